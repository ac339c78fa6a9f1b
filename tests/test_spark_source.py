"""The ``rocketstore`` Spark data source end to end: batch reads of RocketMQ's own stores, filter
pushdown, streaming across restarts beside a live writer, and the Arrow writer."""

from __future__ import annotations

import json
import pkgutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from rocketstore import Message, MessageStore, StoreConfig
from rocketstore.geometry import detect_geometry
from tests.conftest import FIXTURES
from tests.test_spark_scan import _as_listing, _expected, _listing

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

pytestmark = pytest.mark.slow


def _plain_source_registered(spark: SparkSession) -> str:
    """The source as Spark finds it without ``register`` (no pushdown), under its own name so
    both can be compared in one session."""
    from rocketstore.spark.source import RocketStoreDataSource

    class PlainSource(RocketStoreDataSource):
        @classmethod
        def name(cls) -> str:
            return "rocketstore_plain"

    spark.dataSource.register(PlainSource)
    return "rocketstore_plain"


def _collect(df: DataFrame) -> list[dict[str, Any]]:
    return [r.asDict(recursive=True) for r in df.collect()]


def test_the_short_name_resolves_through_pyspark_rocketstore() -> None:
    from pyspark.sql.datasource import DataSource, DataSourceReader

    import pyspark_rocketstore

    assert "pyspark_rocketstore" in {m.name for m in pkgutil.iter_modules()}
    assert issubclass(pyspark_rocketstore.DefaultSource, DataSource)
    assert pyspark_rocketstore.DefaultSource.name() == "rocketstore"
    # Spark refuses a filtering Python reader unless pushdown is switched on: the default
    # source must not be one
    reader = type(pyspark_rocketstore.DefaultSource({"path": str(FIXTURES / "store-sample")}).reader(None))  # type: ignore[arg-type]
    assert reader.pushFilters is DataSourceReader.pushFilters


@pytest.mark.parametrize("name", ["store-sample", "store-sample-crash"])
@pytest.mark.parametrize("source", ["commitlog", "queues"])
def test_batch_read_equals_rocketmqs_listing(spark: SparkSession, name: str, source: str) -> None:
    df = (
        spark.read.format("rocketstore")
        .option("source", source)
        .option("includeSystemTopics", "true")
        .load(str(FIXTURES / name))
    )
    rows = _collect(df)
    if source == "commitlog":
        assert sorted(r["physical_offset"] for r in rows) == [c["offset"] for c in _listing(name, "clrec")]
    by_phy = {m["phyOffset"]: m for m in _listing(name, "msg")}
    listed = {r["physical_offset"]: _as_listing(r) for r in rows if r["physical_offset"] in by_phy}
    assert len(listed) == len(by_phy)
    if source == "queues":
        assert len(rows) == len(by_phy)  # only dispatched messages
    for phy, got in listed.items():
        assert got == _expected(by_phy[phy])


FILTERS = [
    "topic = 'TopicA'",
    "topic IN ('TopicB', 'TopicC') AND queue_id = 2",
    "queue_offset >= 10 AND queue_offset < 30 AND queue_id IN (0, 3)",
    "physical_offset BETWEEN 70000 AND 200000",
    "store_timestamp >= timestamp'2026-11-22 05:12:08.450+00:00'",
    "store_timestamp < timestamp'2026-11-22 05:12:08.450+00:00' AND topic = 'TopicC'",
]


@pytest.mark.parametrize("where", FILTERS)
@pytest.mark.parametrize("source", ["commitlog", "queues"])
def test_pushdown_changes_speed_never_results(spark: SparkSession, where: str, source: str) -> None:
    plain = _plain_source_registered(spark)
    path = str(FIXTURES / "store-sample")
    pushed = spark.read.format("rocketstore").option("source", source).load(path).where(where)
    unpushed = spark.read.format(plain).option("source", source).load(path).where(where)
    key = lambda r: r["physical_offset"]  # noqa: E731
    got = sorted(_collect(pushed), key=key)
    assert got == sorted(_collect(unpushed), key=key)
    assert got  # each filter keeps some rows and drops others
    assert len(got) < 600


