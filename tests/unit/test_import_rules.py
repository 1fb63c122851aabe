"""The house table's import rules, checked on the source: who may import whom, no cycles.

Every module under ``trikafka/`` is parsed with ``ast`` (nothing is imported,
so optional extras such as PySpark need not be installed).  Every import
counts, including the ones inside functions and ``TYPE_CHECKING`` blocks: a
lazy import is still a dependency.
"""

from __future__ import annotations

import ast
import functools
import os
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

PACKAGE_ROOT = Path(__file__).resolve().parents[2] / "trikafka"
TESTS_ROOT = Path(__file__).resolve().parents[1]

EVERYTHING = None  # "may import everything"

# layer -> the trikafka layers it may import (its own layer always allowed).
# util/ (generic helpers, stdlib only) is below every layer: any layer may import it.
MAY_IMPORT: dict[str, frozenset[str] | None] = {
    "util": frozenset(),
    "wire": frozenset({"util"}),
    "kafka": frozenset({"util"}),  # the Kafka-protocol codec (§16), a codec beside wire/, independent of it
    "log": frozenset({"util", "wire", "kafka"}),
    "zk": frozenset({"util", "wire", "kafka"}),
    "broker": frozenset({"util", "wire", "kafka", "log", "zk"}),
    "client": frozenset({"util", "wire", "kafka"}),
    "producer": frozenset({"util", "wire", "kafka", "zk", "client"}),
    "group": frozenset({"util", "wire", "kafka", "zk", "client"}),
    # zk: only its registry API, see SPARK_ZK_MODULES; kafka: the codec its Kafka-format mode's tasks speak
    "spark": frozenset({"util", "wire", "kafka", "client", "zk"}),
    "mirror": frozenset({"util", "wire", "zk", "client", "producer", "group"}),
    "testing": EVERYTHING,
    "sim": EVERYTHING,  # the simulated world runs the real broker and clients (docs/simulation.md)
    "cli": EVERYTHING,
    "__main__": frozenset({"cli"}),
    "__init__": frozenset(),
}

# The registry API spark may reach: paths and values, their errors, connect strings
# (zk.registry_values: the registry's values, parsed without Trio; zk.registry is the Trio registration).
# zk.blocking: the blocking adapter for processes without a Trio loop (Spark has none).
# zk.replication_values: the pure values of the replication znodes (a replicated topic's partitions).
SPARK_ZK_MODULES = frozenset({"trikafka.zk.paths", "trikafka.zk.registry_values", "trikafka.zk.errors",
                              "trikafka.zk.connect", "trikafka.zk.blocking", "trikafka.zk.replication_values"})

# The wire modules kafka/ may reach: gzip and the snappy-java stream are the same bytes in a
# 0.7 wrapper and a v2 batch, so kafka.compression uses wire's codecs (one implementation of each)
# and catches wire's error for a payload that does not decompress.
KAFKA_WIRE_MODULES = frozenset({"trikafka.wire.compression", "trikafka.wire.errors"})
KAFKA_WIRE_IMPORTERS = frozenset({"trikafka.kafka.compression"})

