"""Pop consumption (rocketstore.broker.pop): receive, ack, redelivery, DLQ, FIFO, durability."""

from __future__ import annotations

import dataclasses
import logging
import multiprocessing as mp
import os
import signal
import threading
from collections.abc import Iterator
from multiprocessing.connection import Connection
from pathlib import Path

import pytest

from rocketstore import FlushDiskType, ManualClock, Message, MessageStore, StoreConfig
from rocketstore.broker import pop_log
from rocketstore.broker.pop import (
    POP_LOG_GROUP,
    POP_LOG_TOPIC,
    PoppedMessage,
    PopService,
    binding,
    dlq_topic,
    retry_topic,
)
from rocketstore.broker.pop_table import InFlightTable
from rocketstore.broker.receipt import ReceiptHandle
from rocketstore.errors import (
    CorruptDataError,
    InvalidReceiptHandleError,
    StoreConfigError,
    StoreLockedError,
    StoreWriteError,
)

INVISIBLE = 30_000
# small files: a default store preallocates over 2 GiB
CONFIG = StoreConfig(
    commitlog_segment_size=1 << 20, consume_queue_entries=1024, index_hash_slots=64, index_max_entries=4096
)


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def store(tmp_path: Path, clock: ManualClock) -> Iterator[MessageStore]:
    with MessageStore.open(tmp_path / "store", CONFIG, clock=clock) as s:
        s.create_topic("T", 4)
        yield s


@pytest.fixture
def pop(store: MessageStore, clock: ManualClock) -> Iterator[PopService]:
    service = PopService(store, clock=clock)
    yield service
    service.stop()


def log_records(store: MessageStore) -> list[pop_log.PopLogRecord]:
    return pop_log.read(store.layout.pop_log)


def put(store: MessageStore, bodies: list[str], topic: str = "T", **fields: object) -> None:
    store.put_messages([Message(topic, b.encode(), **fields) for b in bodies])  # type: ignore[arg-type]
    store.wait_dispatched()


def bodies(popped: list[PoppedMessage]) -> list[str]:
    return sorted(p.message.body.decode() for p in popped)


def test_a_new_group_starts_at_the_queue_ends_and_gets_what_is_sent_after_its_first_receive(
    store: MessageStore, pop: PopService
) -> None:
    put(store, ["old"])
    assert pop.receive("g", "T", "*", 32, INVISIBLE) == []
    put(store, [f"m{i}" for i in range(8)])
    got = pop.receive("g", "T", "*", 32, INVISIBLE)
    assert bodies(got) == [f"m{i}" for i in range(8)]
    assert {p.queue_id for p in got} == {0, 1, 2, 3}  # every queue of the topic
    assert all(p.topic == "T" and p.delivery_attempt == 1 and p.dead_letter_queue is None for p in got)
    assert pop.receive("g", "T", "*", 32, INVISIBLE) == []  # invisible now


def test_a_group_that_asked_before_the_topic_existed_gets_its_first_messages(
    store: MessageStore, pop: PopService
) -> None:
    assert pop.receive("g", "T", "*", 32, INVISIBLE) == []  # no topic T yet
    put(store, [f"m{i}" for i in range(8)])
    assert bodies(pop.receive("g", "T", "*", 32, INVISIBLE)) == [f"m{i}" for i in range(8)]
    assert pop.receive("late", "T", "*", 32, INVISIBLE) == []  # a group new to existing queues: at their ends


def test_new_group_start_min_reads_what_is_stored(store: MessageStore, clock: ManualClock) -> None:
    put(store, ["a", "b"])
    pop = PopService(store, clock=clock, new_group_start="min")
    assert bodies(pop.receive("g", "T", "*", 32, INVISIBLE)) == ["a", "b"]


def test_ack_commits_the_group_offsets_and_a_second_ack_is_harmless(
    store: MessageStore, pop: PopService
) -> None:
    pop.receive("g", "T", "*", 32, INVISIBLE)
    put(store, [f"m{i}" for i in range(8)])
    got = pop.receive("g", "T", "*", 32, INVISIBLE)
    first, rest = got[0], got[1:]
    pop.ack("g", "T", first.receipt_handle)
    pop.ack("g", "T", first.receipt_handle)
    assert pop.in_flight == 7
    for p in rest:
        pop.ack("g", "T", p.receipt_handle)
    assert store.consumer_offsets()[("T", "g")] == {q: 2 for q in range(4)}
    assert pop.in_flight == 0


def test_each_receive_and_ack_is_one_pop_log_record(store: MessageStore, pop: PopService) -> None:
    pop.receive("g", "T", "*", 32, INVISIBLE)  # where the group starts: one record
    assert [r.kind for r in log_records(store)] == [pop_log.LogKind.POSITION]
    put(store, [f"m{i}" for i in range(8)])
    got = pop.receive("g", "T", "*", 32, INVISIBLE)
    assert len(log_records(store)) == 2
    pop.ack("g", "T", got[0].receipt_handle)
    records = log_records(store)
    assert [r.kind for r in records[1:]] == [pop_log.LogKind.IN_FLIGHT, pop_log.LogKind.RESOLVED]
    assert len(records[1].in_flight) == 8 and len(records[2].resolved) == 1
    assert pop.receive("g", "T", "*", 32, INVISIBLE) == []  # nothing to hand out: nothing written
    assert len(log_records(store)) == 3
    assert POP_LOG_TOPIC not in store.topic_configs()  # the pop state is not in the store's topics


