"""rocketstore.spark.maintenance: verify on Spark gives verify_store's report, field by field; rebuild
on Spark writes the consume queues and index the store's own dispatch writes, byte for byte.

The reference for rebuild's index file names is a store written with a ManualClock held still
between putting a round of messages and its dispatch: the store names an index file by its clock
when it creates it, which is then the store time of the first record the file indexes, the rule
rebuild names files by. Against RocketMQ's files (named by RocketMQ's wall clock) the contents are
compared file by file, in order.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from rocketstore import ManualClock, Message, MessageStore, StoreConfig
from rocketstore.codec import index_layout
from rocketstore.codec.commitlog_record import TX_COMMIT, TX_PREPARED, TX_ROLLBACK, decode_record
from rocketstore.codec.commitlog_scan import message_starts
from rocketstore.codec.consume_queue_entry import CQ_ENTRY_SIZE
from rocketstore.errors import StoreLockedError
from rocketstore.spark import maintenance
from rocketstore.storage.paths import StoreLayout
from rocketstore.verify import MAX_DAMAGE_PER_FILE, VerifyReport, verify_store
from tests.conftest import FIXTURE_CONFIG, FIXTURES, copy_fixture, fixture_clock

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = pytest.mark.slow

SLOTS = FIXTURE_CONFIG.index_hash_slots
CFG = StoreConfig(
    commitlog_segment_size=256 * 1024, consume_queue_entries=100, index_hash_slots=64, index_max_entries=256
)
T0 = 1_790_000_000_000


# --- verify ---------------------------------------------------------------------------------
def same_report(ours: VerifyReport, theirs: VerifyReport) -> None:
    assert ours.damage == theirs.damage
    assert (ours.records, ours.queue_entries, ours.index_entries, ours.commitlog_range) == (
        theirs.records,
        theirs.queue_entries,
        theirs.index_entries,
        theirs.commitlog_range,
    )
    assert ours == theirs


def patch(path: Path, pos: int, data: bytes) -> None:
    with path.open("r+b") as f:
        f.seek(pos)
        f.write(data)


def records_of(segment: Path) -> list[int]:
    data = segment.read_bytes()
    return [int(p) for p in message_starts(data)[0]]


@pytest.mark.parametrize("name", ["store-sample", "store-sample-crash"])
def test_verify_on_spark_equals_verify_store_on_the_rocketmq_fixtures(spark: SparkSession, name: str) -> None:
    root = FIXTURES / name
    report = maintenance.verify(spark, str(root))
    assert report.clean and report.records > 0
    same_report(report, verify_store(root))


def plant_one_of_each(root: Path) -> None:
    """A flipped body byte, a broken TOTALSIZE, a corrupt consume-queue entry, a broken index chain."""
    seg1 = root / "commitlog" / f"{65536:020d}"
    at = records_of(seg1)[3]
    body = decode_record(seg1.read_bytes(), at).body_start
    patch(seg1, body + 2, bytes([seg1.read_bytes()[body + 2] ^ 0x41]))
    seg2 = root / "commitlog" / f"{131072:020d}"
    at = records_of(seg2)[5]
    size = struct.unpack_from(">i", seg2.read_bytes(), at)[0]
    patch(seg2, at, struct.pack(">i", size + 8))
    cq = root / "consumequeue" / "TopicB" / "2" / f"{0:020d}"
    patch(cq, 7 * CQ_ENTRY_SIZE + 8, struct.pack(">i", 33))
    index = sorted((root / "index").iterdir())[1]
    patch(index, index_layout.entry_position(SLOTS, 100) + 16, struct.pack(">i", 100))


def plant_many(root: Path) -> None:
    """More damage in one index file than is listed, found partly by the file's own task (chains)
    and partly by every segment's task (keys), and a whole queue file of wrong tags."""
    index = sorted((root / "index").iterdir())[2]
    data = bytearray(index.read_bytes())
    count = index_layout.decode_header(data).index_count
    for number in range(1, count):
        at = index_layout.entry_position(SLOTS, number)
        struct.pack_into(">i", data, at, struct.unpack_from(">i", data, at)[0] ^ 1)
    index.write_bytes(bytes(data))
    cq = root / "consumequeue" / "TopicC" / "1" / f"{0:020d}"
    data = bytearray(cq.read_bytes())
    for i in range(len(data) // CQ_ENTRY_SIZE):
        struct.pack_into(">q", data, i * CQ_ENTRY_SIZE + 12, 12345)
    cq.write_bytes(bytes(data))


@pytest.mark.parametrize(
    ("name", "damage"), [("store-sample", plant_one_of_each), ("store-sample-crash", plant_many)]
)
def test_verify_on_spark_equals_verify_store_on_damaged_copies(
    spark: SparkSession, tmp_path: Path, name: str, damage: Any
) -> None:
    root = copy_fixture(name, tmp_path)
    damage(root)
    expected = verify_store(root)
    assert expected.damage
    if damage is plant_many:
        capped = [d.file for d in expected.damage if "more problems in this file" in d.detail]
        assert len(capped) == 1 and capped[0].startswith("index/")
        assert len([d for d in expected.damage if d.file == capped[0]]) == MAX_DAMAGE_PER_FILE + 1
    else:
        assert {d.kind for d in expected.damage} >= {"commitlog_record", "consume_queue_entry", "index_chain"}
    same_report(maintenance.verify(spark, str(root)), expected)
    same_report(
        maintenance.verify(spark, str(root), FIXTURE_CONFIG, check_crc=False),
        verify_store(root, FIXTURE_CONFIG, check_crc=False),
    )


# --- rebuild: a store written by rocketstore ------------------------------------------------
def workload(round_no: int) -> list[Message]:
    msgs = []
    for i in range(40):
        n = round_no * 40 + i
        tx = (0, 0, 0, TX_PREPARED, TX_COMMIT, TX_ROLLBACK)[n % 6] if n % 5 == 0 else 0
        msgs.append(
            Message(
                topic=("Orders", "Payments", "Audit")[n % 3],
                body=bytes([n % 251]) * (300 + n % 400),
                tags=None if n % 7 == 0 else f"tag{n % 4}",
                keys=[] if n % 11 == 0 else [f"key{n}", f"customer{n % 13}"][: 1 + n % 2],
                queue_id=n % 4,
                delay_level=(2 if n % 17 == 0 else 0) if not tx else 0,
                sys_flag=tx,
            )
        )
    return msgs


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Written round by round; the clock moves only after a round is dispatched, never far enough
    for a delayed message to fall due."""
    root = tmp_path_factory.mktemp("own") / "s"
    clock = ManualClock(T0)
    with MessageStore.open(root, CFG, clock=clock) as store:
        for r in range(60):
            msgs = workload(r)
            if r % 3:
                results = store.put_messages(msgs)
            else:
                results = [store.put_message(m) for m in msgs]
            assert all(x.ok for x in results)
            assert store.wait_dispatched(10)
            clock.advance(3 + r % 5)
    assert len(list((root / "commitlog").iterdir())) >= 4
    assert len(list((root / "index").iterdir())) >= 10
    assert (root / "consumequeue" / "SCHEDULE_TOPIC_XXXX" / "1").is_dir()
    return root


def files_under(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def answers(root: Path, config: StoreConfig, clock: ManualClock) -> dict[str, Any]:
    """What readers get: every queue read through, and every key queried."""
    out: dict[str, Any] = {}
    with MessageStore.open(root, config, clock=clock) as store:
        store.wait_dispatched(10)
        keys: set[tuple[str, str]] = set()
        for topic, queue_ids in store.topics().items():
            for q in queue_ids:
                r = store.get_message("g", topic, q, 0, max_msgs=100_000)
                out[f"{topic}/{q}"] = (
                    r.status,
                    r.next_begin_offset,
                    r.min_offset,
                    r.max_offset,
                    [(m.msg_id, m.queue_offset, m.tags_code, m.keys, m.body) for m in r.messages],
                )
                for m in r.messages:
                    keys.update((m.topic, k) for k in m.keys)
                    if m.uniq_key:
                        keys.add((m.topic, m.uniq_key))
        for topic, key in sorted(keys):
            out[f"{topic}#{key}"] = sorted(m.msg_id for m in store.query_message(topic, key))
    return out


def test_rebuild_reproduces_the_stores_own_consume_queues_and_index(
    spark: SparkSession, written: Path, tmp_path: Path
) -> None:
    root = tmp_path / "s"
    shutil.copytree(written, root)
    shutil.rmtree(root / "consumequeue")
    shutil.rmtree(root / "index")
    summary = maintenance.rebuild(spark, str(root), CFG)

    queues, rebuilt_queues = files_under(written / "consumequeue"), files_under(root / "consumequeue")
    assert sorted(rebuilt_queues) == sorted(queues)
    for name, data in queues.items():
        assert rebuilt_queues[name] == data, name
    index, rebuilt_index = files_under(written / "index"), files_under(root / "index")
    assert list(rebuilt_index) == list(index)  # the same names
    for name, data in index.items():
        assert rebuilt_index[name] == data, name
    assert not (root / maintenance.STAGING_DIR).exists()

    assert summary["segments"] == len(list((root / "commitlog").iterdir()))
    assert summary["records"] == 60 * 40
    assert summary["queue_files"] == len(queues) and summary["index_files"] == len(index)
    assert summary["queues"] == len({name.rsplit("/", 1)[0] for name in queues})
    assert summary["queue_entries"] < summary["records"]  # PREPARED and ROLLBACK: no queue entry
    entries = sum(index_layout.decode_header(d).index_count - 1 for d in index.values())
    assert summary["index_entries"] == entries
    assert verify_store(root, CFG).clean

    reference = tmp_path / "reference"  # opening a store writes to it: not the module's store
    shutil.copytree(written, reference)
    later = T0 + 1000  # nothing is due yet: delayed messages stay where they are
    assert answers(root, CFG, ManualClock(later)) == answers(reference, CFG, ManualClock(later))


def test_rebuild_with_segments_that_hold_no_keys(spark: SparkSession, tmp_path: Path) -> None:
    """Keys, then whole segments of records without any key, then keys again: the index files
    span the keyless segments as dispatch's do."""
    cfg = dataclasses.replace(CFG, generate_uniq_key=False)
    root = tmp_path / "own"
    clock = ManualClock(T0)
    with MessageStore.open(root, cfg, clock=clock) as store:
        for r, with_keys in enumerate((True, False, False, False, True)):
            msgs = [
                Message(
                    topic=("A", "B")[i % 2],
                    body=bytes([i % 251]) * 1000,
                    keys=[f"k{r}-{i}"] if with_keys else [],
                    queue_id=i % 2,
                )
                for i in range(300)
            ]
            assert all(x.ok for x in store.put_messages(msgs))
            assert store.wait_dispatched(10)
            clock.advance(1500)
    assert len(list((root / "commitlog").iterdir())) >= 5
    assert len(list((root / "index").iterdir())) >= 3
    copy = tmp_path / "copy"
    shutil.copytree(root, copy)
    shutil.rmtree(copy / "consumequeue")
    shutil.rmtree(copy / "index")
    summary = maintenance.rebuild(spark, str(copy), cfg)
    assert summary["index_entries"] == 600
    assert files_under(copy / "consumequeue") == files_under(root / "consumequeue")
    assert files_under(copy / "index") == files_under(root / "index")


def test_rebuild_replaces_damaged_files_and_refuses_an_open_store(
    spark: SparkSession, written: Path, tmp_path: Path
) -> None:
    root = tmp_path / "s"
    shutil.copytree(written, root)
    with MessageStore.open(root, CFG, clock=ManualClock(T0 + 1000)), pytest.raises(StoreLockedError):
        maintenance.rebuild(spark, str(root), CFG)
    queue = root / "consumequeue" / "Orders" / "1" / f"{0:020d}"
    patch(queue, 0, bytes(100))
    (root / "index" / "20000101000000000").write_bytes(b"junk")
    assert not verify_store(root, CFG).clean
    holder = subprocess.Popen(  # another process holds the store's lock, as an open store does
        [
            sys.executable,
            "-c",
            "import fcntl, os, sys, time\n"
            "fd = os.open(sys.argv[1], os.O_RDWR)\n"
            "fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 0)\n"
            "print('locked', flush=True)\n"
            "time.sleep(60)\n",
            str(root / "lock"),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        with pytest.raises(StoreLockedError, match=f"process {holder.pid}"):
            maintenance.rebuild(spark, str(root), CFG)
    finally:
        holder.kill()
        holder.wait()

    maintenance.rebuild(spark, str(root))  # geometry from the files this time
    assert files_under(root / "consumequeue") == files_under(written / "consumequeue")
    assert files_under(root / "index") == files_under(written / "index")
    assert verify_store(root, CFG).clean


# --- rebuild: RocketMQ's store --------------------------------------------------------------
def test_rebuild_of_a_rocketmq_store_gives_rocketmqs_files(spark: SparkSession, tmp_path: Path) -> None:
    root = copy_fixture("store-sample", tmp_path)
    original = FIXTURES / "store-sample"
    summary = maintenance.rebuild(spark, str(root))  # the geometry from RocketMQ's files
    assert (summary["records"], summary["queue_entries"], summary["index_files"]) == (600, 600, 4)

    assert files_under(root / "consumequeue") == files_under(original / "consumequeue")
    theirs = sorted((original / "index").iterdir())
    ours = sorted((root / "index").iterdir())
    assert len(ours) == len(theirs)
    for mine, rocketmq in zip(ours, theirs):
        assert mine.read_bytes() == rocketmq.read_bytes(), (mine.name, rocketmq.name)
    assert summary["index_entries"] == sum(
        index_layout.decode_header(p.read_bytes()).index_count - 1 for p in theirs
    )

    reference = copy_fixture("store-sample", tmp_path / "ref")
    clock = fixture_clock("store-sample")
    assert answers(root, FIXTURE_CONFIG, clock) == answers(reference, FIXTURE_CONFIG, clock)
    assert os.path.getsize(root / "checkpoint") == 4096


@pytest.mark.parametrize("atomic", [True, False])
def test_the_swap_keeps_the_old_directories_until_both_new_ones_are_in(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, atomic: bool
) -> None:
    if not atomic:
        monkeypatch.setattr(maintenance, "_exchange", lambda a, b: False)
    layout = StoreLayout(tmp_path / "s")
    staging = layout.root / maintenance.STAGING_DIR
    for d, tag in ((layout.root, "old"), (staging, "new")):
        for name in ("consumequeue", "index"):
            (d / name).mkdir(parents=True)
            (d / name / tag).write_text(tag)
    maintenance._swap_in(layout, staging)
    assert (
        [p.name for p in layout.consume_queue.iterdir()]
        == [p.name for p in layout.index.iterdir()]
        == ["new"]
    )
    assert (staging / "consumequeue" / "old").exists() and (staging / "index" / "old").exists()

    maintenance._swap_in(layout, staging)  # back again; then a second swap that fails
    real = maintenance._swap_directory

    def failing(new: Path, live: Path, aside: Path) -> None:
        if live.name == "index":
            raise OSError("no")
        real(new, live, aside)

    monkeypatch.setattr(maintenance, "_swap_directory", failing)
    with pytest.raises(OSError, match="no"):
        maintenance._swap_in(layout, staging)
    monkeypatch.setattr(maintenance, "_swap_directory", real)
    assert (
        [p.name for p in layout.consume_queue.iterdir()]
        == [p.name for p in layout.index.iterdir()]
        == ["old"]
    )
