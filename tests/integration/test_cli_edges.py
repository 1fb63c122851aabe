"""The edges of the ``trikafka`` command a new user meets: one address syntax, honest
one-line errors with a non-zero exit, and the polish (``--version``, options after the
subcommand, "1 message", a clean stop on SIGTERM)."""

from __future__ import annotations

import json
import re
import signal
import subprocess

import pytest

from trikafka import __version__
from trikafka.cli import build_parser
from trikafka.cli.serve import read_ready_file
from trikafka.client import BrokerAddress, format_broker_addresses, parse_broker_addresses

from tests.helpers.broker_testing import child_process, make_config, serve_process

SMALL_LIMIT = ("--set", "max.message.size=100")


async def run(*args: str, stdin: bytes | None = None, status: int) -> tuple[str, str]:
    """Run ``trikafka ARGS`` to completion; assert its exit status; return (stdout, stderr)."""
    async with child_process(*args, stdin=subprocess.PIPE if stdin is not None else None,
                             stdout=subprocess.PIPE) as child:
        if stdin is not None:
            await child.send_stdin(stdin)
        assert await child.wait() == status, child.stderr.decode(errors="replace")
    return bytes(child.stdout).decode(), bytes(child.stderr).decode(errors="replace")


def one_error_line(stderr: str) -> str:
    """The single ``trikafka: ...`` line an error is allowed to print (no traceback)."""
    assert "Traceback" not in stderr, stderr
    error_lines = [line for line in stderr.splitlines() if not line.startswith("trikafka: consuming ")]
    assert len(error_lines) == 1 and error_lines[0].startswith("trikafka: "), stderr
    return error_lines[0]


# ---------------------------------------------------------------- one address syntax

def test_one_address_syntax_with_and_without_ids():
    assert parse_broker_addresses("127.0.0.1:9092") == (BrokerAddress(0, "127.0.0.1", 9092),)
    assert parse_broker_addresses("3:a:1, b:2") == (BrokerAddress(3, "a", 1), BrokerAddress(1, "b", 2))
    assert format_broker_addresses(parse_broker_addresses("0:h:1,1:h:2")) == "0:h:1,1:h:2"
    for bad, reason in (("h:x", "not [ID:]HOST:PORT"), ("0:h:0", "not in 1..65535"), ("", "no broker"),
                        ("0:h:1,0:h:2", "listed twice"), ("a:b:c:d", "not [ID:]HOST:PORT")):
        with pytest.raises(ValueError, match=re.escape(reason)):
            parse_broker_addresses(bad)


def test_spark_broker_list_takes_the_same_syntax():
    from trikafka.spark.cluster import ClusterConfigError, parse_broker_list

    assert parse_broker_list("127.0.0.1:19092") == {0: BrokerAddress(0, "127.0.0.1", 19092)}
    assert parse_broker_list("5:h:1") == {5: BrokerAddress(5, "h", 1)}
    with pytest.raises(ClusterConfigError, match="not in 1..65535"):
        parse_broker_list("h:70000")


@pytest.mark.parametrize("command", ["produce", "consume", "topics"])
def test_every_command_takes_broker_and_brokers_with_an_id(command):
    parser = build_parser()
    args = [command, "t"] if command != "topics" else [command]
    assert parser.parse_args([*args, "--broker", "7:h:5"]).broker == ("h", 5)
    assert parser.parse_args([*args, "--brokers", "h:6"]).broker == ("h", 6)


def test_zookeeper_flag_everywhere_and_zk_a_hidden_alias():
    parser = build_parser()
    assert parser.parse_args(["topics", "--zookeeper", "z:1/c"]).zookeeper == "z:1/c"
    assert parser.parse_args(["topics", "--zk", "z:1/c"]).zookeeper == "z:1/c"
    assert parser.parse_args(["groups", "--zookeeper", "z:1"]).zookeeper == "z:1"
    assert parser.parse_args(["produce", "t", "--zookeeper", "z:1"]).zookeeper == "z:1"
    assert "--zk " not in parser._subparsers._group_actions[0].choices["topics"].format_help()


# ---------------------------------------------------------------- polish