# layer -> third-party top-level packages it may import.
THIRD_PARTY: dict[str, frozenset[str] | None] = {
    "util": frozenset(),  # stdlib only, so that importing it never loads more than the helper asked for
    "wire": frozenset(),  # stdlib only; its codec library in wire/compression.py, its CRC library in wire/crc.py
    "kafka": frozenset({"kio", "crc32c", "cramjam"}),  # Kafka's message schemas, CRC-32C, the batch codecs
    "log": frozenset(),
    "zk": frozenset({"kazoo", "trio", "trio_util"}),
    "broker": frozenset({"trio", "trio_util", "kio"}),  # kio: the Kafka listener builds its answers (§16)
    "client": frozenset({"trio", "trio_util", "kio"}),  # kio: client/kafka builds and reads Kafka bodies (§16)
    "producer": frozenset({"trio", "trio_util"}),
    "group": frozenset({"trio", "trio_util"}),
    "spark": frozenset({"pyspark", "pyarrow", "kio"}),  # kio: the Kafka-format mode reads Kafka answers
    "mirror": frozenset({"trio"}),
    "testing": EVERYTHING,
    "sim": frozenset({"trio", "kio"}),  # kio: the Kafka world reads error codes, a plant answers them
    "cli": EVERYTHING,
    "__main__": frozenset(),
    "__init__": frozenset(),
}
MODULE_THIRD_PARTY = {
    "trikafka.wire.compression": frozenset({"cramjam"}),
    "trikafka.wire.crc": frozenset({"isal"}),  # the CRC-32 library (bench/crc_bench.py chose it)
    # the metrics and health endpoint: HTTP parsing and the Prometheus registry stay in these two modules
    "trikafka.broker.http": frozenset({"h11", "prometheus_client"}),
    "trikafka.broker.metrics": frozenset({"prometheus_client"}),
}

# Known exceptions, each named and justified.  Nothing else may be added here.
KNOWN_EXCEPTIONS: set[tuple[str, str]] = set()

# The broker's own layers (docs/architecture.md): the engine below both listeners, the
# listeners beside each other, replication and the coordinators below the listeners.
# Each part is its modules' dotted prefixes under trikafka.broker.
BROKER_PARTS: dict[str, tuple[str, ...]] = {
    "the engine": ("engine",),
    "replication": ("replication",),
    "the 0.7 listener": ("handlers", "connection", "short_circuit"),
    "the Kafka listener": ("kafka",),
    "the Kafka listener's dispatch": ("kafka.service", "kafka.connection"),
    "the Kafka handlers' needs": ("kafka.needs",),
    # A coordinator and its internal topic, which is all of the broker it reaches (docs/architecture.md).
    "a coordinator": ("kafka.groups.coordinator", "kafka.transactions.coordinator", "kafka.internal_topic",
                      "kafka.partition_loads", "kafka.groups.store", "kafka.coordinator_seams"),
    "the composition root": ("server",),
}
# part -> the parts it may not import.
BROKER_MAY_NOT_IMPORT: dict[str, tuple[str, ...]] = {
    "the engine": ("the 0.7 listener", "the Kafka listener", "the composition root"),
    "replication": ("the 0.7 listener", "the Kafka listener", "the composition root"),
    "the 0.7 listener": ("the Kafka listener", "the composition root"),
    "the Kafka listener": ("the 0.7 listener", "the composition root"),
    "a coordinator": ("the Kafka listener's dispatch", "the Kafka handlers' needs"),
}

# Generic helpers -> the one util module that defines them.  wire/ holds only the
# codec; a helper every layer needs lives in util/, and nowhere else defines it again.
GENERIC_HELPERS = {
    "lazy_exports": "trikafka.util.lazy",
    "parse_bool": "trikafka.util.settings",
}


@dataclass(frozen=True)
class Import:
    module: str  # the importing module, dotted
    target: str  # what it imports, dotted (a trikafka module, or a third-party name)
    line: int


def parse(path: Path) -> ast.Module:
    """The syntax tree of the file at ``path`` (read-only: callers walk it, never change it)."""
    return _parse_source(path.read_text())


@functools.lru_cache(maxsize=None)
def _parse_source(source: str) -> ast.Module:
    # Keyed by the text alone: the planted-violation tests parse copies of the
    # whole package, and every file but the planted one is already known.
    return ast.parse(source)


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def is_package(path: Path) -> bool:
    return path.name == "__init__.py"


def collect_imports(root: Path) -> tuple[set[str], list[Import]]:
    """Every module under ``root`` and every import it makes (resolved to a module where possible)."""
    files = sorted(root.rglob("*.py"))
    modules = {module_name(f, root) for f in files}
    imports: list[Import] = []
    for path in files:
        name = module_name(path, root)
        package = name if is_package(path) else name.rpartition(".")[0]
        for source, names, line, is_from in _import_statements(path.read_text(), package):
            if not is_from:
                imports.extend(Import(name, alias, line) for alias in names)
                continue
            for alias in names:  # `from pkg import submodule` depends on the submodule
                candidate = f"{source}.{alias}"
                imports.append(Import(name, candidate if candidate in modules else source, line))
    return modules, imports


