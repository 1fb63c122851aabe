"""Log formats of the command (trikafka/cli/logsetup.py)."""

from __future__ import annotations

import io
import json
import logging

import pytest

from trikafka.cli.logsetup import announce, configure_logging, json_enabled


@pytest.fixture
def restore_root_logger():
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    for handler in list(root.handlers):
        root.removeHandler(handler)
    for handler in handlers:
        root.addHandler(handler)
    root.setLevel(level)


def test_json_lines_have_the_fixed_keys_then_the_extra_fields(restore_root_logger):
    out = io.StringIO()
    configure_logging("INFO", "json", stream=out)
    logging.getLogger("trikafka.x").info("hello %s", "world", extra={"topic": "t", "level": "clash",
                                                                     "obj": object()})
    logging.getLogger("kazoo.client").debug("below the level")
    logging.getLogger("kazoo.client").warning("from another library's logger")
    try:
        raise ValueError("boom")
    except ValueError:
        logging.getLogger("trikafka.y").exception("failed")
    lines = out.getvalue().splitlines()
    assert len(lines) == 3
    first, second, third = (json.loads(line) for line in lines)
    assert list(first)[:4] == ["ts", "level", "logger", "msg"]
    assert first["level"] == "INFO" and first["logger"] == "trikafka.x" and first["msg"] == "hello world"
    assert first["topic"] == "t" and first["extra_level"] == "clash" and first["obj"].startswith("<object")
    assert first["ts"].endswith("Z") and first["ts"][10] == "T" and len(first["ts"]) == 24
    assert (second["level"], second["logger"]) == ("WARNING", "kazoo.client")
    assert third["msg"] == "failed" and "ValueError: boom" in third["exc"]


def test_configuring_twice_prints_each_record_once_and_text_is_the_default(restore_root_logger):
    out = io.StringIO()
    configure_logging("INFO", "json", stream=out)
    configure_logging("INFO", stream=out)
    assert not json_enabled()
    logging.getLogger("trikafka.x").info("once")
    assert out.getvalue().count("once") == 1
    assert out.getvalue().split(" ", 3)[2:] == ["INFO", "trikafka.x: once\n"]


def test_an_unknown_format_is_refused():
    with pytest.raises(ValueError, match="unknown log format"):
        configure_logging("INFO", "xml")


def test_announce_is_a_plain_line_in_text_mode_and_a_record_in_json_mode(restore_root_logger, capsys):
    out = io.StringIO()
    configure_logging("INFO", "text", stream=out)
    announce(logging.getLogger("trikafka.cli"), "trikafka: serving on h:1", port=1)
    assert capsys.readouterr().err == "trikafka: serving on h:1\n" and out.getvalue() == ""
    configure_logging("INFO", "json", stream=out)
    announce(logging.getLogger("trikafka.cli"), "trikafka: serving on h:1", port=1)
    record = json.loads(out.getvalue())
    assert (record["msg"], record["port"], record["logger"]) == ("trikafka: serving on h:1", 1, "trikafka.cli")
    assert capsys.readouterr().err == ""