async def test_version_and_log_options_after_the_subcommand(tmp_path):
    stdout, _ = await run("--version", status=0)
    assert stdout.strip() == f"trikafka {__version__}"
    await run("topics", "--log-dir", str(tmp_path), "--log-level", "warning", "--log-format", "json", status=0)


def test_every_flag_has_help_text():
    parser = build_parser()
    commands = parser._subparsers._group_actions[0].choices
    for name, sub in commands.items():
        if name == "pipeline":
            continue
        for action in sub._actions:
            assert action.help, f"trikafka {name} {action.option_strings or action.dest} has no help"


async def test_pipeline_help_names_the_trikafka_command():
    pytest.importorskip("pyspark")
    stdout, _ = await run("pipeline", "--help", status=0)
    assert stdout.startswith("usage: trikafka pipeline")


async def test_one_message_is_singular_and_consume_stops_cleanly_on_sigterm(tmp_path):
    async with serve_process(tmp_path / "data") as (broker, port):
        _, stderr = await run("produce", "t", "--broker", f"127.0.0.1:{port}", "--acks", "-1",
                              stdin=b"only\n", status=0)
        assert "sent 1 message to t" in stderr
        async with child_process("consume", "t", "--broker", f"127.0.0.1:{port}",
                                 stdout=subprocess.PIPE) as consumer:
            assert await consumer.wait_for_lines(1) == [b"only"]
            consumer.signal(signal.SIGTERM)
            assert await consumer.wait() == 0, consumer.stderr.decode()
        broker.signal(signal.SIGTERM)
        assert await broker.wait() == 0


# ---------------------------------------------------------------- topics

async def test_topics_create_lists_one_line_per_topic_and_json(tmp_path):
    async with serve_process(tmp_path / "data") as (broker, port):
        where = ("--broker", f"127.0.0.1:{port}")
        stdout, _ = await run("topics", "create", "orders", "--partitions", "3", *where, status=0)
        assert stdout.strip() == f"trikafka: topic 'orders' has 3 partitions on 127.0.0.1:{port}"
        _, stderr = await run("topics", "create", "orders", "--partitions", "2", *where, status=1)
        assert one_error_line(stderr).endswith("it exists with 3 partitions")
        _, stderr = await run("topics", "create", "a/b", "--partitions", "2", *where, status=1)
        assert "rejects the topic name" in one_error_line(stderr)
        await run("produce", "clicks", *where, "--acks", "-1", stdin=b"x\n", status=0)
        stdout, _ = await run("topics", *where, status=0)
        assert [line.split("\t")[0] for line in stdout.splitlines()] == ["clicks", "orders"]
        stdout, _ = await run("topics", *where, "--json", status=0)
        listing = json.loads(stdout)
        assert [(t["topic"], len(t["partitions"])) for t in listing["topics"]] == [("clicks", 1), ("orders", 3)]
        _, stderr = await run("topics", "nosuch", *where, status=1)
        assert one_error_line(stderr) == f"trikafka: topic 'nosuch' does not exist on 127.0.0.1:{port}"
        stdout, _ = await run("topics", *where, "--partitions", "2", status=0)  # counts for the named topics: none
        assert stdout == ""
        broker.signal(signal.SIGTERM)
        assert await broker.wait() == 0


async def test_topics_of_a_missing_log_dir_is_one_line(tmp_path):
    _, stderr = await run("topics", "--log-dir", str(tmp_path / "missing"), status=1)
    assert "no data directory" in one_error_line(stderr)


# ---------------------------------------------------------------- honest errors

async def test_produce_refuses_a_message_over_max_message_size_for_every_acks(tmp_path):
    async with serve_process(tmp_path / "data", *SMALL_LIMIT) as (broker, port):
        for acks in ("0", "1", "-1"):
            _, stderr = await run("produce", "big", "--broker", f"127.0.0.1:{port}", "--acks", acks, "--batch", "1",
                                  stdin=b"small\n" + b"x" * 200 + b"\n", status=1)
            line = one_error_line(stderr)
            assert "exceeds max.message.size 100" in line and "1 message sent before it" in line, line
        broker.signal(signal.SIGTERM)
        assert await broker.wait() == 0


