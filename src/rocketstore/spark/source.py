"""The ``rocketstore`` data source for Spark (PySpark's Python Data Source API).

    spark.read.format("rocketstore").load("/path/to/store")             # batch
    spark.read.format("rocketstore").load(["/stores/a", "/stores/b"])   # a cluster: broker column
    spark.readStream.format("rocketstore").load("/path/to/store")       # streaming
    df.write.format("rocketstore").mode("append").save("/path/to/store")

The schema is ``spark_schema()`` for any store directory, rocketstore's or RocketMQ's.
Reading options (case-insensitive):

    source          commitlog (every record, commitlog order) | queues (dispatched only)
    topic / topics  one topic / comma-separated topics
    queueIds        comma-separated queue ids
    startTime, endTime       store time window [start, end): epoch ms or ISO-8601 (local if no zone)
    startOffset, endOffset   physical offset window [start, end) of the record starts
    includeBody     true (default) | false: body is null and is not read
    bodyAs          binary (default) | string
    minPartitions   at least this many partitions when the store is big enough (default 2 × cores)
    paths, brokers  several stores, one per broker, and their broker names (``spark.brokers``)

Kafka's options (``subscribe``, ``subscribePattern``, ``assign``, ``startingOffsets``,
``endingOffsets``, ``startingTimestamp``, ``startingOffsetsByTimestamp``,
``endingOffsetsByTimestamp``, ``maxOffsetsPerTrigger`` / ``maxMessagesPerTrigger``,
``minOffsetsPerTrigger``, ``maxTriggerDelay``, ``failOnDataLoss``, ``includeHeaders``) mean what
they mean on Kafka's source (``rocketstore.spark.options``, docs/spark.md); times follow
``rocketstore.times`` (local if no zone), as the CLI's do. Without ``source``,
the consume queues are read when the options or filters name queues, the commitlog otherwise.
Writing takes columns ``topic, body`` and optionally ``keys, tags, properties, queue_id,
delay_level, born_timestamp``; options ``config`` (a StoreConfig file for a new store) and
``lockTimeout`` (seconds a task waits for the other tasks of the job; default 600). The
streaming sink stores each micro-batch once (``rocketstore.spark.stream_sink``).

``DefaultSource`` in the top-level ``pyspark_rocketstore`` module makes the short name resolve
without registering; ``rocketstore.spark.register(spark)`` registers the source with filter
pushdown (equality, IN and ranges on topic, queue_id, queue_offset, physical_offset,
store_timestamp) and turns Spark's Python pushdown switch on.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import logging
import os
import re
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    DataSourceStreamArrowWriter,
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
from rocketstore.spark.brokers import store_paths
from rocketstore.spark.columns import COLUMNS, BodyAs, with_headers
from rocketstore.spark.options import (
    EARLIEST,
    LATEST,
    QueueKey,
    assigned,
    boolean,
    broker_offsets_json,
    check_known,
    integer,
    offsets_json,
    text,
    topic_pattern,
)
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
from rocketstore.spark.stream_sink import StagedPart, commit_batch, stage_part
from rocketstore.spark.writer import append_batches, check_writable

__all__ = ["PushdownDataSource", "RocketStoreDataSource", "spark_schema"]

log = logging.getLogger(__name__)


def spark_schema(body_as: BodyAs = "binary", headers: bool = False, broker: bool = False) -> StructType:
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
    fields = [StructField(name, types[name]) for name in COLUMNS]
    if headers:  # Kafka's headers column
        pair = StructType([StructField("key", StringType()), StructField("value", BinaryType())])
        fields.append(StructField("headers", ArrayType(pair)))
    if broker:  # several stores: which broker's store the row is from
        fields.append(StructField("broker", StringType()))
    return StructType(fields)


# --- options --------------------------------------------------------------------------------
_option = text
_bool = boolean


def _int(options: Any, name: str) -> int | None:
    return integer(options, name)


def parse_time(name: str, raw: str) -> int:
    """An option's time as epoch ms: epoch ms, or ISO 8601 (local time when it names no zone: the
    rule of ``rocketstore.times``, the same as the CLI's)."""
    try:
        return times.parse_time(raw)
    except ValueError as exc:
        raise ValueError(f"option {name}={raw!r}: {exc}") from None


