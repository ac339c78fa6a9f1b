"""Pipeline jobs over the ``rocketstore`` data source: plain functions that take a SparkSession.

``export(spark, store, out, fmt="parquet", **read_options)`` writes the store's messages (the data
source's schema, every column) to a new directory ``out``:

- ``parquet``: Hive-style partitions ``out/topic=<topic>/date=<yyyy-MM-dd>/part-*.parquet``, where
  ``date`` is the UTC date of ``store_timestamp``. ``topic`` and ``date`` live in the directory
  names, not in the files (``spark.read.parquet(out)`` gives them back as columns).
- ``json``: JSON Lines part files, one object per message with every column of the schema (nulls
  written as null; ``body`` in base64, as Spark writes binary; times in ISO-8601).

It returns how many rows it wrote, counted by an ``Observation`` on the written frame: the count
comes from the same pass that writes, so the store is read once and nothing is cached.

``stats(spark, store, out, **read_options)`` writes into the directory ``out``:

- ``stats.parquet``: one row per topic, queue_id and UTC hour of ``store_timestamp``: ``messages``,
  ``bytes`` (sum of body lengths), ``first_store_timestamp``, ``last_store_timestamp``, and
  ``top_tags`` / ``top_keys``: the 5 most frequent values, each ``{value, count}``, most frequent
  first (ties by value); a message counts once per distinct key.
- ``messages_per_hour.png``: messages per hour, one series per topic.
- ``size_distribution.png``: body sizes in power-of-two bins, stacked by topic.

and returns a summary (topics, messages, bytes, rows, hours, the paths written). The charts are
drawn on the driver, so ``out`` must be a local directory there.

``store`` is one store directory, or a list of them, one per broker, read as one data set with a
``broker`` column (``rocketstore.spark.brokers``: option ``brokers`` names them). Then ``export``
writes the ``broker`` column into its files, and ``stats`` has one row per broker, topic,
queue_id and hour.

``read_options`` are the data source's reading options (``source``, ``topics``, ``queueIds``,
``startTime``, ``brokers`` ...; see ``rocketstore.spark.source``). Both jobs refuse to overwrite: an existing
``out`` (export) or an existing output file (stats) is a ``FileExistsError`` naming it.
"""

from __future__ import annotations

import datetime as dt
import os
import shutil
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from rocketstore import times
from rocketstore.spark.columns import COLUMNS

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure
    from pyspark.sql import Column, DataFrame, DataFrameWriter, SparkSession

__all__ = ["FORMATS", "export", "refuse_existing", "stats", "stats_paths"]

FORMATS: Final = ("parquet", "json")
PARTITION_COLUMNS: Final = ("topic", "date")
STATS_FILE: Final = "stats.parquet"
HOURLY_CHART: Final = "messages_per_hour.png"
SIZE_CHART: Final = "size_distribution.png"
TOP_N: Final = 5
MAX_SERIES: Final = 8  # more topics than this in one chart is unreadable: the rest become "other"
_GROUP: Final = ("topic", "queue_id", "hour")
_HOUR_MS: Final = 3_600_000
_DAY_US: Final = 86_400_000_000
_TOP_TYPE: Final = "array<struct<value:string,count:bigint>>"

Stores = str | os.PathLike[str] | Sequence[str | os.PathLike[str]]


def read_store(spark: SparkSession, store: Stores, **read_options: str) -> DataFrame:
    """Every record the options select, system topics included: a job reports on the whole store.
    A list of stores is read as one frame with a ``broker`` column."""
    read_options = {"includeSystemTopics": "true", **read_options}
    reader = spark.read.format("rocketstore").options(**read_options)
    if isinstance(store, (str, os.PathLike)):
        return reader.load(str(store))
    return reader.load([str(s) for s in store])


def _title(store: Stores) -> str:
    """The store (or stores) as the charts' titles name them."""
    if isinstance(store, (str, os.PathLike)):
        return Path(store).name or str(store)
    return ", ".join(Path(s).name or str(s) for s in store)