async def test_consume_errors_name_the_reason(tmp_path):
    async with serve_process(tmp_path / "data", "--num-partitions", "2") as (broker, port):
        where = ("--broker", f"127.0.0.1:{port}")
        await run("produce", "t", *where, "--partition", "0", "--acks", "-1", stdin=b"zero-a\nzero-b\n", status=0)
        _, stderr = await run("consume", "t", *where, "--partition", "0", "--from", "3", "--max-messages", "1",
                              status=1)
        assert "offset 3 is not an entry boundary of t-0" in one_error_line(stderr)
        _, stderr = await run("consume", "t", *where, "--from", "3", status=1)
        assert one_error_line(stderr) == ("trikafka: --from 3 is a byte offset of one partition, and 't' has "
                                          "2 partitions: give --partition N")
        _, stderr = await run("consume", "nosuch", *where, "--exit-at-end", status=1)
        assert one_error_line(stderr) == f"trikafka: topic 'nosuch' does not exist on 127.0.0.1:{port}"
        _, stderr = await run("consume", "t", *where, "--partition", "9", status=1)
        assert one_error_line(stderr) == (f"trikafka: topic 't' has no partition 9: it has 2 partitions "
                                          f"(0..1) on 127.0.0.1:{port}")
        _, stderr = await run("consume", "a/b", *where, status=1)
        assert "rejects the topic name 'a/b'" in one_error_line(stderr)
        broker.signal(signal.SIGTERM)
        assert await broker.wait() == 0


# ---------------------------------------------------------------- what a kcat user expects

async def test_produce_spreads_lines_and_consume_reads_every_partition(tmp_path):
    """Keyless lines go to any partition, keyed lines to their key's; `consume` reads every
    partition, `-e` stops at the end, `-f` formats each message."""
    async with serve_process(tmp_path / "data", "--num-partitions", "3") as (broker, port):
        where = ("--broker", f"127.0.0.1:{port}")
        lines = b"".join(b"line-%d\n" % i for i in range(300))
        _, stderr = await run("produce", "plain", *where, "--acks", "-1", "--batch", "10", stdin=lines, status=0)
        assert "sent 300 messages to plain" in stderr
        stdout, stderr = await run("consume", "plain", *where, "-e", "-f", "%p %s\\n", status=0)
        printed = [line.split(" ") for line in stdout.splitlines()]
        assert sorted(value for _, value in printed) == sorted(f"line-{i}" for i in range(300))
        assert {partition for partition, _ in printed} == {"0", "1", "2"}  # 30 batches: all 3 is near-certain
        assert stderr.splitlines()[-1] == "trikafka: reached the end of plain (3 partitions) after 300 messages"

        keyed = b"".join(b"k%d=v%d\n" % (i % 7, i) for i in range(70))
        await run("produce", "keyed", *where, "--key-separator", "=", "--acks", "-1", stdin=keyed, status=0)
        stdout, _ = await run("consume", "keyed", *where, "-e", "--format", "%k %p %o %s\\n", status=0)
        rows = [line.split(" ") for line in stdout.splitlines()]
        assert len(rows) == 70
        partitions_of = {}
        for key, partition, _offset, _value in rows:
            partitions_of.setdefault(key, set()).add(partition)
        assert all(len(found) == 1 for found in partitions_of.values())  # a key stays in one partition
        for key in partitions_of:  # and in order within it
            values = [int(v[1:]) for k, _p, _o, v in rows if k == key]
            assert values == sorted(values)

        stdout, _ = await run("consume", "keyed", *where, "-p", "0", "-c", "1", "-f", "%t:%p:%o:%n:%S:%K", status=0)
        topic, partition, offset, next_offset, size, key_size = stdout.split(":")
        assert (topic, partition, offset, key_size) == ("keyed", "0", "0", "2") and int(next_offset) > 0
        _, stderr = await run("consume", "keyed", *where, "-f", "%q", status=2)
        assert "unknown field %q" in stderr
        broker.signal(signal.SIGTERM)
        assert await broker.wait() == 0


