"""The source's edges: every partition of a topic is read, a missing topic is an error
unless the user opts in, Spark-Kafka's option names work, and an editable install
is found by ``format("trikafka")`` from any working directory."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import sysconfig
import textwrap
from pathlib import Path

import pytest

from trikafka.spark.cluster import ClusterConfigError
from trikafka.spark.offsets import PartitionKey
from trikafka.spark.options import OptionError, parse_options
from trikafka.spark.pageviews import generate_pageviews, iter_pageviews
from trikafka.spark.planning import PlanningError, plan_batch

pytest_plugins = ["tests.helpers.spark_cluster"]
pytestmark = [pytest.mark.spark]

REPO_ROOT = Path(__file__).resolve().parents[2]
PV4_PARTITIONS = 4
PV4_MESSAGES = 2_000
PV4_SEED = 14
START_MS = 1_714_564_800_000
LOAD_TIMEOUT_S = 600


def test_subscribe_and_subscribe_pattern_are_aliases():
    opts = parse_options({"brokers": "0:127.0.0.1:1", "subscribe": "a,b"})
    assert opts.topics == ("a", "b") and opts.topic_pattern is None
    opts = parse_options({"zookeeper": "127.0.0.1:2181", "subscribePattern": "pv.*"})
    assert opts.topic_pattern == "pv.*" and opts.topics == ()
    with pytest.raises(OptionError, match="alias of 'topics'"):
        parse_options({"brokers": "0:127.0.0.1:1", "subscribe": "a", "topics": "b"})
    with pytest.raises(OptionError, match="exactly one"):
        parse_options({"zookeeper": "127.0.0.1:2181", "subscribe": "a", "subscribePattern": "b"})


def test_fail_on_missing_topic_defaults_to_true():
    assert parse_options({"brokers": "0:127.0.0.1:1", "topics": "a"}).fail_on_missing_topic
    assert not parse_options({"brokers": "0:127.0.0.1:1", "topics": "a",
                              "failOnMissingTopic": "false"}).fail_on_missing_topic
    with pytest.raises(OptionError, match="failonmissingtopic"):
        parse_options({"brokers": "0:127.0.0.1:1", "topics": "a", "failOnMissingTopic": "maybe"})


def test_a_batch_read_of_a_missing_topic_is_an_error_unless_opted_in(broker_cluster, unique_topic):
    options = {"brokers": broker_cluster.broker_list, "topics": unique_topic}
    with pytest.raises((ClusterConfigError, PlanningError), match=f"{unique_topic}.*does not exist"):
        plan_batch(parse_options(options))
    assert plan_batch(parse_options({**options, "failOnMissingTopic": "false"})) == []


def test_a_source_error_names_its_cause_in_the_first_line(spark):
    """Spark wraps what the source raises; the cause stands in the error's first line, without the
    Python traceback (build_session hides it), and error_line gives the cause alone."""
    from trikafka.spark.session import error_line

    with pytest.raises(Exception) as caught:
        spark.read.format("trikafka").option("brokers", "127.0.0.1:1").option("topics", "t").load().count()
    first = str(caught.value).strip().splitlines()[0]
    assert "Traceback" not in str(caught.value)
    assert "PlanningError: planning the trikafka read failed: cannot connect to broker 127.0.0.1:1" in first
    assert error_line(caught.value).startswith("planning the trikafka read failed: cannot connect to broker")


@pytest.fixture(scope="module")
def pv4(tk, tmp_path_factory):
    """One broker whose topics have four partitions, holding page views in topic ``pv4``."""
    broker = tk.BrokerProcess(0, tmp_path_factory.mktemp("pv4") / "broker-0", num_partitions=PV4_PARTITIONS)
    broker.start()
    try:
        targets = [PartitionKey("pv4", 0, p) for p in range(PV4_PARTITIONS)]
        summary = generate_pageviews({0: broker.address}, targets, PV4_MESSAGES, rng=random.Random(PV4_SEED),
                                     clock_ms=lambda: START_MS, interval_ms=1000, batch_size=250)
        assert summary.messages == PV4_MESSAGES and len(summary.per_partition) == PV4_PARTITIONS
        views = iter_pageviews(PV4_MESSAGES, rng=random.Random(PV4_SEED), start_ms=START_MS, interval_ms=1000)
        yield broker, sorted(v.to_json_bytes() for v in views)
    finally:
        broker.stop()


@pytest.mark.parametrize("topic_option", ["topics", "subscribe"])
def test_a_static_broker_list_reads_every_partition(spark, pv4, topic_option):
    broker, payloads = pv4
    brokers = f"0:127.0.0.1:{broker.port}"
    frame = spark.read.format("trikafka").option("brokers", brokers).option(topic_option, "pv4").load()
    rows = frame.select("partition", "payload").collect()
    assert {r.partition for r in rows} == set(range(PV4_PARTITIONS))
    assert sorted(bytes(r.payload) for r in rows) == payloads


def test_pipeline_load_reads_every_partition(spark, pv4, tmp_path):
    broker, payloads = pv4
    output = tmp_path / "out"
    command = [sys.executable, "-m", "trikafka.spark.pipeline", "load", "--brokers", f"0:127.0.0.1:{broker.port}",
               "--topic", "pv4", "--output", str(output), "--checkpoint", str(tmp_path / "checkpoint")]
    done = subprocess.run(command, capture_output=True, text=True, timeout=LOAD_TIMEOUT_S)
    assert done.returncode == 0, done.stderr[-5000:]
    assert json.loads(done.stdout.strip().splitlines()[-1])["rows_total"] == PV4_MESSAGES
    events = spark.read.parquet(str(output / "events")).select("payload").collect()
    assert sorted(bytes(r.payload) for r in events) == payloads


def test_pipeline_load_of_a_missing_topic_fails(pv4, tmp_path):
    broker, _ = pv4
    command = [sys.executable, "-m", "trikafka.spark.pipeline", "load", "--brokers", f"0:127.0.0.1:{broker.port}",
               "--topic", "nosuch", "--output", str(tmp_path / "out"), "--checkpoint", str(tmp_path / "checkpoint")]
    done = subprocess.run(command, capture_output=True, text=True, timeout=LOAD_TIMEOUT_S)
    assert done.returncode != 0
    assert "'nosuch' does not exist" in done.stderr


_DISCOVERY_SCRIPT = textwrap.dedent("""
    import sys
    from pyspark.sql import SparkSession
    spark = (SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false")
             .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
             .getOrCreate())
    try:
        spark.read.format("trikafka").option("topics", "a").load().count()
    except Exception as exc:
        print(str(exc).splitlines()[0] if "DATA_SOURCE_NOT_FOUND" in str(exc) else "source found: " + str(exc))
    spark.stop()
