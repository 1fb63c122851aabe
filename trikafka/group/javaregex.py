"""Translate the common subset of Java regex syntax to Python ``re`` (docs/protocol.md §8.3: topic filters).

0.7 wildcard subscriptions (``*<k>*<regex>``, ``!<k>!<regex>``) store a
``java.util.regex`` pattern that must match the **whole** topic name
(``String.matches``).  Most of that syntax means the same in Python; this
module rewrites the parts that differ and rejects, with ``JavaRegexError``,
the parts Python cannot express, so a pattern never silently means something
else.

Translated:

* ``\\p{Lower}`` ``\\p{Upper}`` ``\\p{ASCII}`` ``\\p{Alpha}`` ``\\p{Digit}``
  ``\\p{Alnum}`` ``\\p{Punct}`` ``\\p{Graph}`` ``\\p{Print}`` ``\\p{Blank}``
  ``\\p{Cntrl}`` ``\\p{XDigit}`` ``\\p{Space}`` (the POSIX classes, ASCII as in
  Java), and ``\\P{...}`` outside a character class;
* ``\\Q...\\E`` quoting, ``\\z`` and ``\\Z``, ``\\e``, ``\\cX``, ``\\x{h...}``,
  ``\\0ooo`` octal, named groups ``(?<name>...)`` and ``\\k<name>``.

Passed through unchanged (same meaning in both): literals, ``.``, ``|``,
groups ``(?:`` ``(?=`` ``(?!`` ``(?<=`` ``(?<!`` ``(?>``, greedy, reluctant
and possessive quantifiers, ``\\d \\D \\w \\W \\s \\S \\b \\B \\A``,
back-references ``\\1``..``\\9``, character classes and ranges, and the
inline flags ``i``, ``m``, ``s`` (a bare ``(?i)`` only at the very start;
the scoped ``(?i:...)`` anywhere).  Patterns compile with ``re.ASCII``, which
gives ``\\d \\w \\s \\b`` and case folding Java's default ASCII meaning.

Rejected (``JavaRegexError``): character-class union and intersection
(``[a[b]]``, ``[a&&b]``), ``\\P{..}`` inside a class, other ``\\p`` names,
``\\G \\R \\X \\h \\H \\v \\V``, flags other than ``i m s``, and unknown
letter escapes.  Known remaining difference: Java's ``.`` also excludes
``\\r``, U+0085, U+2028 and U+2029, Python's only ``\\n``; topic names never
contain them (docs/protocol.md §9.7).
"""

from __future__ import annotations

import re

__all__ = ["JavaRegexError", "translate_java_regex", "compile_java_regex"]


class JavaRegexError(ValueError):
    """The pattern is invalid, or uses Java syntax this module cannot translate."""


# Java's POSIX classes (US-ASCII only unless UNICODE_CHARACTER_CLASS is set),
# as character-class *contents* so they also work inside ``[...]``.
_POSIX_CLASSES = {
    "Lower": "a-z",
    "Upper": "A-Z",
    "ASCII": "\\x00-\\x7f",
    "Alpha": "a-zA-Z",
    "Digit": "0-9",
    "Alnum": "a-zA-Z0-9",
    "Punct": "!-/:-@\\[-`{-~",
    "Graph": "!-~",
    "Print": " -~",
    "Blank": " \\t",
    "Cntrl": "\\x00-\\x1f\\x7f",
    "XDigit": "0-9a-fA-F",
    "Space": " \\t\\n\\x0b\\f\\r",
}
# Escapes whose meaning is identical in Java and Python.
_SAME_ESCAPES = set("dDwWsSbBAtnrfa") | set("123456789")
_REJECTED_ESCAPES = set("GRXhHvV")
# Java's \Z: end of input, or before a final line terminator.
_JAVA_END_Z = "(?=(?:\\r\\n|[\\n\\r\\u0085\\u2028\\u2029])?\\Z)"
_NAMED_GROUP = re.compile(r"\(\?<([a-zA-Z][a-zA-Z0-9]*)>")
_INLINE_FLAGS = re.compile(r"\(\?([a-zA-Z]*)(?:-([a-zA-Z]*))?([:)])")


def translate_java_regex(pattern: str) -> str:
    """Return a Python ``re`` pattern equivalent to the Java ``pattern``.

    Raises ``JavaRegexError`` for unsupported constructs.  The result is meant
    to be compiled with ``re.ASCII`` (``compile_java_regex`` does that).
    """
    return _Translator(pattern).run()


def compile_java_regex(pattern: str) -> re.Pattern[str]:
    """Translate and compile; any error becomes ``JavaRegexError``."""
    translated = translate_java_regex(pattern)
    try:
        return re.compile(translated, re.ASCII)
    except re.error as exc:
        raise JavaRegexError(f"invalid regex {pattern!r}: {exc}") from None


def _class_escape(ch: str) -> str:
    """One literal character, escaped so it is safe inside ``[...]``."""
    return "\\" + ch if ch in "\\]^-[" else re.escape(ch)


