"""The controller's decisions for one partition (docs/protocol.md §12.7).

Pure: the current state, the replica list, who is live and whose unflushed
tail survived go in; the next state (or None: leave it alone) comes out.
The controller writes the result with a versioned set and bumps nothing
else; every leader change and every move to offline bumps the leader epoch
by one, so at most one leader ever holds a given (partition, epoch).
"""

from __future__ import annotations

from dataclasses import dataclass

from ...zk.replication_values import NO_LEADER, PartitionState, TopicConfig


@dataclass(frozen=True, slots=True)
class Cluster:
    """What the controller knows about brokers when it decides."""

    live: frozenset[int]  # registered under /brokers/ids
    tail_intact: frozenset[int]  # live brokers whose unflushed tail survived their last stop
    shutting_down: frozenset[int] = frozenset()  # asked for a controlled shutdown
    # Registered again (a new session) since the controller last looked: a
    # leader among them lost its in-memory leadership, so its epoch is over.
    restarted: frozenset[int] = frozenset()
    # Per partition: registered after its state znode's last write, so possibly back in an ISR it
    # never left without having caught up; not a preferred-leader target yet (§12.7).
    registered_after_state: frozenset[int] = frozenset()


def initial_state(replicas: tuple[int, ...], cluster: Cluster, controller_epoch: int) -> PartitionState:
    """The first state of a new partition: the first live replica leads epoch 0, every replica in the ISR.

    A new partition is empty on every replica, so all of them are in sync.
    """
    leader = next((r for r in replicas if r in cluster.live and r not in cluster.shutting_down), NO_LEADER)
    return PartitionState(leader, 0, tuple(replicas), controller_epoch)


def _electable(replica: int, cluster: Cluster, config: TopicConfig) -> bool:
    if replica not in cluster.live or replica in cluster.shutting_down:
        return False
    # KIP-966: a replica whose unflushed tail may be gone could lack committed
    # bytes; only ack-fsync topics guarantee committed bytes were on its disk.
    return replica in cluster.tail_intact or config.replica_ack_fsync


def elect(state: PartitionState, replicas: tuple[int, ...], cluster: Cluster, config: TopicConfig,
          controller_epoch: int) -> PartitionState | None:
    """The state after the controller reacted to ``cluster``; None when nothing changes.

    * a live, electable leader keeps leading (unless the preferred replica can take over);
    * otherwise the first ISR member (replica order) that is live and electable leads;
    * with none, unclean election (if the topic opted in) takes the first live
      replica outside the ISR, with the ISR ``[itself]``; else the partition is offline.
    """
    current_ok = (state.leader != NO_LEADER and state.leader in cluster.live
                  and state.leader not in cluster.shutting_down and state.leader not in cluster.restarted)
    preferred = replicas[0] if replicas else NO_LEADER
    if current_ok:
        if (preferred != state.leader and preferred in state.isr and _electable(preferred, cluster, config)
                and preferred not in cluster.registered_after_state):
            return PartitionState(preferred, state.leader_epoch + 1, state.isr, controller_epoch)
        return None
    candidates = [r for r in replicas if r in state.isr and _electable(r, cluster, config)]
    if candidates:
        leader = candidates[0]
        # The old leader leaves the ISR, also when it is shutting down in a
        # controlled way: it stops fetching at once, and kept in the ISR it would
        # hold the HW (every acks -1 write) until replica.lag.time.max.ms.
        isr = tuple(r for r in state.isr if r == leader or (r in cluster.live and r not in cluster.shutting_down))
        if len(isr) < config.min_insync_replicas:
            # Never below the minimum at an election (KIP-966): the members it would drop hold every
            # committed byte and stay electable, in case the new leader is a zombie whose session
            # has not expired yet; the new leader's own upkeep shrinks them if they do not fetch.
            isr = state.isr
        return PartitionState(leader, state.leader_epoch + 1, isr, controller_epoch)
    if config.unclean_leader_election:
        unclean = [r for r in replicas if r in cluster.live and r not in cluster.shutting_down]
        if unclean:
            return PartitionState(unclean[0], state.leader_epoch + 1, (unclean[0],), controller_epoch)
    if state.leader == NO_LEADER:
        return None  # already offline: no new epoch for nothing
    # Offline: the ISR is kept so that a member coming back can lead again.
    return PartitionState(NO_LEADER, state.leader_epoch + 1, state.isr, controller_epoch)


# -- reassignment (docs/protocol.md §12.12.3) ---------------------------------------------------------


def announce(state: PartitionState, controller_epoch: int) -> PartitionState:
    """The same leader and ISR in a new epoch: how a changed replica list reaches the brokers
    (a leader builds its view of its followers when an epoch starts)."""
    return PartitionState(state.leader, state.leader_epoch + 1, state.isr, controller_epoch)


def _leader_within(state: PartitionState, replicas: tuple[int, ...], cluster: Cluster,
                   config: TopicConfig) -> int:
    """The current leader if it stays in ``replicas``, else the first of ``replicas`` in the ISR that
    is electable; NO_LEADER if none."""
    if state.leader in replicas and state.leader != NO_LEADER:
        return state.leader
    return next((r for r in replicas if r in state.isr and _electable(r, cluster, config)), NO_LEADER)


def finish_reassignment(state: PartitionState, target: tuple[int, ...], cluster: Cluster, config: TopicConfig,
                        controller_epoch: int) -> PartitionState | None:
    """The state that completes a move to ``target``; None while it must wait.

    Ready when the partition has a leader and every target replica is in the
    ISR.  The leader stays if it is in the target, else leadership goes to
    the first electable target replica; the removed replicas leave the ISR;
    the epoch goes up (the new list is announced).
    """
    if state.leader == NO_LEADER or not set(target) <= set(state.isr):
        return None
    leader = _leader_within(state, target, cluster, config)
    if leader == NO_LEADER:
        return None
    isr = tuple(r for r in state.isr if r in target)
    return PartitionState(leader, state.leader_epoch + 1, isr, controller_epoch)


def prune_to_replicas(state: PartitionState, replicas: tuple[int, ...], cluster: Cluster, config: TopicConfig,
                      controller_epoch: int) -> PartitionState | None:
    """A state whose leader or ISR names a broker outside ``replicas``, made right; None if it is.

    The leader outside is replaced as in ``finish_reassignment`` (offline if
    no replica can lead); the ISR keeps only replicas.
    """
    if (state.leader == NO_LEADER or state.leader in replicas) and set(state.isr) <= set(replicas):
        return None
    leader = _leader_within(state, replicas, cluster, config) if state.leader != NO_LEADER else NO_LEADER
    isr = tuple(r for r in state.isr if r in replicas)
    return PartitionState(leader, state.leader_epoch + 1, isr, controller_epoch)
