"""Every ```python block of README.md runs, in order, against a real broker and ZooKeeper.

The README addresses the defaults (ZooKeeper 127.0.0.1:2181, broker 127.0.0.1:9092);
the test points them at a ``trikafka serve`` child registered in a fresh ZooKeeper
chroot and a free port, and changes nothing else.  A block passes when its
program exits 0, prints what the README says it prints, and leaves behind what the
README says it makes (CLAIMS: each block has one entry, checked by a program of its
own); the blocks build on each other (the group consumer reads what the producers sent).
"""

from __future__ import annotations

import contextlib
import re
import shlex
import signal
import sys
from dataclasses import dataclass

import pytest
import trio

from tests.helpers.broker_testing import READY_MARKER, REPO_ROOT, child_env, child_process
from trikafka.cli.serve import read_ready_file

pytestmark = pytest.mark.zookeeper

BLOCK_RE = re.compile(r"^```python\n(.*?)^```$", re.DOTALL | re.MULTILINE)
README_ZOOKEEPER = "127.0.0.1:2181"
README_BROKER = "127.0.0.1:9092"
README_KAFKA = "127.0.0.1:9093"  # the Kafka listener beside the default port (docs/protocol.md §16.1)
BLOCK_TIMEOUT_S = 120.0


TOUR_RE = re.compile(r"\*\*Terminal 2: produce, then consume\.\*\*.*?^```console\n(.*?)^```$",
                     re.DOTALL | re.MULTILINE)
SECURITY_RE = re.compile(r"^## Security: TLS, SASL and ACLs\n(.*?)^## ", re.DOTALL | re.MULTILINE)
CONSOLE_RE = re.compile(r"^```console\n(.*?)^```$", re.DOTALL | re.MULTILINE)


def console_steps(block: str) -> list[tuple[str, list[str]]]:
    """A console block's commands (``$ `` lines, a trailing backslash continuing on the next line),
    each with the lines the README shows it printing."""
    steps: list[tuple[str, list[str]]] = []
    continued = False
    for line in block.splitlines():
        if continued:
            steps[-1] = (steps[-1][0][:-1].rstrip() + " " + line.strip(), steps[-1][1])
        elif line.startswith("$ "):
            steps.append((line[2:], []))
        else:
            steps[-1][1].append(line)
        continued = line.endswith("\\")
    return steps


def as_run_here(command: str) -> str:
    """``command`` with ``trikafka`` run by this interpreter from this checkout."""
    return re.sub(r"(^|\s)trikafka ", rf"\1{sys.executable} -m trikafka ", command)


def python_blocks() -> list[str]:
    return BLOCK_RE.findall((REPO_ROOT / "README.md").read_text())


@dataclass(frozen=True)
class Claim:
    """What one README block says it does: ``marker`` picks the block (a line only it has), its
    stdout must match ``prints``, and ``check`` (a program, addresses as in the README) must exit 0
    after it; ``append`` is added to the block itself (a block that only defines a function)."""

    marker: str
    prints: str = ""
    check: str = ""
    append: str = ""


