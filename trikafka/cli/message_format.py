"""``consume --format``: how each consumed message is printed, as kcat's ``-f`` does.

A format is parsed once into pieces (literal bytes, or a field of the message) and
rendered per message to bytes, so a payload is never decoded as text.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, NamedTuple

DEFAULT_FORMAT = "%s\\n"


class Printed(NamedTuple):
    """What a format can show of one message: where it is and what it holds."""

    topic: str
    partition: str  # a number, or a group's registry name ``<broker>-<partition>``
    offset: int  # where the message's entry starts (docs/protocol.md §4)
    next_offset: int  # the offset to commit after it
    key: bytes | None
    value: bytes


_FIELDS: dict[str, Callable[[Printed], bytes]] = {
    "t": lambda m: m.topic.encode(),
    "p": lambda m: m.partition.encode(),
    "o": lambda m: str(m.offset).encode(),
    "n": lambda m: str(m.next_offset).encode(),
    "k": lambda m: m.key or b"",
    "s": lambda m: m.value,
    "S": lambda m: str(len(m.value)).encode(),
    "K": lambda m: str(-1 if m.key is None else len(m.key)).encode(),
}
_ESCAPES = {"n": b"\n", "t": b"\t", "\\": b"\\", "0": b"\0"}
FORMAT_HELP = ("%%t topic, %%p partition, %%o offset, %%n next offset, %%k key, %%K key length (-1: none), "
               "%%s value, %%S value length, %%%% a percent sign; \\n \\t \\\\ escapes")


@dataclass(frozen=True, slots=True)
class MessageFormat:
    """A parsed ``--format``: literal bytes and fields, in order."""

    pieces: tuple[bytes | Callable[[Printed], bytes], ...]

    @classmethod
    def parse(cls, text: str) -> "MessageFormat":
        """ValueError (one line, naming the bad token) for an unknown ``%x`` or a trailing ``%``/``\\``."""
        pieces: list[bytes | Callable[[Printed], bytes]] = []
        literal = bytearray()
        i = 0
        while i < len(text):
            char = text[i]
            if char not in "%\\":
                literal += char.encode()
                i += 1
                continue
            if i + 1 == len(text):
                raise ValueError(f"format {text!r} ends with a lone {char!r}")
            token = text[i + 1]
            i += 2
            if char == "\\":
                if token not in _ESCAPES:
                    raise ValueError(f"unknown escape \\{token} in format {text!r}")
                literal += _ESCAPES[token]
            elif token == "%":
                literal += b"%"
            elif token in _FIELDS:
                if literal:
                    pieces.append(bytes(literal))
                    literal.clear()
                pieces.append(_FIELDS[token])
            else:
                known = " ".join("%" + name for name in _FIELDS)
                raise ValueError(f"unknown field %{token} in format {text!r} (known: {known})")
        if literal:
            pieces.append(bytes(literal))
        return cls(tuple(pieces))

    def render(self, message: Printed) -> bytes:
        return b"".join(p if isinstance(p, bytes) else p(message) for p in self.pieces)
