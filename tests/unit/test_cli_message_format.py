"""``consume --format``: fields and escapes render to bytes; a bad format is one clear error."""

import pytest

from trikafka.cli.message_format import DEFAULT_FORMAT, MessageFormat, Printed

MESSAGE = Printed("clicks", "2", 100, 120, b"user-1", b"\xffpayload")


@pytest.mark.parametrize("text, rendered", [
    (DEFAULT_FORMAT, b"\xffpayload\n"),
    ("%t/%p@%o..%n %k=%s (%S, %K)\\t|", b"clicks/2@100..120 user-1=\xffpayload (8, 6)\t|"),
    ("100%% %s\\\\", b"100% \xffpayload\\"),
    ("", b""),
])
def test_fields_and_escapes(text, rendered):
    assert MessageFormat.parse(text).render(MESSAGE) == rendered


def test_an_unkeyed_message_has_an_empty_key_of_length_minus_one():
    assert MessageFormat.parse("[%k] %K").render(MESSAGE._replace(key=None)) == b"[] -1"


@pytest.mark.parametrize("text, message", [
    ("%x", "unknown field %x"),
    ("abc%", "ends with a lone '%'"),
    ("\\q", "unknown escape \\q"),
])
def test_a_bad_format_names_the_token(text, message):
    with pytest.raises(ValueError, match=message.replace("\\", "\\\\")):
        MessageFormat.parse(text)
