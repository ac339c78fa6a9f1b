"""Consumers (rocketstore.consumer): positions, commits, groups, in-process and across processes."""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import multiprocessing as mp
import os
import threading
import time
from multiprocessing.synchronize import Event
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from rocketstore import (
    GetMessageResult,
    GetStatus,
    ManualClock,
    Message,
    MessageStore,
    StoreClosedError,
    StoreConfig,
    StoreConfigError,
)
from rocketstore.codec.dispatch_signal import decode_signal
from rocketstore.consumer import open_consumer
from rocketstore.consumer.group import allocate_averagely
from rocketstore.consumer.offset_store import commit_offsets, read_offsets
from tests.live_writer import LiveWriter

CFG = StoreConfig(
    commitlog_segment_size=65536, consume_queue_entries=40, index_hash_slots=64, index_max_entries=256
)


def fill(store: MessageStore, n: int, topic: str = "T", queues: int = 4) -> None:
    store.put_messages(
        [
            Message(topic=topic, body=f"m{i}".encode(), tags="A" if i % 2 else "B", queue_id=i % queues)
            for i in range(n)
        ]
    )
    assert store.wait_dispatched(10)


@pytest.fixture
def store(tmp_path: Path) -> Any:
    with MessageStore.open(tmp_path / "s", CFG) as s:
        yield s


def test_poll_reads_every_queue_in_order_and_commit_writes_rocketmq_shape(store: MessageStore) -> None:
    fill(store, 40)
    with store.consumer("g", {"T": "*"}, start="earliest") as c:
        assert c.assignment() == [("T", 0), ("T", 1), ("T", 2), ("T", 3)]
        # fair: each poll starts at the next queue (a read of a queue is up to 32 messages)
        polls = [c.poll(8) for _ in range(4)]
        assert sorted(p[0].queue_id for p in polls) == [0, 1, 2, 3]
        assert all([m.queue_offset for m in p] == list(range(8)) for p in polls)
        assert all(len({m.queue_id for m in p}) == 1 for p in polls)
        got = [m for p in polls for m in p]
        rest = c.poll(1000)
        assert {m.queue_id for m in rest} == {0, 1, 2, 3}
        by_queue: dict[int, list[int]] = {}
        for m in got + rest:
            by_queue.setdefault(m.queue_id, []).append(m.queue_offset)
        assert by_queue == {q: list(range(10)) for q in range(4)}
        assert c.poll(10) == []
        c.commit()
    path = store.layout.config / "consumerOffset.json"
    assert json.loads(path.read_text("utf-8")) == {
        "offsetTable": {"T@g": {"0": 10, "1": 10, "2": 10, "3": 10}}
    }
    assert store.consumer_offsets() == {("T", "g"): {0: 10, 1: 10, 2: 10, 3: 10}}


