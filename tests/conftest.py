"""Suite-wide settings: the Hypothesis profile (``tests/helpers/hypothesis_profiles.py``),
the test tiers (``tests/helpers/tiers.py``) and the fixtures every test may request."""

import signal

import tests.helpers.hypothesis_profiles  # noqa: F401  (registers and loads the profile)

# Tests send SIGINT to the commands they start and expect its default effect.  A suite started as
# a background job of a non-interactive shell inherits SIGINT ignored, and so would every child; a
# signal this process handles is reset to the default in its children instead.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

# The tier markers; the real ZooKeeper server fixture (session-scoped, loopback, stopped
# by PID); the in-process broker fixtures trikafka offers its users (trikafka_broker,
# trikafka_cluster); the test certificates of TLS tests (``certificates``); the simulation's
# CI budget, run behind the other tests (``sim_budget``).
pytest_plugins = ["tests.helpers.tiers", "tests.helpers.zookeeper_server", "trikafka.testing.pytest_plugin",
                  "tests.helpers.certificates", "tests.helpers.sim_budget"]
