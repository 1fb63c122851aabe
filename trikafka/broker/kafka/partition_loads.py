"""Which partitions of an internal topic this broker coordinates, and their loading
(docs/protocol.md §17.3, §19.5.6).

A coordinator request first asks ``serve``: the partition's loaded state when
this broker leads it and has loaded it at the current leader epoch; else the
error the request answers.  Leadership is read from the partition itself
(``read_view``) at every request, so a partition this broker stopped leading
is dropped at once, and one it leads again (a new epoch) is loaded again
before it serves: nothing is kept that the partition does not say.  The group
coordinator and the transaction coordinator each hold one, with their own
``load`` (read the partition and build the state).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Awaitable, Callable, Generic, TypeVar

import trio
from kio.schema.errors import ErrorCode

from trikafka.kafka.errors import KafkaCodecError
from trikafka.log.errors import OffsetOutOfRangeError

from ..engine.errors import EngineError
from ..engine.partition import ReadView, Refused
from ..log_tally import Tally
from .internal_topic import InternalTopic

logger = logging.getLogger(__name__)

# How long a request waits for a load it started before answering COORDINATOR_LOAD_IN_PROGRESS.
LOAD_WAIT_S = 0.5

# What a partition this broker cannot serve answers (§17.3).
_NOT_SERVED: dict[EngineError, ErrorCode] = {
    EngineError.NOT_LEADER_FOR_PARTITION: ErrorCode.not_coordinator,
}

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class _LoadAt:
    """A partition this broker leads and must load, at this leader epoch, before serving it."""

    leader_epoch: int


@dataclass(slots=True)
class _Loaded(Generic[T]):
    leader_epoch: int
    state: T


class PartitionLoads(Generic[T]):
    """The loaded partitions of one internal topic: ``load(index, view)`` builds a partition's state
    from its log (a codec error stops that partition until a new leader epoch), ``on_drop`` hears
    of a state dropped, ``on_loaded`` of one that starts serving."""

    def __init__(self, topic: InternalTopic, load: Callable[[int, ReadView], Awaitable[T]],
                 on_loaded: Callable[[T], None] = lambda _: None, on_drop: Callable[[T], None] = lambda _: None):
        self._topic = topic
        self._name = topic.name
        self._load_state = load
        self._on_loaded = on_loaded
        self._on_drop = on_drop
        self._loaded: dict[int, _Loaded[T]] = {}
        self._loading: dict[int, trio.Event] = {}
        self._failed: set[tuple[int, int]] = set()  # (partition, epoch) whose records did not decode
        self._nursery: trio.Nursery | None = None
        self._loaded_tally = Tally(logger, "coordinator partitions loaded")
        self._dropped = Tally(logger, "coordinator partitions dropped (no longer led here)")

    def start(self, nursery: trio.Nursery) -> None:
        """Loads run in ``nursery`` (the listener's), so a client that gives up cancels none."""
        self._nursery = nursery

    def states(self) -> list[T]:
        """The states of the partitions this broker serves now."""
        return [loaded.state for loaded in self._loaded.values()]

    def get(self, index: int) -> T | None:
        """Partition ``index``'s state if it is loaded here now (no leadership check)."""
        loaded = self._loaded.get(index)
        return None if loaded is None else loaded.state

    def loading(self, index: int) -> bool:
        """Whether a load of partition ``index`` is under way."""
        return index in self._loading

    def any_loading(self) -> bool:
        """Whether a load of some partition is under way."""
        return bool(self._loading)

    async def serve(self, index: int) -> T | ErrorCode:
        """Partition ``index``'s loaded state, or NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS,
        COORDINATOR_NOT_AVAILABLE (§17.3)."""
        found = self._current(index)
        if not isinstance(found, _LoadAt):
            return found
        epoch = found.leader_epoch
        if (index, epoch) in self._failed:
            return ErrorCode.coordinator_not_available
        loading = self._loading.get(index)
        if loading is None:
            loading = self._loading[index] = trio.Event()
            if self._nursery is None:
                await self._load(index, epoch, loading)
            else:
                self._nursery.start_soon(self._load, index, epoch, loading)
        with trio.move_on_after(LOAD_WAIT_S):
            await loading.wait()
        found = self._current(index)
        return ErrorCode.coordinator_load_in_progress if isinstance(found, _LoadAt) else found

    def _current(self, index: int) -> T | ErrorCode | _LoadAt:
        """The loaded state; an error; or the leader epoch a load must be at."""
        try:
            view = self._topic.read_view(index)
        except Refused as exc:
            self.drop(index)
            return _NOT_SERVED.get(exc.error, ErrorCode.coordinator_not_available)
        loaded = self._loaded.get(index)
        if loaded is not None and loaded.leader_epoch == view.leader_epoch:
            return loaded.state
        if loaded is not None:
            self.drop(index)
        return _LoadAt(view.leader_epoch)

    def on_role(self, index: int, role: str) -> None:
        """Replication applied a state of partition ``index`` here: one this broker now leads
        is loaded at once, one it no longer leads dropped (§17.3)."""
        if role != "leader":
            self.drop(index)
            return
        found = self._current(index)
        if isinstance(found, _LoadAt) and index not in self._loading and self._nursery is not None:
            done = self._loading[index] = trio.Event()
            self._nursery.start_soon(self._load, index, found.leader_epoch, done)

    def drop(self, index: int) -> None:
        """Forget partition ``index``'s state: this broker no longer leads it (§17.3)."""
        dropped = self._loaded.pop(index, None)
        if dropped is not None:
            self._on_drop(dropped.state)
            logger.debug("%s-%d: no longer its coordinator, its state dropped", self._name, index)
            self._dropped.note(self._name, index)

    def _view(self, index: int) -> ReadView:
        return self._topic.read_view(index)

    async def _load(self, index: int, epoch: int, done: trio.Event) -> None:
        try:
            view = self._view(index)
            if view.leader_epoch != epoch:
                return
            started_s = trio.current_time()
            try:
                state = await self._load_state(index, view)
            except (KafkaCodecError, OffsetOutOfRangeError) as exc:
                logger.error("%s-%d: load stopped: %s; it answers COORDINATOR_NOT_AVAILABLE until a restart",
                             self._name, index, exc)
                self._failed.add((index, epoch))
                return
            if self._view(index).leader_epoch == epoch:
                self._loaded[index] = _Loaded(epoch, state)
                self._on_loaded(state)
                logger.debug("%s-%d loaded at leader epoch %d in %.3f s", self._name, index, epoch,
                             trio.current_time() - started_s)
                self._loaded_tally.note(self._name, index)
        except Refused:
            return
        finally:
            self._loading.pop(index, None)
            done.set()
