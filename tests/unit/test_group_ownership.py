"""The group consumer's ownership state: what commits write, what a release or a lost session forgets."""

from __future__ import annotations

from trikafka.group.fetcher import FetchTarget
from trikafka.group.ownership import Ownership, key_of, offset_path, owner_path

A = ("t", "0-0")
B = ("t", "1-2")
R = ("r", "3")  # a replicated partition (docs/protocol.md §12.9)


def owning(*keys: tuple[str, str]) -> Ownership:
    ownership = Ownership()
    ownership.created(keys, 0)
    ownership.unrecord(keys)
    ownership.add({key: "g_c-0" for key in keys}, {key: 10 for key in keys}, present={keys[0]})
    return ownership


def test_add_records_claimed_partitions_at_their_committed_offsets():
    ownership = owning(A, B)
    assert ownership.owned == {A, B}
    assert ownership.unrecorded == set()
    assert ownership.positions == ownership.committed == {A: 10, B: 10}
    assert ownership.offset_nodes == {A}
    assert ownership.owner_versions == {A: 0, B: 0}


def test_commits_stay_at_the_first_unacknowledged_batch():
    ownership = owning(A)
    ownership.hand_out(A, 10, 20)
    ownership.hand_out(A, 20, 30)
    assert ownership.positions[A] == 30
    assert ownership.committable(A) == 10
    ownership.acknowledge(A, 20)
    assert ownership.committable(A) == 10
    ownership.acknowledge(A, 10)
    assert ownership.committable(A) == 30
    assert ownership.unacked == {}
    ownership.acknowledge(A, 10)  # twice: nothing pending, nothing changes
    assert ownership.committable(A) == 30


def test_forget_drops_everything_about_released_partitions_only():
    ownership = owning(A, B)
    ownership.hand_out(B, 10, 20)
    generation = ownership.generation
    ownership.forget({B})
    assert ownership.owned == {A}
    for table in (ownership.threads, ownership.positions, ownership.committed, ownership.unacked,
                  ownership.owner_versions):
        assert B not in table
    assert ownership.generation == generation


def test_drop_forgets_everything_and_starts_a_generation():
    ownership = owning(A, B)
    ownership.unrecord({R})
    generation = ownership.generation
    ownership.drop()
    assert ownership.owned == frozenset()
    assert ownership.unrecorded == set() and ownership.owner_versions == {} and ownership.positions == {}
    assert ownership.generation == generation + 1


def test_a_commit_records_what_it_wrote_and_released():
    ownership = owning(A, B)
    ownership.committed_to([(B, 15)], released={A})
    assert ownership.committed[B] == 15
    assert ownership.offset_nodes == {A, B}
    assert ownership.owner_versions == {B: 0}
    ownership.flip_offset_node(B)
    assert ownership.offset_nodes == {A}


def test_fetch_targets_name_broker_and_partition_in_key_order():
    ownership = owning(B, A, R)
    assert ownership.fetch_targets() == [
        FetchTarget(ownership.generation, R, None, 3, 10),
        FetchTarget(ownership.generation, A, 0, 0, 10),
        FetchTarget(ownership.generation, B, 1, 2, 10),
    ]


def test_registry_paths_of_a_partition_and_back():
    assert owner_path("g", B) == "/consumers/g/owners/t/1-2"
    assert offset_path("g", R) == "/consumers/g/offsets/r/3"
    assert key_of(owner_path("g", B)) == B
    assert key_of(offset_path("g", R)) == R