def test_options_narrow_the_scan(spark: SparkSession) -> None:
    path = str(FIXTURES / "store-sample")
    msgs = [m for m in _listing("store-sample", "msg") if m["topic"] == "TopicB" and m["queueId"] in (1, 2)]
    times = sorted(m["storeTs"] for m in msgs)
    lo, hi = times[5], times[-5]
    df = (
        spark.read.format("rocketstore")
        .option("topic", "TopicB")
        .option("queueIds", "1,2")
        .option("startTime", str(lo))
        .option("endTime", str(hi))
        .option("includeBody", "false")
        .load(path)
    )
    rows = _collect(df)
    assert sorted(r["physical_offset"] for r in rows) == sorted(
        m["phyOffset"] for m in msgs if lo <= m["storeTs"] < hi
    )
    assert all(r["body"] is None for r in rows)
    text = spark.read.format("rocketstore").option("bodyAs", "string").load(path)
    assert dict(text.dtypes)["body"] == "string"


def test_bad_options_fail_with_their_name(spark: SparkSession) -> None:
    path = str(FIXTURES / "store-sample")
    for option, value in (("bodyAs", "hex"), ("source", "index"), ("queueIds", "a,b"), ("startTime", "soon")):
        with pytest.raises(Exception, match=option):
            spark.read.format("rocketstore").option(option, value).load(path).count()
    with pytest.raises(Exception, match=r"not a store directory|no store directory"):
        spark.read.format("rocketstore").load(str(FIXTURES)).count()


# --- streaming ------------------------------------------------------------------------------
WRITER = textwrap.dedent(
    """
    import sys, time
    from rocketstore import Message, MessageStore, StoreConfig
    root, total = sys.argv[1], int(sys.argv[2])
    cfg = StoreConfig(
        commitlog_segment_size=1 << 20,
        consume_queue_entries=500,
        # how full the test machine's disk is must not reclaim what the test reads
        disk_max_used_space_ratio=100,
        disk_clean_forcibly_ratio=100,
        disk_warning_ratio=100,
    )
    with MessageStore.open(root, cfg) as store:
        print("open", flush=True)
        for k in range(0, total, 500):
            batch = [Message(topic="S", body=str(i).encode(), queue_id=i % 4) for i in range(k, k + 500)]
            assert all(r.ok for r in store.put_messages(batch))
            time.sleep(0.05)
        store.wait_dispatched(10)
    """
)


def _run_stream(spark: SparkSession, store: Path, out: Path, ckpt: Path, seconds: float | None) -> None:
    reader = spark.readStream.format("rocketstore").option("maxMessagesPerTrigger", "3000").load(str(store))
    writer = (
        reader.select("topic", "queue_id", "queue_offset", "body")
        .writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(ckpt))
    )
    if seconds is None:
        writer.trigger(availableNow=True).start().awaitTermination(120)
        return
    query = writer.trigger(processingTime="200 milliseconds").start()
    time.sleep(seconds)
    query.stop()


