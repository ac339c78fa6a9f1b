"""Flush policies: SYNC_FLUSH acknowledges only durable bytes, failures are never success."""

from __future__ import annotations

import errno
import threading
import time
from pathlib import Path

import pytest

from rocketstore import ManualClock, Message, MessageStore, PutStatus, StoreConfig
from rocketstore.storage.mapped_file import MappedFile
from tests.conftest import held_syncs

SMALL = {
    "commitlog_segment_size": 65536,
    "consume_queue_entries": 40,
    "index_hash_slots": 64,
    "index_max_entries": 256,
}


def sync_config(**kw: object) -> StoreConfig:
    return StoreConfig(flush_disk_type="SYNC_FLUSH", **{**SMALL, **kw})  # type: ignore[arg-type]


def test_sync_put_returns_after_its_bytes_are_flushed(tmp_path: Path) -> None:
    with MessageStore.open(tmp_path / "s", sync_config()) as store:
        for i in range(50):
            r = store.put_message(Message(topic="T", body=b"x" * 300, queue_id=i % 3))
            assert r.status is PutStatus.PUT_OK
            assert store._commitlog.files.flushed_where >= r.physical_offset + r.wrote_bytes


def test_sync_batch_put_waits_for_the_whole_batch(tmp_path: Path) -> None:
    with MessageStore.open(tmp_path / "s", sync_config()) as store:
        results = store.put_messages(
            [Message(topic="T", body=b"y" * 500) for _ in range(300)]
        )  # rolls segments
        assert all(r.ok for r in results)
        assert store._commitlog.files.flushed_where >= max(r.physical_offset + r.wrote_bytes for r in results)