def test_tag_filter_skips_messages_and_they_still_advance_the_group(
    store: MessageStore, pop: PopService
) -> None:
    pop.receive("g", "T", "*", 32, INVISIBLE)
    put(store, [f"a{i}" for i in range(4)], tags="A", queue_id=0)
    put(store, [f"b{i}" for i in range(4)], tags="B", queue_id=0)
    put(store, [f"c{i}" for i in range(4)], tags="C", queue_id=0)
    got = pop.receive("g", "T", "A || C", 32, INVISIBLE)
    assert bodies(got) == [f"a{i}" for i in range(4)] + [f"c{i}" for i in range(4)]
    for p in got:
        pop.ack("g", "T", p.receipt_handle)
    assert store.query_offset("g", "T", 0) == 12
    assert pop.receive("g", "T", "B", 32, INVISIBLE) == []  # skipped for good


def test_an_expired_message_comes_back_through_the_retry_topic_with_the_next_attempt(
    store: MessageStore, pop: PopService, clock: ManualClock
) -> None:
    pop.receive("g", "T", "*", 32, INVISIBLE)
    put(store, ["x"], tags="A", keys=["k1"], properties={"p": "v"})
    (first,) = pop.receive("g", "T", "*", 32, INVISIBLE)
    clock.advance(INVISIBLE - 1)
    assert pop.revive_expired() == 0
    clock.advance(1)
    assert pop.revive_expired() == 1
    store.wait_dispatched()
    (again,) = pop.receive("g", "T", "*", 32, INVISIBLE)
    msg = again.message
    assert (again.topic, msg.topic, again.delivery_attempt, msg.reconsume_times) == ("T", "%RETRY%g_T", 2, 1)
    assert msg.body == b"x" and msg.tags == "A" and msg.keys == ["k1"]
    assert msg.uniq_key == first.message.uniq_key  # the same message id for the client
    props = msg.properties
    assert props["p"] == "v" and props["RETRY_TOPIC"] == "T"
    assert props["ORIGIN_MESSAGE_ID"] == first.message.uniq_key
    assert props["1ST_POP_TIME"] == str(clock.now_ms() - INVISIBLE)
    pop.ack("g", "T", first.receipt_handle)  # the stale handle of the original: a no-op
    assert pop.in_flight == 1
    pop.ack("g", "T", again.receipt_handle)
    assert pop.in_flight == 0
    pop.commit_progress()
    assert store.query_offset("g", retry_topic("g", "T"), 0) == 1
    assert store.query_offset("g", "T", first.queue_id) == 1


def test_a_message_delivered_max_attempts_times_goes_to_the_dlq(
    store: MessageStore, pop: PopService, clock: ManualClock
) -> None:
    pop.receive("g", "T", "*", 32, INVISIBLE)
    put(store, ["x"], tags="A")
    attempts = []
    for _ in range(3):
        (p,) = pop.receive("g", "T", "*", 32, INVISIBLE, max_attempts=3)
        attempts.append(p.delivery_attempt)
        clock.advance(INVISIBLE)
        assert pop.revive_expired() == 1
        store.wait_dispatched()
    assert attempts == [1, 2, 3]
    assert pop.receive("g", "T", "*", 32, INVISIBLE, max_attempts=3) == []
    (dead,) = store.get_message("x", dlq_topic("g"), 0, 0).messages
    assert dead.body == b"x" and dead.reconsume_times == 3
    assert dead.properties["DLQ_ORIGIN_TOPIC"] == "T"
    assert dead.properties["DLQ_ORIGIN_MESSAGE_ID"] == dead.uniq_key
    # a group reading the DLQ topic learns where the message came from
    pop.stop()
    reader = PopService(store, clock=clock, new_group_start="min")
    (from_dlq,) = reader.receive("ops", dlq_topic("g"), "*", 32, INVISIBLE)
    assert from_dlq.dead_letter_queue == "T"
    reader.stop()


def test_forward_to_dlq(store: MessageStore, pop: PopService) -> None:
    pop.receive("g", "T", "*", 32, INVISIBLE)
    put(store, ["x"])
    (p,) = pop.receive("g", "T", "*", 32, INVISIBLE)
    pop.forward_to_dlq("g", "T", p.receipt_handle)
    store.wait_dispatched()
    assert pop.in_flight == 0
    (dead,) = store.get_message("x", dlq_topic("g"), 0, 0).messages
    assert dead.body == b"x"
    pop.forward_to_dlq("g", "T", p.receipt_handle)  # not in flight any more: nothing happens
    store.wait_dispatched()
    assert store.max_offset_in_queue(dlq_topic("g"), 0) == 1


def fifo_put(store: MessageStore, bodies_: list[str], group: str = "G1") -> None:
    put(store, bodies_, queue_id=0, properties={"__SHARDINGKEY": group})