CLAIMS = (
    Claim('NewTopic("events", num_partitions=3', check="""
from confluent_kafka.admin import AdminClient, ConfigResource
admin = AdminClient({"bootstrap.servers": "127.0.0.1:9093"})
topic = admin.list_topics(topic="events", timeout=30).topics["events"]
assert len(topic.partitions) == 3, f"events has {len(topic.partitions)} partitions, the README creates 3"
(configs,) = admin.describe_configs([ConfigResource("topic", "events")]).values()
retention = configs.result(timeout=30)["retention.ms"].value
assert retention == "86400000", f"events has retention.ms={retention}"
"""),
    Claim('"producer_byte_rate": 1024',
          prints=r"\A\{QuotaEntity\(components=\(\('client-id', 'metered'\),\)\): \{'producer_byte_rate': 1024\.0\}\}\n"
                 r"throttled for \d+\.\d s after \d+ KB\n\Z"),
    Claim('ConfigResource("broker", "0"', prints=r"\A3600000 DYNAMIC_BROKER_CONFIG\n\Z", check="""
from confluent_kafka.admin import AdminClient, ConfigResource
admin = AdminClient({"bootstrap.servers": "127.0.0.1:9093"})
(configs,) = admin.describe_configs([ConfigResource("topic", "metered")]).values()
retention = configs.result(timeout=30)["retention.ms"]
assert (retention.value, retention.source) == ("3600000", 2), retention  # the broker's dynamic value
"""),
    Claim('group_protocol="consumer"',
          prints=r"\A\[b'click 0', b'click 1', b'click 2'\]\n"
                 r"clicks 0 0 b'click 0'\nclicks 0 1 b'click 1'\nclicks 0 2 b'click 2'\n\Z", check="""
import subprocess, sys
from confluent_kafka import Consumer, TopicPartition
for group, offset in (("clickers", 3), ("trio-clickers", 2)):
    consumer = Consumer({"bootstrap.servers": "127.0.0.1:9093", "group.id": group})
    (committed,) = consumer.committed([TopicPartition("clicks", 0)], timeout=30)
    assert committed.offset == offset, (group, committed)
    consumer.close()
shown = subprocess.run([sys.executable, "-m", "trikafka", "groups", "clickers", "--kafka", "127.0.0.1:9093"],
                       capture_output=True, text=True, check=True).stdout
assert "protocol consumer/uniform" in shown, shown
"""),
    Claim('transactional_id="events-copier"', check="""
from confluent_kafka import Consumer, TopicPartition
consumer = Consumer({"bootstrap.servers": "127.0.0.1:9093", "group.id": "readme-check",
                     "auto.offset.reset": "earliest", "isolation.level": "read_committed"})
consumer.subscribe(["events-copy"])
m = consumer.poll(30)
assert m is not None and m.error() is None, m and m.error()
assert (m.key(), m.value()) == (b"user-1", b"SIGNED UP"), (m.key(), m.value())
copiers = Consumer({"bootstrap.servers": "127.0.0.1:9093", "group.id": "copiers"})
committed = copiers.committed([TopicPartition("events", p) for p in range(3)], timeout=30)
assert sum(tp.offset for tp in committed if tp.offset >= 0) == 1, committed
consumer.close()
copiers.close()
"""),
    Claim("def test_my_app():", prints=r"\Aready at 127\.0\.0\.1:\d+\n\Z", append="""
def run_my_app(bootstrap_servers):
    from confluent_kafka.admin import AdminClient
    AdminClient({"bootstrap.servers": bootstrap_servers}).list_topics(timeout=30)
    print("ready at", bootstrap_servers)

test_my_app()
"""),
    Claim('compression_codec="snappy"',
          prints=r"\ASendResult\(topic='greetings', broker_id=0, .*error=None\)\n\Z"),
    Claim('delivery = await p.send("greetings", b"right now")',
          prints=r"\ASendResult\(topic='greetings', broker_id=0, .*error=None\)\n\Z"),
    Claim('GroupConsumer(zk, "readers"', prints=r"b'the last one'\n\Z", check="""
from kazoo.client import KazooClient
zk = KazooClient("127.0.0.1:2181")
zk.start(30)
committed = {bp: int(zk.get(f"/consumers/readers/offsets/greetings/{bp}")[0])
             for bp in zk.get_children("/consumers/readers/offsets/greetings")}
zk.stop()
assert committed and any(committed.values()), committed
"""),
    Claim("open_cluster(2, num_partitions=2)", prints=r"\A\[b'order 0', b'order 1', .*b'order 9'\]\n\Z"),
    Claim("cluster.kafka_client() as client", prints=r"\A\[b'payment 0', b'payment 1', .*b'payment 5'\]\n\Z"),
)


def claim_of(block: str) -> Claim:
    (claim,) = [c for c in CLAIMS if c.marker in block]
    return claim


def test_the_readme_has_python_blocks_and_only_fenced_code():
    text = (REPO_ROOT / "README.md").read_text()
    assert len(python_blocks()) >= 3
    # An indented block would escape this test: every example is fenced with its language.
    assert not re.search(r"\n\n {4}\S", text)


