"""The broker is built in one place, top down, each object given what it needs at construction
(docs/architecture.md, "The composition root"): the root finishes no object after building it,
and the Kafka listener's ``start`` only starts tasks."""

from __future__ import annotations

import ast
from pathlib import Path

BROKER = Path(__file__).resolve().parents[2] / "trikafka" / "broker"


def _function(path: Path, name: str, in_class: str | None = None) -> ast.AST:
    """The definition of ``name`` (a method of ``in_class``, or a module-level function) in ``path``."""
    scope: list[ast.stmt] = ast.parse(path.read_text()).body
    if in_class is not None:
        scope = next(n for n in scope if isinstance(n, ast.ClassDef) and n.name == in_class).body
    return next(n for n in scope if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == name)


def attribute_assignments(function: ast.AST) -> list[str]:
    """Each ``x.y = ...`` (or ``+=``, or annotated) in ``function``, as written."""
    found = []
    for node in ast.walk(function):
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        else:
            continue
        found += [ast.unparse(t) for t in targets if isinstance(t, ast.Attribute)]
    return found


def registrations(function: ast.AST) -> list[str]:
    """Each ``.append(...)`` or ``.add(...)`` call in ``function``, as written: a callback put into
    another object's listeners, or an object put into a box that code built earlier reads it through.
    The root builds its own lists whole (literals, comprehensions), so it needs neither."""
    return [ast.unparse(node) for node in ast.walk(function)
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("append", "add")]


def test_the_composition_root_finishes_no_object_after_building_it():
    for name in ("_run_tree", "serve"):  # serve builds what comes before the tree (the metrics, the endpoint)
        root = _function(BROKER / "server.py", name)
        assert attribute_assignments(root) == [], name
        assert registrations(root) == [], name


def test_the_kafka_listener_is_built_whole_and_start_only_starts_tasks():
    assert attribute_assignments(_function(BROKER / "kafka" / "service.py", "start", "KafkaService")) == []


def test_replication_is_started_without_finishing_anything_it_did_not_build():
    # The directory is built with the ReplicationView that replication keeps (docs/architecture.md).
    assert attribute_assignments(_function(BROKER / "replication" / "startup.py", "start_replication")) == []


def test_an_assignment_after_construction_is_found():
    planted = ast.parse("async def _run_tree():\n    admin = TopicAdmin()\n    admin.self_broker = me\n")
    assert attribute_assignments(planted) == ["admin.self_broker"]


def test_a_registration_after_construction_is_found():
    planted = ast.parse("async def _run_tree(broker_box):\n    kafka = KafkaService()\n"
                        "    kafka.broker_settings.listeners.append(apply)\n    broker = Broker()\n"
                        "    broker_box.append(broker)\n    processors = [Processor(i) for i in range(2)]\n")
    assert registrations(planted) == ["kafka.broker_settings.listeners.append(apply)", "broker_box.append(broker)"]


def metrics_registrations(tree: ast.AST) -> list[str]:
    """Each call that adds a collector to the metrics: ``<x>.watch_<what>(...)`` or ``<x>.register(...)``
    on a registry, as written."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            name, receiver = node.func.attr, ast.unparse(node.func.value)
            if (name.startswith("watch_") and receiver.endswith("metrics")) or (
                    name == "register" and receiver.endswith("registry")):
                found.append(f"{receiver}.{name}")
    return found


def test_metrics_collectors_are_registered_by_the_root_alone():
    # Each collector is added in the root as the object it reads comes to exist (docs/architecture.md);
    # BrokerMetrics' own methods are where a watch_* call becomes a registry.register.
    elsewhere = {str(path.relative_to(BROKER)): calls for path in sorted(BROKER.rglob("*.py"))
                 if path.name != "server.py" and path != BROKER / "metrics.py"
                 and (calls := metrics_registrations(ast.parse(path.read_text())))}
    assert elsewhere == {}


def test_a_registration_outside_the_root_is_found():
    planted = ast.parse("def start(self):\n    self.engine.metrics.watch_groups(self.groups)\n")
    assert metrics_registrations(planted) == ["self.engine.metrics.watch_groups"]
