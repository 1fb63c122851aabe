"""Every section-sign reference in the project names a heading that exists.

Code, tests, benchmarks and documents cite the protocol reference by section
number: a section sign and a number such as ``12.4.1`` or ``12.9a``, optionally
followed by a finer pointer (``step 3``) that is not checked.  Two signs cite
several sections (``5.1-5.3``, ``5.1, 5.3``); a dash after any number opens a
range whose other end is checked too.

Which document a reference means: a reference right after the name of a
Markdown document of ``docs/`` (``docs/simulation.md`` and the sign) means
that document and must resolve among its headings; every other reference
(bare, after ``docs``, ``spec`` or ``docs/protocol.md``) means
``docs/protocol.md``.  A number after a dash, a comma or "and" shares the document of
the number before it.

The references are found by reading text, nothing is imported.  The section
sign is written as an escape in this file so its own examples are not scanned
as references.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
SIGN = "\N{SECTION SIGN}"

# What is scanned: directories walked for text files, and single files.
SCANNED_DIRS = ("trikafka", "tests", "bench", "scripts")
SCANNED_FILES = ("README.md",)
SCANNED_DOCS_GLOB = "docs/*.md"
DEFAULT_DOC = "protocol.md"

# A heading line: "## 12. Replication", "### 12.9a Compaction", "#### 12.4.1 REPLICA_FETCH".
HEADING = re.compile(r"^#{1,6}\s+(\d+(?:\.\d+)*[a-z]?)\.?\s")

NUMBER = r"\d+(?:\.\d+)*[a-z]?"
# One or two signs and a number, then further parts joined by a dash, a comma or "and";
# which of those parts are section numbers is decided in ``references_in``.
REFERENCE = re.compile(
    rf"(?P<signs>{SIGN}{{1,2}})\s*(?P<first>{NUMBER})"
    rf"(?P<rest>(?:\s*(?:-|\u2013|,|and)\s*{SIGN}?\s*{NUMBER})*)"
)
MORE = re.compile(rf"(-|\u2013|,|and)\s*{SIGN}?\s*({NUMBER})")
# A Markdown document named right before a reference: "docs/simulation.md ".
DOC_NAME = re.compile(r"([A-Za-z0-9_-]+\.md)\s*$")

# References that are allowed to stay unresolved.  Keep it empty: a wrong
# section number sends a reader to text that says something else.
ALLOWED: frozenset[tuple[str, str]] = frozenset()


@dataclass(frozen=True)
class Reference:
    """One cited section: where it was found, which document, which number."""

    path: str
    line: int
    document: str
    number: str


def headings(markdown: str) -> frozenset[str]:
    """The section numbers of a Markdown document's numbered headings."""
    found = set()
    for line in markdown.splitlines():
        match = HEADING.match(line)
        if match:
            found.add(match.group(1))
    return frozenset(found)


def references_in(text: str, path: str, documents: frozenset[str]) -> list[Reference]:
    """Every section reference in ``text``, with the document each one means.

    ``documents`` are the Markdown file names a reference may name before it;
    a name that is not among them leaves the reference to the default document.
    """
    found: list[Reference] = []
    for line_number, line in enumerate(text.splitlines(), start=1):
        for match in REFERENCE.finditer(line):
            document = DEFAULT_DOC
            named = DOC_NAME.search(line[: match.start()])
            if named and named.group(1) in documents:
                document = named.group(1)
            numbers = [match.group("first")]
            for part in MORE.finditer(match.group("rest")):
                separator, number = part.groups()
                # With one sign only a range continues the reference; ", 16"
                # after a single sign is prose, not a second section.
                if len(match.group("signs")) == 2 or separator in ("-", "\u2013") or SIGN in part.group(0):
                    numbers.append(number)
            for number in numbers:
                found.append(Reference(path, line_number, document, number))
    return found


def unresolved(references: list[Reference], sections: dict[str, frozenset[str]]) -> list[Reference]:
    """The references whose number is no heading of the document they mean."""
    return [
        ref for ref in references
        if ref.number not in sections.get(ref.document, frozenset())
        and (ref.path, ref.number) not in ALLOWED
    ]


