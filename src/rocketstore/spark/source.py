"""The ``rocketstore`` data source for Spark (PySpark's Python Data Source API).

    spark.read.format("rocketstore").load("/path/to/store")             # batch
    spark.readStream.format("rocketstore").load("/path/to/store")       # streaming
    df.write.format("rocketstore").mode("append").save("/path/to/store")

The schema is ``spark_schema()`` for any store directory, rocketstore's or RocketMQ's.
Reading options (case-insensitive):

    source          commitlog (every record, commitlog order; default) | queues (dispatched only)
    topic / topics  one topic / comma-separated topics
    queueIds        comma-separated queue ids
    startTime, endTime       store time window [start, end): epoch ms or ISO-8601 (local if no zone)
    startOffset, endOffset   physical offset window [start, end) of the record starts
    includeBody     true (default) | false: body is null and is not read
    bodyAs          binary (default) | string
    minPartitions   at least this many partitions when the store is big enough (default 2 × cores)

Streaming adds ``startingOffsets`` (earliest | latest | {"topic/queueId": offset, ...}),
``startingTimestamp`` (epoch ms or ISO-8601, local if no zone), ``maxMessagesPerTrigger`` and
``failOnDataLoss`` (default true). Times follow ``rocketstore.times``, as the CLI's do. Writing
takes columns ``topic, body`` and optionally ``keys, tags, properties, queue_id, delay_level,
born_timestamp``; options ``config`` (a StoreConfig file for a new store)
and ``lockTimeout`` (seconds a task waits for the other tasks of the job; default 600).

``DefaultSource`` in the top-level ``pyspark_rocketstore`` module makes the short name resolve
without registering; ``rocketstore.spark.register(spark)`` registers the source with filter
pushdown (equality, IN and ranges on topic, queue_id, queue_offset, physical_offset,
store_timestamp) and turns Spark's Python pushdown switch on.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    DataSourceStreamReader,
    EqualNullSafe,
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    InputPartition,
    LessThan,
    LessThanOrEqual,
    WriterCommitMessage,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from rocketstore import times
from rocketstore.errors import DataLossError
from rocketstore.spark.columns import COLUMNS, BodyAs
from rocketstore.spark.scan import (
    CommitlogRange,
    QueueRange,
    ScanBounds,
    ScanOptions,
    StoreFiles,
    plan_commitlog,
    plan_queues,
    queue_extent,
    queue_offset_by_time,
    read_commitlog_range,
    read_queue_range,
)
from rocketstore.spark.writer import append_batches, check_writable

__all__ = ["PushdownDataSource", "RocketStoreDataSource", "spark_schema"]

log = logging.getLogger(__name__)


def spark_schema(body_as: BodyAs = "binary") -> StructType:
    types = {
        "topic": StringType(),
        "queue_id": IntegerType(),
        "queue_offset": LongType(),
        "physical_offset": LongType(),
        "msg_id": StringType(),
        "uniq_key": StringType(),
        "keys": ArrayType(StringType()),
        "tags": StringType(),
        "properties": MapType(StringType(), StringType()),
        "body": StringType() if body_as == "string" else BinaryType(),
        "body_crc": IntegerType(),
        "flag": IntegerType(),
        "sys_flag": IntegerType(),
        "born_timestamp": TimestampType(),
        "born_host": StringType(),
        "store_timestamp": TimestampType(),
        "store_host": StringType(),
        "reconsume_times": IntegerType(),
        "prepared_transaction_offset": LongType(),
    }
    return StructType([StructField(name, types[name]) for name in COLUMNS])


# --- options --------------------------------------------------------------------------------
def _option(options: Any, name: str, default: str | None = None) -> str | None:
    value = options.get(name)
    return default if value is None else str(value)


def _bool(options: Any, name: str, default: bool) -> bool:
    raw = _option(options, name)
    if raw is None:
        return default
    if raw.strip().lower() in ("true", "1", "yes"):
        return True
    if raw.strip().lower() in ("false", "0", "no"):
        return False
    raise ValueError(f"option {name}={raw!r}: expected true or false")


def _int(options: Any, name: str) -> int | None:
    raw = _option(options, name)
    if raw is None:
        return None
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"option {name}={raw!r}: expected an integer") from None


def parse_time(name: str, raw: str) -> int:
    """An option's time as epoch ms: epoch ms, or ISO 8601 (local time when it names no zone: the
    rule of ``rocketstore.times``, the same as the CLI's)."""
    try:
        return times.parse_time(raw)
    except ValueError as exc:
        raise ValueError(f"option {name}={raw!r}: {exc}") from None


def _path(options: Any) -> str:
    path = _option(options, "path")
    if not path:
        raise ValueError("the rocketstore source needs a store directory: .load(path) or .save(path)")
    return path


