"""rocketstore on Apache Spark: the ``rocketstore`` data source and the pipeline jobs.

    from rocketstore.spark import register, session
    spark = session()                      # or your own SparkSession
    register(spark)                        # filter pushdown on; the short name works without it
    df = spark.read.format("rocketstore").load("/path/to/store")

See ``rocketstore.spark.source`` for the options and ``rocketstore.spark.jobs`` for the jobs.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["SMALL_STORE_BYTES", "check_workers_python", "register", "session", "small_job_conf"]

PUSHDOWN_CONF = "spark.sql.python.filterPushdown.enabled"
# A local job over a store with at most this much commitlog data is over in seconds: most of its
# CPU is the driver JVM warming up, half of that HotSpot's optimizing compiler (C2), whose code
# only pays off in longer runs. Measured on a 1,000-message store (benchmarks/spark_startup.py):
# the JVM's CPU to start 20 s -> 8.5 s, for session + count + two exports 40 s -> 19 s.
SMALL_STORE_BYTES = 64 << 20
_QUICK_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


def register(spark: SparkSession) -> None:
    """Register the ``rocketstore`` source on ``spark`` with filter pushdown, and turn on Spark's
    switch for Python filter pushdown (Spark refuses a filtering Python reader without it)."""
    from rocketstore.spark.source import PushdownDataSource

    spark.conf.set(PUSHDOWN_CONF, "true")
    spark.dataSource.register(PushdownDataSource)


def small_job_conf(
    store: str | os.PathLike[str] | Sequence[str | os.PathLike[str]], master: str
) -> dict[str, str]:
    """Spark settings for a job over ``store`` (or a list of stores) on ``master``, given before
    the session starts: for a local master and at most ``SMALL_STORE_BYTES`` of commitlog data
    in all, a driver JVM without C2, with the serial collector and mapping the class archive when
    one was built (``class_archive``); nothing otherwise."""
    stores = [store] if isinstance(store, (str, os.PathLike)) else list(store)
    if not master.startswith("local") or sum(map(_commitlog_bytes, stores)) > SMALL_STORE_BYTES:
        return {}
    from rocketstore.spark.class_archive import java_options

    return {"spark.driver.extraJavaOptions": f"{_QUICK_JVM} {java_options()}".strip()}


def _commitlog_bytes(store: str | os.PathLike[str]) -> int:
    """Bytes of records in the commitlog: full segments, and the last one up to where its valid
    records end (segments are allocated whole, so file sizes say nothing)."""
    from rocketstore.codec.commitlog_scan import scan_extent
    from rocketstore.geometry import detect_geometry
    from rocketstore.storage.file_view import mapped_readonly
    from rocketstore.storage.paths import StoreLayout, segment_files

    segments = segment_files(StoreLayout(store).commitlog)
    if not segments:
        return 0
    size = detect_geometry(store, None, with_index=False).commitlog_segment_size
    with mapped_readonly(segments[-1][1]) as view:
        return (len(segments) - 1) * size + scan_extent(view).position


def check_workers_python(python: str) -> None:
    """Raise RuntimeError, saying what to set, when the interpreter ``python`` (the one Spark
    starts for its Python workers) cannot import the source: Spark would otherwise fail with
    DATA_SOURCE_NOT_FOUND and no hint."""
    try:
        found = subprocess.run(
            [python, "-c", "import pyspark_rocketstore"], capture_output=True, timeout=120, check=False
        )
    except OSError as exc:
        raise RuntimeError(f"PYSPARK_PYTHON={python}: cannot run it ({exc})") from None
    if found.returncode != 0:
        raise RuntimeError(
            f"Spark's Python workers run {python}, which cannot import rocketstore's Spark source "
            f"(pyspark_rocketstore); set PYSPARK_PYTHON={sys.executable} (this interpreter), or "
            f"install rocketstore into {python}"
        )


def session(master: str = "local[*]", app_name: str = "rocketstore", **conf: str) -> SparkSession:
    """A SparkSession whose Python workers run this interpreter (so they import this
    rocketstore), unless PYSPARK_PYTHON or ``spark.pyspark.python`` names another one, which is
    then checked (``check_workers_python``); the source is registered. ``conf`` adds Spark
    settings (dots as given).

    A Python worker's error is shown as its type and message, without the worker's traceback
    (``spark.sql.execution.pyspark.udf.hideTraceback.enabled``, which ``conf`` may set to false):
    a refused option is then named on the error's first line, not at the end of a traceback."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    workers = conf.get("spark.pyspark.python") or os.environ["PYSPARK_PYTHON"]
    if workers != sys.executable:  # a venv's python is a link to another: compare as written
        check_workers_python(workers)
    from pyspark.sql import SparkSession

    builder = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.sql.execution.pyspark.udf.hideTraceback.enabled", "true")
    )
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    register(spark)
    return spark
