"""The suite's Hypothesis profiles, loaded by ``tests/conftest.py``.

``ci`` (the default, used by ./scripts/test-all) runs at least 1,000 examples per
state machine with no deadline; ``explore`` is the longer opt-in run:
``HYPOTHESIS_PROFILE=explore ./scripts/test-all tests/property``.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci",
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    print_blob=True,
)
settings.register_profile(
    "explore",
    max_examples=20_000,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    print_blob=True,
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

# State machines override max_examples up to this floor under the ci profile.
STATE_MACHINE_MIN_EXAMPLES = {"ci": 1000, "explore": 20_000}.get(
    os.environ.get("HYPOTHESIS_PROFILE", "ci"), 1000
)