def _bounds(options: Any) -> ScanBounds:
    bounds = ScanBounds()
    topics = _option(options, "topics") or _option(options, "topic")
    if topics:
        bounds = bounds.narrowed(topics=frozenset(t.strip() for t in topics.split(",") if t.strip()))
    qids = _option(options, "queueIds")
    if qids:
        try:
            ids = frozenset(int(q) for q in qids.split(",") if q.strip())
        except ValueError:
            raise ValueError(f"option queueIds={qids!r}: expected comma-separated integers") from None
        bounds = bounds.narrowed(queue_ids=ids)
    start, end = _option(options, "startTime"), _option(options, "endTime")
    if start is not None or end is not None:
        bounds = bounds.narrowed(
            store_time=(
                parse_time("startTime", start) if start is not None else None,
                parse_time("endTime", end) if end is not None else None,
            )
        )
    lo, hi = _int(options, "startOffset"), _int(options, "endOffset")
    if lo is not None or hi is not None:
        bounds = bounds.narrowed(physical_offset=(lo, hi))
    return bounds


def _scan_options(options: Any) -> ScanOptions:
    body_as = (_option(options, "bodyAs", "binary") or "binary").lower()
    if body_as not in ("binary", "string"):
        raise ValueError(f"option bodyAs={body_as!r}: expected binary or string")
    return ScanOptions(
        include_body=_bool(options, "includeBody", True),
        body_as=body_as,  # type: ignore[arg-type]
        bounds=_bounds(options),
    )


# --- batch ----------------------------------------------------------------------------------
class RocketStoreDataSource(DataSource):
    """``spark.read/readStream/write.format("rocketstore")``."""

    @classmethod
    def name(cls) -> str:
        return "rocketstore"

    def schema(self) -> StructType:
        body_as = (_option(self.options, "bodyAs", "binary") or "binary").lower()
        return spark_schema("string" if body_as == "string" else "binary")

    def reader(self, schema: StructType) -> DataSourceReader:
        return RocketStoreReader(self.options)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return RocketStoreStreamReader(self.options)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceArrowWriter:
        return RocketStoreWriter(self.options, schema, overwrite)


class PushdownDataSource(RocketStoreDataSource):
    """The source with filter pushdown (``register``): Spark refuses a Python reader that
    takes filters unless ``spark.sql.python.filterPushdown.enabled`` is on."""

    def reader(self, schema: StructType) -> DataSourceReader:
        return FilteringReader(self.options)


class RocketStoreReader(DataSourceReader):
    def __init__(self, options: Any) -> None:
        self.files = StoreFiles.at(_path(options))
        self.scan = _scan_options(options)
        source = (_option(options, "source", "commitlog") or "commitlog").lower()
        if source not in ("commitlog", "queues"):
            raise ValueError(f"option source={source!r}: expected commitlog or queues")
        self.source = source
        self.min_partitions = _int(options, "minPartitions") or 2 * (os.cpu_count() or 1)

    def partitions(self) -> Sequence[InputPartition]:
        bounds = self.scan.bounds
        parts: Sequence[CommitlogRange | QueueRange]
        if self.source == "commitlog":
            parts = plan_commitlog(self.files, bounds, self.min_partitions)
        else:
            parts = plan_queues(self.files, bounds)
        return [InputPartition(p) for p in parts]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        part = partition.value
        if part is None:
            return iter(())
        if isinstance(part, CommitlogRange):
            return read_commitlog_range(part, self.scan)
        return read_queue_range(self.files, part, self.scan)


class FilteringReader(RocketStoreReader):
    def pushFilters(self, filters: list[Filter]) -> Iterable[Filter]:
        """Every filter narrows the scan where it can, and every filter is handed back: Spark
        checks them again, so a bound can prune but never change a result."""
        for f in filters:
            self.scan = ScanOptions(self.scan.include_body, self.scan.body_as, _narrow(self.scan.bounds, f))
            yield f


_RANGE_COLUMNS = {
    "queue_offset": "queue_offset",
    "physical_offset": "physical_offset",
    "store_timestamp": "store_time",
}


