"""A deterministic simulation of a replicated trikafka cluster, replayable from one seed.

The real brokers (replica manager, controller, followers) run on a virtual
clock over fake disks, a fake ZooKeeper and an in-memory network, under
seeded faults; a checker holds them to the promises in ``checker``.
``run_seed(seed)`` runs one world; ``kafka_world.run_seed`` runs the Kafka
world (the same brokers' Kafka listeners and trikafka's Kafka client);
``trikafka sim`` is the command (docs/simulation.md).  Names load on first
use, so the command line can read
``trikafka.sim.names`` and ``trikafka.sim.faults`` without importing a broker.
"""

from __future__ import annotations

import importlib
from typing import Any

_HOMES = {"FAULTS": "faults", "FAULT_TABLE": "faults", "PLANT_NAMES": "names", "PLANTS": "plants",
          "planted": "plants", "KAFKA_PLANT_NAMES": "names", "SimResult": "world", "parse_faults": "faults", "run_seed": "world",
          "Violation": "checker"}

__all__ = sorted(_HOMES)


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f".{home}", __name__), name)