def test_group_commit_serves_concurrent_waiters(tmp_path: Path) -> None:
    syncs = []
    real = MappedFile.sync

    def counting_sync(self: MappedFile) -> None:
        syncs.append(1)
        real(self)

    with MessageStore.open(tmp_path / "s", sync_config()) as store:
        MappedFile.sync = counting_sync  # type: ignore[method-assign]
        try:

            def writer() -> None:
                for _ in range(100):
                    assert store.put_message(Message(topic="T", body=b"z" * 100)).ok

            threads = [threading.Thread(target=writer) for _ in range(8)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        finally:
            MappedFile.sync = real  # type: ignore[method-assign]
    assert 0 < len(syncs) < 800  # waiters shared flushes


def test_wait_false_does_not_wait(tmp_path: Path) -> None:
    with MessageStore.open(tmp_path / "s", sync_config(sync_flush_timeout=5000)) as store, held_syncs():
        started = time.monotonic()
        r = store.put_message(Message(topic="T", body=b"a", properties={"WAIT": "false"}))
        assert r.ok and time.monotonic() - started < 2


def test_slow_flush_gives_flush_disk_timeout_and_the_message_stays(tmp_path: Path) -> None:
    with MessageStore.open(tmp_path / "s", sync_config(sync_flush_timeout=200)) as store:
        with held_syncs():
            r = store.put_message(Message(topic="T", body=b"late"))
        assert r.status is PutStatus.FLUSH_DISK_TIMEOUT
        assert r.physical_offset >= 0
        store.wait_dispatched()
        m = store.look_message_by_offset(r.physical_offset)
        assert m is not None and m.body == b"late"
        assert store.put_message(Message(topic="T", body=b"next")).ok


def test_flush_error_is_never_success_and_the_store_refuses_writes(tmp_path: Path) -> None:
    real = MappedFile.sync

    def failing_sync(self: MappedFile) -> None:
        raise OSError(errno.EIO, "injected I/O error")

    with MessageStore.open(tmp_path / "s", sync_config()) as store:
        assert store.put_message(Message(topic="T", body=b"before")).ok
        MappedFile.sync = failing_sync  # type: ignore[method-assign]
        try:
            r = store.put_message(Message(topic="T", body=b"during"))
            assert r.status is PutStatus.FLUSH_DISK_TIMEOUT
            assert isinstance(store.failure, OSError) and store.failure.errno == errno.EIO
            later = store.put_message(Message(topic="T", body=b"after"))
            assert later.status is PutStatus.SERVICE_NOT_AVAILABLE
            assert store.wait_dispatched(5)
            assert store.get_message("g", "T", 0, 0).messages[0].body == b"before"  # reads go on
        finally:
            MappedFile.sync = real  # type: ignore[method-assign]
        with pytest.raises(OSError, match="injected"):
            store.close()


def test_async_flush_error_makes_the_store_refuse_writes(tmp_path: Path) -> None:
    real = MappedFile.sync

    def failing_sync(self: MappedFile) -> None:
        raise OSError(errno.EIO, "injected I/O error")

    cfg = StoreConfig(flush_interval=10, flush_least_pages=0, **SMALL)  # type: ignore[arg-type]
    with MessageStore.open(tmp_path / "s", cfg) as store:
        MappedFile.sync = failing_sync  # type: ignore[method-assign]
        try:
            assert store.put_message(Message(topic="T", body=b"x")).ok  # ASYNC: acknowledged before the flush
            deadline = time.monotonic() + 5
            while store.failure is None and time.monotonic() < deadline:
                time.sleep(0.01)
            assert isinstance(store.failure, OSError)
            assert store.put_message(Message(topic="T", body=b"y")).status is PutStatus.SERVICE_NOT_AVAILABLE
        finally:
            MappedFile.sync = real  # type: ignore[method-assign]
        with pytest.raises(OSError):
            store.close()


def test_async_flusher_is_woken_by_puts(tmp_path: Path) -> None:
    cfg = StoreConfig(flush_interval=60_000, flush_least_pages=2, flush_commit_log_timed=False, **SMALL)  # type: ignore[arg-type]
    with MessageStore.open(tmp_path / "s", cfg) as store:
        store.put_messages([Message(topic="T", body=b"w" * 1000) for _ in range(20)])  # ~5 pages dirty
        deadline = time.monotonic() + 5
        while store._commitlog.files.flushed_where == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert store._commitlog.files.flushed_where > 0  # long before the 60 s interval


def test_timed_async_flusher_is_not_woken_by_puts(tmp_path: Path) -> None:
    cfg = StoreConfig(flush_interval=60_000, flush_least_pages=2, **SMALL)  # type: ignore[arg-type]
    with MessageStore.open(tmp_path / "s", cfg) as store:
        store.put_messages([Message(topic="T", body=b"w" * 1000) for _ in range(20)])
        time.sleep(0.3)
        assert store._commitlog.files.flushed_where == 0  # RocketMQ's default: sleep the interval


def test_page_cache_busy_fails_fast(tmp_path: Path) -> None:
    clock = ManualClock()
    with MessageStore.open(tmp_path / "s", StoreConfig(**SMALL), clock=clock) as store:  # type: ignore[arg-type]
        assert store.put_message(Message(topic="T", body=b"ok")).ok
        store._commitlog.begin_time_in_lock = clock.monotonic()  # as if an append held the lock ...
        clock.advance(1500)  # ... for 1.5 s, longer than os_page_cache_busy_timeout
        r = store.put_message(Message(topic="T", body=b"busy"))
        assert r.status is PutStatus.OS_PAGECACHE_BUSY
        store._commitlog.begin_time_in_lock = 0.0
        assert store.put_message(Message(topic="T", body=b"ok again")).ok


def test_checkpoint_moves_with_flushes(tmp_path: Path) -> None:
    with MessageStore.open(tmp_path / "s", sync_config()) as store:
        r = store.put_message(Message(topic="T", body=b"x", keys=["k"]))
        store.wait_dispatched()
    with MessageStore.open(tmp_path / "s", sync_config()) as store:
        physic, logics, index = store.checkpoint
        assert physic == r.store_timestamp and logics == r.store_timestamp and index == r.store_timestamp


def test_a_put_that_does_not_wait_leaves_its_wait_to_wait_durable(tmp_path: Path) -> None:
    config = sync_config(sync_flush_timeout=5000)
    with MessageStore.open(tmp_path / "s", config) as store, held_syncs() as gate:
        results = store.put_messages(
            [Message(topic="T", body=b"a"), Message(topic="T", body=b"b")], wait=False
        )
        assert [r.status for r in results] == [PutStatus.PUT_OK] * 2
        end = max(r.physical_offset + r.wrote_bytes for r in results)
        assert store._commitlog.files.flushed_where < end
        outcome: list[PutStatus] = []
        waiter = threading.Thread(target=lambda: outcome.append(store.wait_durable(end)))
        waiter.start()
        waiter.join(0.3)
        assert waiter.is_alive() and not outcome  # it waits for the flush
        gate.set()
        waiter.join(5)
        assert outcome == [PutStatus.PUT_OK]
        assert store._commitlog.files.flushed_where >= end


def test_wait_durable_says_what_a_waiting_put_would_say(tmp_path: Path) -> None:
    with MessageStore.open(tmp_path / "s", sync_config(sync_flush_timeout=200)) as store, held_syncs():
        [r] = store.put_messages([Message(topic="T", body=b"late")], wait=False)
        assert r.ok
        assert store.wait_durable(r.physical_offset + r.wrote_bytes) is PutStatus.FLUSH_DISK_TIMEOUT
    with MessageStore.open(tmp_path / "a", StoreConfig(**SMALL)) as store:  # ASYNC_FLUSH: nothing to wait for
        [r] = store.put_messages([Message(topic="T", body=b"x")], wait=False)
        started = time.monotonic()
        assert store.wait_durable(r.physical_offset + r.wrote_bytes) is PutStatus.PUT_OK
        assert time.monotonic() - started < 1


def test_when_flushed_tells_the_caller_from_the_group_commit_thread(tmp_path: Path) -> None:
    told: list[tuple[PutStatus, str]] = []
    told_event = threading.Event()

    def done(status: PutStatus) -> None:
        told.append((status, threading.current_thread().name))
        told_event.set()

    real = MappedFile.sync
    with MessageStore.open(tmp_path / "s", sync_config(sync_flush_timeout=5000)) as store:
        with held_syncs() as gate:
            [r] = store.put_messages([Message(topic="T", body=b"a")], wait=False)
            store.when_flushed(r.physical_offset + r.wrote_bytes, done)
            assert not told_event.wait(0.3)  # not before the flush
            gate.set()
            assert told_event.wait(5)
        [(status, thread)] = told
        assert status is PutStatus.PUT_OK and thread != threading.current_thread().name
        assert store._commitlog.files.flushed_where >= r.physical_offset + r.wrote_bytes

        def failing_sync(self: MappedFile) -> None:
            raise OSError(errno.EIO, "injected I/O error")

        told.clear()
        told_event.clear()
        MappedFile.sync = failing_sync  # type: ignore[method-assign]
        try:
            [r] = store.put_messages([Message(topic="T", body=b"b")], wait=False)
            store.when_flushed(r.physical_offset + r.wrote_bytes, done)
            assert told_event.wait(5)
            assert told[0][0] is PutStatus.FLUSH_DISK_TIMEOUT  # a failed flush is never PUT_OK
        finally:
            MappedFile.sync = real  # type: ignore[method-assign]
        with pytest.raises(OSError, match="injected"):
            store.close()
    with MessageStore.open(tmp_path / "a", StoreConfig(**SMALL)) as store:  # ASYNC_FLUSH: at once
        told.clear()
        [r] = store.put_messages([Message(topic="T", body=b"x")], wait=False)
        store.when_flushed(r.physical_offset + r.wrote_bytes, done)
        assert told == [(PutStatus.PUT_OK, threading.current_thread().name)]
