"""DispatchService: follows the commitlog and feeds the consume queues and the index."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from itertools import islice

from rocketstore.codec.commitlog_record import SYSFLAG_TX_MASK, TX_PREPARED, TX_ROLLBACK
from rocketstore.commitlog import CommitLog
from rocketstore.consume_queue import ConsumeQueueSet
from rocketstore.dispatch_request import DispatchBatch, DispatchRequest
from rocketstore.index import IndexService
from rocketstore.service import BackgroundService

__all__ = ["DispatchService"]

log = logging.getLogger(__name__)
_CATCH_UP_BATCH = 4096


class DispatchService(BackgroundService):
    """RocketMQ's ReputMessageService.

    Records below ``catch_up_to`` (written before this store was opened) are re-parsed from
    the commitlog starting at ``reput_offset``; records appended since come straight from the
    writer (``CommitLog.take_dispatch_requests``), in log order, so they are not parsed again.
    PREPARED and ROLLBACK records are indexed but get no consume-queue entry.

    ``dispatched_to`` is the commitlog offset below which everything is dispatched; waiters
    on ``changed`` are notified after every round that dispatched something.
    """

    def __init__(
        self,
        commitlog: CommitLog,
        queues: ConsumeQueueSet,
        index: IndexService | None,
        *,
        reput_offset: int,
        on_failure: Callable[[BackgroundService, BaseException], None] | None = None,
    ) -> None:
        super().__init__("dispatch", interval=0.001, on_failure=on_failure)
        self._commitlog = commitlog
        self._queues = queues
        self._index = index
        self.reput_offset = reput_offset
        self.catch_up_to = commitlog.max_offset
        self.dispatched_to = reput_offset
        self.last_store_timestamp = 0
        self.changed = threading.Condition()

    def run_once(self) -> None:
        while self.reput_offset < self.catch_up_to:
            parsed = list(
                islice(
                    self._commitlog.dispatch_requests(self.reput_offset, self.catch_up_to), _CATCH_UP_BATCH
                )
            )
            if not parsed:  # only BLANK space left, or a corrupt record (CommitLog.scan logged it)
                self.catch_up_to = self.reput_offset
                break
            self._dispatch(list(parsed))
        snapshot = self._commitlog.max_offset
        requests = self._commitlog.take_dispatch_requests(snapshot)
        if requests:
            self._dispatch(requests)
        waiting = self._commitlog.first_pending_offset()
        if snapshot > self.dispatched_to and (waiting is None or waiting >= snapshot):
            self.dispatched_to = max(snapshot, self.reput_offset)
            with self.changed:
                self.changed.notify_all()

    def _dispatch(self, items: list[DispatchRequest | DispatchBatch]) -> None:
        """Dispatch in log order: runs of single requests, and whole batches in bulk."""
        run: list[DispatchRequest] = []
        for item in items:
            if isinstance(item, DispatchBatch):
                self._dispatch_requests(run)
                run = []
                self._queues.put_batch(item)
                if self._index is not None:
                    self._index.build_batch(item)
                self._advance(item.end_offset, item.store_timestamp)
            else:
                run.append(item)
        self._dispatch_requests(run)
        with self.changed:
            self.changed.notify_all()

    def _dispatch_requests(self, requests: list[DispatchRequest]) -> None:
        if not requests:
            return
        self._queues.put(
            [r for r in requests if r.sys_flag & SYSFLAG_TX_MASK not in (TX_PREPARED, TX_ROLLBACK)]
        )
        if self._index is not None:
            self._index.build(requests)
        last = requests[-1]
        self._advance(last.physical_offset + last.size, last.store_timestamp)

    def _advance(self, end_offset: int, store_timestamp: int) -> None:
        self.reput_offset = end_offset
        self.last_store_timestamp = store_timestamp
        self.dispatched_to = max(self.dispatched_to, end_offset)

    @property
    def behind_bytes(self) -> int:
        return max(0, self._commitlog.max_offset - self.dispatched_to)
