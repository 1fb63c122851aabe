"""Seeds for the fault tests: random by default, printed, replayable.

``TRIKAFKA_FAULT_SEED=<n>`` replays a run's fault schedule (which faults, when,
how long, how many messages).  Real-time tests cannot replay thread and
network interleavings exactly; the schedule is what the seed pins down.
"""

from __future__ import annotations

import os
import random

SEED_VARIABLE = "TRIKAFKA_FAULT_SEED"


def fault_seed() -> int:
    """``TRIKAFKA_FAULT_SEED`` when set, else a fresh random seed."""
    text = os.environ.get(SEED_VARIABLE)
    return int(text) if text else random.SystemRandom().randrange(2**32)


def fault_rng(test_name: str) -> random.Random:
    """A ``random.Random`` for one test; prints its seed (pytest shows it on failure)."""
    seed = fault_seed()
    print(f"{test_name}: fault seed {seed} (replay with {SEED_VARIABLE}={seed})")
    rng = random.Random(seed)
    rng.seed_value = seed  # type: ignore[attr-defined]
    return rng