async def test_every_python_block_of_the_readme_runs(tmp_path, zk_chroot):
    ready_file = tmp_path / "port"
    async with child_process("serve", "--zookeeper", zk_chroot, "--port", "0", "--log-dir", str(tmp_path / "data"),
                             "--ready-file", str(ready_file), cwd=tmp_path) as broker:
        await broker.wait_for_stderr(READY_MARKER)
        port, kafka_port = read_ready_file(str(ready_file))

        async def run(number: int, what: str, source: str) -> str:
            program = (source.replace(README_ZOOKEEPER, zk_chroot).replace(README_KAFKA, f"127.0.0.1:{kafka_port}")
                       .replace(README_BROKER, f"127.0.0.1:{port}"))
            with trio.fail_after(BLOCK_TIMEOUT_S):
                done = await trio.run_process([sys.executable, "-c", program], cwd=tmp_path, env=child_env(),
                                              capture_stdout=True, capture_stderr=True, check=False)
            assert done.returncode == 0, f"README python block {number}, {what}, failed:\n{done.stderr.decode()}"
            return done.stdout.decode()

        for number, block in enumerate(python_blocks(), 1):
            claim = claim_of(block)
            out = await run(number, "the block", block + claim.append)
            assert re.search(claim.prints, out, re.DOTALL), f"README python block {number} printed:\n{out}"
            if claim.check:
                await run(number, "the check of what it claims", claim.check)
        broker.signal(signal.SIGINT)
        assert await broker.wait() == 0


def test_every_readme_block_has_one_claim_and_every_claim_a_block():
    blocks = python_blocks()
    assert sorted(CLAIMS.index(claim_of(block)) for block in blocks) == list(range(len(CLAIMS)))


async def test_the_tour_s_console_block_prints_what_it_shows(tmp_path):
    """The five-minute tour's commands, run as written beside a `trikafka serve` of the default data
    dir (on a free port, which the commands find, docs §7.1), print exactly the lines it shows."""
    (tour,) = TOUR_RE.findall((REPO_ROOT / "README.md").read_text())
    steps = console_steps(tour)
    ready_file = tmp_path / "port"
    async with child_process("serve", "--standalone", "--port", "0", "--log-dir", "trikafka-data",
                             "--ready-file", str(ready_file), cwd=tmp_path) as broker:
        await broker.wait_for_stderr(READY_MARKER)
        for command, shown in steps:
            program = as_run_here(command)
            with trio.fail_after(BLOCK_TIMEOUT_S):
                done = await trio.run_process(["bash", "-c", f"{{ {program}; }} 2>&1"], cwd=tmp_path,
                                              env=child_env(), capture_stdout=True, check=False)
            assert done.returncode == 0, f"$ {command}\n{done.stdout.decode()}"
            assert done.stdout.decode().splitlines() == shown, f"$ {command}"
        broker.signal(signal.SIGINT)
        assert await broker.wait() == 0


async def test_the_security_section_runs_as_written(tmp_path):
    """The security section's commands, in order, in one directory: the test CA and broker certificate
    from `openssl`, users and an ACL, `trikafka serve` (given free ports and a ready file: the only
    change, with the Kafka address the commands name replaced by its port), then the admin creating
    the topic, alice writing, the admin reading; each command exits 0 and prints on stdout exactly
    the lines shown (stderr, openssl's progress included, is not compared)."""
    (section,) = SECURITY_RE.findall((REPO_ROOT / "README.md").read_text())
    steps = [step for block in CONSOLE_RE.findall(section) for step in console_steps(block)]
    kafka_address = README_KAFKA
    async with contextlib.AsyncExitStack() as stack:
        for command, shown in steps:
            if command.startswith("trikafka serve "):
                ready_file = tmp_path / "port"
                broker = await stack.enter_async_context(child_process(
                    *shlex.split(command)[1:], "--port", "0", "--kafka-port", "0", "--ready-file", str(ready_file),
                    cwd=tmp_path))
                await broker.wait_for_stderr(READY_MARKER)
                kafka_address = f"127.0.0.1:{read_ready_file(str(ready_file))[1]}"
                continue
            program = as_run_here(command).replace(README_KAFKA, kafka_address)
            with trio.fail_after(BLOCK_TIMEOUT_S):
                done = await trio.run_process(["bash", "-c", program], cwd=tmp_path, env=child_env(),
                                              capture_stdout=True, capture_stderr=True, check=False)
            assert done.returncode == 0, f"$ {command}\n{done.stderr.decode()}"
            assert done.stdout.decode().splitlines() == shown, f"$ {command}"
        assert kafka_address != README_KAFKA, "the section starts a broker"
        broker.signal(signal.SIGINT)
        assert await broker.wait() == 0
