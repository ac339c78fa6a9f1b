"""DispatchService: follows the commitlog and feeds the consume queues and the index."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

import numpy as np
import numpy.typing as npt

from rocketstore.commitlog import CommitLog
from rocketstore.consume_queue import ConsumeQueueSet
from rocketstore.dispatch_request import DispatchBatch, DispatchRequest, gets_queue_entry
from rocketstore.index import IndexService
from rocketstore.service import BackgroundService

__all__ = ["DispatchService"]

log = logging.getLogger(__name__)
# Batches merged into one dispatch pass at most (a pass then handles up to ~16 K records).
_BATCHES_PER_PASS = 64


class DispatchService(BackgroundService):
    """RocketMQ's ReputMessageService.

    Records below ``catch_up_to`` (written before this store was opened) are re-parsed from
    the commitlog starting at ``reput_offset``; records appended since come straight from the
    writer (``CommitLog.take_dispatch_requests``), in log order, so they are not parsed again
    (a replica's are parsed there, in bulk). PREPARED and ROLLBACK records are indexed but get
    no consume-queue entry.

    ``dispatched_to`` is the commitlog offset below which everything is dispatched; waiters
    on ``changed`` are notified after every round that dispatched something, and listeners
    (``subscribe``) called.

    A put runs a round on its own thread (``run_here``) right after its append: what it wrote is
    dispatched before it returns, and the rounds follow the puts (a broker's sends of one turn of
    its loop, one round), with no thread to wake and hand the GIL to. Whatever else makes bytes
    readable (the transient pool's committer, a replica's receiving thread) wakes the service's
    thread, which otherwise runs a round every ``FALLBACK_INTERVAL`` seconds: polling every
    millisecond, as RocketMQ's ReputMessageService does, cost an idle store 5 % of a core.
    """

    FALLBACK_INTERVAL = 0.1

    def __init__(
        self,
        commitlog: CommitLog,
        queues: ConsumeQueueSet,
        index: IndexService | None,
        *,
        reput_offset: int,
        index_durable_until: int = 0,
        on_failure: Callable[[BackgroundService, BaseException], None] | None = None,
        on_dispatched: Callable[[int], None] | None = None,
    ) -> None:
        super().__init__("dispatch", interval=self.FALLBACK_INTERVAL, on_failure=on_failure)
        self._on_dispatched = on_dispatched  # told dispatched_to after each pass (follow.py)
        self._commitlog = commitlog
        self._queues = queues
        self._index = index
        self.reput_offset = reput_offset
        self._index_durable_until = index_durable_until
        self.catch_up_to = commitlog.max_offset
        self.dispatched_to = reput_offset
        self.last_store_timestamp = 0
        self.changed = threading.Condition()
        self._listeners: tuple[Callable[[], None], ...] = ()
        self._round = threading.Lock()  # one round at a time: the service's thread's, or a put's

    def subscribe(self, listener: Callable[[], None]) -> Callable[[], None]:
        """Call ``listener()`` where ``changed`` is notified: after each round that dispatched
        something, on the round's thread (a put's, or the service's) and within the round, so it
        must not call the store. Returns what unsubscribes it."""
        self._listeners = (*self._listeners, listener)

        def unsubscribe() -> None:
            self._listeners = tuple(known for known in self._listeners if known is not listener)

        return unsubscribe

    def run_once(self) -> None:
        with self._round:
            if self.failure is None:
                self._round_once()

    def run_here(self, *, wait: bool = False) -> None:
        """A round on the calling thread (a put's, so that what it wrote is dispatched before it
        returns); when a round is running already, the thread runs the next one instead, or
        with ``wait`` this thread, once that round is over. A failure stops the service as one
        of the thread's rounds would."""
        if not self._round.acquire(blocking=wait):
            self.wakeup()
            return
        failed = None
        try:
            if self.failure is None:
                self._round_once()
        except BaseException as exc:
            failed = exc
        finally:
            self._round.release()
        if failed is not None:
            self._fail(failed)

    def _round_once(self) -> None:
        if self.reput_offset < self.catch_up_to:
            self._catch_up()
        snapshot = self._commitlog.max_offset
        requests, waiting = self._commitlog.take_dispatch_requests(snapshot)
        if requests:
            self._dispatch(requests)
        if self._commitlog.replica_backlog:
            self.wakeup()  # a replica's bytes are parsed a step a round: the next step at once
        advanced = snapshot > self.dispatched_to and (waiting is None or waiting >= snapshot)
        if advanced:
            self.dispatched_to = max(snapshot, self.reput_offset)
        if advanced or requests:  # once a round: the queues grew even while a put is in flight
            self._notify()

    def _catch_up(self) -> None:
        """Re-dispatch what was written before this store was opened, skipping (undecoded) every
        record that needs nothing: it has its queue entry, and so (the index is written first)
        its index entries, durably so if it is no newer than the checkpoint's index time."""
        queued = self._queues.physical_offsets_from(self.reput_offset)
        durable = self._index_durable_until if self._index is not None else 1 << 62
        rebuild = self._index.reindex_from if self._index is not None else None
        rebuild_from = rebuild if rebuild is not None else 1 << 62

        def needed(offsets: npt.NDArray[np.int64], stored: npt.NDArray[np.int64]) -> npt.NDArray[np.bool_]:
            # both sorted: a binary search per record beats np.isin's hashing by far
            at = np.minimum(np.searchsorted(queued, offsets), max(len(queued) - 1, 0))
            in_queue = queued[at] == offsets if len(queued) else np.zeros(len(offsets), dtype=np.bool_)
            done: npt.NDArray[np.bool_] = in_queue & (stored <= durable) & (offsets < rebuild_from)
            return ~done

        while self.reput_offset < self.catch_up_to:
            batch, reached = self._commitlog.catch_up(self.reput_offset, self.catch_up_to, needed)
            if batch is not None:
                self._dispatch([batch])
                self._notify()
            if reached <= self.reput_offset:  # a damaged record (logged): nothing more to follow
                self.catch_up_to = self.reput_offset
                break
            self.reput_offset = reached
            self.dispatched_to = max(self.dispatched_to, reached)

    def _dispatch(self, items: list[DispatchRequest | DispatchBatch]) -> None:
        """Dispatch in log order: runs of single requests, and runs of batches in bulk (the
        batches that piled up since the last round as one, so the fixed cost of a queue write
        and of an index pass is paid once per round, not once per put)."""
        run: list[DispatchRequest] = []
        batches: list[DispatchBatch] = []
        for item in items:
            if isinstance(item, DispatchBatch):
                if run:
                    self._dispatch_requests(run)
                    run = []
                batches.append(item)
            else:
                if batches:
                    self._dispatch_batches(batches)
                    batches = []
                run.append(item)
        self._dispatch_batches(batches)
        self._dispatch_requests(run)

    def _fail(self, exc: BaseException) -> None:
        super()._fail(exc)
        with self._round:  # published as a round's publication is, one at a time
            self._notify()  # waiters (wait_dispatched, wait_for_message) see the failure at once

    def _notify(self) -> None:
        # published first: whoever wait_dispatched() releases may tell another process to look.
        # Not while re-dispatching what an earlier writer wrote: its queue entries beyond this
        # pass are intact, and a follower told the new writer's dispatched_to would drop them
        # until the catch-up ends (its consumers would see every queue shrink, then grow back)
        if self._on_dispatched is not None and self.reput_offset >= self.catch_up_to:
            self._on_dispatched(self.dispatched_to)
        with self.changed:
            self.changed.notify_all()
        for listener in self._listeners:
            try:
                listener()
            except Exception:  # a listener's bug must not stop dispatch
                log.exception("dispatch listener %r failed", listener)

    def _dispatch_batches(self, batches: list[DispatchBatch]) -> None:
        for start in range(0, len(batches), _BATCHES_PER_PASS):
            batch = DispatchBatch.concat(batches[start : start + _BATCHES_PER_PASS])
            if self._index is not None:  # index first: a queued record is an indexed one
                self._index.build_batch(batch)
            self._queues.put_batch(batch)
            self._advance(batch.end_offset, int(batch.store_timestamps[-1]))

    def _dispatch_requests(self, requests: list[DispatchRequest]) -> None:
        if not requests:
            return
        if self._index is not None:  # index first: a queued record is an indexed one
            self._index.build(requests)
        self._queues.put([r for r in requests if gets_queue_entry(r.sys_flag)])
        last = requests[-1]
        self._advance(last.physical_offset + last.size, last.store_timestamp)

    def _advance(self, end_offset: int, store_timestamp: int) -> None:
        self.reput_offset = end_offset
        self.last_store_timestamp = store_timestamp
        self.dispatched_to = max(self.dispatched_to, end_offset)

    @property
    def behind_bytes(self) -> int:
        return max(0, self._commitlog.max_offset - self.dispatched_to)
