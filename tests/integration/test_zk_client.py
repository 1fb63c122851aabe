"""Coordinator conformance: the same tests against FakeZooKeeperClient and against
KazooZooKeeperClient on a real ZooKeeper server (``zk_harness`` runs each twice)."""

from __future__ import annotations

import time

import pytest
import trio
import trio.testing

from trikafka.zk import (
    BadVersionError,
    CheckOp,
    ZooKeeperClientClosedError,
    CreateOp,
    DeleteOp,
    InvalidPathError,
    NoChildrenForEphemeralsError,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    SessionState,
    SetOp,
)
from trikafka.zk.connect import parse_connect_string
from trikafka.zk.kazoo_bridge import KazooZooKeeperClient

WAIT_S = 10.0


async def test_create_get_set_delete(zk_harness, zk_clock):
    async with zk_harness.client() as zk:
        assert await zk.create("/a", b"one") == "/a"
        data, stat = await zk.get("/a")
        assert (data, stat.version, stat.data_length, stat.ephemeral_owner) == (b"one", 0, 3, 0)
        stat2 = await zk.set("/a", b"two")
        assert stat2.version == 1 and stat2.mzxid > stat.mzxid and stat2.czxid == stat.czxid
        assert (await zk.get("/a"))[0] == b"two"
        assert (await zk.exists("/a")).version == 1
        await zk.delete("/a")
        assert await zk.exists("/a") is None
        with pytest.raises(NoNodeError):
            await zk.get("/a")


async def test_errors_are_mapped(zk_harness, zk_clock):
    async with zk_harness.client() as zk:
        await zk.create("/p", b"")
        with pytest.raises(NodeExistsError):
            await zk.create("/p", b"")
        with pytest.raises(NoNodeError):
            await zk.create("/missing/child", b"")
        with pytest.raises(NoNodeError):
            await zk.set("/missing", b"x")
        with pytest.raises(NoNodeError):
            await zk.delete("/missing")
        with pytest.raises(NoNodeError):
            await zk.children("/missing")
        with pytest.raises(BadVersionError):
            await zk.set("/p", b"x", version=7)
        with pytest.raises(BadVersionError):
            await zk.delete("/p", version=7)
        await zk.create("/p/c", b"")
        with pytest.raises(NotEmptyError):
            await zk.delete("/p")
        assert (await zk.get("/p"))[1].num_children == 1


async def test_invalid_paths_are_refused_before_any_request(zk_harness, zk_clock):
    async with zk_harness.client() as zk:
        for bad in ("relative", "/trailing/", "/double//slash", "/dot/..", "/nul\x00"):
            with pytest.raises(InvalidPathError):
                await zk.create(bad, b"")
        with pytest.raises(TypeError):
            await zk.create("/str-data", "not bytes")  # type: ignore[arg-type]


async def test_makepath_children_and_recursive_delete(zk_harness, zk_clock):
    async with zk_harness.client() as zk:
        await zk.create("/x/y/z", b"leaf", makepath=True)
        assert (await zk.get("/x/y"))[0] == b""  # parents: persistent, empty (§8.1)
        for name in ("b", "a", "c"):
            await zk.create(f"/x/{name}", b"")
        assert await zk.children("/x") == ["a", "b", "c", "y"]
        await zk.ensure_path("/x/y/z")  # idempotent on an existing node
        await zk.ensure_path("/e/f/g")
        assert await zk.children("/e/f") == ["g"]
        await zk.delete("/x", recursive=True)
        assert await zk.exists("/x") is None
        with pytest.raises(NoNodeError):
            await zk.delete("/x", recursive=True)


async def test_sequential_and_ephemeral_nodes(zk_harness, zk_clock):
    async with zk_harness.client() as zk:
        await zk.create("/q", b"")
        first = await zk.create("/q/item-", b"1", sequential=True)
        second = await zk.create("/q/item-", b"2", sequential=True, ephemeral=True)
        assert first == "/q/item-0000000000" and second == "/q/item-0000000001"
        assert (await zk.create("/q/", b"", sequential=True)) == "/q/0000000002"
        ephemeral = await zk.create("/eph", b"e", ephemeral=True)
        stat = (await zk.get(ephemeral))[1]
        assert stat.is_ephemeral and stat.ephemeral_owner == zk.session_id
        with pytest.raises(NoChildrenForEphemeralsError):
            await zk.create("/eph/child", b"")


async def test_ephemerals_vanish_when_the_owner_closes(zk_harness, zk_clock):
    async with zk_harness.client() as observer:
        async with zk_harness.client() as owner:
            await owner.create("/brokers/ids/1", b"v", ephemeral=True, makepath=True)
            assert await observer.children("/brokers/ids") == ["1"]
            watch = observer.watch_children("/brokers/ids")
            assert await watch.__anext__() == ["1"]
        with trio.fail_after(WAIT_S):
            assert await watch.__anext__() == []


