"""Flush services: the commitlog flusher and the consume-queue/index flusher."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from rocketstore.checkpoint import StoreCheckpoint
from rocketstore.clock import Clock
from rocketstore.commitlog import CommitLog
from rocketstore.config import StoreConfig
from rocketstore.consume_queue import ConsumeQueueSet
from rocketstore.index import IndexService
from rocketstore.service import BackgroundService, FailureHandler

log = logging.getLogger("rocketstore.flush")

__all__ = [
    "CommitLogFlushService",
    "CommitService",
    "ConsumeQueueFlushService",
    "FlushRequest",
    "GroupCommitService",
]


class _ThoroughTimer:
    """Says when a full flush (ignoring the least-pages threshold) is due."""

    def __init__(self, clock: Clock, interval_ms: int) -> None:
        self._clock = clock
        self._interval_ms = interval_ms
        self._last = clock.monotonic()

    def due(self, force: bool) -> bool:
        now = self._clock.monotonic()
        if force or (now - self._last) * 1000 >= self._interval_ms:
            self._last = now
            return True
        return False


class CommitLogFlushService(BackgroundService):
    """ASYNC_FLUSH (RocketMQ's FlushRealTimeService): every ``flush_interval`` ms (or, with
    ``flush_commit_log_timed`` off, sooner when a put wakes it), sync the commitlog when at least
    ``flush_least_pages`` pages are dirty, and fully every ``flush_thorough_interval`` ms. Moves
    the checkpoint's physic timestamp. A failed sync raises out of ``run_once``: the service
    stops and reports it, it is never ignored.
    """

    def __init__(
        self,
        commitlog: CommitLog,
        checkpoint: StoreCheckpoint,
        config: StoreConfig,
        clock: Clock,
        on_failure: FailureHandler | None = None,
    ) -> None:
        super().__init__("flush-commitlog", config.flush_interval / 1000, on_failure)
        self._commitlog = commitlog
        self._checkpoint = checkpoint
        self._config = config
        self._thorough = _ThoroughTimer(clock, config.flush_thorough_interval)

    def run_once(self) -> None:
        thorough = self._thorough.due(force=self._stopping.is_set())
        last = self._commitlog.files.last
        timestamp = last.last_store_timestamp if last is not None else 0
        if self._commitlog.files.flush(0 if thorough else self._config.flush_least_pages) and timestamp:
            self._checkpoint.update(physic=timestamp)


class CommitService(BackgroundService):
    """The transient pool's committer (RocketMQ's CommitRealTimeService): every
    ``commit_interval`` ms, or when woken by puts, copies appended bytes from the pooled write
    buffers into the segment files once ``commit_least_pages`` pages are waiting (all of them
    every ``commit_thorough_interval`` ms), then wakes the flusher, and the dispatcher: what
    was committed has just become readable."""

    def __init__(
        self,
        commitlog: CommitLog,
        config: StoreConfig,
        clock: Clock,
        flusher: BackgroundService,
        dispatcher: BackgroundService,
        on_failure: FailureHandler | None = None,
    ) -> None:
        super().__init__("commit", config.commit_interval / 1000, on_failure)
        self._commitlog = commitlog
        self._least_pages = config.commit_least_pages
        self._flusher = flusher
        self._dispatcher = dispatcher
        self._thorough = _ThoroughTimer(clock, config.commit_thorough_interval)

    def run_once(self) -> None:
        thorough = self._thorough.due(force=self._stopping.is_set())
        if self._commitlog.files.commit(0 if thorough else self._least_pages):
            self._flusher.wakeup()
            self._dispatcher.wakeup()


class ConsumeQueueFlushService(BackgroundService):
    """RocketMQ's FlushConsumeQueueService: flushes consume queues and the index, then the
    checkpoint with the logics and index timestamps of what was just made durable. The index
    timestamp is the store time up to which the index is complete (RocketMQ writes the time of
    the last indexed record, which stands still while records without keys go by)."""

    def __init__(
        self,
        queues: ConsumeQueueSet,
        index: IndexService | None,
        checkpoint: StoreCheckpoint,
        config: StoreConfig,
        clock: Clock,
        dispatched_timestamp: Callable[[], int],
        on_failure: FailureHandler | None = None,
    ) -> None:
        super().__init__("flush-consume-queue", config.flush_consume_queue_interval / 1000, on_failure)
        self._queues = queues
        self._index = index
        self._checkpoint = checkpoint
        self._config = config
        self._dispatched_timestamp = dispatched_timestamp
        self._thorough = _ThoroughTimer(clock, config.flush_consume_queue_thorough_interval)

    def run_once(self) -> None:
        thorough = self._thorough.due(force=self._stopping.is_set())
        least = 0 if thorough else self._config.flush_consume_queue_least_pages
        # Captured before flushing: everything dispatched up to this store time is in the queues and,
        # since dispatch writes the index first, in the index; after the flushes, durably so.
        logics = self._dispatched_timestamp()
        targets = [(cq, cq.files.max_offset) for cq in self._queues]
        for cq, _ in targets:
            cq.files.flush(least)
        if self._index is not None:
            self._index.flush()
        # The logics time may only say "every queue is durable up to here" when every queue is:
        # a round that left some below the least-pages threshold does not move it (as RocketMQ).
        complete = all(cq.files.flushed_where >= target for cq, target in targets)
        self._checkpoint.update(
            logics=logics if complete and logics else None,
            index=logics if self._index is not None and logics else None,
        )
        self._checkpoint.flush()


class FlushRequest:
    """A put waiting for its bytes (up to ``target`` in the commitlog) to be durable: by
    ``wait``, or told by ``on_done(ok)``, called once on the thread that finishes it.

    The latch is a bare lock, taken at creation and released by ``finish``: waiting on it is
    one C call, where a threading.Event costs a Condition round trip in Python.
    """

    __slots__ = ("_latch", "ok", "on_done", "target")

    def __init__(self, target: int, on_done: Callable[[bool], object] | None = None) -> None:
        self.target = target
        self.ok = False
        self.on_done = on_done
        self._latch = threading.Lock()
        self._latch.acquire()

    def finish(self, ok: bool) -> None:
        self.ok = ok
        self._latch.release()
        if self.on_done is not None:
            try:
                self.on_done(ok)
            except Exception:  # the caller's: it must not stop the group commit
                log.exception("a flush request's callback failed")

    def wait(self, timeout: float) -> bool:
        """True when flushed in time, False on timeout or flush failure."""
        return self._latch.acquire(timeout=timeout) and self.ok


class GroupCommitService(BackgroundService):
    """SYNC_FLUSH (RocketMQ's GroupCommitService): puts submit a request for their end offset
    and wait; the service swaps the request list under a lock, flushes the commitlog once for
    all of them (group commit), and completes each request. A flush error fails every waiting
    request and every later one: never reported as durable when it is not.
    """

    def __init__(
        self, commitlog: CommitLog, checkpoint: StoreCheckpoint, on_failure: FailureHandler | None = None
    ) -> None:
        super().__init__("group-commit", interval=0.01, on_failure=on_failure)
        self._commitlog = commitlog
        self._checkpoint = checkpoint
        self._lock = threading.Lock()
        self._requests_write: list[FlushRequest] = []
        self._requests_read: list[FlushRequest] = []
        self._broken = False

    def submit(self, target: int, on_done: Callable[[bool], object] | None = None) -> FlushRequest:
        """A request to flush up to ``target``: ``on_done(ok)`` is called once it is finished
        (on this thread when the service is broken already)."""
        request = FlushRequest(target, on_done)
        with self._lock:
            if self._broken:
                request.finish(False)
                return request
            self._requests_write.append(request)
        if not self._wake.is_set():  # one wake-up per round is enough; setting it again costs a lock
            self.wakeup()
        return request

    def run_once(self) -> None:
        with self._lock:
            self._requests_read, self._requests_write = self._requests_write, self._requests_read
        requests = self._requests_read
        last = self._commitlog.files.last
        timestamp = last.last_store_timestamp if last is not None else 0
        try:
            self._commitlog.files.flush(0)
        except BaseException as exc:
            self._fail(exc)  # known to the store before any waiter is released
            with self._lock:
                self._broken = True
                pending = requests + self._requests_write
                self._requests_write = []
            for r in pending:
                r.finish(False)
            requests.clear()
            raise
        flushed = self._commitlog.files.flushed_where
        for r in requests:
            r.finish(flushed >= r.target)
        requests.clear()
        if timestamp:
            self._checkpoint.update(physic=timestamp)