def _path(options: Any) -> str:
    path = _option(options, "path")
    if not path and _option(options, "paths") is not None:
        raise ValueError("the rocketstore sink writes into one store: .save(path), not several paths")
    if not path:
        raise ValueError("the rocketstore source needs a store directory: .load(path) or .save(path)")
    return path


def _stores(options: Any) -> dict[str, StoreFiles]:
    """{broker: store} of the stores read: several with option ``paths``, or the one store of
    option ``path`` under the broker name "" (its rows get no broker column)."""
    named = store_paths(options)
    if named is None:
        return {"": StoreFiles.at(_path(options))}
    return {broker: StoreFiles.at(path) for broker, path in named.items()}


def _where(broker: str, key: str) -> str:
    """A queue ``topic/queueId`` as errors name it: with its broker when there are several."""
    return f"{broker}/{key}" if broker else key


def _with_broker(batches: Iterable[pa.RecordBatch], broker: str) -> Iterator[pa.RecordBatch]:
    for batch in batches:
        yield batch.append_column("broker", pa.repeat(pa.scalar(broker, pa.string()), batch.num_rows))


def _topic_list(options: Any, name: str) -> frozenset[str] | None:
    raw = _option(options, name)
    if raw is None:
        return None
    return frozenset(t.strip() for t in raw.split(",") if t.strip())


def _warn_missing_topics(options: Any, stores: dict[str, StoreFiles], *, streaming: bool) -> None:
    """Log the topics a topic option names that no store has a queue of: Kafka's source
    would wait for them silently, and a misspelt name reads as an empty result."""
    present = {topic for files in stores.values() for topic, _ in files.queues()}
    named: dict[str, frozenset[str]] = {
        name: topics for name in ("subscribe", "topic", "topics") if (topics := _topic_list(options, name))
    }
    queues = assigned(options)
    if queues is not None:
        named["assign"] = frozenset(t for t, _ in queues)
    for name, topics in named.items():
        missing = sorted(topics - present)
        if missing:
            log.warning(
                "option %s: the %s at %s %s no topic %s: %s",
                name,
                "store" if len(stores) == 1 else "stores",
                ", ".join(files.root for files in stores.values()),
                "has" if len(stores) == 1 else "have",
                ", ".join(repr(t) for t in missing),
                "the stream reads it once it appears" if streaming else "no rows from it",
            )


def _bounds(options: Any) -> ScanBounds:
    bounds = ScanBounds()
    given = [n for n in ("subscribe", "subscribePattern", "assign") if _option(options, n) is not None]
    if len(given) > 1:
        raise ValueError(f"options {' and '.join(given)}: give one of subscribe, subscribePattern, assign")
    named = False
    for name in ("topic", "topics", "subscribe"):
        topics = _topic_list(options, name)
        if topics is not None:
            bounds = bounds.narrowed(topics=topics)
            named = True
    queues = assigned(options)
    if queues is not None:
        bounds = bounds.narrowed(topics=frozenset(t for t, _ in queues))
        named = True
    pattern = topic_pattern(options)
    if pattern is not None:
        bounds = dataclasses.replace(bounds, topic_pattern=pattern.pattern)
    if not named and not _bool(options, "includeSystemTopics", False):
        bounds = dataclasses.replace(bounds, system_topics=False)
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


@dataclass(frozen=True)
class OffsetSpec:
    """Where each queue starts or ends, as Kafka's options say it: per-queue times win over
    per-queue offsets (one broker's, then every broker's), which win over ``earliest`` /
    ``latest`` (``whole``)."""

    name: str  # the option this came from, for errors
    whole: int = EARLIEST  # EARLIEST or LATEST for queues named nowhere else
    offsets: dict[QueueKey, int] = field(default_factory=dict)  # a queue of that name on any broker
    times: dict[QueueKey, int] = field(default_factory=dict)
    all_time: int | None = None
    by_broker: dict[str, dict[QueueKey, int]] = field(default_factory=dict)

    @property
    def per_queue(self) -> bool:
        return bool(self.offsets or self.times or self.by_broker) or self.all_time is not None

    def given(self) -> list[int]:
        """Every offset the option names."""
        return [*self.offsets.values(), *(n for queues in self.by_broker.values() for n in queues.values())]

    def resolve(self, files: StoreFiles, key: QueueKey, extent: tuple[int, int], broker: str = "") -> int:
        """The queue offset of ``key`` (of ``broker``'s store ``files``); the earliest and
        latest offsets are ``extent``."""
        if self.all_time is not None:
            return queue_offset_by_time(files, *key, self.all_time)
        if key in self.times:
            return queue_offset_by_time(files, *key, self.times[key])
        at = self.by_broker.get(broker, {}).get(key, self.offsets.get(key, self.whole))
        return extent[0] if at == EARLIEST else extent[1] if at == LATEST else at