async def test_commands_find_the_local_broker_on_any_port(tmp_path):
    """`serve` writes where it listens into its data dir (docs §7.1); commands run beside the
    default data dir use it without --broker, and a clean stop removes it."""
    listener = tmp_path / "trikafka-data" / ".trikafka-listener"
    async with serve_process(tmp_path / "trikafka-data", cwd=tmp_path) as (broker, port):
        _, kafka_port = read_ready_file(f"{tmp_path / 'trikafka-data'}.port")
        assert listener.read_text() == f"127.0.0.1:{port}\nkafka 127.0.0.1:{kafka_port}\n"
        async with child_process("produce", "t", "--acks", "-1", stdin=subprocess.PIPE, cwd=tmp_path) as producer:
            await producer.send_stdin(b"found\n")
            assert await producer.wait() == 0, producer.stderr.decode()
        async with child_process("consume", "t", "-e", stdout=subprocess.PIPE, cwd=tmp_path) as consumer:
            assert await consumer.wait() == 0, consumer.stderr.decode()
        assert bytes(consumer.stdout) == b"found\n"
        broker.signal(signal.SIGTERM)
        assert await broker.wait() == 0
    assert not listener.exists()


async def test_consume_of_a_missing_topic_says_it_waits(tmp_path):
    async with serve_process(tmp_path / "data") as (broker, port):
        async with child_process("consume", "later", "--broker", f"127.0.0.1:{port}") as consumer:
            await consumer.wait_for_stderr(b"trikafka: topic 'later' does not exist on "
                                           b"127.0.0.1:%d yet; waiting for its partition 0" % port)
            await run("produce", "later", "--broker", f"127.0.0.1:{port}", "--acks", "-1", stdin=b"x\n", status=0)
            consumer.signal(signal.SIGTERM)
            assert await consumer.wait() == 0
        broker.signal(signal.SIGTERM)
        assert await broker.wait() == 0


async def test_an_interrupted_simulation_prints_a_summary_line():
    async with child_process("sim", "--seeds", "1..50", "--duration-s", "5", stdout=subprocess.PIPE) as sim:
        await sim.wait_for_lines(1)  # seed 1 is done
        sim.signal(signal.SIGINT)
        assert await sim.wait() == 130
    line = one_error_line(sim.stderr.decode())
    assert re.fullmatch(r"trikafka: interrupted after \d+ seeds: \d+ ok, 0 failed", line), line


async def test_an_interrupted_produce_says_what_it_sent(tmp_path):
    async with serve_process(tmp_path / "data") as (broker, port):
        where = ("--broker", f"127.0.0.1:{port}")
        async with child_process("produce", "t", *where, "--acks", "1", stdin=subprocess.PIPE) as producer:
            await producer.send_stdin(b"one\ntwo\n", close=False)
            async with child_process("consume", "t", *where, stdout=subprocess.PIPE) as consumer:
                assert await consumer.wait_for_lines(2) == [b"one", b"two"]
                consumer.signal(signal.SIGTERM)
                assert await consumer.wait() == 0
            producer.signal(signal.SIGINT)
            assert await producer.wait() == 128 + signal.SIGINT
        assert one_error_line(producer.stderr.decode()).startswith("trikafka: SIGINT: sent 2 messages to t before it")
        broker.signal(signal.SIGTERM)
        assert await broker.wait() == 0


@pytest.mark.zookeeper
async def test_produce_through_zookeeper_refuses_an_oversized_line_in_one_line(nursery, tmp_path, zk_chroot):
    from trikafka.broker import serve
    from trikafka.zk import KazooZooKeeperClient

    broker = await nursery.start(serve, make_config(tmp_path, broker_id=4, num_partitions=1))
    async with KazooZooKeeperClient(zk_chroot) as session:
        await session.create("/brokers/ids/4", f"127.0.0.1-1:127.0.0.1:{broker.port}".encode(),
                             ephemeral=True, makepath=True)
        _, stderr = await run("produce", "big", "--zookeeper", zk_chroot, "--acks", "0",
                              stdin=b"x" * 2_000_000 + b"\n", status=1)
    assert "exceeds max_message_size" in one_error_line(stderr)


# ---------------------------------------------------------------- the private ZooKeeper's port

async def test_a_taken_private_zookeeper_port_is_an_error_not_a_move(tmp_path):
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        _, stderr = await run("serve", "--port", "0", "--log-dir", str(tmp_path / "data"),
                              "--zookeeper-port", str(port), status=1)
    line = one_error_line(stderr)
    assert f"port {port} for the private ZooKeeper is taken" in line and "--zookeeper-port" in line