async def test_multi_applies_all_operations(zk_harness, zk_clock):
    async with zk_harness.client() as zk:
        await zk.create("/m", b"0")
        await zk.create("/m/old", b"")
        results = await zk.multi([
            CheckOp("/m", 0), CreateOp("/m/new", b"n"), SetOp("/m", b"1", 0), DeleteOp("/m/old"),
            CreateOp("/m/seq-", b"", sequential=True),
        ])
        assert results[0] is None and results[1] == "/m/new" and results[3] is None
        assert results[2].version == 1 and results[4] == "/m/seq-0000000002"
        assert await zk.children("/m") == ["new", "seq-0000000002"]
        assert (await zk.get("/m"))[0] == b"1"
        assert await zk.multi([]) == []


@pytest.mark.parametrize("failing_op, error, index", [
    (SetOp("/m", b"x", 5), BadVersionError, 2),
    (CreateOp("/m/existing"), NodeExistsError, 2),
    (DeleteOp("/m/absent"), NoNodeError, 2),
    (CheckOp("/m", 3), BadVersionError, 2),
])
async def test_failed_multi_applies_nothing(zk_harness, zk_clock, failing_op, error, index):
    async with zk_harness.client() as zk:
        await zk.create("/m", b"0")
        await zk.create("/m/existing", b"")
        watch = zk.watch_children("/m")
        assert await watch.__anext__() == ["existing"]
        with pytest.raises(error) as raised:
            await zk.multi([CreateOp("/m/new", b""), SetOp("/m", b"changed"), failing_op])
        assert raised.value.op_index == index
        assert await zk.children("/m") == ["existing"]
        data, stat = await zk.get("/m")
        assert (data, stat.version) == (b"0", 0)
        # No watch fired for the rolled-back create: the next change is the first seen.
        await zk.create("/m/later", b"")
        with trio.fail_after(WAIT_S):
            assert await watch.__anext__() == ["existing", "later"]


async def test_data_watch_delivers_successive_values(zk_harness, zk_clock):
    async with zk_harness.client() as zk, zk_harness.client() as writer:
        watch = zk.watch_data("/w")
        seen = []
        with trio.fail_after(WAIT_S):
            assert await watch.__anext__() is None
            await writer.create("/w", b"v0")
            for step in range(1, 4):
                data, stat = await watch.__anext__()
                seen.append((data, stat.version))
                await writer.set("/w", b"v%d" % step)
            assert (await watch.__anext__())[0] == b"v3"
            await writer.delete("/w")
            assert await watch.__anext__() is None
        assert seen == [(b"v0", 0), (b"v1", 1), (b"v2", 2)]


async def test_data_watch_is_level_triggered_under_bursts(zk_harness, zk_clock):
    async with zk_harness.client() as zk:
        await zk.create("/burst", b"0")
        versions = []
        async with trio.open_nursery() as nursery:
            async def follow():
                async for value in zk.watch_data("/burst"):
                    versions.append(value[1].version)
                    if value[0] == b"50":
                        return

            nursery.start_soon(follow)
            for i in range(1, 51):
                await zk.set("/burst", str(i).encode())
        assert versions == sorted(set(versions)) and versions[-1] == 50


async def test_children_watch_delivers_successive_lists(zk_harness, zk_clock):
    async with zk_harness.client() as zk, zk_harness.client() as writer:
        watch = zk.watch_children("/c")
        with trio.fail_after(WAIT_S):
            assert await watch.__anext__() is None
            await writer.create("/c", b"")
            assert await watch.__anext__() == []
            await writer.create("/c/b", b"")
            assert await watch.__anext__() == ["b"]
            await writer.create("/c/a", b"", ephemeral=True)
            assert await watch.__anext__() == ["a", "b"]
            await writer.set("/c/a", b"data changes are not child changes")
            await writer.delete("/c/b")
            assert await watch.__anext__() == ["a"]
            await writer.delete("/c", recursive=True)
            while (children := await watch.__anext__()) is not None:
                assert children == []  # the child went first, then the node
            await writer.create("/c/again", b"", makepath=True)  # re-created: watch still alive
            assert await watch.__anext__() in ([], ["again"])


async def test_session_expiry_is_observable_and_removes_ephemerals(zk_harness, zk_clock):
    async with zk_harness.client() as zk, zk_harness.client() as observer:
        await zk.create("/eph", b"mine", ephemeral=True)
        old_session, generation = zk.session_id, zk.session_generation.value
        assert zk.state.value is SessionState.CONNECTED and generation == 1
        with zk.state_changes() as changes:
            await zk_harness.expire(zk)
            seen = [changes.receive_nowait() for _ in range(3)]
        assert seen == [SessionState.SUSPENDED, SessionState.LOST, SessionState.CONNECTED]
        assert zk.session_generation.value == generation + 1
        assert zk.session_id not in (None, old_session)
        assert await observer.exists("/eph") is None
        assert await zk.exists("/eph") is None
        await zk.create("/eph", b"again", ephemeral=True)  # the owner re-creates it
        assert (await observer.get("/eph"))[1].ephemeral_owner == zk.session_id