# --- export ---------------------------------------------------------------------------------------
def export(spark: SparkSession, store: Stores, out: str, *, fmt: str = "parquet", **read_options: str) -> int:
    """Write the store's messages to the new directory ``out`` (see the module docstring);
    returns the number of rows written."""
    from pyspark.sql import Observation
    from pyspark.sql import functions as F

    if fmt not in FORMATS:
        raise ValueError(f"export format {fmt!r}: expected one of {', '.join(FORMATS)}")
    refuse_existing(out)
    df = read_store(spark, store, **read_options)
    written = Observation("rocketstore-export")
    df = df.observe(written, F.count(F.lit(1)).alias("rows"))
    if fmt == "parquet":
        # integer arithmetic on the instant, so the date is UTC whatever the session's time zone
        day = F.floor(F.unix_micros("store_timestamp") / _DAY_US).cast("int")
        df = df.withColumn("date", F.date_from_unix_date(day).cast("string"))
        _write_new(df.write.partitionBy(*PARTITION_COLUMNS).format("parquet"), out)
    else:
        # every line has every column (null as null), not only the ones a message happens to have
        columns = [*COLUMNS, *(["broker"] if "broker" in df.columns else [])]
        _write_new(df.select(*columns).write.format("json").option("ignoreNullFields", "false"), out)
    return int(written.get["rows"])


def refuse_existing(path: str | os.PathLike[str]) -> None:
    """FileExistsError if ``path`` exists. The jobs call it before any work; a caller may call it
    before it starts Spark at all. Only local paths are looked at here: on other file systems
    (``scheme://...``) Spark's own check (mode ``errorifexists``) gives the same error, through
    ``_write_new``."""
    if "://" not in str(path) and os.path.lexists(path):
        raise FileExistsError(
            f"{path} already exists: the job writes a new directory, remove it or pick another"
        )


def _write_new(writer: DataFrameWriter, out: str | os.PathLike[str]) -> None:
    """Save to ``out``, which must not exist. A local ``out`` a failed job left half written is
    removed: nothing else could be in it, as it did not exist before."""
    from pyspark.errors import AnalysisException

    try:
        writer.mode("errorifexists").save(str(out))
    except AnalysisException as exc:
        if (exc.getCondition() or "") == "PATH_ALREADY_EXISTS":
            raise FileExistsError(f"{out} already exists: the job writes a new directory") from None
        _remove_partial(out)
        raise
    except BaseException:
        _remove_partial(out)
        raise


def _remove_partial(out: str | os.PathLike[str]) -> None:
    if "://" not in str(out):
        shutil.rmtree(out, ignore_errors=True)


# --- stats ----------------------------------------------------------------------------------------
def stats(spark: SparkSession, store: Stores, out: str, **read_options: str) -> dict[str, Any]:
    """Per topic / queue / hour figures and two charts into the directory ``out`` (see the module
    docstring); returns a summary of what was written."""
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    root = Path(out)
    paths = stats_paths(out)
    for path in paths.values():
        refuse_existing(path)
    root.mkdir(parents=True, exist_ok=True)

    # sizes need the bodies (the source has no length column); bodies as binary, so a length is in
    # bytes, not characters. Only the length is kept in the cached frame.
    options = {**read_options, "includeBody": "true", "bodyAs": "binary"}
    ms = F.unix_millis("store_timestamp")
    df = read_store(spark, store, **options)
    by_broker = ["broker"] if "broker" in df.columns else []  # several stores: per broker too
    group = (*by_broker, *_GROUP)
    slim = df.select(
        *by_broker,
        "topic",
        "queue_id",
        F.timestamp_millis(ms - F.pmod(ms, F.lit(_HOUR_MS))).alias("hour"),
        "store_timestamp",
        F.length("body").alias("size"),
        "tags",
        F.array_distinct("keys").alias("keys"),
    )
    # four aggregations read it: the store is scanned and decoded once
    slim = slim.persist(StorageLevel.MEMORY_AND_DISK)
    try:
        table = (
            slim.groupBy(*group)
            .agg(
                F.count(F.lit(1)).alias("messages"),
                F.sum("size").alias("bytes"),
                F.min("store_timestamp").alias("first_store_timestamp"),
                F.max("store_timestamp").alias("last_store_timestamp"),
            )
            .join(_top(slim, group, F.col("tags"), "top_tags"), list(group), "left")
            .join(_top(slim, group, F.explode("keys"), "top_keys"), list(group), "left")
            .select(
                *group,
                "messages",
                "bytes",
                "first_store_timestamp",
                "last_store_timestamp",
                *(F.coalesce(F.col(c), F.array().cast(_TOP_TYPE)).alias(c) for c in ("top_tags", "top_keys")),
            )
            .orderBy(*group)
        )
        # a few rows per queue and hour: one file is easier to hand on than many tiny ones
        _write_new(table.coalesce(1).write.format("parquet"), paths["stats"])
        histogram = [
            (str(r["topic"]), int(r["bin"]), int(r["n"]))
            for r in slim.groupBy("topic", _size_bin(F.col("size")).alias("bin"))
            .agg(F.count(F.lit(1)).alias("n"))
            .collect()
        ]
    finally:
        slim.unpersist()

    written = spark.read.parquet(str(paths["stats"]))
    # epoch ms, not the collected datetime: Python renders a timestamp in the local zone
    hourly = [
        (str(r["topic"]), _utc(r["hour_ms"]), int(r["messages"]), int(r["bytes"] or 0))
        for r in written.groupBy("topic", F.unix_millis("hour").alias("hour_ms"))
        .agg(F.sum("messages").alias("messages"), F.sum("bytes").alias("bytes"))
        .collect()
    ]
    rows = written.count()
    title = _title(store)
    _hourly_chart(hourly, paths["messages_per_hour"], title)
    _size_chart(histogram, paths["size_distribution"], title)
    return {
        "topics": sorted({t for t, _, _, _ in hourly}),
        "messages": sum(n for _, _, n, _ in hourly),
        "bytes": sum(b for _, _, _, b in hourly),
        "rows": rows,
        "hours": len({h for _, h, _, _ in hourly}),
        "paths": {name: str(p) for name, p in paths.items()},
    }


