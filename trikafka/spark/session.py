"""A SparkSession set up for trikafka jobs (local mode by default).

Three PySpark pitfalls are handled here once:

* workers run ``python3`` from PATH unless told otherwise, so the driver's
  interpreter is passed on (``PYSPARK_PYTHON``), or tasks cannot import
  pyarrow or trikafka;
* workers import the source by reference, so the directory holding the
  ``trikafka`` package is put on their ``PYTHONPATH``;
* in local mode Spark binds to the host's external address; trikafka jobs
  bind to 127.0.0.1 and keep the web UI off unless asked.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path
from typing import Mapping

DEFAULT_MASTER = "local[2]"


def _prepend_pythonpath(directory: str) -> None:
    current = os.environ.get("PYTHONPATH", "")
    parts = [p for p in current.split(os.pathsep) if p]
    if directory not in parts:
        os.environ["PYTHONPATH"] = os.pathsep.join([directory, *parts])


def source_is_discoverable() -> bool:
    """True when workers will find ``pyspark_trikafka`` by PySpark's ``pyspark_*`` module scan.

    The scan walks ``sys.path`` entries with ``pkgutil``, so a package served
    only by an editable-install import hook is invisible to it.
    """
    import pkgutil

    entries = [*sys.path, *os.environ.get("PYTHONPATH", "").split(os.pathsep)]
    absolute = [e for e in entries if os.path.isabs(e)]  # a worker's cwd may differ from ours
    return any(m.name == "pyspark_trikafka" for m in pkgutil.iter_modules(absolute))


def prepare_worker_environment() -> None:
    """Make Spark's Python workers use this interpreter and find trikafka (call before the JVM starts)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    # This file is <root>/trikafka/spark/session.py; workers need <root> on their path.
    _prepend_pythonpath(str(Path(__file__).resolve().parents[2]))


_CAUSE_RE = re.compile(r"(?:[A-Za-z_][\w]*\.)*([A-Za-z_]\w*(?:Error|Exception)): (.+)")


def error_line(exc: BaseException) -> str:
    """The cause of a Spark error in one line: the message of the Python exception a
    source or UDF raised (Spark prefixes it with its error condition), else the first line."""
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    found = _CAUSE_RE.search(first)
    return found.group(2).strip() if found else first


def build_session(
    app_name: str,
    *,
    master: str = DEFAULT_MASTER,
    shuffle_partitions: int = 2,
    ui: bool = False,
    conf: Mapping[str, str] | None = None,
    register: bool = True,
):  # -> pyspark.sql.SparkSession (pyspark is imported lazily)
    """Get or create a session that can read ``format("trikafka")``.

    The source is registered explicitly unless PySpark will discover it
    (``register=False`` never registers: tests use it to check discovery).
    """
    prepare_worker_environment()
    local = master.startswith("local")
    if local:
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    builder = (
        SparkSession.builder.appName(app_name)
        .master(master)
        .config("spark.ui.enabled", "true" if ui else "false")
        .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.ui.showConsoleProgress", "false")
        # A failing source or UDF reports its exception's own line, not its Python traceback:
        # the cause then stands in the first line of Spark's error.
        .config("spark.sql.execution.pyspark.udf.hideTraceback.enabled", "true")
    )
    if local:
        builder = builder.config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    if register and not source_is_discoverable():
        from .source import TrikafkaDataSource

        spark.dataSource.register(TrikafkaDataSource)
    return spark