def test_messages_of_a_message_group_are_handed_out_in_order_one_batch_at_a_time(
    store: MessageStore, pop: PopService, clock: ManualClock
) -> None:
    pop.receive("g", "T", "*", 32, INVISIBLE)
    fifo_put(store, [f"m{i}" for i in range(5)])
    got = pop.receive("g", "T", "*", 2, INVISIBLE)
    assert [p.message.body for p in got] == [b"m0", b"m1"]
    put(store, ["other"], queue_id=1)
    # queue 0 is locked; queue 1 is not
    (other,) = pop.receive("g", "T", "*", 32, INVISIBLE)
    assert other.message.body == b"other"
    pop.ack("g", "T", other.receipt_handle)
    pop.ack("g", "T", got[0].receipt_handle)
    assert pop.receive("g", "T", "*", 32, INVISIBLE) == []  # m1 is still in flight
    pop.ack("g", "T", got[1].receipt_handle)
    got = pop.receive("g", "T", "*", 2, INVISIBLE)
    assert [p.message.body for p in got] == [b"m2", b"m3"]
    # not acked: both come back in place, in order, with the next attempt, then m4 after them
    clock.advance(INVISIBLE)
    assert pop.revive_expired() == 0  # FIFO messages are never re-put into the retry topic
    again = pop.receive("g", "T", "*", 3, INVISIBLE)
    assert [(p.message.body, p.delivery_attempt) for p in again] == [(b"m2", 2), (b"m3", 2), (b"m4", 1)]
    assert {p.message.topic for p in again} == {"T"}
    assert store.max_offset_in_queue(retry_topic("g", "T"), 0) == 0


def test_fifo_message_out_of_attempts_goes_to_the_dlq_and_the_next_follows(
    store: MessageStore, pop: PopService, clock: ManualClock
) -> None:
    pop.receive("g", "T", "*", 32, INVISIBLE, fifo=True)
    fifo_put(store, ["m0", "m1"])
    for attempt in (1, 2):
        (p,) = pop.receive("g", "T", "*", 1, INVISIBLE, fifo=True, max_attempts=2)
        assert (p.message.body, p.delivery_attempt) == (b"m0", attempt)
        clock.advance(INVISIBLE)
    (p,) = pop.receive("g", "T", "*", 1, INVISIBLE, fifo=True, max_attempts=2)
    assert (p.message.body, p.delivery_attempt) == (b"m1", 1)
    store.wait_dispatched()
    (dead,) = store.get_message("x", dlq_topic("g"), 0, 0).messages
    assert dead.body == b"m0" and dead.reconsume_times == 2


def test_change_invisible_duration(store: MessageStore, pop: PopService, clock: ManualClock) -> None:
    pop.receive("g", "T", "*", 32, INVISIBLE)
    put(store, ["x"])
    (p,) = pop.receive("g", "T", "*", 32, INVISIBLE)
    clock.advance(INVISIBLE - 1000)
    handle = pop.change_invisible_duration("g", "T", p.receipt_handle, 60_000)
    new = ReceiptHandle.decode(handle)
    assert (new.retrieve_time, new.invisible_time, new.offset) == (clock.now_ms(), 60_000, p.queue_offset)
    clock.advance(59_999)
    assert pop.revive_expired() == 0
    clock.advance(1)
    assert pop.revive_expired() == 1
    with pytest.raises(InvalidReceiptHandleError, match="not in flight"):
        pop.change_invisible_duration("g", "T", handle, 60_000)


def test_the_handle_before_a_change_still_acks(
    store: MessageStore, pop: PopService, clock: ManualClock
) -> None:
    pop.receive("g", "T", "*", 32, INVISIBLE)
    put(store, ["x"])
    (p,) = pop.receive("g", "T", "*", 32, INVISIBLE)
    pop.change_invisible_duration("g", "T", p.receipt_handle, 60_000)
    pop.ack("g", "T", p.receipt_handle)
    clock.advance(120_000)
    assert pop.revive_expired() == 0 and pop.in_flight == 0


BOUND = binding("g", "T")


@pytest.mark.parametrize(
    ("handle", "reason"),
    [
        ("", "want 9 fields"),
        ("0 1 2 0 0 rocketstore 0 5", "want 9 fields"),
        ("0 1 2 0 0 rocketstore 0 x 7", "offset 'x' is not a non-negative integer"),
        ("0 1 2 0 0 rocketstore -1 5 7", "queueId '-1'"),
        ("0 1 2 0 3 rocketstore 0 5 7", "topicType 3"),
        ("0  1 2 0 0 rocketstore 0 5 7", "want 9 fields"),
        ("6 1 2 0 0 rocketstore 0 5 7", "startOffset 6 is past the offset 5"),
        (
            "0 1 2 0 0 rocketstore 0 5 99999999999999999999",
            "commitLogOffset 99999999999999999999 is out of range",
        ),
        ("0 1 2 0 0 rock#et 0 5 7", "brokerName 'rock#et' is not a broker name"),
        ("0 1 2 0 0 other 0 0 0", "broker 'other'"),
        ("0 1 2 0 0 rocketstore 0 0 0", "not handed to group 'g' for topic 'T'"),
        (f"0 1 2 {BOUND} 0 rocketstore 9 0 0", "no queue 9"),
        (f"0 1 2 {BOUND} 1 rocketstore 1 0 0", "only queue 0"),
        (f"0 1 2 {BOUND} 0 rocketstore 0 0 0", "never handed offset 0"),
    ],
)
def test_bad_receipt_handles_are_refused_naming_what_is_wrong(
    pop: PopService, handle: str, reason: str
) -> None:
    with pytest.raises(InvalidReceiptHandleError, match=reason):
        pop.ack("g", "T", handle)


