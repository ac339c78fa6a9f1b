"""rocketstore on Apache Spark: the ``rocketstore`` data source and the pipeline jobs.

    from rocketstore.spark import register, session
    spark = session()                      # or your own SparkSession
    register(spark)                        # filter pushdown on; the short name works without it
    df = spark.read.format("rocketstore").load("/path/to/store")

See ``rocketstore.spark.source`` for the options and ``rocketstore.spark.jobs`` for the jobs.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["register", "session"]

PUSHDOWN_CONF = "spark.sql.python.filterPushdown.enabled"


def register(spark: SparkSession) -> None:
    """Register the ``rocketstore`` source on ``spark`` with filter pushdown, and turn on Spark's
    switch for Python filter pushdown (Spark refuses a filtering Python reader without it)."""
    from rocketstore.spark.source import PushdownDataSource

    spark.conf.set(PUSHDOWN_CONF, "true")
    spark.dataSource.register(PushdownDataSource)


def session(master: str = "local[*]", app_name: str = "rocketstore", **conf: str) -> SparkSession:
    """A SparkSession whose Python workers run this interpreter (so they import this
    rocketstore), with the source registered. ``conf`` adds Spark settings (dots as given)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    builder = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
    )
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    register(spark)
    return spark