def test_messages_a_read_steps_over_are_named_in_a_warning(
    store: MessageStore, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A read that steps over messages no longer there (their segment reclaimed or damaged:
    MESSAGE_WAS_REMOVING) moves the consumer on, as RocketMQ's does, and says which offsets it
    lost; a tag filter's stepping over what does not match says nothing."""
    fill(store, 80)
    real = store.get_message

    def reclaimed_below_12(group: str, topic: str, queue_id: int, offset: int, *args: Any, **kw: Any) -> Any:
        if queue_id == 2 and offset < 12:
            return GetMessageResult(GetStatus.MESSAGE_WAS_REMOVING, 12, 0, 20)
        return real(group, topic, queue_id, offset, *args, **kw)

    monkeypatch.setattr(store, "get_message", reclaimed_below_12)
    with caplog.at_level("WARNING", logger="rocketstore.consumer.consumer"):
        with store.consumer("g", "T", start="earliest") as c:
            got = c.poll(1000)
        assert sorted(m.queue_offset for m in got if m.queue_id == 2) == list(range(12, 20))
        assert [r.getMessage() for r in caplog.records] == [
            "T/2: 12 messages between offsets 0 and 11 were gone (reclaimed or damaged) before group g "
            "read them"
        ]
        caplog.clear()
        monkeypatch.undo()
        with store.consumer("h", {"T": "A"}, start="earliest") as c:
            assert {m.tags for m in c.poll(1000)} == {"A"}
        assert caplog.records == []


def test_tag_expression_and_committed_offsets_come_first(store: MessageStore) -> None:
    fill(store, 40)
    with store.consumer("g", {"T": "A || C"}, start="earliest") as c:
        assert {m.tags for m in c.poll(100)} == {"A"}
    store.commit_offset("h", "T", 1, 7)
    with store.consumer("h", "T", start="earliest") as c:
        got = c.poll(100)
        assert [m.queue_offset for m in got if m.queue_id == 1] == [7, 8, 9]
        assert [m.queue_offset for m in got if m.queue_id == 0] == list(range(10))


def test_start_latest_and_at_a_time(store: MessageStore) -> None:
    fill(store, 8)
    with store.consumer("late", "T", start="latest") as c:
        assert c.poll(100) == []
        fill(store, 4)
        assert sorted(m.body for m in c.poll(100, timeout=5)) == [b"m0", b"m1", b"m2", b"m3"]
    stamp = store.get_message("x", "T", 2, 2, 1).messages[0].store_timestamp
    with store.consumer("timed", "T", start=stamp) as c:
        assert all(m.store_timestamp >= stamp for m in c.poll(100))


def test_auto_commit_happens_at_the_next_poll_after_the_interval_and_at_close(store: MessageStore) -> None:
    fill(store, 8)
    clock = ManualClock()
    c = store.consumer("g", "T", start="earliest", auto_commit_interval_ms=5000, clock=clock)
    assert len(c.poll(3)) == 3
    c.poll(0 + 1)
    assert store.consumer_offsets() == {}
    clock.advance(5000)
    handed_out = c.poll(1)  # commits what the polls before handed out, not this one
    offsets = store.consumer_offsets()[("T", "g")]
    assert sum(offsets.values()) == 4
    c.close()
    assert sum(store.consumer_offsets()[("T", "g")].values()) == 4 + len(handed_out)
    with pytest.raises(StoreClosedError):
        c.poll()


def test_iteration_commits_only_what_was_handed_out(store: MessageStore) -> None:
    fill(store, 20)
    clock = ManualClock()
    c = store.consumer("g", {"T": "*"}, start="earliest", clock=clock, auto_commit_interval_ms=1)
    it = iter(c)
    first = [next(it) for _ in range(5)]
    c.commit()
    assert sum(store.consumer_offsets()[("T", "g")].values()) == 5
    assert len({(m.queue_id, m.queue_offset) for m in first}) == 5
    c.close()
    assert sum(store.consumer_offsets()[("T", "g")].values()) == 5


def test_seek_moves_back_and_the_commit_follows(store: MessageStore) -> None:
    fill(store, 40)
    with store.consumer("g", "T", start="earliest") as c:
        c.poll(1000)
        c.commit()
        c.seek("T", 2, 3)
        again = c.poll(1000)
        assert [m.queue_offset for m in again] == list(range(3, 10))
        c.seek("T", 2, 5)
        c.commit()
        assert store.query_offset("g", "T", 2) == 5
        with pytest.raises(StoreConfigError, match="not assigned"):
            c.seek("T", 9, 0)
        stamp = store.get_message("x", "T", 0, 6, 1).messages[0].store_timestamp
        c.seek_to_time(stamp)
        assert min(m.queue_offset for m in c.poll(1000) if m.queue_id == 0) <= 6


def test_pause_and_resume(store: MessageStore) -> None:
    fill(store, 40)
    with store.consumer("g", "T", start="earliest") as c:
        c.pause("T", 1)
        assert {m.queue_id for m in c.poll(1000)} == {0, 2, 3}
        c.resume("T", 1)
        assert {m.queue_id for m in c.poll(1000)} == {1}
        c.pause()
        fill(store, 4)
        assert c.poll(100) == []
        c.resume()
        assert len(c.poll(100)) == 4


def test_poll_batch_gives_read_batch_columns(store: MessageStore) -> None:
    fill(store, 400)
    with store.consumer("g", "T", start="earliest") as c:
        batches = c.poll_batch(100_000)
        assert sum(len(b) for b in batches) == 400
        for b in batches:
            ref = store.read_batch("T", b.queue_id, int(b.queue_offsets[0]), len(b))
            assert np.array_equal(b.queue_offsets, ref.queue_offsets)
            assert b.body == ref.body
    with store.consumer("h", {"T": "A"}, start="earliest") as c:
        batches = c.poll_batch(100_000)
        bodies = sorted(bytes(b.body_at(i)) for b in batches for i in range(len(b)))
        assert bodies == sorted(f"m{i}".encode() for i in range(1, 400, 2))


def test_a_poll_hands_out_what_it_read_and_leaves_what_came_meanwhile_to_the_next(
    store: MessageStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    for topic, name in (("T", "read_batch"), ("U", "get_message")):
        fill(store, 40, topic=topic)
        arrived: list[int] = []
        real = getattr(store, name)

        def arriving(
            *args: Any, real: Any = real, topic: str = topic, arrived: list[int] = arrived, **kwargs: Any
        ) -> Any:
            got = real(*args, **kwargs)
            if len(arrived) < 4:  # a message comes to each queue just after its first read
                queue_id = args[2] if topic == "U" else args[1]
                store.put_message(Message(topic=topic, body=b"late", queue_id=queue_id))
                arrived.append(queue_id)
            return got

        monkeypatch.setattr(store, name, arriving)
        with store.consumer("g", topic, start="earliest") as c:
            if name == "read_batch":
                first = [bytes(b.body_at(i)) for b in c.poll_batch(1000) for i in range(len(b))]
                then = [bytes(b.body_at(i)) for b in c.poll_batch(1000) for i in range(len(b))]
            else:
                first = [m.body for m in c.poll(1000)]
                then = [m.body for m in c.poll(1000)]
        assert sorted(arrived) == [0, 1, 2, 3]
        assert sorted(first) == sorted(f"m{i}".encode() for i in range(40)), name
        assert then == [b"late"] * 4


def test_a_poll_reads_a_queue_again_when_its_share_was_not_all_it_had(store: MessageStore) -> None:
    fill(store, 10, queues=2)
    fill(store, 20, queues=1)  # queue 0: 25 messages, queue 1: 5
    with store.consumer("g", "T", start="earliest") as c:
        batches = c.poll_batch(30)  # shares of 15: queue 0 is read again for the 10 left
        assert sorted((b.queue_id, len(b)) for b in batches) == [(0, 10), (0, 15), (1, 5)]
    with store.consumer("h", "T", start="earliest") as c:
        assert sorted(m.queue_id for m in c.poll(30)) == [0] * 25 + [1] * 5


def test_asyncio_form(store: MessageStore) -> None:
    fill(store, 6)

    async def main() -> list[bytes]:
        got = []
        with store.consumer("g", "T", start="earliest") as c:
            async for msg in c:
                got.append(msg.body)
                if len(got) == 6:
                    fill(store, 2)  # arrives while the loop waits
                if len(got) == 8:
                    break
        return got

    got = asyncio.run(asyncio.wait_for(main(), 30))
    assert sorted(got) == sorted([f"m{i}".encode() for i in range(6)] + [b"m0", b"m1"])

    async def apolls() -> tuple[list[bytes], list[bytes]]:
        with store.consumer("h", "T", start="latest") as c:
            nothing = await c.apoll(10, timeout=0.05)
            fill(store, 3)
            return [m.body for m in nothing], [m.body for m in await c.apoll(10, timeout=30)]

    nothing, later = asyncio.run(apolls())
    assert nothing == [] and sorted(later) == [b"m0", b"m1", b"m2"]


def _wake_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "rocketstore-async-wake"]


def test_asyncio_waiters_share_one_thread_and_wake_on_a_put(store: MessageStore) -> None:
    """Twenty coroutines of twenty groups await one store: one thread blocks for all of them, and
    a put from another thread wakes each with the message (no timer: their timeouts are 30 s)."""

    async def main() -> list[list[bytes]]:
        earlier = set(_wake_threads())  # other stores' threads linger a second after their waits
        consumers = [store.consumer(f"g{i}", "T", start="latest") for i in range(20)]
        try:
            tasks = [asyncio.create_task(c.apoll(10, timeout=30)) for c in consumers]
            for _ in range(500):
                await asyncio.sleep(0.01)
                if set(_wake_threads()) - earlier:
                    break
            assert len(set(_wake_threads()) - earlier) == 1
            assert not any(t.done() for t in tasks)
            await asyncio.to_thread(fill, store, 1)
            polled = await asyncio.wait_for(asyncio.gather(*tasks), 30)
        finally:
            for c in consumers:
                c.close()
        return [[m.body for m in got] for got in polled]

    assert asyncio.run(main()) == [[b"m0"]] * 20


def test_asyncio_wait_ends_when_the_consumer_closes(store: MessageStore) -> None:
    async def main() -> list[object]:
        c = store.consumer("g", "T", start="latest", rebalance_interval_ms=60_000)
        waiting = asyncio.create_task(c.apoll(10, timeout=None))
        await asyncio.sleep(0.1)
        c.close()
        return await asyncio.wait_for(waiting, 10)

    assert asyncio.run(main()) == []


def test_asyncio_follower_is_woken_by_a_writer_in_another_process(tmp_path: Path) -> None:
    root = tmp_path / "s"
    writer = LiveWriter(root, CFG)
    try:
        writer.put("T", 4)

        async def main() -> list[bytes]:
            with open_consumer(root, "g", "T", config=CFG, start="latest") as c:
                first = asyncio.create_task(c.apoll(100, timeout=60))
                await asyncio.sleep(0.1)
                await asyncio.to_thread(writer.put, "T", 8)
                got = [m.body for m in await first]
                while len(got) < 8:
                    more = await c.apoll(100, timeout=30)
                    assert more, f"only {len(got)} of 8 messages came"
                    got += [m.body for m in more]
                return got

        assert len(asyncio.run(main())) == 8
    finally:
        writer.close()


def test_a_queue_made_after_the_rebalance_is_read_at_once_in_process(store: MessageStore) -> None:
    store.put_batch("T", [b"q0"], queue_ids=0)
    with store.consumer("g", "T", start="earliest", rebalance_interval_ms=3_600_000) as c:
        assert [m.body for m in c.poll(10, timeout=5)] == [b"q0"]
        store.put_batch("T", [b"q1"], queue_ids=1)  # a queue the last rebalance did not see
        got = c.poll(10, timeout=5)
        assert [(m.queue_id, m.body) for m in got] == [(1, b"q1")]


def test_a_followers_consumer_reads_a_queue_the_writer_made_after_its_rebalance(tmp_path: Path) -> None:
    """The writer says in its signal file when it made a queue: the follower's consumer shares it
    out at once, not an hour (its rebalance interval) later."""
    root = tmp_path / "s"
    writer = LiveWriter(root, CFG)
    try:
        writer.put("T", 2, queues=1)
        with open_consumer(
            root, "g", "T", config=CFG, start="earliest", rebalance_interval_ms=3_600_000
        ) as c:
            assert len(c.poll(10, timeout=5)) == 2
            writer.put("U", 1, queues=1)  # another topic's queue: nothing for this consumer
            assert c.poll(10, timeout=0.2) == []
            writer.put("T", 4, queues=4)  # queues 1, 2 and 3 are new
            got: list[tuple[int, int]] = []
            deadline = time.monotonic() + 10
            while len(got) < 4 and time.monotonic() < deadline:
                got += [(m.queue_id, m.queue_offset) for m in c.poll(10, timeout=1)]
            assert sorted(got) == [(0, 2), (1, 0), (2, 0), (3, 0)]
    finally:
        writer.close()


def test_the_signal_file_counts_the_writers_queue_changes(tmp_path: Path) -> None:
    root = tmp_path / "s"
    with MessageStore.open(root, CFG) as store:
        store.put_batch("T", [b"a"], queue_ids=0)
        store.wait_dispatched()
        first = decode_signal((root / ".dispatch-seq").read_bytes())
        store.put_batch("T", [b"b"], queue_ids=0)
        store.wait_dispatched()
        same = decode_signal((root / ".dispatch-seq").read_bytes())
        store.put_batch("T", [b"c"], queue_ids=1)
        store.wait_dispatched()
        grown = decode_signal((root / ".dispatch-seq").read_bytes())
    assert first is not None and same is not None and grown is not None
    assert first.queue_changes > 0
    assert same.queue_changes == first.queue_changes and same.sequence > first.sequence
    assert grown.queue_changes != first.queue_changes


def test_allocation_is_rocketmqs_averaging() -> None:
    members = ["a", "b", "c"]
    queues = list(range(8))
    assert [allocate_averagely(queues, members, m) for m in members] == [[0, 1, 2], [3, 4, 5], [6, 7]]
    assert [allocate_averagely([0, 1], members, m) for m in members] == [[0], [1], []]
    assert allocate_averagely(queues, members, "z") == []


def test_two_members_of_a_group_share_the_queues_and_one_takes_all_when_the_other_leaves(
    store: MessageStore,
) -> None:
    fill(store, 40)
    clock = ManualClock()
    a = store.consumer("g", "T", start="earliest", clock=clock, rebalance_interval_ms=1000)
    b = store.consumer("g", "T", start="earliest", clock=clock, rebalance_interval_ms=1000)
    clock.advance(1000)
    a.poll(1)
    b.poll(1)
    assert len(a.assignment()) == 2 and len(b.assignment()) == 2
    assert not set(a.assignment()) & set(b.assignment())
    got_a, got_b = a.poll(1000), b.poll(1000)
    a.commit()
    b.close()
    clock.advance(1000)
    rest = a.poll(1000)
    assert len(a.assignment()) == 4
    assert rest == []  # b committed what it handed out before it left: nothing is read twice
    assert len(got_a) + len(got_b) == 38
    a.close()


def test_commits_of_other_processes_are_merged_not_lost(tmp_path: Path) -> None:
    path = tmp_path / "consumerOffset.json"
    commit_offsets(path, {("T", "g", 0): 5})
    commit_offsets(path, {("T", "g", 0): 3})  # a plain commit never moves back
    commit_offsets(path, {("T", "h", 1): 2})
    assert read_offsets(path) == {("T", "g"): {0: 5}, ("T", "h"): {1: 2}}
    commit_offsets(path, {("T", "g", 0): 1}, forced=[("T", "g", 0)])
    assert read_offsets(path)[("T", "g")] == {0: 1}


def test_the_writers_periodic_persist_keeps_a_followers_commits(tmp_path: Path) -> None:
    root = tmp_path / "s"
    with MessageStore.open(root, CFG) as writer:
        fill(writer, 8)
        writer.commit_offset("w", "T", 0, 1)
        with open_consumer(root, "f", "T", start="earliest", config=CFG) as c:
            assert len(c.poll(100)) == 8
        assert writer.consumer_offsets()[("T", "f")] == {0: 2, 1: 2, 2: 2, 3: 2}
        writer.commit_offset("w", "T", 1, 2)
    table = read_offsets(root / "config" / "consumerOffset.json")
    assert table == {("T", "f"): {0: 2, 1: 2, 2: 2, 3: 2}, ("T", "w"): {0: 1, 1: 2}}


def test_bad_arguments_are_refused(store: MessageStore) -> None:
    with pytest.raises(StoreConfigError, match="consumer group"):
        store.consumer("bad group", "T")
    with pytest.raises(StoreConfigError, match="not a valid topic"):
        store.consumer("g", {"bad topic": "*"})
    with pytest.raises(StoreConfigError, match="start"):
        store.consumer("g", "T", start="yesterday")  # type: ignore[arg-type]


# --- across processes ---------------------------------------------------------------------------
def _consume(root: str, stop: Event, out: Any) -> None:
    delivered: list[tuple[int, int, bytes]] = []
    warnings: list[str] = []  # what the consumer and its store said went wrong, for the failure's report

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            warnings.append(f"{os.getpid()}: {record.getMessage()}")

    logging.getLogger("rocketstore").addHandler(Keep(logging.WARNING))
    with open_consumer(root, "group", "A", start="earliest", config=CFG, rebalance_interval_ms=200) as c:
        while not stop.is_set():
            for m in c.poll(64, timeout=0.2):
                delivered.append((m.queue_id, m.queue_offset, m.body))
            c.commit()
    out.put((delivered, warnings))


def _stored(view: MessageStore, queue_id: int) -> dict[tuple[int, int], bytes]:
    out = {}
    offset = 0
    while offset < view.max_offset_in_queue("A", queue_id):
        b = view.read_batch("A", queue_id, offset)
        out.update({(queue_id, int(b.queue_offsets[i])): bytes(b.body_at(i)) for i in range(len(b))})
        offset = b.next_offset
    return out


def _committed(root: Path) -> dict[int, int]:
    return read_offsets(root / "config" / "consumerOffset.json").get(("A", "group"), {})


@pytest.mark.slow
def test_a_group_in_two_processes_gets_every_message_in_queue_order_across_a_writer_crash(
    tmp_path: Path,
) -> None:
    root = tmp_path / "s"
    first = LiveWriter(root, CFG)
    first.put("A", 40)
    ctx = mp.get_context("spawn")
    stop, out = ctx.Event(), ctx.Queue()
    consumers = [ctx.Process(target=_consume, args=(str(root), stop, out), daemon=True) for _ in range(2)]
    for p in consumers:
        p.start()
    history: list[dict[int, int]] = []
    try:
        first.stream("A", 2000, batch=4)
        deadline = time.monotonic() + 60
        while sum(_committed(root).values()) < 300 and time.monotonic() < deadline:
            history.append(_committed(root))
            time.sleep(0.02)
        first.kill()
        second = LiveWriter(root, CFG)
        try:
            second.put("A", 200)
            with MessageStore.open(root, CFG, readonly=True) as view:
                ends = {q: view.max_offset_in_queue("A", q) for q in range(4)}
            deadline = time.monotonic() + 60
            while _committed(root) != ends and time.monotonic() < deadline:
                history.append(_committed(root))
                time.sleep(0.02)
            assert _committed(root) == ends
            stop.set()
            results = [out.get(timeout=60) for _ in consumers]
        finally:
            second.close()
    finally:
        stop.set()
        for p in consumers:
            p.join(30)
            if p.is_alive():
                p.kill()
    for before, after in itertools.pairwise(history):
        assert all(after.get(q, 0) >= offset for q, offset in before.items()), (before, after)
    with MessageStore.open(root, CFG, readonly=True) as view:
        stored = {key: body for q in range(4) for key, body in _stored(view, q).items()}
    delivered = [d for r, _ in results for d in r]
    said = [w for _, warnings in results for w in warnings]
    got = {(q, o): b for q, o, b in delivered}
    assert got == stored, (sorted(set(stored) - set(got))[:5], said)  # every message, with its own body
    for r, _ in results:  # each process read each queue in order
        for q in range(4):
            offsets = [o for qq, o, _ in r if qq == q]
            backwards = [(a, b) for a, b in itertools.pairwise(offsets) if b <= a]
            assert not backwards, f"queue {q}: offset after offset, not above it: {backwards[:5]}"


def test_group_membership_files_have_the_stores_modes_not_the_umasks(tmp_path: Path) -> None:
    """docs/store-format.md, "Modes": new files 0600, directories 0700 (a umask of 022 would
    leave 0644 and 0755)."""
    root = tmp_path / "s"
    with MessageStore.open(root, CFG) as writer:
        fill(writer, 8)
    old = os.umask(0o022)
    try:
        with (
            MessageStore.open(root, CFG, readonly=True) as follower,
            follower.consumer("billing", "T", start="earliest") as c,
        ):
            assert len(c.poll(8, timeout=30)) == 8
            group = root / "consumers" / "billing"
            dirs = [root / "consumers", group, group / "members", group / "queues"]
            files = [*(group / "members").iterdir(), *(group / "queues").iterdir()]
            assert len(files) == 5  # this member and its four queue locks
            assert {oct(p.stat().st_mode & 0o777) for p in dirs} == {"0o700"}
            assert {oct(p.stat().st_mode & 0o777) for p in files} == {"0o600"}
    finally:
        os.umask(old)