def _narrow(bounds: ScanBounds, f: Filter) -> ScanBounds:
    column = ".".join(getattr(f, "attribute", ()))
    value = getattr(f, "value", None)
    if isinstance(f, (EqualTo, EqualNullSafe)) and value is not None:
        values: tuple[Any, ...] = (value,)
    elif isinstance(f, In):
        values = tuple(v for v in value if v is not None)  # type: ignore[union-attr]
    else:
        values = ()
    if column == "topic" and values and all(isinstance(v, str) for v in values):
        return bounds.narrowed(topics=frozenset(values))
    if column == "queue_id" and values and all(_is_int(v) for v in values):
        return bounds.narrowed(queue_ids=frozenset(values))
    if column not in _RANGE_COLUMNS:
        return bounds
    # the column's values are whole units (store time: ms); a filter's value is in 1/per of one
    per = 1000 if column == "store_timestamp" else 1
    points = [_in_units(column, v) for v in (values or (value,))]
    if any(p is None for p in points):
        return bounds
    name = _RANGE_COLUMNS[column]
    floor = [p // per for p in points]  # type: ignore[operator]
    ceil = [-(-p // per) for p in points]  # type: ignore[operator]
    window: tuple[int | None, int | None]
    if values:
        window = (min(ceil), max(floor) + 1)
    elif isinstance(f, GreaterThan):
        window = (floor[0] + 1, None)
    elif isinstance(f, GreaterThanOrEqual):
        window = (ceil[0], None)
    elif isinstance(f, LessThan):
        window = (None, ceil[0])
    elif isinstance(f, LessThanOrEqual):
        window = (None, floor[0] + 1)
    else:
        return bounds
    return bounds.narrowed(**{name: window})


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _in_units(column: str, value: Any) -> int | None:
    """A filter's value as an integer: offsets as they are, times in microseconds (a time
    without a zone is not used: the zone Spark meant is not known here)."""
    if column != "store_timestamp":
        return value if _is_int(value) else None
    if not isinstance(value, dt.datetime) or value.tzinfo is None:
        return None
    delta = value - dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


# --- streaming ------------------------------------------------------------------------------
def _queue_key(topic: str, queue_id: int) -> str:
    return f"{topic}/{queue_id}"


def _split_key(key: str) -> tuple[str, int]:
    topic, _, qid = key.rpartition("/")
    if not topic or not qid.isdigit():
        raise ValueError(f"offset key {key!r}: expected 'topic/queueId'")
    return topic, int(qid)


@dataclass(frozen=True)
class StreamRange:
    """Queue offsets [start, end) of one queue in one micro-batch."""

    run: QueueRange
    fail_on_data_loss: bool


class RocketStoreStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Offsets are ``{"topic/queueId": next queue offset}`` with sorted keys; only dispatched
    messages are read (through the consume queues). A batch is planned from its two offsets
    alone, so replaying it reads exactly the same rows."""

    def __init__(self, options: Any) -> None:
        self.files = StoreFiles.at(_path(options))
        scan = _scan_options(options)
        self.scan = ScanOptions(scan.include_body, scan.body_as, ScanBounds())
        self.bounds = scan.bounds
        self.starting = _option(options, "startingOffsets", "earliest") or "earliest"
        ts = _option(options, "startingTimestamp")
        self.starting_time = parse_time("startingTimestamp", ts) if ts is not None else None
        self.max_per_trigger = _int(options, "maxMessagesPerTrigger")
        if self.max_per_trigger is not None and self.max_per_trigger <= 0:
            raise ValueError("option maxMessagesPerTrigger must be positive")
        self.fail_on_data_loss = _bool(options, "failOnDataLoss", True)
        self.available_now: dict[str, int] | None = None
        if self.starting not in ("earliest", "latest"):
            self._explicit_start()  # refuse bad JSON when the query starts, not at its first batch

    def _queues(self) -> dict[str, tuple[int, int]]:
        found = {}
        for topic, qid in self.files.queues():
            if self.bounds.topics is not None and topic not in self.bounds.topics:
                continue
            if self.bounds.queue_ids is not None and qid not in self.bounds.queue_ids:
                continue
            found[_queue_key(topic, qid)] = queue_extent(self.files, topic, qid)
        return dict(sorted(found.items()))

    def _explicit_start(self) -> dict[str, int]:
        try:
            given = json.loads(self.starting)
        except json.JSONDecodeError:
            raise ValueError(
                f"option startingOffsets={self.starting!r}: expected earliest, latest or a JSON object"
            ) from None
        if not isinstance(given, dict) or not all(
            isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in given.values()
        ):
            raise ValueError(
                f'option startingOffsets={self.starting!r}: expected {{"topic/queueId": offset, ...}}'
            )
        for key in given:
            _split_key(key)
        return {k: int(v) for k, v in given.items()}

    def initialOffset(self) -> dict[str, int]:
        queues = self._queues()
        if self.starting_time is not None:
            return {
                key: queue_offset_by_time(self.files, *_split_key(key), self.starting_time) for key in queues
            }
        if self.starting == "earliest":
            return {key: lo for key, (lo, _) in queues.items()}
        if self.starting == "latest":
            return {key: hi for key, (_, hi) in queues.items()}
        given = self._explicit_start()
        start = {key: given.get(key, lo) for key, (lo, _) in queues.items()}
        start.update({k: v for k, v in given.items() if k not in start})
        return dict(sorted(start.items()))

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxRows(self.max_per_trigger) if self.max_per_trigger else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self.available_now = {key: hi for key, (_, hi) in self._queues().items()}

    def latestOffset(self, start: dict[str, int], limit: ReadLimit) -> dict[str, int]:
        queues = self._queues()
        ends = {key: hi for key, (_, hi) in queues.items()}
        if self.available_now is not None:
            ends = {key: min(hi, self.available_now.get(key, 0)) for key, hi in ends.items()}
        begin = {key: max(start.get(key, lo), lo) for key, (lo, _) in queues.items()}
        if isinstance(limit, ReadMaxRows):
            ends = _share(begin, ends, limit.max_rows)
        latest = dict(start)
        for key, hi in ends.items():
            latest[key] = max(hi, start.get(key, 0)) if key in start else max(hi, begin[key])
        return dict(sorted(latest.items()))

    def reportLatestOffset(self) -> dict[str, int]:
        return {key: hi for key, (_, hi) in self._queues().items()}

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> Sequence[InputPartition]:
        parts = []
        for key, hi in sorted(end.items()):
            lo = start.get(key, 0)
            if hi <= lo:
                continue
            topic, qid = _split_key(key)
            q_min, _ = queue_extent(self.files, topic, qid)
            if q_min > lo:
                lost = f"{key}: queue offsets {lo}..{min(q_min, hi) - 1} were reclaimed before they were read"
                if self.fail_on_data_loss:
                    raise DataLossError(lost + " (set failOnDataLoss=false to skip them)")
                log.warning("%s; skipped (failOnDataLoss=false)", lost)
                lo = min(q_min, hi)
            for a in range(lo, hi, 1 << 20):
                run = QueueRange(topic, qid, a, min(hi, a + (1 << 20)))
                parts.append(InputPartition(StreamRange(run, self.fail_on_data_loss)))
        return parts

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        part: StreamRange = partition.value
        expected = part.run.end - part.run.start
        seen = 0
        for batch in read_queue_range(self.files, part.run, self.scan):
            seen += batch.num_rows
            yield batch
        if seen != expected and part.fail_on_data_loss:
            raise DataLossError(
                f"{_queue_key(part.run.topic, part.run.queue_id)}: {expected - seen} of queue offsets "
                f"{part.run.start}..{part.run.end - 1} could not be read (reclaimed or damaged); "
                "set failOnDataLoss=false to skip them"
            )

    def commit(self, end: dict[str, int]) -> None:
        """Nothing to release: the store keeps no state for its readers."""


def _share(begin: dict[str, int], ends: dict[str, int], budget: int) -> dict[str, int]:
    """Cap the ends so that at most ``budget`` messages are taken in all, shared out evenly
    between the queues that have some (queues in key order take the remainder first)."""
    want = {key: max(0, ends[key] - begin.get(key, ends[key])) for key in ends}
    take = dict.fromkeys(want, 0)
    left = budget
    open_keys = sorted(k for k, w in want.items() if w > 0)
    while left > 0 and open_keys:
        share = max(1, left // len(open_keys))
        for key in list(open_keys):
            step = min(share, want[key] - take[key], left)
            take[key] += step
            left -= step
            if take[key] >= want[key]:
                open_keys.remove(key)
            if left == 0:
                break
    return {key: begin.get(key, ends[key]) + take[key] if want[key] else ends[key] for key in ends}


# --- write ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class WriteReport(WriterCommitMessage):
    rows: int
    first_offset: int
    end_offset: int


class RocketStoreWriter(DataSourceArrowWriter):
    def __init__(self, options: Any, schema: StructType, overwrite: bool) -> None:
        if overwrite:
            raise ValueError("the rocketstore sink only appends: use mode('append')")
        self.path = _path(options)
        self.config_file = _option(options, "config")
        lock_timeout = _option(options, "lockTimeout", "600") or "600"
        self.lock_timeout = float(lock_timeout)
        self.columns = check_writable(self.path, schema.fieldNames())

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriteReport:
        rows, first, end = append_batches(self.path, iterator, self.config_file, self.lock_timeout)
        return WriteReport(rows, first, end)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        reports = [m for m in messages if isinstance(m, WriteReport)]
        log.info("rocketstore: %d rows appended to %s", sum(r.rows for r in reports), self.path)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        written = sum(m.rows for m in messages if isinstance(m, WriteReport))
        if written:
            log.warning(
                "rocketstore: the job failed after %d rows were appended to %s by tasks that finished",
                written,
                self.path,
            )