@pytest.mark.zookeeper
async def test_client_commands_find_the_local_private_zookeeper(tmp_path, no_kazoo_thread_leaks):
    from tests.helpers.broker_testing import READY_MARKER

    async with child_process("serve", "--port", "0", "--zookeeper-port", "0", "--ready-file", "port",
                             cwd=tmp_path) as broker:
        await broker.wait_for_stderr(READY_MARKER)
        connect = (tmp_path / "trikafka-data-zookeeper" / "zookeeper-connect").read_text().strip()
        assert f"private ZooKeeper {connect} " in broker.stderr.decode()  # printed at start
        async with child_process("groups", cwd=tmp_path, stdout=subprocess.PIPE) as groups:
            assert await groups.wait() == 0, groups.stderr.decode()
        assert bytes(groups.stdout).splitlines()[0] == b"group\tmembers"
        broker.signal(signal.SIGTERM)
        assert await broker.wait() == 0


async def test_an_unreachable_zookeeper_is_one_line(tmp_path):
    import socket

    with socket.socket() as closed:  # a port nobody listens on
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    _, stderr = await run("groups", "--zookeeper", f"127.0.0.1:{port}", status=1)
    assert f"ZooKeeper at 127.0.0.1:{port}" in one_error_line(stderr)
    # serve: no kazoo retry warnings, no exception groups; the reason once, in the log and as the last line
    _, stderr = await run("serve", "--zookeeper", f"127.0.0.1:{port}", "--port", "0", "--log-dir",
                          str(tmp_path / "data"), status=1)
    assert "kazoo" not in stderr and "ExceptionGroup" not in stderr and "Traceback" not in stderr, stderr
    assert stderr.splitlines()[-1] == (f"trikafka: no ZooKeeper session with 127.0.0.1:{port} within 6.0 s "
                                       "(is the ensemble running? --standalone runs without ZooKeeper)")


async def test_a_taken_broker_port_is_one_line_naming_it(tmp_path):
    async with serve_process(tmp_path / "first") as (broker, port):
        _, stderr = await run("serve", "--standalone", "--port", str(port), "--log-dir", str(tmp_path / "second"),
                              status=1)
        assert "ExceptionGroup" not in stderr and "Traceback" not in stderr, stderr
        assert stderr.splitlines()[-1] == f"trikafka: [Errno 98] broker port 127.0.0.1:{port}: Address already in use"
        broker.signal(signal.SIGTERM)
        assert await broker.wait() == 0


@pytest.mark.zookeeper
async def test_an_idle_group_member_says_it_owns_no_partition(zk_chroot):
    async with child_process("consume", "nothing-here", "--group", "idle", "--zookeeper", zk_chroot) as member:
        await member.wait_for_stderr(b"owns 0 partitions")
        member.signal(signal.SIGTERM)
        assert await member.wait() == 0


async def test_a_new_data_dir_does_not_report_recovery(tmp_path):
    async with serve_process(tmp_path / "data") as (broker, _port):
        broker.signal(signal.SIGTERM)
        assert await broker.wait() == 0
    assert b"recovery ran" not in broker.stderr and b"holds no logs yet" in broker.stderr


async def test_serve_names_a_bad_tls_file_in_one_line(tmp_path):
    from tests.helpers.certificates import make_certificates

    files = make_certificates(str(tmp_path))
    (tmp_path / "other").mkdir()
    other = make_certificates(str(tmp_path / "other"))
    serve = ("serve", "--standalone", "--port", "0", "--kafka-port", "0", "--log-dir", str(tmp_path / "data"),
             "--kafka-security", "SSL")
    cases = {
        "ssl.certificate.location": ("--tls-cert", str(tmp_path / "missing.pem"), "--tls-key", files.broker_key_path),
        "does not match": ("--tls-cert", files.broker_cert_path, "--tls-key", other.broker_key_path),
        "ssl.client.ca.location": ("--tls-cert", files.broker_cert_path, "--tls-key", files.broker_key_path,
                                   "--tls-client-ca", files.broker_key_path),
    }
    for needle, flags in cases.items():
        _, stderr = await run(*serve, *flags, status=2)
        line = one_error_line(stderr)
        assert line.startswith("trikafka: bad configuration: ") and needle in line, line
