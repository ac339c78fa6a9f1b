"""The streaming sink: each micro-batch stored once, across restarts and lost commits."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa
import pytest

from rocketstore import Message, MessageStore, StoreConfig
from rocketstore.geometry import detect_geometry
from rocketstore.spark.stream_sink import LEDGER, SinkLedgerError, commit_batch, stage_part

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

CFG = StoreConfig(commitlog_segment_size=64 * 1024, consume_queue_entries=100)


def _by_queue(s: MessageStore) -> list[tuple[str, bytes]]:
    found = []
    for topic, qids in sorted(s.topics().items()):
        for q in qids:
            result = s.get_message("g", topic, q, 0, 10_000)
            found.extend((m.topic, m.body) for m in result.messages)
    return found


def _rows(*bodies: str) -> list[pa.RecordBatch]:
    return [pa.RecordBatch.from_pydict({"topic": ["S"] * len(bodies), "body": [b.encode() for b in bodies]})]


def test_a_committed_batch_run_again_appends_nothing(tmp_path: Path) -> None:
    root = tmp_path / "store"
    MessageStore.open(root, CFG).close()
    for attempt in range(2):  # Spark runs batch 0 again when its commit log entry was lost
        part = stage_part(str(root), "q1", 0, 0, attempt, _rows("a", "b"), None)
        commit_batch(str(root), "q1", 0, [part], None, 10)
    part = stage_part(str(root), "q1", 1, 0, 0, _rows("c"), None)
    assert commit_batch(str(root), "q1", 1, [part], None, 10) == 1
    assert sorted(_by_queue_store(root)) == [("S", b"a"), ("S", b"b"), ("S", b"c")]
    assert json.loads((root / "config" / LEDGER).read_text()) == {"q1": {"batch": 1, "state": "done"}}
    assert not (root / "spark-sink" / "q1" / "0").exists()  # staged files removed


def _by_queue_store(root: Path) -> list[tuple[str, bytes]]:
    with MessageStore.open(root, detect_geometry(root), readonly=True) as s:
        return _by_queue(s)


def test_a_commit_that_died_while_appending(tmp_path: Path) -> None:
    root = tmp_path / "store"
    with MessageStore.open(root, CFG) as s:
        s.put_messages([Message(topic="S", body=b"old")])
        end = s.max_phy_offset()
    (root / "config" / LEDGER).write_text(json.dumps({"q": {"batch": 4, "state": "appending", "from": end}}))
    # nothing went in: the batch is appended now
    part = stage_part(str(root), "q", 4, 0, 0, _rows("x"), None)
    assert commit_batch(str(root), "q", 4, [part], None, 10) == 1
    assert sorted(_by_queue_store(root)) == [("S", b"old"), ("S", b"x")]
    # part of it may have gone in: refused, nothing appended
    (root / "config" / LEDGER).write_text(json.dumps({"q": {"batch": 5, "state": "appending", "from": end}}))
    part = stage_part(str(root), "q", 5, 0, 0, _rows("y"), None)
    with pytest.raises(SinkLedgerError, match=f"micro-batch 5 .* at commitlog offset {end}"):
        commit_batch(str(root), "q", 5, [part], None, 10)
    assert sorted(_by_queue_store(root)) == [("S", b"old"), ("S", b"x")]


def test_bad_rows_fail_the_task_before_anything_is_staged(tmp_path: Path) -> None:
    rows = [pa.RecordBatch.from_pydict({"topic": ["bad/topic"], "body": [b"x"]})]
    with pytest.raises(ValueError, match="row 0"):
        stage_part(str(tmp_path / "store"), "q", 0, 0, 0, rows, None)
    assert not (tmp_path / "store" / "spark-sink").exists()


@pytest.mark.slow
def test_a_restarted_query_stores_each_row_once(spark: SparkSession, tmp_path: Path) -> None:
    root, inbox, ckpt = tmp_path / "store", tmp_path / "in", tmp_path / "ckpt"
    MessageStore.open(root, StoreConfig(commitlog_segment_size=1 << 20, consume_queue_entries=1000)).close()
    inbox.mkdir()

    def drop(name: str, first: int, n: int) -> None:
        lines = [json.dumps({"topic": "S", "body": f"m{i:03d}"}) for i in range(first, first + n)]
        (inbox / name).write_text("\n".join(lines))

    # the tasks' stores must not reclaim or refuse what the test writes, however full the disk is
    sink_config = tmp_path / "sink.toml"
    sink_config.write_text(
        "disk_max_used_space_ratio = 100\ndisk_clean_forcibly_ratio = 100\ndisk_warning_ratio = 100\n"
    )

    def run() -> None:
        (
            spark.readStream.schema("topic string, body string")
            .option("maxFilesPerTrigger", 1)
            .json(str(inbox))
            .writeStream.format("rocketstore")
            .option("config", str(sink_config))
            .option("checkpointLocation", str(ckpt))
            .trigger(availableNow=True)
            .start(str(root))
            .awaitTermination(120)
        )

    drop("a.json", 0, 30)
    drop("b.json", 30, 30)
    run()
    # the last batch's commit is lost from the checkpoint: Spark runs it again on restart
    commits = sorted((ckpt / "commits").glob("[0-9]*"), key=lambda p: int(p.name))
    assert [p.name for p in commits] == ["0", "1"]
    commits[-1].unlink()
    (ckpt / "commits" / f".{commits[-1].name}.crc").unlink(missing_ok=True)
    drop("c.json", 60, 30)
    run()
    bodies = sorted(b for _, b in _by_queue_store(root))
    assert bodies == [f"m{i:03d}".encode() for i in range(90)]