""")


@pytest.mark.slow
def test_an_editable_install_is_discovered_from_any_directory(tmp_path):
    """The README's ``pip install -e '.[spark]'``, then ``format("trikafka")`` from elsewhere.

    The venv sees this interpreter's pyspark and pyarrow (its site-packages, named by a .pth line;
    this interpreter may itself be a venv's, such as ./scripts/test-all's, so the base interpreter's
    system site packages need not have them); trikafka itself comes only from the editable install of
    a copy of the sources: a directory a .pth line adds is not searched for .pth files, so this
    checkout's own editable install there is not read.
    """
    source = tmp_path / "checkout"
    source.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        (source / name).write_bytes((REPO_ROOT / name).read_bytes())
    for name in ("trikafka", "pyspark_trikafka"):
        subprocess.run(["cp", "-r", str(REPO_ROOT / name), str(source / name)], check=True)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, env=env)
    python = str(venv / "bin" / "python")
    venv_site = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                               capture_output=True, text=True, check=True, env=env).stdout.strip()
    suite_site = dict.fromkeys(sysconfig.get_path(name) for name in ("purelib", "platlib"))
    (Path(venv_site) / "suite-site-packages.pth").write_text("".join(f"{path}\n" for path in suite_site))
    install = subprocess.run([python, "-m", "pip", "install", "--no-deps", "-e", str(source)],
                             capture_output=True, text=True, env=env, timeout=LOAD_TIMEOUT_S)
    assert install.returncode == 0, install.stderr[-3000:]
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "job.py").write_text(_DISCOVERY_SCRIPT)
    env.update(PYSPARK_PYTHON=python, PYSPARK_DRIVER_PYTHON=python, SPARK_LOCAL_IP="127.0.0.1")
    done = subprocess.run([python, "job.py"], cwd=elsewhere, capture_output=True, text=True, env=env,
                          timeout=LOAD_TIMEOUT_S)
    assert done.returncode == 0, done.stderr[-5000:]
    # The source ran and rejected the options: it was found, by discovery alone.
    assert "source found:" in done.stdout and "set 'brokers'" in done.stdout, done.stdout + done.stderr[-3000:]


@pytest.mark.parametrize("payload_bytes", [20, 9000])  # a whole entry in the probe, and one bigger than it
def test_a_starting_offset_inside_an_entry_fails_on_the_driver(broker_cluster, unique_topic, payload_bytes):
    payloads = [bytes([i]) * payload_bytes for i in range(1, 4)]
    base, _ = broker_cluster.produce_payloads(unique_topic, 0, 1, payloads)
    entry = 10 + payload_bytes  # magic-1 entry: 4-byte length + 6-byte header + payload
    options = {"brokers": broker_cluster.broker_list, "topics": unique_topic}

    def plan_from(offset):
        return plan_batch(parse_options({**options, "startingOffsets": json.dumps({unique_topic: {"0-1": offset}})}))

    for inside in (base + 3, base + entry + 7, base + entry - 1):
        with pytest.raises(PlanningError, match=f"starting offset {inside} is not an entry boundary"):
            plan_from(inside)
    ranges = plan_from(base + entry)
    assert [(r.start, r.end) for r in ranges if r.key.partition == 1 and r.key.broker == 0] == \
        [(base + entry, base + 3 * entry)]


@pytest.mark.zookeeper
def test_a_registry_without_brokers_or_without_the_topic_is_an_error_unless_opted_in(zk_chroot, broker_cluster,
                                                                                   unique_topic):
    from kazoo.client import KazooClient

    options = {"zookeeper": zk_chroot, "topics": unique_topic}
    with pytest.raises(PlanningError, match="lists no brokers"):
        plan_batch(parse_options(options))
    assert plan_batch(parse_options({**options, "failOnMissingTopic": "false"})) == []

    client = KazooClient(hosts=zk_chroot, timeout=10.0)
    client.start(timeout=10.0)
    try:
        address = broker_cluster.addresses[0]
        client.create("/brokers/ids/0", f"{address.host}-1:{address.host}:{address.port}".encode(), makepath=True)
    finally:
        client.stop()
        client.close()
    with pytest.raises((ClusterConfigError, PlanningError), match=f"{unique_topic}.*does not exist"):
        plan_batch(parse_options(options))
    assert plan_batch(parse_options({**options, "failOnMissingTopic": "false"})) == []
