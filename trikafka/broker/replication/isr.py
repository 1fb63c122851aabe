"""The leader's view of one replicated partition: follower ends, high watermark, ISR.

Pure and clock-free: every call that depends on time takes ``now_ms``.  The
leader feeds it its own appends and each follower's REPLICA_FETCH; it answers
what the high watermark is, whether an acks -1 write may be appended or is
committed, and which ISR change to propose.  Proposals are written to
ZooKeeper conditionally by the caller and applied here only once that write
succeeded (``apply_isr``), so a fenced leader never acts on an ISR nobody
agreed to.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..engine.errors import EngineError


@dataclass(slots=True)
class _Follower:
    end: int = 0  # the end this replica reports as "has it" (log end, or fsynced end)
    fetch_offset: int = 0  # its log end, as of its last fetch
    log_start: int = -1  # its stored log start offset, as of its last fetch (-1: none reported, or a 0.7 log)
    last_caught_up_ms: int = 0
    last_fetch_ms: int = 0
    leader_end_at_last_fetch: int = 0
    fetched: bool = False  # has fetched in this epoch (its ends mean something)
    caught_up: bool = False  # was caught up at least once in this epoch (§12.8: may be written into the ISR)


class LeaderPartition:
    """ISR bookkeeping on the leader of one partition for one leader epoch.

    Args:
        leader_id: this broker.
        replicas: every replica of the partition (leader included).
        isr: the ISR read from ZooKeeper (leader included).
        epoch_start: the log end when this epoch began (the epoch's start offset).
        high_watermark: the HW this replica knew before it became leader.
        lag_time_max_ms: ``replica.lag.time.max.ms``.
        min_insync_replicas: ``min.insync.replicas``.
        now_ms: the time the leadership began (followers count as caught up then).
        durable_end: the leader's fsynced end, on ``replica.ack.fsync`` topics
            (its unflushed tail must not count towards the HW).
    """

    def __init__(self, leader_id: int, replicas: tuple[int, ...], isr: tuple[int, ...], *, epoch_start: int,
                 high_watermark: int, lag_time_max_ms: int, min_insync_replicas: int, now_ms: int,
                 durable_end: int | None = None):
        if leader_id not in isr:
            raise ValueError(f"leader {leader_id} is not in the ISR {isr}")
        self.leader_id = leader_id
        self.replicas = tuple(replicas)
        self.isr = tuple(isr)
        self.epoch_start = epoch_start
        self.log_end = epoch_start
        self.leader_end = epoch_start if durable_end is None else durable_end  # its own "has it" end
        self.high_watermark = min(high_watermark, epoch_start)
        self.lag_time_max_ms = lag_time_max_ms
        self.min_insync_replicas = min_insync_replicas
        self._followers = {r: _Follower(last_caught_up_ms=now_ms, last_fetch_ms=now_ms)
                           for r in self.replicas if r != leader_id}
        self.joining: frozenset[int] = frozenset()  # followers an ISR write in flight adds
        self._advance_hw()

    # -- inputs ------------------------------------------------------------------------

    def on_local_append(self, log_end: int, durable_end: int | None = None) -> None:
        """The leader's log grew to ``log_end``; ``durable_end`` in ack-fsync mode."""
        self.log_end = log_end
        self.leader_end = log_end if durable_end is None else durable_end
        self._advance_hw()

    def on_follower_fetch(self, replica_id: int, fetch_offset: int, now_ms: int,
                          durable_offset: int | None = None, log_start_offset: int = -1) -> None:
        """A follower fetched from ``fetch_offset`` (its log end); it has everything below, and has
        stored ``log_start_offset`` as its log start (§12.4.1).

        Raises KeyError for a replica id outside the replica list.
        """
        f = self._followers[replica_id]
        if fetch_offset >= self.log_end:
            f.last_caught_up_ms = now_ms
            f.caught_up = True
        elif fetch_offset >= f.leader_end_at_last_fetch:
            f.last_caught_up_ms = max(f.last_caught_up_ms, f.last_fetch_ms)
            f.caught_up = f.caught_up or f.fetched
        f.fetch_offset = fetch_offset
        f.log_start = log_start_offset
        f.end = fetch_offset if durable_offset is None else min(durable_offset, fetch_offset)
        f.leader_end_at_last_fetch = self.log_end
        f.last_fetch_ms = now_ms
        f.fetched = True
        self._advance_hw()

    def update_replicas(self, replicas: tuple[int, ...], now_ms: int) -> None:
        """The replica list changed within this epoch (a reassignment): track new followers, forget removed ones."""
        if self.leader_id not in replicas:
            raise ValueError(f"leader {self.leader_id} is not among the replicas {replicas}")
        self.replicas = tuple(replicas)
        for r in self.replicas:
            if r != self.leader_id and r not in self._followers:
                self._followers[r] = _Follower(last_caught_up_ms=now_ms, last_fetch_ms=now_ms)
        for r in [r for r in self._followers if r not in self.replicas and r not in self.isr]:
            del self._followers[r]

    def apply_isr(self, isr: tuple[int, ...]) -> None:
        """The ISR ZooKeeper now holds (after our conditional write succeeded)."""
        if self.leader_id not in isr:
            raise ValueError(f"leader {self.leader_id} is not in the ISR {isr}")
        self.isr = tuple(isr)
        self._advance_hw()

    # -- decisions -----------------------------------------------------------------------

    def follower_end(self, replica_id: int) -> int:
        """The end ``replica_id`` last reported."""
        return self.leader_end if replica_id == self.leader_id else self._followers[replica_id].end

    def log_start_of(self, replica_id: int) -> int:
        """The log start ``replica_id`` last reported (-1: none, or not a follower)."""
        follower = self._followers.get(replica_id)
        return -1 if follower is None else follower.log_start

    def isr_holds_log_start(self, offset: int) -> bool:
        """Whether every follower in the ISR has reported a log start at or above ``offset``
        (the leader stores its own before it asks: DeleteRecords, §16.4)."""
        return all(self.log_start_of(r) >= offset for r in self.isr if r != self.leader_id)

    def begin_expansion(self, isr: tuple[int, ...]) -> bool:
        """An ISR that adds followers is about to be written: until ``end_expansion``, the HW
        waits for them too (§12.8), so they hold every committed byte when the write lands.
        False (and nothing begins) if one of them is no longer at the HW: propose again."""
        joining = frozenset(isr) - frozenset(self.isr)
        if any(self.follower_end(r) < self.high_watermark for r in joining):
            return False
        self.joining = joining
        return True

    def end_expansion(self) -> None:
        self.joining = frozenset()
        self._advance_hw()

    def _advance_hw(self) -> None:
        low = min(self.follower_end(r) for r in (*self.isr, *self.joining))
        # The HW never moves back on a leader: a follower joins the ISR only at or above it.
        self.high_watermark = max(self.high_watermark, low)

    def shrink_proposal(self, now_ms: int) -> tuple[int, ...] | None:
        """The ISR without followers not caught up for ``lag_time_max_ms``; None if unchanged."""
        laggards = {r for r in self.isr if r != self.leader_id
                    and now_ms - self._followers[r].last_caught_up_ms > self.lag_time_max_ms}
        if not laggards:
            return None
        return self._caught_up_only(tuple(r for r in self.isr if r not in laggards))

    def expand_proposal(self, now_ms: int | None = None) -> tuple[int, ...] | None:
        """The ISR plus followers caught up to the HW within this epoch; None if unchanged.

        With ``now_ms``, only followers caught up within ``lag_time_max_ms`` qualify:
        a follower that stopped fetching while caught up must not flap back in
        after every shrink.
        """
        joiners = [r for r in self.replicas if r not in self.isr and r != self.leader_id
                   and self._followers[r].fetched
                   and (now_ms is None or now_ms - self._followers[r].last_caught_up_ms <= self.lag_time_max_ms)
                   and self._followers[r].fetch_offset >= max(self.high_watermark, self.epoch_start)
                   and self._followers[r].end >= self.high_watermark]
        if not joiners:
            return None
        return self._caught_up_only(tuple(r for r in self.replicas if r in self.isr or r in joiners))

    def _caught_up_only(self, isr: tuple[int, ...]) -> tuple[int, ...]:
        """``isr`` without the members not caught up in this epoch, unless that leaves fewer than
        ``min_insync_replicas`` (§12.8): a member written into the ISR by this leader is in sync,
        which the controller's preferred-leader rule trusts (§12.7)."""
        kept = tuple(r for r in isr if r == self.leader_id or self._followers[r].caught_up)
        return kept if len(kept) >= self.min_insync_replicas else isr

    def check_acks_all(self) -> EngineError:
        """May an acks -1 write be appended now? NO_ERROR or NOT_ENOUGH_REPLICAS."""
        if len(self.isr) < self.min_insync_replicas:
            return EngineError.NOT_ENOUGH_REPLICAS
        return EngineError.NO_ERROR

    def commit_status(self, required_end: int) -> EngineError | None:
        """Outcome of an acks -1 write ending at ``required_end``: None while it must wait.

        Committed once the HW covers it and the ISR still has the minimum size;
        if the ISR fell below the minimum first, NOT_ENOUGH_REPLICAS_AFTER_APPEND.
        """
        if len(self.isr) < self.min_insync_replicas:
            return EngineError.NOT_ENOUGH_REPLICAS_AFTER_APPEND
        if self.high_watermark >= required_end:
            return EngineError.NO_ERROR
        return None
