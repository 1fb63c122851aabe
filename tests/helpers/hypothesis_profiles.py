"""The suite's Hypothesis profiles, loaded by ``tests/conftest.py``; ``HYPOTHESIS_PROFILE`` picks one.

``dev`` (the default: plain ``pytest``, the fast tier) runs few examples, so a
change gets a first answer in minutes; ``ci`` (``./scripts/test-all`` sets it)
runs 200 examples per property and at least 1,000 per state machine, with no
deadline; ``explore`` is the longer opt-in run:
``HYPOTHESIS_PROFILE=explore ./scripts/test-all tests/property``.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

PROFILE_VARIABLE = "HYPOTHESIS_PROFILE"
DEFAULT_PROFILE = "dev"

# profile -> examples per property test (Hypothesis' max_examples), examples per state machine
EXAMPLES = {
    "dev": (20, 20),
    "ci": (200, 1000),
    "explore": (20_000, 20_000),
}

for _name, (_examples, _) in EXAMPLES.items():
    settings.register_profile(
        _name,
        max_examples=_examples,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
        print_blob=True,
    )

PROFILE = os.environ.get(PROFILE_VARIABLE, DEFAULT_PROFILE)
settings.load_profile(PROFILE)  # an unknown name fails here, before any test runs

# Examples per run of every state machine under the active profile: each machine's
# settings(max_examples=...) takes this count rather than the profile's property count.
STATE_MACHINE_MIN_EXAMPLES = EXAMPLES[PROFILE][1]