def _scanned_files() -> list[Path]:
    files: list[Path] = []
    for directory in SCANNED_DIRS:
        files.extend(p for p in sorted((REPO_ROOT / directory).rglob("*"))
                     if p.is_file() and "__pycache__" not in p.parts)
    files.extend(REPO_ROOT / name for name in SCANNED_FILES)
    files.extend(sorted(REPO_ROOT.glob(SCANNED_DOCS_GLOB)))
    return files


def _read_text(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except (UnicodeDecodeError, FileNotFoundError):
        return None  # binary files (figures, compiled caches) hold no references


def _document_sections() -> dict[str, frozenset[str]]:
    return {p.name: headings(p.read_text(encoding="utf-8")) for p in REPO_ROOT.glob(SCANNED_DOCS_GLOB)}


def test_every_section_reference_names_a_heading() -> None:
    sections = _document_sections()
    assert sections[DEFAULT_DOC], "docs/protocol.md has no numbered headings"
    references: list[Reference] = []
    for path in _scanned_files():
        text = _read_text(path)
        if text is not None:
            references.extend(references_in(text, str(path.relative_to(REPO_ROOT)), frozenset(sections)))
    assert references, "no section references found: the scan is looking in the wrong place"
    bad = unresolved(references, sections)
    listing = "\n".join(f"{ref.path}:{ref.line}: {SIGN}{ref.number} is no heading of docs/{ref.document}"
                        for ref in bad)
    assert not bad, f"{len(bad)} section references name no heading:\n{listing}"


# -- the checker itself, on small samples --------------------------------------------------------

SAMPLE_DOC = """\
# A protocol

## 1. Conventions
### 1.1 Integers
## 12. Replication
#### 12.4.1 REPLICA_FETCH (110)
### 12.9a Compaction on replicated topics
"""


def test_headings_are_the_numbered_ones() -> None:
    assert headings(SAMPLE_DOC) == {"1", "1.1", "12", "12.4.1", "12.9a"}


@pytest.mark.parametrize(
    ("line", "numbers"),
    [
        (f"see {SIGN}12.4.1 for the bytes", ["12.4.1"]),
        (f"(spec {SIGN}12.9a)", ["12.9a"]),
        (f"docs {SIGN}1.1 step 3", ["1.1"]),
        (f"(docs/protocol.md {SIGN}12, {SIGN}1.1)", ["12", "1.1"]),
        (f"{SIGN}{SIGN} 1.1, 12.4.1", ["1.1", "12.4.1"]),
        (f"{SIGN}1.1-12.9a", ["1.1", "12.9a"]),
        (f"{SIGN}1.1-{SIGN}12", ["1.1", "12"]),
        (f"{SIGN}12, 16 bytes later", ["12"]),
        (f"ends here ({SIGN}12.4.1).", ["12.4.1"]),
    ],
)
def test_reference_forms(line: str, numbers: list[str]) -> None:
    assert [ref.number for ref in references_in(line, "x.py", frozenset())] == numbers


def test_checker_reports_file_line_and_number() -> None:
    text = f"first line\nPRODUCE handling (spec {SIGN}6.1 step 3), framing {SIGN}1.1\n{SIGN}{SIGN} 12.4.1-12.5\n"
    refs = references_in(text, "pkg/mod.py", frozenset({"protocol.md"}))
    bad = unresolved(refs, {"protocol.md": headings(SAMPLE_DOC)})
    assert [(ref.path, ref.line, ref.number) for ref in bad] == [("pkg/mod.py", 2, "6.1"), ("pkg/mod.py", 3, "12.5")]


def test_a_named_document_resolves_among_its_own_headings() -> None:
    sections = {"protocol.md": headings(SAMPLE_DOC), "simulation.md": frozenset({"2"})}
    refs = references_in(f"docs/simulation.md {SIGN}2 and {SIGN}3; {SIGN}12; simulation.md {SIGN}12\n", "a.md",
                         frozenset(sections))
    assert [(ref.document, ref.number) for ref in refs] == [
        ("simulation.md", "2"), ("simulation.md", "3"), ("protocol.md", "12"), ("simulation.md", "12")]
    assert [ref.number for ref in unresolved(refs, sections)] == ["3", "12"]
