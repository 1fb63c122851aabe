"""One meaning per name (docs/architecture.md): no two classes of the package share a name, so a
class name read alone says which thing it is."""

from __future__ import annotations

import ast
import collections
import pathlib

PACKAGE = pathlib.Path(__file__).resolve().parents[2] / "trikafka"


def _classes(source: str) -> list[str]:
    return [node.name for node in ast.walk(ast.parse(source)) if isinstance(node, ast.ClassDef)]


def test_no_two_classes_of_the_package_share_a_name():
    where: dict[str, list[str]] = collections.defaultdict(list)
    for path in sorted(PACKAGE.rglob("*.py")):
        for name in _classes(path.read_text(encoding="utf-8")):
            where[name].append(str(path.relative_to(PACKAGE.parent)))
    twins = {name: paths for name, paths in where.items() if len(paths) > 1}
    assert not twins, f"class names defined more than once: {twins}"


def test_the_check_sees_a_planted_twin():
    planted = "class Member:\n    pass\n\n\ndef f():\n    class Member:\n        pass\n"
    assert _classes(planted).count("Member") == 2
