"""Makes ``format("rocketmq")`` work in any PySpark 4 session without `rocketflow.spark.register`.

PySpark 4 registers a Python data source by itself when an importable top-level module whose name
starts with ``pyspark_`` has a ``DefaultSource`` class (a `pyspark.sql.datasource.DataSource`): it
looks for them the first time a session needs a Python data source. This module is that hook, shipped
in rocketflow's wheel beside the ``rocketflow`` package; the executors find it where they find rocketflow.
"""

from __future__ import annotations

from rocketflow.spark.source import RocketMQDataSource as DefaultSource

__all__ = ["DefaultSource"]
