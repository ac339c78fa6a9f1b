"""Dispatch runs when bytes become readable, not on a timer: with the dispatcher's fallback
interval set to an hour, a put (which dispatches on its own thread), a transient-pool commit and
a replica's frames must each still make their messages visible (a path that forgot to dispatch
or wake the dispatcher fails here by timeout)."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from rocketstore import Message, MessageStore, PutStatus, StoreConfig
from rocketstore.consume_queue import ConsumeQueueSet
from rocketstore.dispatch import DispatchService

WAIT = 30.0
GEOMETRY = StoreConfig(
    commitlog_segment_size=1 << 20,
    consume_queue_entries=4096,
    index_hash_slots=256,
    index_max_entries=1024,
)


@pytest.fixture(autouse=True)
def no_fallback_rounds(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(DispatchService, "FALLBACK_INTERVAL", 3600.0)


def test_a_put_is_dispatched_before_it_returns(tmp_path: Path) -> None:
    """Every put path runs the dispatch round itself: its messages are in their queues and the
    index when it returns, with no wait (the dispatcher's thread is not woken for them)."""
    with MessageStore.open(tmp_path / "s", GEOMETRY) as store:
        for i in range(3):
            assert store.put_message(Message("T", f"m{i}".encode(), queue_id=0, keys=[f"k{i}"])).ok
            assert store.max_offset_in_queue("T", 0) == i + 1
            assert [m.body for m in store.query_message("T", f"k{i}")] == [f"m{i}".encode()]
        assert all(r.ok for r in store.put_messages([Message("T", b"n", queue_id=1)] * 2))
        assert store.put_batch("T", [b"b"] * 40, queue_ids=2).status.name == "PUT_OK"
        assert [store.max_offset_in_queue("T", q) for q in range(3)] == [3, 2, 40]
        assert [m.body for m in store.get_message("g", "T", 0, 0).messages] == [b"m0", b"m1", b"m2"]


def test_a_put_while_a_round_runs_leaves_its_messages_to_the_dispatchers_thread(tmp_path: Path) -> None:
    """A put that finds a round running (the thread's, or another put's) does not wait for it:
    it wakes the dispatcher's thread, whose next round takes its messages."""
    with MessageStore.open(tmp_path / "s", GEOMETRY) as store:
        dispatcher = store._dispatcher
        assert dispatcher is not None
        with dispatcher._round:  # a round in progress on this thread
            done = []
            putter = threading.Thread(
                target=lambda: done.append(store.put_message(Message("T", b"later", queue_id=0)))
            )
            putter.start()
            putter.join(WAIT)
            assert done and done[0].ok
            assert store.max_offset_in_queue("T", 0) == 0  # not dispatched: the round was busy
        assert store.wait_for_message("T", 0, 0, WAIT)
        assert [m.body for m in store.get_message("g", "T", 0, 0).messages] == [b"later"]


def test_puts_in_a_deferred_block_are_dispatched_at_its_end(tmp_path: Path) -> None:
    """Inside ``dispatch_deferred`` a put returns what it always returns (its queue offsets
    given) with its record in the log, and the dispatch pass (queue entries, index keys, the
    position long polls and followers wait on) runs once, at the outermost block's end."""
    with MessageStore.open(tmp_path / "s", GEOMETRY) as store:
        events = store.dispatch_events
        before = events.position()
        with store.dispatch_deferred():
            first = store.put_message(Message("T", b"m0", queue_id=0, keys=["k0"]))
            with store.dispatch_deferred():
                rest = store.put_messages([Message("T", b"m1", queue_id=0, keys=["k1"])] * 2)
                assert store.put_batch("T", [b"b"] * 3, queue_ids=1).ok
            assert first.ok and [r.queue_offset for r in [first, *rest]] == [0, 1, 2]
            assert store.max_phy_offset() > rest[-1].physical_offset + rest[-1].wrote_bytes  # logged
            assert events.position() == before  # not dispatched yet
        assert events.position() == store.max_phy_offset()
        assert [store.max_offset_in_queue("T", q) for q in (0, 1)] == [3, 3]
        assert [m.body for m in store.query_message("T", "k0")] == [b"m0"]
        assert store.put_message(Message("T", b"m3", queue_id=0)).ok  # outside: at once again
        assert events.position() == store.max_phy_offset()
    with MessageStore.open(tmp_path / "s", GEOMETRY, readonly=True) as reader, reader.dispatch_deferred():
        assert reader.max_offset_in_queue("T", 0) == 4


def test_a_reader_sees_every_put_that_returned_inside_a_deferred_block(tmp_path: Path) -> None:
    """A reader of the process (here another thread, while the block is still open) dispatches
    what the block put before it looks: every read sees a put once it returned."""
    with MessageStore.open(tmp_path / "s", GEOMETRY) as store:
        before = store.dispatch_events.position()
        reads: list[object] = []
        readers = [
            lambda: store.max_offset_in_queue("T", 0),
            lambda: [m.body for m in store.get_message("g", "T", 0, 0).messages],
            lambda: [m.body for m in store.query_message("T", "kept")],
            lambda: store.wait_for_message("T", 0, 0, 0.0),
            lambda: list(store.topics()),
        ]
        for read in readers:
            with store.dispatch_deferred():
                store.put_message(Message("T", b"kept", queue_id=0, keys=["kept"]))
                assert store.dispatch_events.position() == before
                reader = threading.Thread(target=lambda read=read: reads.append(read()))
                reader.start()
                reader.join(WAIT)
                before = store.dispatch_events.position()
        assert reads == [1, [b"kept", b"kept"], [b"kept"] * 3, True, ["T"]]


def test_a_deferred_block_that_raises_still_dispatches_what_it_stored(tmp_path: Path) -> None:
    with MessageStore.open(tmp_path / "s", GEOMETRY) as store:
        with pytest.raises(RuntimeError, match="after the put"), store.dispatch_deferred():
            assert store.put_message(Message("T", b"kept", queue_id=0)).ok
            raise RuntimeError("after the put")
        assert store.dispatch_events.position() == store.max_phy_offset()
        assert [m.body for m in store.get_message("g", "T", 0, 0).messages] == [b"kept"]


def test_another_threads_put_dispatches_a_deferred_blocks_records_with_its_own(tmp_path: Path) -> None:
    """The deferral is the calling thread's: a put of another thread meanwhile dispatches as
    ever, in log order, the block's record first."""
    with MessageStore.open(tmp_path / "s", GEOMETRY) as store, store.dispatch_deferred():
        before = store.dispatch_events.position()
        assert store.put_message(Message("T", b"deferred", queue_id=0)).ok
        assert store.dispatch_events.position() == before
        other = threading.Thread(target=lambda: store.put_message(Message("T", b"other", queue_id=0)))
        other.start()
        other.join(WAIT)
        assert store.dispatch_events.position() == store.max_phy_offset()
        assert [m.body for m in store.get_message("g", "T", 0, 0).messages] == [b"deferred", b"other"]


def test_a_transient_pool_commit_wakes_the_dispatcher(tmp_path: Path) -> None:
    # the put's own wake-up finds nothing readable (too few pages to wake the committer); the
    # committer's timed round, up to 50 ms later, commits it and must wake the dispatcher
    cfg = GEOMETRY.replace(
        transient_store_pool_enable=True,
        commit_interval=50,
        commit_least_pages=1000,
        commit_thorough_interval=50,
    )
    with MessageStore.open(tmp_path / "s", cfg) as store:
        assert store.put_message(Message("T", b"pooled", queue_id=0)).ok
        assert store.wait_for_message("T", 0, 0, WAIT)
        assert [m.body for m in store.get_message("g", "T", 0, 0).messages] == [b"pooled"]


def test_a_replica_wakes_its_dispatcher_for_every_step(tmp_path: Path) -> None:
    """12 MiB in one burst: the slave parses 4 MiB a dispatch round, so the rounds after the
    first are woken by the dispatcher itself."""
    ha = GEOMETRY.replace(commitlog_segment_size=64 << 20, ha_listen_host="127.0.0.1")
    body = os.urandom(1000)
    n = 12_000
    master_cfg = ha.replace(broker_role="ASYNC_MASTER", ha_listen_port=0)
    with MessageStore.open(tmp_path / "m", master_cfg) as master:
        slave_cfg = ha.replace(broker_role="SLAVE", ha_master_address=f"127.0.0.1:{master.ha_port}")
        with MessageStore.open(tmp_path / "s", slave_cfg) as slave:
            assert master.put_batch("T", [body] * n, queue_ids=0).ok
            assert slave.wait_for_message("T", 0, n - 1, WAIT)
            deadline = time.monotonic() + WAIT  # the master's own consume queue, for comparison
            while master.max_offset_in_queue("T", 0) < n and time.monotonic() < deadline:
                time.sleep(0.01)
            assert slave.max_offset_in_queue("T", 0) == master.max_offset_in_queue("T", 0) == n
            last = slave.get_message("g", "T", 0, n - 1).messages
            assert [m.body for m in last] == [body]


def test_a_put_whose_own_dispatch_round_fails_is_answered_as_stored(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The put's record is in the log when its round fails (a queue write's I/O error here): the
    put answers PUT_OK, never an error for a write it made; the failure stops dispatch and the
    store, as a failure on the dispatcher's thread does, so later puts are refused, and the
    record is there after a reopen."""
    root = tmp_path / "s"
    with MessageStore.open(root, GEOMETRY) as store:
        assert store.put_message(Message("T", b"before", queue_id=0)).ok

        def failing_put(self: object, requests: object) -> None:
            raise OSError(5, "Input/output error")

        monkeypatch.setattr(ConsumeQueueSet, "put", failing_put)
        result = store.put_message(Message("T", b"stored", queue_id=0))
        assert result.ok
        assert isinstance(store.failure, OSError)
        assert (
            store.put_message(Message("T", b"refused", queue_id=0)).status is PutStatus.SERVICE_NOT_AVAILABLE
        )
        monkeypatch.undo()
        with pytest.raises(OSError):
            store.close()
    with MessageStore.open(root, GEOMETRY) as again:
        assert again.wait_dispatched(WAIT)
        assert [m.body for m in again.get_message("g", "T", 0, 0).messages] == [b"before", b"stored"]