@functools.lru_cache(maxsize=None)
def _import_statements(text: str, package: str) -> tuple[tuple[str, tuple[str, ...], int, bool], ...]:
    """(module, names, line, is_from) of each import statement of a module of ``package`` whose source is
    ``text``, relative ones made absolute; cached like ``_parse_source``."""
    statements = []
    for node in ast.walk(_parse_source(text)):
        if isinstance(node, ast.Import):
            statements.append(("", tuple(alias.name for alias in node.names), node.lineno, False))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            statements.append((source, tuple(alias.name for alias in node.names), node.lineno, True))
    return tuple(statements)


def layer_of(module: str) -> str:
    parts = module.split(".")
    if len(parts) == 1:
        return "__init__"
    return parts[1]


def violations(root: Path) -> list[str]:
    """Every broken rule, one line each (empty when the house table holds)."""
    modules, imports = collect_imports(root)
    found = []
    for imp in imports:
        layer = layer_of(imp.module)
        top = imp.target.split(".")[0]
        where = f"{imp.module}:{imp.line} imports {imp.target}"
        if top == "__future__" or (top in sys.stdlib_module_names and top != "trikafka"):
            continue
        if (imp.module, top) in KNOWN_EXCEPTIONS:
            continue
        if top == root.name:
            allowed = MAY_IMPORT[layer]
            target_layer = layer_of(imp.target)
            if imp.module in KAFKA_WIRE_IMPORTERS and imp.target in KAFKA_WIRE_MODULES:
                continue
            if allowed is EVERYTHING or target_layer == layer:
                continue
            if target_layer not in allowed:
                found.append(f"{where}: {layer}/ may not import {target_layer}/")
            elif layer == "spark" and target_layer == "zk" and imp.target not in SPARK_ZK_MODULES:
                found.append(f"{where}: spark/ reaches ZooKeeper only through the registry API")
            continue
        allowed_third = THIRD_PARTY[layer]
        if allowed_third is EVERYTHING or top in allowed_third or top in MODULE_THIRD_PARTY.get(imp.module, ()):
            continue
        found.append(f"{where}: third-party {top!r} not allowed in {layer}/")
    found.extend(broker_layer_violations(root.name, imports))
    found.extend(f"import cycle: {' -> '.join(cycle)}" for cycle in cycles(modules, imports))
    found.extend(misplaced_helpers(root))
    return found


def broker_parts_of(package: str, module: str) -> set[str]:
    """The ``BROKER_PARTS`` that ``module`` belongs to (none, one, or a part and the part inside it)."""
    name = module.removeprefix(f"{package}.broker.")
    if name == module:
        return set()
    return {part for part, prefixes in BROKER_PARTS.items()
            if any(name == p or name.startswith(p + ".") for p in prefixes)}


def broker_layer_violations(package: str, imports: list[Import]) -> list[str]:
    """Every import across the broker's layers that ``BROKER_MAY_NOT_IMPORT`` forbids, one line each."""
    found = []
    for imp in imports:
        for part in broker_parts_of(package, imp.module):
            banned = set(BROKER_MAY_NOT_IMPORT.get(part, ())) & broker_parts_of(package, imp.target)
            found.extend(f"{imp.module}:{imp.line} imports {imp.target}: {part} may not import {other}"
                         for other in sorted(banned))
    return found


def misplaced_helpers(root: Path) -> list[str]:
    """A generic helper (``GENERIC_HELPERS``) defined anywhere but its util module, one line each."""
    found = []
    for path in sorted(root.rglob("*.py")):
        name = module_name(path, root)
        for node in parse(path).body:
            home = GENERIC_HELPERS.get(getattr(node, "name", ""))
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and home and name != home:
                found.append(f"{name}:{node.lineno} defines {node.name}: generic helpers live in {home}")
    return found


