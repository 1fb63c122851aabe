"""Lets PySpark (4.x) find the ``trikafka`` data source without ``spark.dataSource.register``.

On its first data-source lookup PySpark imports every top-level module named
``pyspark_*`` on the worker's ``sys.path`` and registers its ``DefaultSource``
under ``DefaultSource.name()``.  Installing ``trikafka[spark]`` puts this
package there, so ``spark.read.format("trikafka")`` just works.
"""

from trikafka.spark.source import TrikafkaDataSource as DefaultSource

__all__ = ["DefaultSource"]