def test_a_handle_serves_only_the_group_and_topic_it_was_handed_to(
    store: MessageStore, pop: PopService
) -> None:
    for group in ("a", "b"):
        pop.receive(group, "T", "*", 32, INVISIBLE)
    put(store, ["x"], queue_id=0)
    (of_a,) = pop.receive("a", "T", "*", 32, INVISIBLE)
    (of_b,) = pop.receive("b", "T", "*", 32, INVISIBLE)
    pop.ack("b", "T", of_b.receipt_handle)  # b is past the message, and has none in flight
    for act in (
        lambda: pop.ack("b", "T", of_a.receipt_handle),
        lambda: pop.forward_to_dlq("b", "T", of_a.receipt_handle),
        lambda: pop.change_invisible_duration("b", "T", of_a.receipt_handle, INVISIBLE),
        lambda: pop.ack("a", "Other", of_a.receipt_handle),
    ):
        with pytest.raises(InvalidReceiptHandleError, match="not handed to group"):
            act()
    assert pop.ack_batch("b", "T", [of_a.receipt_handle])[0] is not None
    assert pop.in_flight == 1  # a's message is still a's
    pop.ack("a", "T", of_a.receipt_handle)
    assert pop.in_flight == 0


def test_a_handle_of_another_message_is_refused(store: MessageStore, pop: PopService) -> None:
    pop.receive("g", "T", "*", 32, INVISIBLE)
    put(store, ["x"], queue_id=0)
    (p,) = pop.receive("g", "T", "*", 32, INVISIBLE)
    h = ReceiptHandle.decode(p.receipt_handle)
    wrong = ReceiptHandle(
        0, 0, 0, h.revive_queue_id, 0, "rocketstore", h.queue_id, h.offset, h.commitlog_offset + 1
    )
    with pytest.raises(InvalidReceiptHandleError, match="is not the message at offset 0"):
        pop.ack("g", "T", wrong.encode())


def test_bad_arguments(pop: PopService) -> None:
    with pytest.raises(StoreConfigError, match="batch_size"):
        pop.receive("g", "T", "*", 0, INVISIBLE)
    with pytest.raises(StoreConfigError, match="consumer group"):
        pop.receive("g g", "T", "*", 1, INVISIBLE)
    with pytest.raises(StoreConfigError, match="longer than 127"):
        pop.receive("g" * 120, "T", "*", 1, INVISIBLE)
    assert pop.receive("g", "Unknown", "*", 1, INVISIBLE) == []


def test_in_flight_messages_are_bounded(store: MessageStore, clock: ManualClock) -> None:
    pop = PopService(store, clock=clock, max_in_flight=3)
    pop.receive("g", "T", "*", 32, INVISIBLE)
    put(store, [f"m{i}" for i in range(5)], queue_id=0)
    got = pop.receive("g", "T", "*", 32, INVISIBLE)
    assert len(got) == 3 and pop.receive("g", "T", "*", 32, INVISIBLE) == []
    pop.ack("g", "T", got[0].receipt_handle)
    assert len(pop.receive("g", "T", "*", 32, INVISIBLE)) == 1


def test_a_restart_keeps_acks_and_brings_back_what_was_in_flight(tmp_path: Path, clock: ManualClock) -> None:
    path = tmp_path / "store"
    with MessageStore.open(path, CONFIG, clock=clock) as store:
        store.create_topic("T", 4)
        pop = PopService(store, clock=clock)
        pop.receive("g", "T", "*", 32, INVISIBLE)
        put(store, [f"m{i}" for i in range(8)])
        got = pop.receive("g", "T", "*", 32, INVISIBLE)
        acked = {p.message.body.decode() for p in got[::2]}
        for p in got[::2]:
            pop.ack("g", "T", p.receipt_handle)
        kept = {p.receipt_handle for p in got[1::2]}
        pop.stop()
    with MessageStore.open(path, CONFIG, clock=clock) as store:
        pop = PopService(store, clock=clock)
        assert pop.in_flight == 4
        assert pop.receive("g", "T", "*", 32, INVISIBLE) == []
        one = next(iter(kept))
        pop.ack("g", "T", one)  # a handle from before the restart acks
        clock.advance(INVISIBLE)
        assert pop.revive_expired() == 3
        store.wait_dispatched()
        again = pop.receive("g", "T", "*", 32, INVISIBLE)
        names = {p.message.body.decode() for p in again}
        assert len(names) == 3 and not names & acked
        assert {p.delivery_attempt for p in again} == {2}