def cycles(modules: set[str], imports: list[Import]) -> list[list[str]]:
    """One cycle per strongly connected component of the module graph (explicit imports only)."""
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for imp in imports:
        if imp.target in modules and imp.target != imp.module:
            graph[imp.module].add(imp.target)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's algorithm; the graph is small enough to recurse
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                components.append(sorted(component) + [min(component)])

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return components


def test_the_house_table_holds():
    assert violations(PACKAGE_ROOT) == []


def test_every_layer_has_a_rule():
    modules, _ = collect_imports(PACKAGE_ROOT)
    assert {layer_of(m) for m in modules} <= MAY_IMPORT.keys() & THIRD_PARTY.keys()


@pytest.mark.parametrize("plant, expected", [
    (("wire/planted.py", "import trio\n"), "third-party 'trio' not allowed in wire/"),
    (("wire/planted.py", "import cramjam\n"), "third-party 'cramjam' not allowed in wire/"),
    (("log/planted.py", "from trikafka.zk import paths\n"), "log/ may not import zk/"),
    (("log/planted.py", "from trikafka.testing import FakeFileSystem\n"), "log/ may not import testing/"),
    (("spark/planted.py", "from trikafka.zk.kazoo_bridge import KazooZooKeeperClient\n"), "registry API"),
    (("spark/planted.py", "import kazoo\n"), "third-party 'kazoo' not allowed in spark/"),
    (("zk/planted.py", "from trikafka.zk import planted_too\n"), "import cycle"),
    (("kafka/planted.py", "import trio\n"), "third-party 'trio' not allowed in kafka/"),
    (("kafka/planted.py", "from trikafka.wire import crc\n"), "kafka/ may not import wire/"),
    (("kafka/planted.py", "from trikafka.wire import compression\n"), "kafka/ may not import wire/"),
    (("wire/planted.py", "from trikafka.kafka import batch\n"), "wire/ may not import kafka/"),
    (("util/planted.py", "import trio\n"), "third-party 'trio' not allowed in util/"),
    (("util/planted.py", "from trikafka.wire import crc32\n"), "util/ may not import wire/"),
    (("wire/planted.py", "def parse_bool(value):\n    return value\n"), "generic helpers live in trikafka.util"),
    (("broker/engine/planted.py", "from trikafka.broker.handlers import RequestHandler\n"),
     "the engine may not import the 0.7 listener"),
    (("broker/engine/planted.py", "from trikafka.broker.kafka import service\n"),
     "the engine may not import the Kafka listener"),
    (("broker/engine/planted.py", "from ..server import serve\n"), "the engine may not import the composition root"),
    (("broker/kafka/planted.py", "from ..handlers import RequestHandler\n"),
     "the Kafka listener may not import the 0.7 listener"),
    (("broker/short_circuit.py", "from trikafka.broker.kafka.produce import produce\n"),
     "the 0.7 listener may not import the Kafka listener"),
    (("broker/replication/planted.py", "from trikafka.broker.connection import ServedConnection07\n"),
     "replication may not import the 0.7 listener"),
    (("broker/replication/planted.py", "from trikafka.broker.kafka.markers import MarkerWriter\n"),
     "replication may not import the Kafka listener"),
    (("broker/kafka/groups/coordinator.py", "from ..service import KafkaService\n"),
     "a coordinator may not import the Kafka listener's dispatch"),
    (("broker/kafka/transactions/coordinator.py", "from ..needs import GroupApis\n"),
     "a coordinator may not import the Kafka handlers' needs"),
])
def test_a_planted_violation_is_found(package_copy, plant, expected):
    path, source = plant
    target, planted_too = package_copy / path, package_copy / "zk" / "planted_too.py"
    original = target.read_text() if target.exists() else None
    try:
        target.write_text(source)
        if "planted_too" in source:
            planted_too.write_text("from trikafka.zk import planted\n")
        found = violations(package_copy)
        assert any(expected in line for line in found), found
    finally:  # the copy is the module's: the next plant starts from the package as it is
        if original is None:
            target.unlink()
        else:
            target.write_text(original)
        planted_too.unlink(missing_ok=True)


