"""Delayed delivery (STORE.md §8): due messages reach their real topic once, on time, across
restarts, crashes (SIGKILL of a live writer) and stores written by RocketMQ."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import pytest

from rocketstore import (
    CorruptDataError,
    ManualClock,
    Message,
    MessageExt,
    MessageStore,
    StoreConfig,
)
from rocketstore.codec.java_hash import tags_code
from rocketstore.schedule import real_message
from tests.conftest import FIXTURE_CONFIG, FIXTURES, copy_fixture, fixture_clock
from tests.helpers import read_all, spawn_python, wait_until

CFG = StoreConfig(
    commitlog_segment_size=65536,
    consume_queue_entries=40,
    index_hash_slots=64,
    index_max_entries=256,
    schedule_tick=10,
)
T0 = 1_700_000_000_000
SCHEDULE = "SCHEDULE_TOPIC_XXXX"


def delivered(store: MessageStore, topic: str, queue_id: int) -> list[MessageExt]:
    store.wait_dispatched(5)
    return read_all(store, topic, queue_id)


def test_due_message_reaches_its_real_queue_with_its_fields(tmp_path: Path) -> None:
    clock = ManualClock(T0)
    with MessageStore.open(tmp_path / "s", CFG, clock=clock) as store:
        r = store.put_message(
            Message(
                "Orders",
                b"pay later",
                tags="TagD",
                keys=["order-1", "k2"],
                properties={"app": "shop"},
                queue_id=2,
                delay_level=3,  # 10 s
                flag=7,
                born_host="10.0.0.9:1234",
                born_timestamp=T0 - 5,
            )
        )
        assert r.ok
        original = store.look_message_by_offset(r.physical_offset)
        assert original is not None and original.topic == SCHEDULE and original.queue_id == 2
        clock.advance(9_999)
        time.sleep(0.1)  # several ticks: nothing is due yet
        assert store.max_offset_in_queue("Orders", 2) == 0
        clock.advance(1)
        assert wait_until(lambda: store.max_offset_in_queue("Orders", 2) == 1)
        [msg] = delivered(store, "Orders", 2)
        assert (msg.topic, msg.queue_id, msg.body, msg.tags, msg.keys, msg.flag) == (
            "Orders",
            2,
            b"pay later",
            "TagD",
            ["order-1", "k2"],
            7,
        )
        assert msg.uniq_key == original.uniq_key and msg.uniq_key
        assert (msg.born_host, msg.born_timestamp) == ("10.0.0.9:1234", T0 - 5)
        assert msg.properties["app"] == "shop"
        assert not {"DELAY", "REAL_TOPIC", "REAL_QID"} & msg.properties.keys()
        assert msg.tags_code == tags_code("TagD")  # the real queue's entry: the tag's hash, not a time
        assert store.query_message("Orders", "order-1")[0].physical_offset == msg.physical_offset
        assert store.delay_progress()[3] == (1, 1)
    saved = json.loads((tmp_path / "s" / "config" / "delayOffset.json").read_text())
    assert saved["offsetTable"] == {"3": 1}


def test_levels_deliver_in_order_and_independently(tmp_path: Path) -> None:
    clock = ManualClock(T0)
    with MessageStore.open(tmp_path / "s", CFG, clock=clock) as store:
        for i in range(5):
            assert store.put_message(Message("T", f"one-{i}".encode(), queue_id=0, delay_level=1)).ok
            assert store.put_message(Message("T", f"five-{i}".encode(), queue_id=0, delay_level=2)).ok
        clock.advance(1_000)
        assert wait_until(lambda: store.max_offset_in_queue("T", 0) == 5)
        time.sleep(0.05)
        assert [m.body for m in delivered(store, "T", 0)] == [f"one-{i}".encode() for i in range(5)]
        clock.advance(4_000)
        assert wait_until(lambda: store.max_offset_in_queue("T", 0) == 10)
        assert [m.body for m in delivered(store, "T", 0)][5:] == [f"five-{i}".encode() for i in range(5)]


def test_restart_neither_loses_nor_repeats(tmp_path: Path) -> None:
    clock = ManualClock(T0)
    root = tmp_path / "s"
    with MessageStore.open(root, CFG, clock=clock) as store:
        for i in range(6):
            assert store.put_message(Message("T", b"m%d" % i, queue_id=1, delay_level=1 + i % 2)).ok
        clock.advance(1_000)  # the level-1 ones are due
        assert wait_until(lambda: store.max_offset_in_queue("T", 1) == 3)
    with MessageStore.open(root, CFG, clock=clock) as store:
        time.sleep(0.1)
        assert store.max_offset_in_queue("T", 1) == 3
        clock.advance(4_000)
        assert wait_until(lambda: store.max_offset_in_queue("T", 1) == 6)
        time.sleep(0.1)
        assert sorted(m.body for m in delivered(store, "T", 1)) == [b"m%d" % i for i in range(6)]


def test_delivered_but_unrecorded_before_a_crash_is_not_delivered_again(tmp_path: Path) -> None:
    """The crash window between the re-put and the progress write: the progress file is put back
    to its state before the deliveries and the store is left with its abort file (as a killed
    process leaves it). Reopening must recognise the copies and skip them."""
    clock = ManualClock(T0)
    root = tmp_path / "s"
    progress = root / "config" / "delayOffset.json"
    with MessageStore.open(root, CFG, clock=clock) as store:
        for i in range(4):
            assert store.put_message(Message("T", b"d%d" % i, keys=[f"k{i}"], queue_id=0, delay_level=1)).ok
        assert store.put_message(Message("T", b"later", queue_id=0, delay_level=2)).ok
    before = progress.read_bytes() if progress.exists() else None
    with MessageStore.open(root, CFG, clock=clock) as store:
        clock.advance(1_000)
        assert wait_until(lambda: store.max_offset_in_queue("T", 0) == 4)
    if before is None:
        progress.unlink()
    else:
        progress.write_bytes(before)
    (root / "abort").touch()
    with MessageStore.open(root, CFG, clock=clock) as store:
        time.sleep(0.1)
        assert store.max_offset_in_queue("T", 0) == 4  # nothing repeated
        clock.advance(4_000)
        assert wait_until(lambda: store.max_offset_in_queue("T", 0) == 5)
        time.sleep(0.1)
        assert [m.body for m in delivered(store, "T", 0)] == [b"d0", b"d1", b"d2", b"d3", b"later"]
    assert json.loads(progress.read_text())["offsetTable"] == {"1": 4, "2": 1}


def test_the_delivered_message_is_built_from_real_topic_and_queue(tmp_path: Path) -> None:
    clock = ManualClock(T0)
    with MessageStore.open(tmp_path / "s", CFG, clock=clock) as store:
        r = store.put_message(Message("T", b"x", queue_id=0, delay_level=1))
        msg = store.look_message_by_offset(r.physical_offset)
        assert msg is not None
        assert real_message(msg).topic == "T"

        # A record naming no real topic cannot be delivered (the scheduler logs and skips it).
        plain = store.put_message(Message("T", b"not delayed", queue_id=0))
        bare = store.look_message_by_offset(plain.physical_offset)
        assert bare is not None
        with pytest.raises(CorruptDataError, match="names no real topic"):
            real_message(bare)


@pytest.mark.parametrize("name", ["store-sample", "store-sample-crash"])
def test_rocketmq_fixture_delivers_its_pending_delayed_messages(name: str, tmp_path: Path) -> None:
    listing = FIXTURES / f"{name}.expected.jsonl"
    rows = [json.loads(line) for line in listing.read_text("utf-8").splitlines()] if listing.exists() else []
    root = copy_fixture(name, tmp_path)
    pending = [r for r in rows if r.get("kind") == "msg" and r.get("topic") == SCHEDULE]
    assert pending, "the fixture holds delayed messages"
    clock = fixture_clock(name)
    with MessageStore.open(root, FIXTURE_CONFIG, clock=clock) as store:
        before = {
            (t, q): store.max_offset_in_queue(t, q) for t in ("TopicA", "TopicB", "TopicC") for q in range(4)
        }
        clock.advance(121_000)  # the longest delay in the fixtures is 2 min
        assert wait_until(
            lambda: sum(store.delay_progress()[lvl][0] for lvl in store.delay_progress()) == len(pending)
        )
        store.wait_dispatched(5)
        got = []
        for (t, q), start in before.items():
            res = store.get_message("g", t, q, start, 32)
            got += [(m.topic, m.queue_id, m.body, m.born_timestamp) for m in res.messages]
    want = [(r["props"]["REAL_TOPIC"], int(r["props"]["REAL_QID"]), _body(r), r["bornTs"]) for r in pending]
    assert sorted(got) == sorted(want)
    with MessageStore.open(root, FIXTURE_CONFIG, clock=clock) as store:  # and never again
        time.sleep(0.1)
        assert sum(store.max_offset_in_queue(t, q) for (t, q) in before) == sum(before.values()) + len(
            pending
        )


def _body(row: dict[str, object]) -> bytes:
    if "body_utf8" in row:
        return str(row["body_utf8"]).encode()
    return bytes.fromhex(str(row["body_hex"]))


_WRITER = """
import sys, time
from rocketstore import Message, MessageStore, StoreConfig
cfg = StoreConfig(commitlog_segment_size=65536, consume_queue_entries=40, index_hash_slots=64,
                  index_max_entries=256, schedule_tick=5, message_delay_level="1s 2s",
                  disk_max_used_space_ratio=100, disk_clean_forcibly_ratio=100, disk_warning_ratio=100)