def stats_paths(out: str | os.PathLike[str]) -> dict[str, Path]:
    """What ``stats`` writes into ``out``, by the names its summary gives them."""
    root = Path(out)
    return {
        "stats": root / STATS_FILE,
        "messages_per_hour": root / HOURLY_CHART,
        "size_distribution": root / SIZE_CHART,
    }


def _top(slim: DataFrame, group: Sequence[str], value: Column, name: str) -> DataFrame:
    """Per group, the TOP_N most frequent non-null values as [{value, count}], most frequent first."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    counted = (
        slim.select(*group, value.alias("value"))
        .where(F.col("value").isNotNull())
        .groupBy(*group, "value")
        .agg(F.count(F.lit(1)).alias("count"))
    )
    rank = F.row_number().over(Window.partitionBy(*group).orderBy(F.desc("count"), F.asc("value")))
    ranked = counted.withColumn("rank", rank).where(F.col("rank") <= TOP_N)
    # collect_list keeps no order after a shuffle: the rank travels with each value and sorts it back
    in_order = F.array_sort(F.collect_list(F.struct("rank", "value", "count")))
    return ranked.groupBy(*group).agg(
        F.transform(in_order, lambda s: F.struct(s["value"].alias("value"), s["count"].alias("count"))).alias(
            name
        )
    )


def _size_bin(size: Column) -> Column:
    """0 for an empty body, else b with 2**(b-1) <= size < 2**b. log2 is a float and can land
    just below an exact power of two, so the guess is checked against powers of two (exact in a
    double) and moved by one where it is off."""
    from pyspark.sql import functions as F

    guess = F.floor(F.log2(F.greatest(size, F.lit(1)))).cast("int")
    exact = (
        F.when(F.pow(F.lit(2.0), guess) > size, guess - 1)
        .when(F.pow(F.lit(2.0), guess + 1) <= size, guess + 1)
        .otherwise(guess)
    )
    return F.when(size.isNull(), None).when(size == 0, 0).otherwise(exact + 1)


def _bin_label(b: int) -> str:
    """Bin b as the sizes it holds: "0", "1", then [low, high) (8-15 prints as "8-16")."""
    if b <= 1:
        return str(b)
    return f"{_bytes(1 << (b - 1))}-{_bytes(1 << b)}"


def _bytes(n: int) -> str:
    for unit, size in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= size and n % size == 0:
            return f"{n // size}{unit}"
    return str(n)


# --- charts ---------------------------------------------------------------------------------------
def _series_names(totals: dict[str, int]) -> tuple[list[str], bool]:
    """The busiest topics (at most MAX_SERIES, then "other topics"), busiest first."""
    ordered = sorted(totals, key=lambda t: (-totals[t], t))
    if len(ordered) <= MAX_SERIES:
        return ordered, False
    return ordered[: MAX_SERIES - 1], True


_OTHER: Final = "other topics"


def _hourly_chart(hourly: list[tuple[str, dt.datetime, int, int]], path: Path, store: str) -> None:
    totals: dict[str, int] = defaultdict(int)
    for topic, _, n, _ in hourly:
        totals[topic] += n
    named, other = _series_names(totals)
    counts: dict[str, dict[dt.datetime, int]] = defaultdict(lambda: defaultdict(int))
    for topic, hour, n, _ in hourly:
        counts[topic if topic in named else _OTHER][hour] += n
    series = [*named, _OTHER] if other else named
    # every hour of the span, so an hour without messages shows as 0 instead of being skipped
    seen = sorted({h for _, h, _, _ in hourly})
    steps = int((seen[-1] - seen[0]).total_seconds()) // 3600 + 1 if seen else 0
    hours = [seen[0] + dt.timedelta(hours=k) for k in range(steps)]

    fig, ax = _figure()
    if not hours:
        _empty(ax)
    elif len(hours) <= 24:
        # few buckets: grouped bars, one label per hour (a line through 1-2 points says little)
        width = 0.8 / len(series)
        for i, topic in enumerate(series):
            xs = [k + (i - (len(series) - 1) / 2) * width for k in range(len(hours))]
            ax.bar(xs, [counts[topic].get(h, 0) for h in hours], width=width, label=topic)
        ax.set_xticks(range(len(hours)))
        ax.set_xticklabels([_hour_label(h) for h in hours], **_tilt(len(hours) > 6))
    else:
        for topic in series:
            ax.plot(range(len(hours)), [counts[topic].get(h, 0) for h in hours], marker=".", label=topic)
        ticks = list(range(0, len(hours), max(1, len(hours) // 12)))
        ax.set_xticks(ticks)
        ax.set_xticklabels([_hour_label(hours[k]) for k in ticks], **_tilt(True))
    ax.set_title(f"Messages per hour by topic: {store}")
    ax.set_xlabel("hour (store time, local, with its UTC offset)")
    ax.set_ylabel("messages")
    _finish(fig, ax, path, bool(hours))


def _size_chart(histogram: list[tuple[str, int, int]], path: Path, store: str) -> None:
    totals: dict[str, int] = defaultdict(int)
    for topic, _, n in histogram:
        totals[topic] += n
    named, other = _series_names(totals)
    counts: dict[str, dict[int, int]] = defaultdict(lambda: defaultdict(int))
    for topic, b, n in histogram:
        counts[topic if topic in named else _OTHER][b] += n
    series = [*named, _OTHER] if other else named

    fig, ax = _figure()
    if not histogram:
        _empty(ax)
    else:
        bins = list(range(min(b for _, b, _ in histogram), max(b for _, b, _ in histogram) + 1))
        bottom = [0] * len(bins)
        for topic in series:
            heights = [counts[topic].get(b, 0) for b in bins]
            ax.bar(range(len(bins)), heights, bottom=bottom, label=topic, width=0.85)
            bottom = [a + h for a, h in zip(bottom, heights)]
        ax.set_xticks(range(len(bins)))
        ax.set_xticklabels([_bin_label(b) for b in bins], **_tilt(len(bins) > 8))
        nonzero = [v for v in bottom if v]
        if max(nonzero) / min(nonzero) >= 100:
            # a long tail of rare sizes would be invisible beside the common ones on a linear axis
            ax.set_yscale("log")
    ax.set_title(f"Body size distribution: {store}")
    ax.set_xlabel("body size in bytes (bins low-high hold low <= size < high)")
    ax.set_ylabel("messages")
    _finish(fig, ax, path, bool(histogram))


def _figure() -> tuple[Figure, Axes]:
    # an Agg canvas of its own rather than pyplot: the process's backend (which a notebook or the
    # caller may have chosen) is left alone, and no display is needed
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(10, 5.5))
    FigureCanvasAgg(fig)
    return fig, fig.subplots()


def _finish(fig: Figure, ax: Axes, path: Path, legend: bool) -> None:
    if legend:
        # beside the plot, never over a bar or a line
        ax.legend(title="topic", fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0))
        ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def _tilt(crowded: bool) -> dict[str, Any]:
    """Tick label placement: slanted (anchored at their right end, under their tick) when many."""
    return {"rotation": 45, "ha": "right"} if crowded else {"rotation": 0, "ha": "center"}


def _empty(ax: Axes) -> None:
    ax.text(0.5, 0.5, "no messages", ha="center", va="center", transform=ax.transAxes)


def _utc(ms: int) -> dt.datetime:
    return dt.datetime.fromtimestamp(ms / 1000, tz=dt.timezone.utc)


def _hour_label(hour: dt.datetime) -> str:
    """The hour as every printed time is (rocketstore.times): local, ISO 8601, with its offset."""
    return times.format_time(round(hour.timestamp() * 1000), "minutes") or ""
