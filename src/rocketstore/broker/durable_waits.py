"""The wait for a send to be durable, apart from its put.

The broker stores sends on its event loop, with ``wait=False``: a put is an append to the mapped
commitlog, and handing it to a thread and back cost more than the put (docs/remoting.md). When
the store's puts wait (SYNC_FLUSH's group commit, a SYNC_MASTER's slave:
``StoreConfig.puts_wait``), that wait alone goes to a store thread (``MessageStore.wait_durable``),
where it holds no lock and costs no CPU, and the send is answered with its outcome: PUT_OK,
FLUSH_DISK_TIMEOUT, FLUSH_SLAVE_TIMEOUT or SLAVE_NOT_AVAILABLE, as a put that waited says.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging

from rocketstore.results import PutStatus
from rocketstore.store import MessageStore

__all__ = ["DurableWaits"]

log = logging.getLogger("rocketstore.broker")


class DurableWaits:
    """Waits on ``executor``'s threads for ``store``'s puts to be durable.

    Thread safety: ``status`` is awaited on the event loop.
    """

    def __init__(self, store: MessageStore, executor: concurrent.futures.Executor) -> None:
        self._store = store
        self._executor = executor

    async def status(self, end: int) -> PutStatus:
        """The status of a put whose bytes end at commitlog offset ``end``, once its wait is
        over. A wait that fails (the store closed under it) is FLUSH_DISK_TIMEOUT: the put was
        made, and is answered as one whose durability is not known."""
        try:
            return await asyncio.get_running_loop().run_in_executor(
                self._executor, self._store.wait_durable, end
            )
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.error("waiting for the commitlog to be durable up to %d failed: %s", end, exc)
            return PutStatus.FLUSH_DISK_TIMEOUT
