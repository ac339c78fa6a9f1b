"""The wait for a send to be durable, apart from its put.

The broker stores sends on its event loop, with ``wait=False``: a put is an append to the mapped
commitlog, and handing it to a thread and back cost more than the put (docs/remoting.md). When
the store's puts wait (``StoreConfig.puts_wait``), the send is answered once that wait is over,
with the status a put that waited would have had:

* SYNC_FLUSH: the group commit's thread tells the loop when it flushed the put
  (``MessageStore.when_flushed``); no thread waits. A flush that takes longer than
  ``sync_flush_timeout`` is answered FLUSH_DISK_TIMEOUT at that deadline (the message is
  stored; its durability is not known), as a waiting put returns then.
* SYNC_MASTER: a store thread waits (``MessageStore.wait_durable``: the flush, then a slave's
  acknowledgement), where it holds no lock and costs no CPU.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
from collections.abc import Callable

from rocketstore.config import BrokerRole
from rocketstore.results import PutStatus
from rocketstore.store import MessageStore

__all__ = ["DurableWaits"]

log = logging.getLogger("rocketstore.broker")


class DurableWaits:
    """Waits for ``store``'s puts to be durable (``executor``: the store threads a SYNC_MASTER's
    waits run on).

    Thread safety: on the event loop (``status``, ``when_durable``).
    """

    def __init__(self, store: MessageStore, executor: concurrent.futures.Executor) -> None:
        self._store = store
        self._executor = executor
        self._on_thread = store.config.broker_role is BrokerRole.SYNC_MASTER
        self._timeout_s = store.config.sync_flush_timeout / 1000

    async def status(self, end: int) -> PutStatus:
        """The status of a put whose bytes end at commitlog offset ``end``, once its wait is
        over (``when_durable``)."""
        outcome: asyncio.Future[PutStatus] = asyncio.get_running_loop().create_future()

        def done(status: PutStatus) -> None:
            if not outcome.done():  # (its awaiter may have been cancelled)
                outcome.set_result(status)

        self.when_durable(end, done)
        return await outcome

    def when_durable(self, end: int, done: Callable[[PutStatus], object]) -> None:
        """``done(status)`` on the event loop, once, when the wait of a put whose bytes end at
        commitlog offset ``end`` is over: with the status a put that waited would have had. A
        wait that fails (the store closed under it) is FLUSH_DISK_TIMEOUT: the put was made,
        and is answered as one whose durability is not known. No task: a round of sends is
        answered from here."""
        loop = asyncio.get_running_loop()
        if self._on_thread:
            try:
                waited = loop.run_in_executor(self._executor, self._store.wait_durable, end)
            except RuntimeError as exc:  # (the executor shut down: the broker stops)
                log.error("waiting for the commitlog to be durable up to %d failed: %s", end, exc)
                done(PutStatus.FLUSH_DISK_TIMEOUT)
                return
            waited.add_done_callback(lambda w: done(self._outcome(end, w)))
            return
        deadline: asyncio.TimerHandle | None = None
        settled = False

        def settle(status: PutStatus) -> None:
            nonlocal settled
            if settled:
                return
            settled = True
            if deadline is not None:
                deadline.cancel()
            done(status)

        def flushed(status: PutStatus) -> None:  # on the group commit's thread, or here at once
            with contextlib.suppress(RuntimeError):  # the loop closed: no one waits any more
                loop.call_soon_threadsafe(settle, status)

        def expire() -> None:
            if not settled:
                log.error(
                    "SYNC_FLUSH: the commitlog was not flushed up to %d within %d ms: "
                    "answered FLUSH_DISK_TIMEOUT",
                    end,
                    int(self._timeout_s * 1000),
                )
                settle(PutStatus.FLUSH_DISK_TIMEOUT)

        deadline = loop.call_later(self._timeout_s, expire)
        try:
            self._store.when_flushed(end, flushed)
        except Exception as exc:
            log.error("waiting for the commitlog to be durable up to %d failed: %s", end, exc)
            settle(PutStatus.FLUSH_DISK_TIMEOUT)

    @staticmethod
    def _outcome(end: int, waited: asyncio.Future[PutStatus]) -> PutStatus:
        if waited.cancelled():
            return PutStatus.FLUSH_DISK_TIMEOUT
        error = waited.exception()
        if error is None:
            return waited.result()
        log.error("waiting for the commitlog to be durable up to %d failed: %s", end, error)
        return PutStatus.FLUSH_DISK_TIMEOUT
