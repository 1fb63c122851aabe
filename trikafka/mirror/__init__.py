"""Mirroring between clusters and the audit trail (docs/protocol.md §13).

* :mod:`trikafka.mirror.mirror`: ``trikafka mirror``, a group consumer on each
  source cluster feeding a producer into the target, at least once.
* :mod:`trikafka.mirror.topics`: creating mirrored topics on the target.
* :mod:`trikafka.mirror.audit`: ``trikafka audit``, counting what each tier holds.
"""

from .mirror import MirrorConfig, MirrorStats, run_mirror

__all__ = ["MirrorConfig", "MirrorStats", "run_mirror"]