async def test_watches_survive_session_expiry(zk_harness, zk_clock):
    async with zk_harness.client() as zk, zk_harness.client() as writer:
        await writer.create("/node", b"before")
        watch = zk.watch_data("/node")
        with trio.fail_after(WAIT_S):
            assert (await watch.__anext__())[0] == b"before"
            await zk_harness.expire(zk)
            await writer.set("/node", b"after")
            assert (await watch.__anext__())[0] == b"after"


async def test_connection_loss_keeps_session_ephemerals_and_watches(zk_harness, zk_clock):
    async with zk_harness.client() as zk, zk_harness.client() as writer:
        await zk.create("/kept", b"", ephemeral=True)
        await writer.create("/watched", b"0")
        session, generation = zk.session_id, zk.session_generation.value
        watch = zk.watch_data("/watched")
        with trio.fail_after(WAIT_S):
            assert (await watch.__anext__())[0] == b"0"
            await zk_harness.sever(zk)
            assert zk.state.value is SessionState.CONNECTED
            assert (zk.session_id, zk.session_generation.value) == (session, generation)
            assert (await writer.get("/kept"))[1].ephemeral_owner == session
            await writer.set("/watched", b"1")
            assert (await watch.__anext__())[0] == b"1"


async def test_create_ephemeral_expect_conflict(zk_harness, zk_clock):
    async with zk_harness.client() as zk, zk_harness.client() as other:
        await zk.create_ephemeral_expect_conflict("/owners/t/0-1", b"thread-a")
        await zk.create_ephemeral_expect_conflict("/owners/t/0-1", b"thread-a")  # same value: success
        await other.create_ephemeral_expect_conflict("/owners/t/0-1", b"thread-a")
        with pytest.raises(NodeExistsError):
            await other.create_ephemeral_expect_conflict("/owners/t/0-1", b"thread-b")
        data, stat = await other.get("/owners/t/0-1")
        assert data == b"thread-a" and stat.ephemeral_owner == zk.session_id
        assert (await other.get("/owners/t"))[1].ephemeral_owner == 0


async def test_closed_coordinator_refuses_work_and_ends_watches(zk_harness, zk_clock):
    async with zk_harness.client() as writer:
        await writer.create("/n", b"")
        async with zk_harness.client() as zk:
            watch = zk.watch_children("/n")
            assert await watch.__anext__() == []
            async with trio.open_nursery() as nursery:
                ended = trio.Event()

                async def drain():
                    async for _ in watch:
                        pass
                    ended.set()

                nursery.start_soon(drain)
                await trio.sleep(0)
                await zk.aclose()
                with trio.fail_after(WAIT_S):
                    await ended.wait()
        assert zk.closed and zk.state.value is SessionState.LOST
        with pytest.raises(ZooKeeperClientClosedError):
            await zk.get("/n")
        with pytest.raises(ZooKeeperClientClosedError):
            await zk.wait_connected()


async def test_sequence_numbers_count_creates_while_cversion_counts_every_change(zk_harness, zk_clock):
    async with zk_harness.client() as zk:
        await zk.create("/s", b"")
        await zk.create("/s/a", b"")
        await zk.delete("/s/a")
        stat = await zk.exists("/s")
        assert (stat.cversion, stat.num_children) == (2, 0)
        # ZooKeeper numbers sequential children by creates only: deletes don't count.
        assert await zk.create("/s/n-", b"", sequential=True) == "/s/n-0000000001"
        assert await zk.create("/s/n-", b"", sequential=True, ephemeral=True) == "/s/n-0000000002"
        stat = await zk.exists("/s")
        assert (stat.cversion, stat.num_children) == (4, 2)
        created = (await zk.get("/s/n-0000000002"))[1]
        assert stat.pzxid == created.czxid


async def test_a_multi_is_one_transaction_with_one_zxid(zk_harness, zk_clock):
    async with zk_harness.client() as zk:
        await zk.create("/t", b"0")
        before = (await zk.get("/t"))[1]
        results = await zk.multi([CreateOp("/t/a", b""), SetOp("/t", b"1"), CreateOp("/t/b", b"")])
        a_stat, b_stat = (await zk.get("/t/a"))[1], (await zk.get("/t/b"))[1]
        assert a_stat.czxid == results[1].mzxid == b_stat.czxid > before.mzxid
        assert results[1].pzxid == b_stat.czxid
        assert (await zk.set("/t", b"2")).mzxid > results[1].mzxid


