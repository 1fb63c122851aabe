"""docs/architecture.md names the code as it is: every path it cites exists, and every class,
function, method and table it names in backticks or in the nursery tree is defined there.

The code is read with ``ast`` (nothing is imported)."""

from __future__ import annotations

import ast
import functools
import re
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "trikafka"
BROKER = PACKAGE / "broker"
DOC = ROOT / "docs" / "architecture.md"
# Where a path the page cites is looked for: the page speaks of the broker's modules by their path
# under trikafka/broker/, of other packages' from trikafka/ or the repository's root.
PATH_BASES = (BROKER, PACKAGE, ROOT)
# Backticked words that are not trikafka's names: HTTP paths, a Kafka Fetch field, the system call.
NOT_NAMES = frozenset({"/metrics", "/readyz", "max_wait", "sendfile"})


@dataclass
class Module:
    names: set[str] = field(default_factory=set)  # module-level classes, functions, assignments
    classes: dict[str, set[str]] = field(default_factory=dict)  # class -> its members (bases' not)
    bases: dict[str, list[str]] = field(default_factory=dict)


def _targets(node: ast.stmt) -> list[ast.expr]:
    if isinstance(node, ast.Assign):
        return node.targets
    if isinstance(node, (ast.AnnAssign, ast.AugAssign)):
        return [node.target]
    return []


def _read(path: Path) -> Module:
    tree = ast.parse(path.read_text())
    module = Module()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            module.names.add(node.name)
        module.names |= {t.id for t in _targets(node) if isinstance(t, ast.Name)}
        if isinstance(node, ast.ClassDef):
            members = module.classes[node.name] = set()
            module.bases[node.name] = [ast.unparse(b).split(".")[-1] for b in node.bases]
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    members.add(item.name)
                members |= {t.id for t in _targets(item) if isinstance(t, ast.Name)}
            for sub in ast.walk(node):  # self.x = ... in its methods
                members |= {t.attr for t in _targets(sub) if isinstance(t, ast.Attribute)  # type: ignore[arg-type]
                            and isinstance(t.value, ast.Name) and t.value.id == "self"}
    return module


@functools.cache
def modules() -> dict[str, Module]:
    """Every module of trikafka/ by dotted name (``trikafka.broker.server``; a package by its name)."""
    found = {}
    for path in [*PACKAGE.rglob("*.py"), *(ROOT / "tests").rglob("*.py")]:
        parts = path.relative_to(ROOT).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = _read(path)
    # (tests/: the page names the checks, e.g. the import rules' tables)
    return found


def _members(class_name: str) -> set[str] | None:
    """A class's members, its bases' (found by name) included; None when no module defines it."""
    defined = [(m, class_name) for m in modules().values() if class_name in m.classes]
    if not defined:
        return None
    members: set[str] = set()
    for module, name in defined:
        members |= module.classes[name]
        for base in module.bases[name]:
            members |= _members(base) or set()
    return members


def _module_named(dotted: str) -> Module | None:
    """``dotted`` as written on the page (``engine.directory``, ``kafka/errors``, ``trikafka.kafka.framing``)."""
    dotted = dotted.replace("/", ".")
    for prefix in ("trikafka.broker.", "trikafka.", ""):
        if (found := modules().get(prefix + dotted)) is not None:
            return found
    return None


def unresolved(name: str) -> str | None:
    """Why ``name`` (a backticked word of the page) names nothing in the code; None when it does."""
    name = re.sub(r"\(.*\)$", "", name)
    if name.endswith(".py") or name.endswith("/"):
        if any((base / name).exists() for base in PATH_BASES):
            return None
        # A bare file name, in the tree beside its package's path (``followers.py``): in the broker.
        return None if "/" not in name and any(BROKER.rglob(name)) else "no such path"
    parts = re.split(r"[./]", name)
    for cut in range(len(parts) - 1, 0, -1):  # the longest prefix that is a module
        module = _module_named(".".join(parts[:cut]))
        if module is None:
            continue
        rest = parts[cut:]
        if rest[0] not in module.names:
            return f"{'.'.join(parts[:cut])} defines no {rest[0]}"
        if len(rest) > 1 and rest[1] not in (_members(rest[0]) or set()):
            return f"{rest[0]} has no {rest[1]}"
        return None
    if not re.fullmatch(r"[A-Za-z_]\w*(\.\w+)?", name):
        return None  # prose or a value, not a name
    head, _, attr = name.partition(".")
    members = _members(head)
    if members is None:
        # A bare name: a module's, or a method or attribute of some class (``create_logs``).
        if attr or not any(head in m.names or any(head in c for c in m.classes.values())
                           for m in modules().values()):
            return "defined nowhere"
        return None
    return None if not attr or attr in members else f"{head} has no {attr}"


def _backticked(text: str) -> list[str]:
    return [w for w in re.findall(r"`([^`\n]+)`", text) if w not in NOT_NAMES]


def _tree(text: str) -> str:
    """The nursery tree's drawing."""
    section = text.split("## The nursery tree", 1)[1]
    return section.split("```", 2)[1]


def test_every_path_the_page_cites_exists():
    text = DOC.read_text()
    paths = set(re.findall(r"[\w/.-]*\w\.py\b", text)) | {w for w in _backticked(text) if w.endswith("/")}
    assert {p: unresolved(p) for p in sorted(paths) if unresolved(p)} == {}


def test_every_name_the_page_gives_in_backticks_is_defined():
    assert {w: why for w in sorted(set(_backticked(DOC.read_text()))) if (why := unresolved(w))} == {}


def test_every_task_of_the_nursery_tree_exists_under_its_name():
    # ``Class.method`` and the functions the drawing names (a word with an underscore, followed by
    # its module or a colon).
    tree = _tree(DOC.read_text())
    names = set(re.findall(r"\b[A-Z]\w+\.\w+\b|\b[a-z][\w.]*\.[A-Z]\w+\b", tree))
    names -= set(re.findall(r"\b[\w/]+\.py\b", tree))
    names |= set(re.findall(r"\b([a-z]+_[a-z_]+)\s+(?:\(\w+\.py|or\b)", tree))
    names |= set(re.findall(r"\bor\s+([a-z]+_[a-z_]+)\b", tree))
    assert len(names) > 10
    assert {n: why for n in sorted(names) if (why := unresolved(n))} == {}


def test_a_stale_name_is_found():
    assert unresolved("FlushScheduler.run") is None
    assert unresolved("FlushScheduler.spin") == "FlushScheduler has no spin"
    assert unresolved("engine/planted.py") == "no such path"
    assert unresolved("engine.directory.PartitionDirectory.partition_for_write") is None
    assert unresolved("engine.directory.Planted") == "engine.directory defines no Planted"
    assert unresolved("watch_topic_configs") is None
    assert unresolved("planted_function") == "defined nowhere"
