"""Test doubles for trikafka and for applications built on it, all in one place.

* :class:`FakeFileSystem` (``fakefs``): an in-memory ``trikafka.log.FileSystem``
  with a crash model, deterministic from a seed.
* :class:`FakeZooKeeper` (``fake_zookeeper``) and :class:`FakeCoordinator`
  (``fake_coordinator``): an in-process ZooKeeper server and its clients with
  kazoo's session behaviour, on Trio time.

Production packages never import this one; tests inject these doubles where
production code takes a ``FileSystem`` or a ``Coordinator``.
"""

from .fake_coordinator import FakeCoordinator
from .fake_zookeeper import FakeZooKeeper
from .fakefs import FakeFileSystem, FakeSegmentFile

__all__ = ["FakeCoordinator", "FakeFileSystem", "FakeSegmentFile", "FakeZooKeeper"]