class _Translator:
    """A single left-to-right pass; ``in_class`` tracks ``[...]`` context."""

    def __init__(self, pattern: str) -> None:
        self.src = pattern
        self.pos = 0
        self.out: list[str] = []
        self.in_class = False

    def fail(self, what: str) -> JavaRegexError:
        return JavaRegexError(f"unsupported Java regex construct {what} in {self.src!r}")

    def run(self) -> str:
        while self.pos < len(self.src):
            ch = self.src[self.pos]
            if ch == "\\":
                self.escape()
            elif self.in_class:
                self.class_char(ch)
            elif ch == "[":
                self.open_class()
            elif ch == "(":
                self.group()
            else:
                self.out.append(ch)
                self.pos += 1
        if self.in_class:
            raise JavaRegexError(f"unclosed character class in {self.src!r}")
        return "".join(self.out)

    def open_class(self) -> None:
        self.in_class = True
        self.pos += 1
        self.out.append("[")
        if self.src.startswith("^", self.pos):
            self.out.append("^")
            self.pos += 1
        if self.src.startswith("]", self.pos):  # a leading ']' is literal in both
            self.out.append("\\]")
            self.pos += 1

    def class_char(self, ch: str) -> None:
        if ch == "[":
            raise self.fail("'[' inside a character class (union)")
        if self.src.startswith("&&", self.pos):
            raise self.fail("'&&' (class intersection)")
        if ch == "]":
            self.in_class = False
        self.out.append(ch)
        self.pos += 1

    def group(self) -> None:
        rest = self.src[self.pos:]
        if not rest.startswith("(?"):
            self.out.append("(")
            self.pos += 1
            return
        named = _NAMED_GROUP.match(rest)
        if named:
            self.out.append(f"(?P<{named.group(1)}>")
            self.pos += named.end()
            return
        if rest[2:3] in (":", "=", "!", ">") or rest.startswith(("(?<=", "(?<!")):
            # Same syntax and meaning in both; the rest is read as usual.
            self.out.append("(?")
            self.pos += 2
            return
        flags = _INLINE_FLAGS.match(rest)
        if not flags:
            raise self.fail(repr(rest[:4]))
        on, off, end = flags.group(1), flags.group(2) or "", flags.group(3)
        if set(on + off) - set("ims") or (flags.group(2) is not None and not off):
            raise self.fail(f"inline flags {flags.group(0)!r} (only i, m, s are supported)")
        if end == ")" and (self.pos != 0 or off):
            raise self.fail(f"{flags.group(0)!r} other than a leading '(?ims)' (use a scoped '(?i:...)' group)")
        self.out.append(flags.group(0))
        self.pos += flags.end()

    def escape(self) -> None:
        if self.pos + 1 >= len(self.src):
            raise JavaRegexError(f"trailing backslash in {self.src!r}")
        ch = self.src[self.pos + 1]
        self.pos += 2
        if ch == "Q":
            self.quoted()
        elif ch in "pP":
            self.posix_class(negated=ch == "P")
        elif ch == "k" and not self.in_class:
            self.backref_by_name()
        elif ch in "xu0ce":
            self.out.append(self.char_escape(ch))
        elif ch in "zZ" and not self.in_class:
            self.out.append("\\Z" if ch == "z" else _JAVA_END_Z)
        elif ch in _REJECTED_ESCAPES or (ch in "bB" and self.in_class):
            raise self.fail(f"'\\{ch}'")
        elif ch in _SAME_ESCAPES and not (ch in "123456789" and self.in_class):
            self.out.append("\\" + ch)
        elif ch.isascii() and ch.isalnum():
            raise self.fail(f"'\\{ch}'")
        else:  # an escaped symbol is that symbol, in both dialects
            self.out.append(_class_escape(ch) if self.in_class else re.escape(ch))

    def quoted(self) -> None:
        end = self.src.find("\\E", self.pos)
        literal = self.src[self.pos:] if end < 0 else self.src[self.pos:end]
        self.pos = len(self.src) if end < 0 else end + 2
        if self.in_class:
            self.out.append("".join(_class_escape(c) for c in literal))
        else:
            self.out.append(re.escape(literal))

    def posix_class(self, negated: bool) -> None:
        name_match = re.compile(r"\{(\w+)\}|([A-Za-z])").match(self.src, self.pos)
        if not name_match:
            raise self.fail("malformed '\\p'")
        name = name_match.group(1) or name_match.group(2)
        self.pos = name_match.end()
        if name not in _POSIX_CLASSES:
            raise self.fail(f"'\\p{{{name}}}'")
        content = _POSIX_CLASSES[name]
        if self.in_class:
            if negated:
                raise self.fail(f"'\\P{{{name}}}' inside a character class")
            self.out.append(content)
        else:
            self.out.append(f"[{'^' if negated else ''}{content}]")

    def backref_by_name(self) -> None:
        named = re.compile(r"<([a-zA-Z][a-zA-Z0-9]*)>").match(self.src, self.pos)
        if not named:
            raise self.fail("malformed '\\k<name>'")
        self.pos = named.end()
        self.out.append(f"(?P={named.group(1)})")

    def char_escape(self, kind: str) -> str:
        """``\\x``, ``\\u``, ``\\0`` octal, ``\\cX``, ``\\e``: one code point, re-escaped."""
        if kind == "e":
            return "\\x1b"
        if kind == "c":
            if self.pos >= len(self.src):
                raise self.fail("'\\c' at the end")
            code = ord(self.src[self.pos]) ^ 64
            self.pos += 1
        else:
            regexes = {
                "x": r"\{([0-9a-fA-F]{1,8})\}|([0-9a-fA-F]{2})",
                "u": r"([0-9a-fA-F]{4})",
                "0": r"([0-3][0-7]{2}|[0-7]{1,2})",
            }
            digits = re.compile(regexes[kind]).match(self.src, self.pos)
            if not digits:
                raise self.fail(f"malformed '\\{kind}'")
            self.pos = digits.end()
            text = next(g for g in digits.groups() if g is not None)
            code = int(text, 8 if kind == "0" else 16)
        if code > 0x10FFFF:
            raise self.fail(f"code point {code:#x}")
        return f"\\U{code:08x}"