def _offset_spec(options: Any, which: str, default: int) -> OffsetSpec:
    """startingOffsets & co. (``which`` = starting) or endingOffsets & co. (ending)."""
    name = f"{which}Offsets"
    raw = (_option(options, name) or "").strip()
    spec = OffsetSpec(name, default)
    if raw.lower() in ("earliest", "latest"):
        spec = OffsetSpec(name, EARLIEST if raw.lower() == "earliest" else LATEST)
    elif raw and (per_broker := broker_offsets_json(name, raw)) is not None:
        spec = OffsetSpec(name, default, by_broker=per_broker)
    elif raw:
        given = offsets_json(name, raw)
        bad = [f"{t}/{q}={v}" for (t, q), v in given.items() if v < LATEST - 1]
        if bad:
            raise ValueError(f"option {name}: offsets {', '.join(bad)}: expected -2, -1 or an offset")
        spec = OffsetSpec(name, default, offsets=given)
    by_time = _option(options, f"{name}ByTimestamp")
    if by_time is not None:
        times = offsets_json(f"{name}ByTimestamp", by_time)
        spec = dataclasses.replace(spec, name=f"{name}ByTimestamp", times=times)
    one_time = _option(options, f"{which}Timestamp")
    if one_time is not None:
        spec = dataclasses.replace(
            spec, name=f"{which}Timestamp", all_time=parse_time(f"{which}Timestamp", one_time)
        )
    return spec


def _check_brokers(spec: OffsetSpec, stores: dict[str, StoreFiles]) -> None:
    """Refuse per-broker offsets naming a broker the query does not read: they would be ignored."""
    unknown = sorted(set(spec.by_broker) - set(stores))
    if not unknown:
        return
    read = (
        'one store (option path), whose queues are given as {"topic": {"queueId": offset}}'
        if "" in stores
        else f"the stores of brokers {', '.join(stores)}"
    )
    raise ValueError(
        f"option {spec.name}: offsets of broker {', '.join(unknown)}, but the query reads {read}"
    )


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

    def __init__(self, options: Any) -> None:
        super().__init__(options)
        check_known(options)

    @classmethod
    def name(cls) -> str:
        return "rocketstore"

    def schema(self) -> StructType:
        body_as = (_option(self.options, "bodyAs", "binary") or "binary").lower()
        return spark_schema(
            "string" if body_as == "string" else "binary",
            _bool(self.options, "includeHeaders", False),
            broker=_option(self.options, "paths") is not None,
        )

    def reader(self, schema: StructType) -> DataSourceReader:
        return RocketStoreReader(self.options)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return RocketStoreStreamReader(self.options)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceArrowWriter:
        return RocketStoreWriter(self.options, schema, overwrite)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamArrowWriter:
        return RocketStoreStreamWriter(self.options, schema, overwrite)


class PushdownDataSource(RocketStoreDataSource):
    """The source with filter pushdown (``register``): Spark refuses a Python reader that
    takes filters unless ``spark.sql.python.filterPushdown.enabled`` is on."""

    def reader(self, schema: StructType) -> DataSourceReader:
        return FilteringReader(self.options)


def _read(
    files: StoreFiles, part: CommitlogRange | QueueRange, scan: ScanOptions, headers: bool
) -> Iterator[pa.RecordBatch]:
    batches = (
        read_commitlog_range(part, scan)
        if isinstance(part, CommitlogRange)
        else read_queue_range(files, part, scan)
    )
    return (with_headers(b) for b in batches) if headers else batches


@dataclass(frozen=True)
class StorePart:
    """A partition of one broker's store ("" when the query reads one store)."""

    broker: str
    run: CommitlogRange | QueueRange