# --- a crash: the process holding the PopService is killed ----------------------------------------
def _pop_child(root: str, compact: bool, conn: Connection) -> None:
    # the offset table is not written before the kill: the pop log alone must tell where groups are
    config = dataclasses.replace(CONFIG, flush_consumer_offset_interval=3_600_000)
    store = MessageStore.open(root, config, disk_usage=lambda _path: 0.5)  # however full the test machine is
    store.create_topic("K", 2)
    # its loop started but never due: a round of its own (every 500 ms by default) could compact
    # between the acks and the maintain() below, which then finds nothing due
    pop = PopService(store, compact_bytes=1 if compact else 16 << 20, revive_interval_ms=3_600_000)
    pop.start()
    pop.receive("g", "K", "*", 32, 10_000)
    pop.receive("idle", "K", "*", 32, 10_000)  # starts at the end now, receives nothing more
    store.put_messages([Message("K", f"m{i}".encode()) for i in range(20)])
    store.wait_dispatched()
    got = pop.receive("g", "K", "*", 32, 10_000)
    acked = [p.message.body.decode() for p in got[:12]]
    for p in got[:12]:
        pop.ack("g", "K", p.receipt_handle)
    if compact:  # the acks are gone from the log: the cursors must keep them from coming back
        pop.maintain()
        assert [r.kind for r in pop_log.read(store.layout.pop_log)][-1] is pop_log.LogKind.IN_FLIGHT
    store.put_messages([Message("K", f"late{i}".encode()) for i in range(4)])  # not received
    store.wait_dispatched()
    conn.send((acked, [p.message.body.decode() for p in got[12:]]))
    conn.recv()  # never comes: the parent kills us


@pytest.mark.parametrize("compact", [False, True], ids=["log", "compacted log"])
def test_sigkill_of_the_process_keeps_acks_and_brings_back_what_was_in_flight(
    tmp_path: Path, compact: bool
) -> None:
    root = tmp_path / "store"
    ctx = mp.get_context("spawn")
    conn, child_end = ctx.Pipe()
    child = ctx.Process(target=_pop_child, args=(str(root), compact, child_end), daemon=True)
    child.start()
    assert conn.poll(120), "the child did not report"
    acked, in_flight = conn.recv()
    assert child.pid is not None
    os.kill(child.pid, signal.SIGKILL)
    child.join(30)
    assert len(acked) == 12 and len(in_flight) == 8
    clock = ManualClock(_now_ms() + 60_000)
    with MessageStore.open(root, CONFIG, clock=clock) as store:
        pop = PopService(store, clock=clock)
        assert pop.in_flight == 8
        assert pop.revive_expired() == 8
        store.wait_dispatched()
        again = pop.receive("g", "K", "*", 32, 10_000)
        late = [f"late{i}" for i in range(4)]
        assert sorted(p.message.body.decode() for p in again) == sorted(in_flight + late)
        assert {p.delivery_attempt for p in again} == {1, 2}
        for p in again:
            pop.ack("g", "K", p.receipt_handle)
        assert pop.receive("g", "K", "*", 32, 10_000) == []
        idle = pop.receive("idle", "K", "*", 32, 10_000)
        assert sorted(p.message.body.decode() for p in idle) == sorted([f"m{i}" for i in range(20)] + late)


def _now_ms() -> int:
    import time

    return time.time_ns() // 1_000_000


# --- the pop log's records --------------------------------------------------------------------------
def test_pop_log_records_round_trip() -> None:
    body = pop_log.encode(
        pop_log.LogKind.IN_FLIGHT, "g", "T", [(1, 1, 0, 5, 700, 10, 20, 3)], max_attempts=17
    )
    record = pop_log.decode(body)
    assert (record.kind, record.group, record.topic, record.max_attempts) == (
        pop_log.LogKind.IN_FLIGHT,
        "g",
        "T",
        17,
    )
    assert record.in_flight == (pop_log.InFlightEntry(1, 1, 0, 5, 700, 10, 20, 3),)
    position = pop_log.decode(pop_log.encode(pop_log.LogKind.POSITION, "g", "T", [(0, 3, 40)]))
    assert (position.kind, position.resolved) == (
        pop_log.LogKind.POSITION,
        (pop_log.ResolvedEntry(0, 3, 40),),
    )
    resolved = pop_log.decode(pop_log.encode(pop_log.LogKind.RESOLVED, "g", "T", [(0, 2, 9)]))
    assert resolved.resolved == (pop_log.ResolvedEntry(0, 2, 9),)


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b"\x01", "shorter than its header"),
        (b"\x02\x01\x00\x00\x00", "version 2"),
        (b"\x01\x07\x00\x00\x00", "kind 7"),
        (b"\x01\x01\x00\x00\x00\x00\x09g", "group of 9 bytes runs past"),
        (b"\x01\x02\x00\x00\x00\x00\x01g\x00\x01T\x00\x00\x00\x02" + bytes(13), "want 2 x 13"),
    ],
)
def test_a_corrupt_pop_log_record_is_reported(body: bytes, reason: str) -> None:
    with pytest.raises(CorruptDataError, match=reason):
        pop_log.decode(body)