@pytest.fixture(scope="module")
def package_copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One copy of ``trikafka/`` for every planted violation (each test undoes its plant): 356 files
    written once, not once per plant."""
    copy = tmp_path_factory.mktemp("planted") / "trikafka"
    for path in PACKAGE_ROOT.rglob("*.py"):
        target = copy / path.relative_to(PACKAGE_ROOT)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(path.read_text())
    return copy


def cross_test_imports(root: Path) -> list[str]:
    """Every import under ``root`` (the tests package) of a module of it outside ``helpers/``, one
    line each: test modules share code only through ``tests/helpers/``, never by importing one
    another.  ``pytest_plugins`` entries count as imports."""
    modules, imports = collect_imports(root)
    for path in sorted(root.rglob("*.py")):
        for node in parse(path).body:
            if (isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "pytest_plugins" for t in node.targets)
                    and isinstance(node.value, (ast.List, ast.Tuple))):
                imports.extend(Import(module_name(path, root), element.value, node.lineno)
                               for element in node.value.elts if isinstance(element, ast.Constant))
    helpers = f"{root.name}.helpers"
    return [f"{imp.module}:{imp.line} imports {imp.target}: test modules share code only through {helpers}"
            for imp in imports
            if imp.target.split(".")[0] == root.name and imp.target != root.name
            and imp.target != helpers and not imp.target.startswith(helpers + ".")]


def test_test_modules_import_only_helpers():
    assert cross_test_imports(TESTS_ROOT) == []


@pytest.mark.parametrize("source", [
    "from tests.integration.test_other import shared\n",
    "from .test_other import shared\n",
    "from tests.conftest import SETTING\n",
    'pytest_plugins = ["tests.integration.test_other"]\n',
])
def test_a_test_module_importing_another_is_found(tmp_path, source):
    tests = tmp_path / "tests"
    for package in ("", "helpers", "integration"):
        (tests / package).mkdir(exist_ok=True)
        (tests / package / "__init__.py").write_text("")
    (tests / "conftest.py").write_text("SETTING = 1\n")
    (tests / "helpers" / "shared.py").write_text("from tests.helpers import other_helper\n")
    (tests / "helpers" / "other_helper.py").write_text("")
    (tests / "integration" / "test_other.py").write_text("from tests.helpers.shared import other_helper\n")
    assert cross_test_imports(tests) == []
    (tests / "integration" / "test_planted.py").write_text(source)
    assert [line.split(":")[0] for line in cross_test_imports(tests)] == ["tests.integration.test_planted"]


def test_spark_readers_load_without_trio_or_kazoo():
    """Spark starts a Python process per streaming query (and per planning step) that imports
    the source: the client and zk packages load their names lazily, and what the source needs
    from them is Trio- and kazoo-free, so no query start pays for an event loop it never runs."""
    import subprocess

    pytest.importorskip("pyspark")

    code = ("import sys, trikafka.spark.source, trikafka.spark.stream, trikafka.spark.tasks; "
            "print(sorted(m for m in ('trio', 'trio_util', 'kazoo', 'pyarrow.compute') if m in sys.modules))")
    # kio imports Hypothesis where it is installed (the test extra), and Hypothesis then runs its
    # plugins, one of which is Trio's: that import is the test environment's, not the source's.
    env = {**os.environ, "HYPOTHESIS_NO_PLUGINS": "1"}
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                            env=env).stdout
    assert loaded.strip() == "[]"


def test_lazy_package_names_resolve():
    """Every name the client and zk packages list in ``__all__`` is found where they say."""
    import trikafka.client
    import trikafka.zk

    for package in (trikafka.client, trikafka.zk):
        for name in package.__all__:
            assert getattr(package, name) is not None, (package.__name__, name)
        with pytest.raises(AttributeError):
            getattr(package, "no_such_name")
