"""Kafka's option names with Kafka's meaning, on RocketMQ's own fixture store: the source's readers
are driven directly (planning and reading as Spark's tasks do, without the JVM), and a few
queries run through Spark to see the options arrive as Spark passes them."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from pyspark.sql.datasource import CaseInsensitiveDict, EqualTo, In
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

from rocketstore import Message, MessageStore, StoreConfig
from rocketstore.errors import DataLossError
from rocketstore.spark.source import (
    FilteringReader,
    RocketStoreDataSource,
    RocketStoreReader,
    RocketStoreStreamReader,
)
from tests.conftest import FIXTURES
from tests.test_spark_scan import _listing

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

STORE = str(FIXTURES / "store-sample")
MSGS = _listing("store-sample", "msg")
SYSTEM = "SCHEDULE_TOPIC_XXXX"
Row = tuple[str, int, int]  # topic, queue id, queue offset


def _options(**given: str) -> CaseInsensitiveDict:
    return CaseInsensitiveDict({"path": STORE, **given})


def _read(reader: RocketStoreReader) -> list[Row]:
    rows = []
    for part in reader.partitions():
        for batch in reader.read(part):
            rows.extend(
                zip(
                    batch.column("topic").to_pylist(),
                    batch.column("queue_id").to_pylist(),
                    batch.column("queue_offset").to_pylist(),
                )
            )
    return sorted(rows)


def _batch(**given: str) -> list[Row]:
    return _read(RocketStoreReader(_options(**given)))


def _listed(keep: Any) -> list[Row]:
    return sorted((m["topic"], m["queueId"], m["queueOffset"]) for m in MSGS if keep(m))


def _first_at(topic: str, qid: int, ms: int) -> int:
    """The queue offset of the first message of the queue stored at or after ``ms``."""
    offsets = [
        m["queueOffset"] for m in MSGS if (m["topic"], m["queueId"]) == (topic, qid) and m["storeTs"] >= ms
    ]
    return min(
        offsets, default=max(m["queueOffset"] for m in MSGS if (m["topic"], m["queueId"]) == (topic, qid)) + 1
    )


# --- which queues -----------------------------------------------------------------------------
@pytest.mark.parametrize("source", ["commitlog", "queues"])
def test_system_topics_are_left_out_unless_named(source: str) -> None:
    assert _batch(source=source) == _listed(lambda m: m["topic"] != SYSTEM)
    assert _batch(source=source, topic=SYSTEM) == _listed(lambda m: m["topic"] == SYSTEM)
    assert _batch(source=source, subscribe=f"TopicC,{SYSTEM}") == _listed(
        lambda m: m["topic"] in ("TopicC", SYSTEM)
    )
    assert _batch(source=source, includeSystemTopics="true") == _listed(lambda m: True)


@pytest.mark.parametrize("source", ["commitlog", "queues"])
def test_subscribe_and_subscribe_pattern(source: str) -> None:
    assert _batch(source=source, subscribe="TopicA, TopicC") == _listed(
        lambda m: m["topic"] in ("TopicA", "TopicC")
    )
    # a pattern matches the whole name, as Java's Pattern.matcher(topic).matches()
    assert _batch(source=source, subscribePattern="Topic[AB]") == _listed(
        lambda m: m["topic"] in ("TopicA", "TopicB")
    )
    assert _batch(source=source, subscribePattern="Topic") == []
    assert _batch(source=source, subscribePattern=".*") == _listed(lambda m: m["topic"] != SYSTEM)


def test_assign_reads_exactly_the_queues_it_names() -> None:
    assign = json.dumps({"TopicB": [3, 0], SYSTEM: [4]})
    assert _batch(assign=assign) == _listed(
        lambda m: (m["topic"], m["queueId"]) in {("TopicB", 3), ("TopicB", 0), (SYSTEM, 4)}
    )
    with pytest.raises(ValueError, match="assign"):
        _batch(assign='{"TopicB": "3"}')
    with pytest.raises(ValueError, match="subscribe and assign"):
        _batch(subscribe="TopicB", assign=assign)
    with pytest.raises(ValueError, match="source=commitlog"):
        _batch(assign=assign, source="commitlog")


# --- which offsets ----------------------------------------------------------------------------
def test_starting_and_ending_offsets_as_kafka_writes_them() -> None:
    starting = json.dumps({"TopicA": {"0": 40, "1": -2}, "TopicB": {"2": 47}})
    ending = json.dumps({"TopicA": {"1": 3, "2": -1}, "TopicB": {"2": 100}})
    got = _batch(subscribe="TopicA,TopicB", startingOffsets=starting, endingOffsets=ending)

    def keep(m: dict[str, Any]) -> bool:
        start = {("TopicA", 0): 40, ("TopicB", 2): 47}.get((m["topic"], m["queueId"]), 0)
        end = {("TopicA", 1): 3}.get((m["topic"], m["queueId"]), 1 << 40)
        return m["topic"] in ("TopicA", "TopicB") and start <= m["queueOffset"] < end

    assert got == _listed(keep)
    assert _batch(startingOffsets="earliest", endingOffsets="latest") == _batch()
    with pytest.raises(ValueError, match="startingOffsets"):
        _batch(startingOffsets="latest")
    with pytest.raises(ValueError, match="endingOffsets"):
        _batch(endingOffsets=json.dumps({"TopicA": {"0": -2}}))
    with pytest.raises(ValueError, match="startingOffsets"):
        _batch(startingOffsets='{"TopicA": {"zero": 1}}')


def test_offsets_by_timestamp() -> None:
    a0 = sorted(m["storeTs"] for m in MSGS if (m["topic"], m["queueId"]) == ("TopicA", 0))
    c3 = sorted(m["storeTs"] for m in MSGS if (m["topic"], m["queueId"]) == ("TopicC", 3))
    t_start, t_end, t_all = a0[10], c3[30], c3[20]
    got = _batch(
        subscribe="TopicA,TopicC",
        startingOffsetsByTimestamp=json.dumps({"TopicA": {"0": t_start}}),
        endingOffsetsByTimestamp=json.dumps({"TopicC": {"3": t_end}}),
    )

    def keep(m: dict[str, Any]) -> bool:
        key = (m["topic"], m["queueId"])
        start = _first_at("TopicA", 0, t_start) if key == ("TopicA", 0) else 0
        end = _first_at("TopicC", 3, t_end) if key == ("TopicC", 3) else 1 << 40
        return m["topic"] in ("TopicA", "TopicC") and start <= m["queueOffset"] < end

    assert got == _listed(keep)
    # startingTimestamp: every queue from its first message stored at or after the time
    every = _batch(subscribe="TopicC", startingTimestamp=str(t_all))
    assert every == _listed(
        lambda m: m["topic"] == "TopicC" and m["queueOffset"] >= _first_at("TopicC", m["queueId"], t_all)
    )
    assert every != _batch(subscribe="TopicC")


def _store_missing_its_first_segment(tmp_path: Path) -> str:
    root = tmp_path / "store"
    cfg = StoreConfig(commitlog_segment_size=64 * 1024, consume_queue_entries=100)
    with MessageStore.open(root, cfg) as store:
        for _ in range(5):
            store.put_messages([Message(topic="L", body=b"y" * 100, queue_id=0)] * 200)
        assert store.wait_dispatched(10)
    sorted((root / "commitlog").iterdir())[0].unlink()  # as reclamation would
    return str(root)


def test_fail_on_data_loss_in_a_batch_query(tmp_path: Path) -> None:
    root = _store_missing_its_first_segment(tmp_path)
    start = json.dumps({"L": {"0": 0}})
    with pytest.raises(DataLossError, match="L/0: startingOffsets asks for queue offset 0"):
        RocketStoreReader(CaseInsensitiveDict({"path": root, "startingOffsets": start})).partitions()
    reader = RocketStoreReader(
        CaseInsensitiveDict({"path": root, "startingOffsets": start, "failOnDataLoss": "false"})
    )
    offsets = [o for _, _, o in _read(reader)]
    assert offsets and offsets[0] > 0 and offsets == list(range(offsets[0], 1000))


# --- streaming ----------------------------------------------------------------------------------
def test_streaming_starting_offsets_and_per_trigger_limits() -> None:
    reader = RocketStoreStreamReader(
        _options(
            subscribe="TopicB",
            startingOffsets=json.dumps({"TopicB": {"1": 40, "3": -1}}),
            maxOffsetsPerTrigger="30",
        )
    )
    start = reader.initialOffset()
    assert start == {"TopicB/0": 0, "TopicB/1": 40, "TopicB/2": 0, "TopicB/3": 47}
    assert reader.getDefaultReadLimit() == ReadMaxRows(30)
    end = reader.latestOffset(start, reader.getDefaultReadLimit())
    assert sum(end[k] - start[k] for k in start) == 30
    assert RocketStoreStreamReader(_options(maxMessagesPerTrigger="7")).getDefaultReadLimit() == ReadMaxRows(
        7
    )
    with pytest.raises(ValueError, match="endingOffsets"):
        RocketStoreStreamReader(_options(endingOffsets="latest"))


def test_min_offsets_per_trigger_waits_until_enough_or_the_delay_passed() -> None:
    start = {"TopicA/0": 0}
    waiting = RocketStoreStreamReader(
        _options(assign='{"TopicA": [0]}', minOffsetsPerTrigger="49", maxTriggerDelay="1h")
    )
    assert waiting.latestOffset(start, ReadAllAvailable()) == start  # 48 available, no batch yet
    enough = RocketStoreStreamReader(
        _options(assign='{"TopicA": [0]}', minOffsetsPerTrigger="48", maxTriggerDelay="1h")
    )
    assert enough.latestOffset(start, ReadAllAvailable()) == {"TopicA/0": 48}
    late = RocketStoreStreamReader(
        _options(assign='{"TopicA": [0]}', minOffsetsPerTrigger="49", maxTriggerDelay="0s")
    )
    assert late.latestOffset(start, ReadAllAvailable()) == {"TopicA/0": 48}  # the delay passed
    with pytest.raises(ValueError, match="maxTriggerDelay"):
        RocketStoreStreamReader(_options(minOffsetsPerTrigger="1", maxTriggerDelay="soon"))


# --- options and source choice ----------------------------------------------------------------
def test_unknown_options_fail_with_their_name() -> None:
    with pytest.raises(ValueError, match=r"does not know option kafka\.bootstrap\.servers"):
        RocketStoreDataSource(_options(**{"kafka.bootstrap.servers": "localhost:9092"}))
    RocketStoreDataSource(_options(STARTINGOFFSETS="earliest", maxoffsetspertrigger="5"))  # any case


def test_a_topic_option_naming_a_topic_the_store_lacks_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, "rocketstore.spark.source"):
        reader = RocketStoreReader(_options(subscribe="TopicA,Nope"))
        RocketStoreReader(_options(topic="TopicA"))
        RocketStoreStreamReader(_options(assign=json.dumps({"Later": [0]})))
    warned = [r.getMessage() for r in caplog.records]
    assert len(warned) == 2, warned
    assert "option subscribe" in warned[0] and "no topic 'Nope': no rows from it" in warned[0]
    assert "option assign" in warned[1] and "'Later'" in warned[1] and "once it appears" in warned[1]
    assert {topic for topic, _, _ in _read(reader)} == {"TopicA"}


def test_the_source_reads_the_queues_when_topics_and_queues_are_named() -> None:
    assert RocketStoreReader(_options()).chosen_source() == "commitlog"
    assert RocketStoreReader(_options(topic="TopicA")).chosen_source() == "commitlog"
    assert RocketStoreReader(_options(topic="TopicA", queueIds="1")).chosen_source() == "queues"
    assert RocketStoreReader(_options(startingOffsets='{"TopicA": {"1": 3}}')).chosen_source() == "queues"
    assert (
        RocketStoreReader(_options(topic="TopicA", queueIds="1", source="commitlog")).chosen_source()
        == "commitlog"
    )
    pushed = FilteringReader(_options())
    list(pushed.pushFilters([EqualTo(("topic",), "TopicA"), In(("queue_id",), (1, 2))]))
    assert pushed.chosen_source() == "queues"
    assert _read(pushed) == _listed(lambda m: m["topic"] == "TopicA" and m["queueId"] in (1, 2))


# --- through Spark ----------------------------------------------------------------------------
@pytest.mark.slow
def test_kafka_options_through_spark(spark: SparkSession) -> None:
    df = (
        spark.read.format("rocketstore")
        .option("subscribe", "TopicA")
        .option("startingOffsets", json.dumps({"TopicA": {"0": 45}}))
        .option("endingOffsets", json.dumps({"TopicA": {"1": 2, "2": 0, "3": 0}}))
        .option("includeHeaders", "true")
        .load(STORE)
    )
    assert dict(df.dtypes)["headers"] == "array<struct<key:string,value:binary>>"
    rows = sorted(df.select("queue_id", "queue_offset", "headers", "properties").collect())
    assert [(r.queue_id, r.queue_offset) for r in rows] == [(0, 45), (0, 46), (0, 47), (1, 0), (1, 1)]
    by_offset = {(m["queueId"], m["queueOffset"]): m for m in MSGS if m["topic"] == "TopicA"}
    for r in rows:
        props = by_offset[(r.queue_id, r.queue_offset)]["props"]
        assert {h.key: bytes(h.value).decode() for h in r.headers} == props == r.properties
    with pytest.raises(Exception, match=r"kafka\.bootstrap\.servers") as refused:
        spark.read.format("rocketstore").option("kafka.bootstrap.servers", "x").load(STORE).count()
    # named on the first line, not under the Python worker's traceback (rocketstore.spark.session)
    first_line = str(refused.value).splitlines()[0]
    assert "does not know option kafka.bootstrap.servers" in first_line, str(refused.value)


def test_the_session_says_what_to_set_when_workers_cannot_import_the_source(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import sys

    from rocketstore.spark import check_workers_python, session

    bare = tmp_path / "venv-less"
    bare.mkdir()
    python = sys.base_exec_prefix + "/bin/python3"  # the interpreter the venv was made from
    monkeypatch.setenv("PYTHONPATH", str(bare))
    with pytest.raises(RuntimeError, match=f"set PYSPARK_PYTHON={sys.executable}"):
        check_workers_python(python)
    monkeypatch.setenv("PYSPARK_PYTHON", python)
    with pytest.raises(RuntimeError, match="cannot import rocketstore's Spark source"):
        session("local[1]")
    monkeypatch.delenv("PYTHONPATH")
    check_workers_python(sys.executable)