def test_a_corrupt_record_in_the_pop_log_is_skipped_and_a_torn_tail_cut_at_replay(
    tmp_path: Path, clock: ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "store"
    with MessageStore.open(path, CONFIG, clock=clock) as store:
        store.create_topic("T", 1)
        pop = PopService(store, clock=clock)
        pop.receive("g", "T", "*", 32, INVISIBLE)
        put(store, ["x", "y"])
        (x,) = pop.receive("g", "T", "*", 1, INVISIBLE)
        pop.stop()
        log_path = store.layout.pop_log
        whole = log_path.stat().st_size
        ack = pop_log.frame(pop_log.encode(pop_log.LogKind.RESOLVED, "g", "T", [(0, 0, x.queue_offset)]))
        junk = pop_log.frame(b"\x09junk")  # a whole frame, not a record
        with open(log_path, "ab") as f:
            f.write(junk + ack[:-3])  # the ack's write was cut short by a crash
    with MessageStore.open(path, CONFIG, clock=clock) as store:
        pop = PopService(store, clock=clock)
        assert pop.in_flight == 1  # the torn ack is not an ack
        assert log_path.stat().st_size == whole + len(junk)
        assert f"cut {len(ack) - 3} bytes" in caplog.text and "a record is skipped" in caplog.text
        (y,) = pop.receive("g", "T", "*", 32, INVISIBLE)
        assert y.message.body == b"y"
        pop.stop()


def test_ack_batch_acks_many_with_one_record_and_names_bad_handles(
    store: MessageStore, pop: PopService
) -> None:
    pop.receive("g", "T", "*", 32, INVISIBLE)
    put(store, [f"m{i}" for i in range(4)])
    got = pop.receive("g", "T", "*", 32, INVISIBLE)
    records = len(log_records(store))
    handles = [p.receipt_handle for p in got]
    outcomes = pop.ack_batch("g", "T", [*handles, handles[0], "junk"])
    assert outcomes[:5] == [None] * 5
    assert isinstance(outcomes[5], InvalidReceiptHandleError)
    assert len(log_records(store)) == records + 1
    assert pop.in_flight == 0


def test_ack_many_acks_the_requests_of_several_groups_with_one_put(
    store: MessageStore, pop: PopService
) -> None:
    for group in ("g", "h"):
        pop.receive(group, "T", "*", 32, INVISIBLE)
    put(store, [f"m{i}" for i in range(3)])
    g = [p.receipt_handle for p in pop.receive("g", "T", "*", 32, INVISIBLE)]
    h = [p.receipt_handle for p in pop.receive("h", "T", "*", 32, INVISIBLE)]
    records = len(log_records(store))
    outcomes = pop.ack_many(
        [("g", "T", g[:2]), ("h", "T", h), ("g", "T", [g[0], g[2]]), ("bad name", "T", g)]
    )
    assert outcomes[:3] == [[None, None], [None] * 3, [None, None]]
    assert isinstance(outcomes[3], StoreConfigError)
    assert len(log_records(store)) == records + 2  # one RESOLVED record per group
    assert pop.in_flight == 0
    assert pop.receive("g", "T", "*", 32, INVISIBLE) == []


def test_compaction_keeps_what_is_in_flight_and_never_brings_back_what_was_acked(
    tmp_path: Path, clock: ManualClock
) -> None:
    path = tmp_path / "store"
    with MessageStore.open(path, CONFIG, clock=clock) as store:
        store.create_topic("T", 1)
        pop = PopService(store, clock=clock, compact_bytes=1)
        pop.receive("g", "T", "*", 32, INVISIBLE)
        put(store, ["long"])
        (held,) = pop.receive("g", "T", "*", 1, 12 * 3600_000)
        for i in range(6):  # other traffic, acked, above the message held
            put(store, [f"m{i}"])
            (p,) = pop.receive("g", "T", "*", 1, INVISIBLE)
            pop.ack("g", "T", p.receipt_handle)
        before = store.layout.pop_log.stat().st_size
        pop.maintain()
        after = store.layout.pop_log.stat().st_size
        assert after < before
        records = log_records(store)
        assert [r.kind for r in records] == [pop_log.LogKind.POSITION, pop_log.LogKind.IN_FLIGHT]
        # the cursors, past the acked (the retry topic has its own)
        assert records[0].resolved == (pop_log.ResolvedEntry(0, 0, 7), pop_log.ResolvedEntry(1, 0, 0))
        assert [e.offset for e in records[1].in_flight] == [held.queue_offset]
        assert oct(store.layout.pop_log.stat().st_mode & 0o777) == oct(CONFIG.file_mode)
        put(store, ["after"])
        (after_msg,) = pop.receive("g", "T", "*", 32, INVISIBLE)  # appends go on in the new file
        pop.ack("g", "T", after_msg.receipt_handle)
        pop.maintain()  # not doubled since: not compacted again
        assert len(log_records(store)) == 4
        pop.stop()
    # the offset table says nothing of the group (as after a crash before it was written)
    (path / "config" / "consumerOffset.json").unlink()
    with MessageStore.open(path, CONFIG, clock=clock) as store:
        pop = PopService(store, clock=clock)
        assert pop.in_flight == 1
        assert pop.receive("g", "T", "*", 32, INVISIBLE) == []  # nothing acked comes back
        clock.advance(12 * 3600_000)
        assert pop.revive_expired() == 1
        store.wait_dispatched()
        assert [p.message.body for p in pop.receive("g", "T", "*", 32, INVISIBLE)] == [b"long"]
        pop.stop()


def test_a_pop_log_topic_of_an_earlier_version_is_migrated_at_open(
    tmp_path: Path, clock: ManualClock
) -> None:
    path = tmp_path / "store"
    with MessageStore.open(path, CONFIG, clock=clock) as store:
        store.create_topic("T", 1)
        put(store, [f"m{i}" for i in range(4)], queue_id=0)
        msgs = store.get_message("x", "T", 0, 0, 4).messages
        fields = [(0, 0, 0, m.queue_offset, m.physical_offset, 1, 2, 1) for m in msgs]
        # what rocketstore wrote before: records as messages of the pop log topic, from its R on
        old = [
            pop_log.encode(pop_log.LogKind.POSITION, "g", "T", [(0, 0, 0)]),
            pop_log.encode(pop_log.LogKind.IN_FLIGHT, "g", "T", fields, max_attempts=5),
            pop_log.encode(pop_log.LogKind.RESOLVED, "g", "T", [(0, 0, 1), (0, 0, 3)]),
        ]
        store.put_messages([Message(POP_LOG_TOPIC, b"before R", queue_id=0)], internal=True)
        store.put_messages([Message(POP_LOG_TOPIC, body, queue_id=0) for body in old], internal=True)
        store.commit_offset(POP_LOG_GROUP, POP_LOG_TOPIC, 0, 1)
        store.wait_dispatched()
    for _ in range(2):  # the second open reads the new log only
        with MessageStore.open(path, CONFIG, clock=clock) as store:
            pop = PopService(store, clock=clock)
            assert pop.in_flight == 2
            assert [r.kind for r in log_records(store)][:3] == [r[1] for r in old]
            assert store.query_offset(POP_LOG_GROUP, POP_LOG_TOPIC, 0) == 4
            pop.stop()
    with MessageStore.open(path, CONFIG, clock=clock) as store:
        pop = PopService(store, clock=clock)
        clock.advance(10)
        assert pop.revive_expired() == 2
        store.wait_dispatched()
        got = pop.receive("g", "T", "*", 32, INVISIBLE)
        assert sorted(p.message.body for p in got) == [b"m0", b"m2"]  # m1 and m3 were acked
        pop.stop()


def test_a_second_pop_service_on_one_store_is_refused(store: MessageStore, pop: PopService) -> None:
    with pytest.raises(StoreLockedError, match="pop log is open"):
        PopService(store)


@pytest.mark.parametrize("flush", [FlushDiskType.ASYNC_FLUSH, FlushDiskType.SYNC_FLUSH])
def test_concurrent_receivers_and_ackers_get_every_message_once_while_the_log_is_compacted(
    tmp_path: Path, flush: FlushDiskType, caplog: pytest.LogCaptureFixture
) -> None:
    """Receivers and ackers on four threads while two compact the log (this test's and the
    service's own loop): every message is delivered once, every ack kept, no compaction fails."""
    caplog.set_level(logging.INFO, logger="rocketstore.broker.pop_log")
    clock = ManualClock()  # never moves: nothing expires, so nothing may be delivered twice
    with MessageStore.open(
        tmp_path / "store", dataclasses.replace(CONFIG, flush_disk_type=flush), clock=clock
    ) as store:
        store.create_topic("T", 4)
        pop = PopService(store, clock=clock, compact_bytes=1)
        pop.start()
        pop.receive("g", "T", "*", 1, INVISIBLE)
        put(store, [f"m{i}" for i in range(400)])
        seen: list[str] = []
        lock = threading.Lock()
        done = threading.Event()
        halfway = threading.Event()
        maintained = threading.Event()

        def consume() -> None:
            while True:
                got = pop.receive("g", "T", "*", 8, INVISIBLE)
                if not got:
                    return
                for p in got:
                    pop.ack("g", "T", p.receipt_handle)
                with lock:
                    seen.extend(p.message.body.decode() for p in got)
                    if len(seen) >= 200:
                        halfway.set()
                if halfway.is_set():
                    # the second half once the compactor had a turn since: on a busy machine the
                    # consumers could otherwise all finish before its first (the log has doubled
                    # by now, so that turn compacts it unless a compaction came before)
                    maintained.wait(30)

        def compact() -> None:
            while not done.is_set():
                after_halfway = halfway.is_set()
                pop.maintain()
                if after_halfway:
                    maintained.set()

        threads = [threading.Thread(target=consume) for _ in range(4)]
        compactor = threading.Thread(target=compact)
        compactor.start()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        done.set()
        compactor.join()
        pop.stop()
        assert sorted(seen) == sorted(f"m{i}" for i in range(400))
        assert pop.in_flight == 0
        assert store.consumer_offsets()[("T", "g")] == {q: 100 for q in range(4)}
        assert "compacted:" in caplog.text  # by this test's compactor or the service's own loop
        assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []
        again = PopService(store, clock=clock)  # the compacted log replays to the same state
        assert again.in_flight == 0
        assert again.receive("g", "T", "*", 32, INVISIBLE) == []
        again.stop()


def test_a_fifo_receive_orders_messages_without_a_message_group_too(
    store: MessageStore, pop: PopService
) -> None:
    pop.receive("g", "T", "*", 32, INVISIBLE, fifo=True)
    put(store, ["a", "b"], queue_id=2)
    (first,) = pop.receive("g", "T", "*", 1, INVISIBLE, fifo=True)
    assert pop.receive("g", "T", "*", 1, INVISIBLE, fifo=True) == []
    assert first.message.body == b"a"
    pop.ack("g", "T", first.receipt_handle)
    assert [p.message.body for p in pop.receive("g", "T", "*", 1, INVISIBLE, fifo=True)] == [b"b"]


def test_messages_without_a_message_group_are_not_held_back(store: MessageStore, pop: PopService) -> None:
    pop.receive("g", "T", "*", 32, INVISIBLE)
    put(store, ["a", "b"], queue_id=2)
    assert [p.message.body for p in pop.receive("g", "T", "*", 1, INVISIBLE)] == [b"a"]
    assert [p.message.body for p in pop.receive("g", "T", "*", 1, INVISIBLE)] == [b"b"]


def test_a_message_too_large_to_store_again_does_not_hold_up_the_other_redeliveries(
    tmp_path: Path, clock: ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    with MessageStore.open(
        tmp_path / "store", dataclasses.replace(CONFIG, max_message_size=400), clock=clock
    ) as store:
        store.create_topic("T", 1)
        pop = PopService(store, clock=clock)
        pop.receive("g", "T", "*", 32, INVISIBLE)
        put(store, ["small"])
        big = store.put_messages([Message("T", b"x" * 250)])[0]  # fits; with the retry properties it won't
        store.wait_dispatched()
        assert big.ok
        got = pop.receive("g", "T", "*", 32, INVISIBLE)
        assert len(got) == 2
        clock.advance(INVISIBLE)
        assert pop.revive_expired() == 2
        store.wait_dispatched()
        assert [p.message.body for p in pop.receive("g", "T", "*", 32, INVISIBLE)] == [b"small"]
        assert pop.in_flight == 1
        assert "cannot be stored again" in caplog.text


def test_replay_orders_records_written_out_of_offset_order(store: MessageStore) -> None:
    put(store, [f"m{i}" for i in range(8)], queue_id=0)
    table = InFlightTable(store, "min")
    later = pop_log.encode(pop_log.LogKind.IN_FLIGHT, "g", "T", [(0, 0, 0, 5, 500, 1, 2, 1)], max_attempts=3)
    earlier = pop_log.encode(
        pop_log.LogKind.IN_FLIGHT, "g", "T", [(0, 0, 0, 3, 300, 1, 2, 1)], max_attempts=3
    )
    table.apply(pop_log.decode(later))  # two concurrent receives: the later one's record first
    table.apply(pop_log.decode(earlier))
    table.finish_replay()
    queue = table.queues[("g", "T", 0, 0)]
    assert (list(queue.in_flight), queue.cursor, queue.commit_point(), table.count) == ([3, 5], 6, 3, 2)
    assert [e.offset for e in table.due(now=2, limit=10)] == [3, 5]


def test_a_restart_keeps_a_fifo_queue_locked_and_redelivers_in_place(
    tmp_path: Path, clock: ManualClock
) -> None:
    path = tmp_path / "store"
    with MessageStore.open(path, CONFIG, clock=clock) as store:
        store.create_topic("T", 1)
        pop = PopService(store, clock=clock)
        pop.receive("g", "T", "*", 32, INVISIBLE)
        fifo_put(store, ["m0", "m1"])
        (first,) = pop.receive("g", "T", "*", 1, INVISIBLE)
        pop.stop()
    with MessageStore.open(path, CONFIG, clock=clock) as store:
        pop = PopService(store, clock=clock)
        assert pop.receive("g", "T", "*", 32, INVISIBLE) == []  # m0 is still in flight
        clock.advance(INVISIBLE)
        assert pop.revive_expired() == 0
        again = pop.receive("g", "T", "*", 1, INVISIBLE)
        assert [(p.message.body, p.delivery_attempt) for p in again] == [(b"m0", 2)]
        pop.ack("g", "T", first.receipt_handle)  # the handle from before the restart acks it
        assert [p.message.body for p in pop.receive("g", "T", "*", 1, INVISIBLE)] == [b"m1"]


def test_a_failed_pop_log_write_is_an_error_and_the_log_takes_nothing_more(
    store: MessageStore, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    pop = PopService(store, clock=clock)
    pop.receive("g", "T", "*", 32, INVISIBLE)
    put(store, ["a", "b"])

    def full(*_: object) -> int:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(pop_log.os, "pwrite", full)
    with pytest.raises(StoreWriteError, match="No space left"):
        pop.receive("g", "T", "*", 32, INVISIBLE)
    monkeypatch.undo()
    assert pop.in_flight == 2  # handed to no one, due for redelivery at once
    put(store, ["c"])
    with pytest.raises(StoreWriteError, match="restart once the cause is fixed"):
        pop.receive("g", "T", "*", 32, INVISIBLE)  # the log may hold half a frame: no more appends
    pop.stop()  # closes the log; the errors were the appends' to raise
    again = PopService(store, clock=clock)  # a restart takes appends again
    assert again.in_flight == 0  # nothing of the failed receives reached the log
    assert len(again.receive("g", "T", "*", 32, INVISIBLE)) == 3
    again.stop()


def test_a_failed_compaction_leaves_the_log_in_use(
    store: MessageStore, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    pop = PopService(store, clock=clock, compact_bytes=1)
    pop.receive("g", "T", "*", 32, INVISIBLE)
    put(store, ["a", "b"])
    got = pop.receive("g", "T", "*", 32, INVISIBLE)

    def refused(*_: object) -> None:
        raise OSError(13, "Permission denied")

    monkeypatch.setattr(pop_log, "atomic_write", refused)
    with pytest.raises(StoreWriteError, match="compaction failed"):
        pop.maintain()
    monkeypatch.undo()
    pop.ack("g", "T", got[0].receipt_handle)  # appends go on in the old log
    assert [r.kind for r in log_records(store)][-1] is pop_log.LogKind.RESOLVED
    pop.stop()
    again = PopService(store, clock=clock)
    assert again.in_flight == 1
    again.stop()