store = MessageStore.open(sys.argv[1], cfg)
n = int(sys.argv[2])
for i in range(n):
    r = store.put_message(Message("D", b"delayed-%06d" % i, queue_id=i % 2, delay_level=1 + i % 2))
    if r.ok:
        print("A", i, flush=True)
    time.sleep(0.002)
print("DONE", flush=True)
time.sleep(60)
"""


@pytest.mark.slow
@pytest.mark.parametrize("round_", range(3))
def test_sigkill_during_delayed_delivery_loses_and_repeats_nothing(round_: int, tmp_path: Path) -> None:
    """A live writer puts delayed messages (1 s and 2 s) while its scheduler delivers the earlier
    ones; it is SIGKILLed at a different moment each round. After reopening (and letting the
    rest fall due), every acknowledged delayed message is in its real queue exactly once."""
    root = tmp_path / "s"
    proc = spawn_python(_WRITER, str(root), "1500")
    assert proc.stdout is not None
    acked: set[int] = set()
    kill_after = 1.2 + 0.7 * round_  # deliveries are under way from 1 s on
    start = time.monotonic()
    for line in proc.stdout:
        if line.startswith("A "):
            acked.add(int(line.split()[1]))
        if time.monotonic() - start > kill_after:
            break
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    acked.update(int(line.split()[1]) for line in proc.stdout.read().splitlines() if line.startswith("A "))
    assert (root / "abort").exists()
    cfg = CFG.replace(message_delay_level="1s 2s", schedule_tick=5)
    with MessageStore.open(root, cfg) as store:
        assert wait_until(lambda: all(lo >= hi for lo, hi in store.delay_progress().values()), timeout=15), (
            store.delay_progress()
        )
        bodies = [m.body for q in (0, 1) for m in delivered(store, "D", q)]
    numbers = [int(b.split(b"-")[1]) for b in bodies]
    assert len(numbers) == len(set(numbers)), "a delayed message was delivered twice"
    assert acked <= set(numbers), f"lost: {sorted(acked - set(numbers))[:10]}"


def test_a_readonly_store_reports_the_saved_progress(tmp_path: Path) -> None:
    clock = ManualClock(T0)
    root = tmp_path / "s"
    with MessageStore.open(root, CFG, clock=clock) as store:
        for i in range(3):
            assert store.put_message(Message("T", b"d%d" % i, queue_id=0, delay_level=1)).ok
        assert store.put_message(Message("T", b"later", queue_id=0, delay_level=2)).ok
        clock.advance(1_000)
        # the level's progress moves after its deliveries are stored: wait for it, not for them
        assert wait_until(lambda: store.delay_progress() == {1: (3, 3), 2: (0, 1)}), store.delay_progress()
        assert store.max_offset_in_queue("T", 0) == 3
        progress = store.delay_progress()
    with MessageStore.open(root, CFG, clock=clock, readonly=True) as ro:
        assert ro.delay_progress() == progress
        assert ro.runtime_info()["delayedPending"] == {2: 1}


def test_delivery_keeps_reconsume_times_and_the_compression_bits(tmp_path: Path) -> None:
    """A consumer's retry travels through a delay level: its RECONSUMETIMES and its body's
    compression type (sysFlag bits 8-10) must survive, as RocketMQ's messageTimeup keeps them."""
    clock = ManualClock(T0)
    with MessageStore.open(tmp_path / "s", CFG, clock=clock) as store:
        r = store.put_message(
            Message("%RETRY%g", b"x", queue_id=0, delay_level=1, reconsume_times=3, sys_flag=0x301)
        )
        assert r.ok
        clock.advance(1_000)
        assert wait_until(lambda: store.max_offset_in_queue("%RETRY%g", 0) == 1)
        [msg] = delivered(store, "%RETRY%g", 0)
        assert (msg.reconsume_times, msg.sys_flag) == (3, 0x301)
