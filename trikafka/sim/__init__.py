"""A deterministic simulation of a replicated trikafka cluster, replayable from one seed.

The real brokers (replica manager, controller, followers) run on a virtual
clock over fake disks, a fake ZooKeeper and an in-memory network, under
seeded faults; a checker holds them to the promises in ``checker``.
``run_seed(seed)`` runs one world; ``trikafka sim`` is the command
(docs/simulation.md).
"""

from .checker import Violation
from .plants import PLANTS, planted
from .world import FAULTS, SimResult, parse_faults, run_seed

__all__ = ["FAULTS", "PLANTS", "SimResult", "Violation", "parse_faults", "planted", "run_seed"]