async def test_requests_wait_out_a_short_partition(zk_harness, zk_clock):
    async with zk_harness.client() as zk, zk_harness.client(direct=True) as writer:
        await writer.create("/p", b"v")
        await zk.create("/mine", b"", ephemeral=True)
        session, generation = zk.session_id, zk.session_generation.value
        replies = []

        async def read_while_cut_off():
            replies.append(await zk.get("/p"))

        with trio.fail_after(WAIT_S):
            await zk_harness.partition(zk)
            assert zk.state.value is SessionState.SUSPENDED
            async with trio.open_nursery() as nursery:
                nursery.start_soon(read_while_cut_off)
                # Once the reader is parked its request is queued (kazoo queues on the call itself).
                await trio.testing.wait_all_tasks_blocked()
                assert replies == []  # queued, like kazoo: no error, no answer yet
                await writer.set("/p", b"w")
                zk_harness.heal(zk)
            await zk.wait_reconnected()
        assert replies[0][0] == b"w"
        assert (zk.session_id, zk.session_generation.value) == (session, generation)
        assert (await writer.get("/mine"))[1].ephemeral_owner == session


@pytest.mark.parametrize("zk_backend", ["fake"], indirect=True)  # the fake's waiting: the fake only
async def test_a_request_waits_out_a_partition_without_a_task_and_ends_with_a_close(zk_harness, zk_clock):
    """The fake's request parked while SUSPENDED waits on the session state alone (closing the client
    publishes LOST), not in tasks of its own; a close ends it with ZooKeeperClientClosedError."""
    spawned: list[str] = []

    class Spawns(trio.abc.Instrument):
        def task_spawned(self, task: trio.lowlevel.Task) -> None:
            spawned.append(task.name)

    outcome: list[str] = []
    async with zk_harness.client() as zk:
        await zk_harness.partition(zk)

        async def read() -> None:
            with pytest.raises(ZooKeeperClientClosedError):
                await zk.get("/p")
            outcome.append("closed")

        async with trio.open_nursery() as nursery:
            trio.lowlevel.add_instrument(Spawns())
            nursery.start_soon(read)
            await trio.testing.wait_all_tasks_blocked()
            assert outcome == []
            await zk.aclose()
    assert outcome == ["closed"]
    assert [name for name in spawned if not name.endswith("read")] == []


async def test_a_partition_longer_than_the_session_expires_it(zk_harness, zk_clock):
    async with zk_harness.client(session_timeout_s=1.0) as zk, zk_harness.client(direct=True) as observer:
        await zk.create("/mine", b"", ephemeral=True)
        generation = zk.session_generation.value
        watch = observer.watch_data("/mine")
        with trio.fail_after(WAIT_S), zk.state_changes() as changes:
            assert await watch.__anext__() is not None
            await zk_harness.partition(zk)
            assert await watch.__anext__() is None  # the server expired the session
            assert zk.state.value is SessionState.SUSPENDED  # the client can't know yet
            zk_harness.heal(zk)
            await zk.session_generation.wait_value(lambda g: g > generation)
            await zk.wait_connected()
            seen = [state async for state in _until_connected(changes)]
        assert seen[-2:] == [SessionState.LOST, SessionState.CONNECTED]
        assert await zk.exists("/mine") is None


async def _until_connected(changes):
    async for state in changes:
        yield state
        if state is SessionState.CONNECTED:
            return


@pytest.mark.zookeeper
def test_kazoo_callbacks_after_the_trio_run_are_dropped_not_fatal(zk_chroot, zk_admin, no_kazoo_thread_leaks):
    """A client that outlives its trio.run keeps receiving callbacks on kazoo's
    threads; the bridge counts and drops them instead of crashing anything."""
    chroot = parse_connect_string(zk_chroot).chroot
    box = {}

    async def arm_a_watch_and_leave():
        zk = KazooZooKeeperClient(zk_chroot, ensure_chroot=False)
        await zk.start()
        await zk.create("/w", b"0")
        assert (await zk.watch_data("/w").__anext__())[0] == b"0"  # a kazoo watch is now armed
        box["zk"] = zk

    trio.run(arm_a_watch_and_leave)
    zk = box["zk"]
    try:
        assert zk.dropped_callbacks == 0
        zk_admin.set(chroot + "/w", b"1")  # fires the watch on kazoo's thread; Trio is gone
        deadline = time.monotonic() + WAIT_S
        while zk.dropped_callbacks == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert zk.dropped_callbacks >= 1
        assert zk.kazoo_client.connected  # kazoo survived the dropped call
    finally:
        zk.kazoo_client.stop()
        zk.kazoo_client.close()
