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

from rocketstore.config import BrokerRole
from rocketstore.results import PutStatus
from rocketstore.store import MessageStore

__all__ = ["DurableWaits"]

log = logging.getLogger("rocketstore.broker")


class DurableWaits:
    """Waits for ``store``'s puts to be durable (``executor``: the store threads a SYNC_MASTER's
    waits run on).

    Thread safety: ``status`` is awaited on the event loop.
    """

    def __init__(self, store: MessageStore, executor: concurrent.futures.Executor) -> None:
        self._store = store
        self._executor = executor
        self._on_thread = store.config.broker_role is BrokerRole.SYNC_MASTER
        self._timeout_s = store.config.sync_flush_timeout / 1000

    async def status(self, end: int) -> PutStatus:
        """The status of a put whose bytes end at commitlog offset ``end``, once its wait is
        over. A wait that fails (the store closed under it) is FLUSH_DISK_TIMEOUT: the put was
        made, and is answered as one whose durability is not known."""
        try:
            if self._on_thread:
                return await asyncio.get_running_loop().run_in_executor(
                    self._executor, self._store.wait_durable, end
                )
            return await self._flushed(end)
        except Exception as exc:  # (not a cancellation: that is the caller's)
            log.error("waiting for the commitlog to be durable up to %d failed: %s", end, exc)
            return PutStatus.FLUSH_DISK_TIMEOUT

    async def _flushed(self, end: int) -> PutStatus:
        loop = asyncio.get_running_loop()
        outcome: asyncio.Future[PutStatus] = loop.create_future()

        def settle(status: PutStatus) -> None:
            if not outcome.done():
                outcome.set_result(status)

        def done(status: PutStatus) -> None:  # on the group commit's thread, or here at once
            with contextlib.suppress(RuntimeError):  # the loop closed: no one waits any more
                loop.call_soon_threadsafe(settle, status)

        def expire() -> None:
            if not outcome.done():
                log.error(
                    "SYNC_FLUSH: the commitlog was not flushed up to %d within %d ms: "
                    "answered FLUSH_DISK_TIMEOUT",
                    end,
                    int(self._timeout_s * 1000),
                )
                outcome.set_result(PutStatus.FLUSH_DISK_TIMEOUT)

        self._store.when_flushed(end, done)
        deadline = loop.call_later(self._timeout_s, expire)
        try:
            return await outcome
        finally:
            deadline.cancel()