def test_a_stream_restarted_twice_delivers_each_message_once_in_queue_order(
    spark: SparkSession, tmp_path: Path
) -> None:
    store, out, ckpt = tmp_path / "store", tmp_path / "out", tmp_path / "ckpt"
    total = 20_000
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(store), str(total)], stdout=subprocess.PIPE)
    try:
        assert writer.stdout is not None and writer.stdout.readline().strip() == b"open"
        time.sleep(0.5)
        _run_stream(spark, store, out, ckpt, 4)  # while the writer writes
        _run_stream(spark, store, out, ckpt, 3)  # restart 1
        assert writer.wait(120) == 0
    finally:
        writer.kill()
    _run_stream(spark, store, out, ckpt, None)  # restart 2: everything still unread
    rows = spark.read.parquet(str(out)).collect()
    assert len(rows) == total
    for q in range(4):
        offsets = sorted(r["queue_offset"] for r in rows if r["queue_id"] == q)
        assert offsets == list(range(total // 4))
    assert sorted(int(r["body"]) for r in rows) == list(range(total))
    assert all(int(r["body"]) % 4 == r["queue_id"] and int(r["body"]) // 4 == r["queue_offset"] for r in rows)
    # each micro-batch file holds each queue's messages in queue order
    for f in out.glob("*.parquet"):
        part = spark.read.parquet(str(f)).collect()
        for q in range(4):
            offsets = [r["queue_offset"] for r in part if r["queue_id"] == q]
            assert offsets == sorted(offsets)


def _small_store_missing_its_first_segment(tmp_path: Path) -> Path:
    root = tmp_path / "store"
    cfg = StoreConfig(commitlog_segment_size=64 * 1024, consume_queue_entries=100)
    with MessageStore.open(root, cfg) as store:
        for _ in range(10):
            store.put_messages([Message(topic="L", body=b"y" * 100, queue_id=0)] * 200)
        assert store.wait_dispatched(10)
    first = sorted((root / "commitlog").iterdir())[0]
    first.unlink()  # as reclamation would
    return root


def test_fail_on_data_loss(spark: SparkSession, tmp_path: Path) -> None:
    store = _small_store_missing_its_first_segment(tmp_path)
    start = json.dumps({"L/0": 0})

    def stream(fail: bool, name: str) -> list[Any]:
        out = tmp_path / name
        df = (
            spark.readStream.format("rocketstore")
            .option("startingOffsets", start)
            .option("failOnDataLoss", str(fail).lower())
            .load(str(store))
        )
        q = (
            df.select("queue_offset")
            .writeStream.format("parquet")
            .option("path", str(out))
            .option("checkpointLocation", str(tmp_path / f"{name}-ckpt"))
            .trigger(availableNow=True)
            .start()
        )
        q.awaitTermination(120)
        return spark.read.parquet(str(out)).collect() if out.exists() else []

    with pytest.raises(Exception, match="reclaimed"):
        stream(True, "strict")
    rows = stream(False, "lenient")
    offsets = sorted(r["queue_offset"] for r in rows)
    assert offsets and offsets[0] > 0 and offsets == list(range(offsets[0], 2000))


# --- writing --------------------------------------------------------------------------------
def test_a_million_rows_round_trip(spark: SparkSession, tmp_path: Path) -> None:
    from pyspark.sql import functions as F

    store = tmp_path / "store"
    conf = tmp_path / "store.toml"
    conf.write_text(
        "commitlog_segment_size = 67108864\nconsume_queue_entries = 300000\n"
        # the tasks' stores must not reclaim what the test reads, however full the disk is
        "disk_max_used_space_ratio = 100\ndisk_clean_forcibly_ratio = 100\ndisk_warning_ratio = 100\n"
    )
    n = 1_000_000
    df = spark.range(n, numPartitions=4).select(
        F.concat(F.lit("W"), (F.col("id") % 3).cast("string")).alias("topic"),
        F.concat(F.lit("body-"), F.col("id").cast("string")).cast("binary").alias("body"),
        F.array(F.concat(F.lit("k"), F.col("id").cast("string"))).alias("keys"),
        F.concat(F.lit("t"), (F.col("id") % 5).cast("string")).alias("tags"),
        (F.col("id") % 4).cast("int").alias("queue_id"),
    )
    df.write.format("rocketstore").mode("append").option("config", str(conf)).save(str(store))
    back = spark.read.format("rocketstore").option("source", "queues").load(str(store))
    cols = ["topic", "body", "keys", "tags", "queue_id"]
    assert back.count() == n
    assert back.select(*cols).exceptAll(df.select(*cols)).count() == 0
    assert df.select(*cols).exceptAll(back.select(*cols)).count() == 0
    with MessageStore.open(store, detect_geometry(store), readonly=True) as s:  # keys, tags indexed
        found = s.query_message("W1", "k4", 10)
        assert [m.body for m in found] == [b"body-4"]
        assert found[0].tags == "t4"


def test_a_properties_map_column_from_create_data_frame_is_written(
    spark: SparkSession, tmp_path: Path
) -> None:
    from pyspark.sql.types import BinaryType, MapType, StringType, StructField, StructType

    schema = StructType(
        [
            StructField("topic", StringType()),
            StructField("body", BinaryType()),
            StructField("properties", MapType(StringType(), StringType())),
        ]
    )
    rows = [("P", b"both", {"color": "red", "size": "L"}), ("P", b"empty", {}), ("P", b"none", None)]
    store = tmp_path / "store"
    conf = tmp_path / "store.toml"
    conf.write_text(
        "commitlog_segment_size = 1048576\ndisk_max_used_space_ratio = 100\ndisk_warning_ratio = 100\n"
    )
    spark.createDataFrame(rows, schema).coalesce(1).write.format("rocketstore").mode("append").option(
        "config", str(conf)
    ).save(str(store))
    with MessageStore.open(store, detect_geometry(store), readonly=True) as s:
        got = {
            m.body: {k: v for k, v in m.properties.items() if k != "UNIQ_KEY"}
            for q in s.topics()["P"]
            for m in s.get_message("g", "P", q, 0).messages
        }
    assert got == {b"both": {"color": "red", "size": "L"}, b"empty": {}, b"none": {}}


def test_writing_to_a_store_another_process_holds_fails_at_once(spark: SparkSession, tmp_path: Path) -> None:
    store = tmp_path / "store"
    MessageStore.open(store, StoreConfig(commitlog_segment_size=64 * 1024)).close()
    df = spark.createDataFrame([("T", b"x")], "topic string, body binary")
    with MessageStore.open(store, StoreConfig(commitlog_segment_size=64 * 1024)):
        began = time.monotonic()
        with pytest.raises(Exception, match="already open by another process"):
            df.write.format("rocketstore").mode("append").save(str(store))
        assert time.monotonic() - began < 30


def test_a_frame_the_sink_cannot_write_is_refused_before_anything_is_written(
    spark: SparkSession, tmp_path: Path
) -> None:
    store = tmp_path / "store"
    with pytest.raises(Exception, match="needs columns body"):
        spark.createDataFrame([("T",)], "topic string").write.format("rocketstore").mode("append").save(
            str(store)
        )
    with pytest.raises(Exception, match="does not know columns colour"):
        spark.createDataFrame([("T", b"x", "red")], "topic string, body binary, colour string").write.format(
            "rocketstore"
        ).mode("append").save(str(store))
    bad = spark.createDataFrame([("T", b"x"), ("bad/topic", b"y")], "topic string, body binary").coalesce(1)
    with pytest.raises(Exception, match="row 1"):
        bad.write.format("rocketstore").mode("append").save(str(store))
    if (store / "commitlog").exists():
        with MessageStore.open(store, detect_geometry(store), readonly=True) as s:
            assert s.max_phy_offset == 0


def test_starting_timestamp_and_max_messages_per_trigger(spark: SparkSession, tmp_path: Path) -> None:
    """Each queue starts at its first message stored at or after the time; no micro-batch takes
    more than maxMessagesPerTrigger messages."""
    from rocketstore import ManualClock

    root = tmp_path / "store"
    clock = ManualClock(1_800_000_000_000)
    cfg = StoreConfig(commitlog_segment_size=64 * 1024, consume_queue_entries=100)
    with MessageStore.open(root, cfg, clock=clock) as store:
        for second in range(10):  # 10 rounds, one second apart, 20 messages per queue each
            store.put_messages(
                [Message(topic="P", body=f"{second}".encode(), queue_id=q % 2) for q in range(40)]
            )
            clock.advance(1000)
        assert store.wait_dispatched(10)
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"
    (
        spark.readStream.format("rocketstore")
        .option("startingTimestamp", str(1_800_000_000_000 + 4000))
        .option("maxMessagesPerTrigger", "50")
        .load(str(root))
        .select("queue_id", "queue_offset", "body")
        .writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(ckpt))
        .trigger(availableNow=True)
        .start()
        .awaitTermination(120)
    )
    rows = spark.read.parquet(str(out)).collect()
    assert sorted(int(r["body"]) for r in rows) == sorted([s for s in range(4, 10) for _ in range(40)])
    for q in range(2):
        assert sorted(r["queue_offset"] for r in rows if r["queue_id"] == q) == list(range(80, 200))
    # the file sink's log lists the files of each micro-batch
    per_batch = []
    logs = [p for p in (out / "_spark_metadata").iterdir() if p.name.isdigit()]
    for log in sorted(logs, key=lambda p: int(p.name)):
        files = [json.loads(line)["path"] for line in log.read_text().splitlines()[1:]]
        per_batch.append(sum(spark.read.parquet(f).count() for f in files))
    assert sum(per_batch) == 240
    assert len(per_batch) >= 5 and max(per_batch) <= 50
