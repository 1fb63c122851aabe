"""Spark integration (the ``trikafka[spark]`` extra): a Python data source and a load pipeline.

* ``spark.read.format("trikafka")`` / ``spark.readStream.format("trikafka")``:
  see ``trikafka.spark.source`` (batch), ``trikafka.spark.stream`` (streaming)
  and ``trikafka.spark.options`` (every option); with the option
  ``kafka.bootstrap.servers``, Kafka-format topics with spark-sql-kafka's
  options and columns (``trikafka.spark.kafka_source``, ``kafka_options``).
* ``python -m trikafka.spark.pipeline``: the page-view generator and the
  exactly-once Parquet load job (see ``trikafka.spark.pipeline``).
* ``trikafka.spark.blocking_client``: the plain-socket 0.7 client used inside
  Spark tasks (no pyspark needed to import it).

``TrikafkaDataSource`` is imported lazily so that importing this package does
not import pyspark.
"""

from __future__ import annotations

from trikafka.util.lazy import lazy_exports

__all__, __getattr__ = lazy_exports(__name__, {".source": ("TrikafkaDataSource",)})