class RocketStoreReader(DataSourceReader):
    def __init__(self, options: Any) -> None:
        self.stores = _stores(options)
        self.brokers: frozenset[str] | None = None  # the stores pushed-down filters on broker keep
        self.scan = _scan_options(options)
        source = _option(options, "source")
        if source is not None and source.lower() not in ("commitlog", "queues"):
            raise ValueError(f"option source={source!r}: expected commitlog or queues")
        self.source = source.lower() if source is not None else None
        self.min_partitions = _int(options, "minPartitions") or 2 * (os.cpu_count() or 1)
        self.headers = _bool(options, "includeHeaders", False)
        self.fail_on_data_loss = _bool(options, "failOnDataLoss", True)
        self.assign = assigned(options)
        self.starting = _offset_spec(options, "starting", EARLIEST)
        self.ending = _offset_spec(options, "ending", LATEST)
        _check_brokers(self.starting, self.stores)
        _check_brokers(self.ending, self.stores)
        # as Kafka's batch queries: they cannot start at the end or end at the start
        if self.starting.whole == LATEST or LATEST in self.starting.given():
            raise ValueError("option startingOffsets: a batch query cannot start at latest (-1)")
        if self.ending.whole == EARLIEST or EARLIEST in self.ending.given():
            raise ValueError("option endingOffsets: a batch query cannot end at earliest (-2)")
        self.per_queue = self.assign is not None or self.starting.per_queue or self.ending.per_queue
        if self.per_queue and self.source == "commitlog":
            raise ValueError(
                f"option source=commitlog: {'assign' if self.assign is not None else 'per-queue offsets'} "
                "are read through the consume queues (leave source unset or set source=queues)"
            )
        _warn_missing_topics(options, self.stores, streaming=False)

    @property
    def named(self) -> bool:
        """Whether the rows carry a broker column (several stores: option paths)."""
        return "" not in self.stores

    def chosen_source(self) -> str:
        """The consume queues when the options or filters name queues (topics and queue ids,
        assign, per-queue offsets), the commitlog otherwise, unless option ``source`` says."""
        if self.source is not None:
            return self.source
        bounds = self.scan.bounds
        named = bounds.topics is not None and bounds.queue_ids is not None
        return "queues" if self.per_queue or named else "commitlog"

    def queue_limits(self, broker: str, files: StoreFiles) -> dict[QueueKey, tuple[int, int]] | None:
        """Offsets [start, end) of each queue of ``broker``'s store read, when the options say
        them per queue."""
        if not self.per_queue:
            return None
        limits = {}
        for key in files.queues():
            if self.assign is not None and key not in self.assign:
                continue
            extent = queue_extent(files, *key)
            start = self.starting.resolve(files, key, extent, broker)
            end = min(self.ending.resolve(files, key, extent, broker), extent[1])
            if start < extent[0] and start < end:
                lost = (
                    f"{_where(broker, _queue_key(*key))}: {self.starting.name} asks for queue offset "
                    f"{start}, but the queue begins at {extent[0]} (older messages were reclaimed)"
                )
                if self.fail_on_data_loss:
                    raise DataLossError(lost + "; set failOnDataLoss=false to read from there")
                log.warning("%s; reading from %d (failOnDataLoss=false)", lost, extent[0])
            limits[key] = (max(start, extent[0]), end)
        return limits

    def partitions(self) -> Sequence[InputPartition]:
        bounds = self.scan.bounds
        source = self.chosen_source()
        stores = {b: f for b, f in self.stores.items() if self.brokers is None or b in self.brokers}
        # minPartitions is for the whole query: each store's share of it
        per_store = -(-self.min_partitions // max(1, len(self.stores)))
        parts: list[StorePart] = []
        for broker, files in stores.items():
            runs: Sequence[CommitlogRange | QueueRange]
            if source == "commitlog":
                runs = plan_commitlog(files, bounds, per_store)
            else:
                runs = plan_queues(files, bounds, self.queue_limits(broker, files))
            parts.extend(StorePart(broker, run) for run in runs)
        # PySpark 4.3 shows nothing of a Python source's pushdown in explain(): say it here
        log.info(
            "rocketstore scan of %s: source=%s, %s, %d partitions",
            ", ".join(files.root for files in stores.values()) or "no store (broker filter)",
            source,
            bounds,
            len(parts),
        )
        return [InputPartition(p) for p in parts]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        part: StorePart | None = partition.value
        if part is None:
            return iter(())
        batches = _read(self.stores[part.broker], part.run, self.scan, self.headers)
        return _with_broker(batches, part.broker) if self.named else batches


class FilteringReader(RocketStoreReader):
    def pushFilters(self, filters: list[Filter]) -> Iterable[Filter]:
        """Every filter narrows the scan where it can, and every filter is handed back: Spark
        checks them again, so a bound can prune but never change a result."""
        for f in filters:
            self.scan = ScanOptions(self.scan.include_body, self.scan.body_as, _narrow(self.scan.bounds, f))
            brokers = _broker_values(f) if self.named else None
            if brokers is not None:
                self.brokers = brokers if self.brokers is None else self.brokers & brokers
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


def _broker_values(f: Filter) -> frozenset[str] | None:
    """The brokers an equality or IN filter on column ``broker`` keeps; None for other filters."""
    if ".".join(getattr(f, "attribute", ())) != "broker":
        return None
    value = getattr(f, "value", None)
    if isinstance(f, (EqualTo, EqualNullSafe)) and isinstance(value, str):
        return frozenset((value,))
    if isinstance(f, In) and all(isinstance(v, str) for v in value if v is not None):  # type: ignore[union-attr]
        return frozenset(v for v in value if v is not None)  # type: ignore[union-attr]
    return None


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
OffsetKey = tuple[str, str]  # (broker, "topic/queueId"); broker "" when the query reads one store


def _queue_key(topic: str, queue_id: int) -> str:
    return f"{topic}/{queue_id}"


def _split_key(key: str) -> tuple[str, int]:
    topic, _, qid = key.rpartition("/")
    if not topic or not qid.isdigit():
        raise ValueError(f"offset key {key!r}: expected 'topic/queueId'")
    return topic, int(qid)


@dataclass(frozen=True)
class StreamRange:
    """Queue offsets [start, end) of one queue of one broker's store in one micro-batch."""

    run: QueueRange
    fail_on_data_loss: bool
    broker: str = ""


class RocketStoreStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Offsets are ``{"topic/queueId": next queue offset}`` with sorted keys for one store, and
    ``{"broker": {"topic/queueId": next queue offset}}`` for several (option ``paths``); only
    dispatched messages are read (through the consume queues). A batch is planned from its two
    offsets alone, so replaying it reads exactly the same rows. Inside, offsets are kept flat,
    keyed by ``OffsetKey``."""

    def __init__(self, options: Any) -> None:
        self.stores = _stores(options)
        scan = _scan_options(options)
        self.scan = ScanOptions(scan.include_body, scan.body_as, ScanBounds())
        self.bounds = scan.bounds
        self.headers = _bool(options, "includeHeaders", False)
        self.assign = assigned(options)
        if _option(options, "endingOffsets") is not None or _option(options, "endingOffsetsByTimestamp"):
            raise ValueError("option endingOffsets: a streaming query has no end (as in Kafka's source)")
        self.starting = _offset_spec(options, "starting", EARLIEST)  # Kafka: latest; kept as before
        _check_brokers(self.starting, self.stores)
        per_trigger = [n for n in ("maxOffsetsPerTrigger", "maxMessagesPerTrigger") if _option(options, n)]
        self.max_per_trigger = integer(options, per_trigger[0], 1) if per_trigger else None
        self.min_per_trigger = integer(options, "minOffsetsPerTrigger", 1)
        self.max_trigger_delay = _duration_ms(options, "maxTriggerDelay", "15m")
        self.last_trigger = time.monotonic()
        self.fail_on_data_loss = _bool(options, "failOnDataLoss", True)
        self.available_now: dict[OffsetKey, int] | None = None
        _warn_missing_topics(options, self.stores, streaming=True)

    @property
    def named(self) -> bool:
        return "" not in self.stores

    def _queues(self) -> dict[OffsetKey, tuple[int, int]]:
        found = {}
        for broker, files in self.stores.items():
            for topic, qid in files.queues():
                if not self.bounds.topic_allowed(topic):
                    continue
                if self.bounds.queue_ids is not None and qid not in self.bounds.queue_ids:
                    continue
                if self.assign is not None and (topic, qid) not in self.assign:
                    continue
                found[(broker, _queue_key(topic, qid))] = queue_extent(files, topic, qid)
        return dict(sorted(found.items()))

    def _json(self, flat: dict[OffsetKey, int]) -> dict[str, Any]:
        """Offsets in the shape Spark keeps in the checkpoint."""
        if not self.named:
            return {key: n for (_, key), n in sorted(flat.items())}
        nested: dict[str, Any] = {}
        for (broker, key), n in sorted(flat.items()):
            nested.setdefault(broker, {})[key] = n
        return nested

    def _flat(self, offsets: dict[str, Any]) -> dict[OffsetKey, int]:
        """Offsets Spark hands back (from the checkpoint) as flat ones; refused when their shape
        is not this query's: a query cannot change from one store to several or back."""
        flat: dict[OffsetKey, int] = {}
        for key, value in offsets.items():
            if isinstance(value, dict) != self.named:
                brokers = ", ".join(self.stores)
                raise ValueError(
                    f"the stream's offsets {json.dumps(offsets)[:200]} are those of a query over "
                    + ("one store" if self.named else "several stores (keyed by broker)")
                    + ", and this query reads "
                    + (f"the stores of brokers {brokers}" if self.named else "one store (option path)")
                    + ": a checkpoint keeps its query's stores; start this one with a new checkpointLocation"
                )
            if isinstance(value, dict):
                flat.update(((key, k), int(n)) for k, n in value.items())
            else:
                flat[("", key)] = int(value)
        if self.named:
            self._check_renamed(offsets)
        return flat

    def _check_renamed(self, offsets: dict[str, Any]) -> None:
        """Refuse offsets naming a broker this query does not read while it reads one they do not
        name: most likely a store whose derived name changed (a broker.conf added or edited, a
        directory renamed), which would be read again from its start under its new name."""
        gone = sorted(set(offsets) - set(self.stores))
        new = sorted(set(self.stores) - set(offsets))
        if gone and new:
            raise ValueError(
                f"the stream's checkpoint has offsets of brokers {', '.join(gone)}, which this query "
                f"does not read, and none of brokers {', '.join(new)}, which it reads (a store's "
                "broker name is its broker.conf's brokerName, else its directory's name): if these "
                "are the same stores, name them as before with option brokers (one name per path, "
                "in order); to read the new stores from the start, use a new checkpointLocation"
            )

    def initialOffset(self) -> dict[str, Any]:
        start = {
            (broker, key): self.starting.resolve(self.stores[broker], _split_key(key), extent, broker)
            for (broker, key), extent in self._queues().items()
        }
        return self._json(start)

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxRows(self.max_per_trigger) if self.max_per_trigger else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self.available_now = {key: hi for key, (_, hi) in self._queues().items()}

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        return self._json(self._latest(self._flat(start), limit))

    def _latest(self, start: dict[OffsetKey, int], limit: ReadLimit) -> dict[OffsetKey, int]:
        queues = self._queues()
        ends = {key: hi for key, (_, hi) in queues.items()}
        if self.available_now is not None:
            ends = {key: min(hi, self.available_now.get(key, 0)) for key, hi in ends.items()}
        begin = {key: max(start.get(key, lo), lo) for key, (lo, _) in queues.items()}
        if isinstance(limit, ReadMaxRows):
            ends = _share(begin, ends, limit.max_rows)
        if self.min_per_trigger and self.available_now is None:
            # minOffsetsPerTrigger / maxTriggerDelay: PySpark's stream reader takes one read limit,
            # so the wait for enough messages is kept here (Kafka's ReadMinRows + ReadMaxTrigger)
            available = sum(max(0, ends[k] - begin[k]) for k in ends)
            waited_ms = (time.monotonic() - self.last_trigger) * 1000
            if available < self.min_per_trigger and waited_ms < self.max_trigger_delay:
                return dict(start)
            if available:
                self.last_trigger = time.monotonic()
        latest = dict(start)
        for key, hi in ends.items():
            latest[key] = max(hi, start.get(key, 0)) if key in start else max(hi, begin[key])
        return latest

    def reportLatestOffset(self) -> dict[str, Any]:
        return self._json({key: hi for key, (_, hi) in self._queues().items()})

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        first = self._flat(start)
        parts = []
        for (broker, key), hi in sorted(self._flat(end).items()):
            lo = first.get((broker, key), 0)
            if hi <= lo:
                continue
            files = self.stores.get(broker)
            if files is None:
                raise ValueError(
                    f"{_where(broker, key)}: the stream has offsets {lo}..{hi - 1} to read from broker "
                    f"{broker!r}, whose store is not among this query's paths any more"
                )
            topic, qid = _split_key(key)
            q_min, _ = queue_extent(files, topic, qid)
            if q_min > lo:
                lost = (
                    f"{_where(broker, key)}: queue offsets {lo}..{min(q_min, hi) - 1} were reclaimed "
                    "before they were read"
                )
                if self.fail_on_data_loss:
                    raise DataLossError(lost + " (set failOnDataLoss=false to skip them)")
                log.warning("%s; skipped (failOnDataLoss=false)", lost)
                lo = min(q_min, hi)
            for a in range(lo, hi, 1 << 20):
                run = QueueRange(topic, qid, a, min(hi, a + (1 << 20)))
                parts.append(InputPartition(StreamRange(run, self.fail_on_data_loss, broker)))
        return parts

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        part: StreamRange = partition.value
        expected = part.run.end - part.run.start
        seen = 0
        batches = _read(self.stores[part.broker], part.run, self.scan, self.headers)
        for batch in _with_broker(batches, part.broker) if self.named else batches:
            seen += batch.num_rows
            yield batch
        if seen != expected and part.fail_on_data_loss:
            raise DataLossError(
                f"{_where(part.broker, _queue_key(part.run.topic, part.run.queue_id))}: {expected - seen} "
                f"of queue offsets {part.run.start}..{part.run.end - 1} could not be read (reclaimed or "
                "damaged); set failOnDataLoss=false to skip them"
            )

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing to release: the store keeps no state for its readers."""


_DURATION = re.compile(r"(\d+)\s*(ms|s|sec|m|min|h|d)?")
_UNIT_MS = {
    None: 1,
    "ms": 1,
    "s": 1000,
    "sec": 1000,
    "m": 60_000,
    "min": 60_000,
    "h": 3_600_000,
    "d": 86_400_000,
}


def _duration_ms(options: Any, name: str, default: str) -> int:
    """A duration as Spark writes them (``500ms``, ``30s``, ``15m``; a bare number is ms)."""
    raw = _option(options, name, default) or default
    found = _DURATION.fullmatch(raw.strip().lower())
    if found is None:
        raise ValueError(f"option {name}={raw!r}: expected a duration such as 500ms, 30s or 15m")
    return int(found[1]) * _UNIT_MS[found[2]]


def _share(begin: dict[OffsetKey, int], ends: dict[OffsetKey, int], budget: int) -> dict[OffsetKey, int]:
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


@dataclass(frozen=True)
class StagedReport(WriterCommitMessage):
    query_id: str
    batch_id: int
    part: StagedPart


class RocketStoreStreamWriter(DataSourceStreamArrowWriter):
    """Each micro-batch appended once, however often Spark runs it (``stream_sink``)."""

    def __init__(self, options: Any, schema: StructType, overwrite: bool) -> None:
        if overwrite:
            raise ValueError("the rocketstore sink only appends: use outputMode('append')")
        self.path = _path(options)
        self.config_file = _option(options, "config")
        self.lock_timeout = float(_option(options, "lockTimeout", "600") or "600")
        self.columns = check_writable(self.path, schema.fieldNames())

    def write(self, iterator: Iterator[pa.RecordBatch]) -> StagedReport:
        from pyspark import TaskContext

        task = TaskContext.get()
        query_id = task.getLocalProperty("sql.streaming.queryId") if task else None
        batch_id = task.getLocalProperty("streaming.sql.batchId") if task else None
        if task is None or not query_id or batch_id is None:
            raise RuntimeError("the rocketstore streaming sink runs inside a Spark streaming query")
        part = stage_part(
            self.path,
            query_id,
            int(batch_id),
            task.partitionId(),
            task.attemptNumber(),
            list(iterator),
            self.config_file,
        )
        return StagedReport(query_id, int(batch_id), part)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        reports = [m for m in messages if isinstance(m, StagedReport)]
        if not reports:
            return  # no task ran: nothing was staged
        rows = commit_batch(
            self.path,
            reports[0].query_id,
            batchId,
            [r.part for r in reports],
            self.config_file,
            self.lock_timeout,
        )
        log.info("rocketstore: micro-batch %d: %d rows appended to %s", batchId, rows, self.path)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Staged rows of a failed micro-batch are left for its re-run to replace."""
