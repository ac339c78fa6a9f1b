"""Group commit of sends: the SendMessage calls that arrive while the store is busy are appended
by one ``put_messages`` call, off the event loop (issue item 5).

Each call of ``put`` waits for its own result. One round takes everything queued (up to
``max_batch`` messages) and hands it to a worker thread; up to ``rounds`` rounds run at once, so
one batch is appended while the previous one waits for its flush (SYNC_FLUSH: ``put_messages``
returns only once the group commit fsynced the batch, or FLUSH_DISK_TIMEOUT after
``sync_flush_timeout``). A batch the store refuses as a whole (one bad message refuses all) is
put again message by message, so only the bad message's sender gets the error.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
from collections.abc import Sequence

from rocketstore.errors import InvalidMessageError
from rocketstore.message import Message
from rocketstore.results import PutMessageResult
from rocketstore.store import MessageStore

__all__ = ["GroupCommit"]

log = logging.getLogger(__name__)

PutOutcome = PutMessageResult | BaseException


class GroupCommit:
    """Batches puts of one kind (``internal`` as for ``MessageStore.put_messages``).

    Thread safety: ``put`` is called on the event loop only; the store call runs on ``executor``.
    """

    def __init__(
        self,
        store: MessageStore,
        executor: concurrent.futures.Executor,
        *,
        internal: bool = False,
        max_batch: int = 1024,
        rounds: int = 2,
    ) -> None:
        self._store = store
        self._executor = executor
        self._internal = internal
        self._max_batch = max_batch
        self._rounds = rounds
        self._running = 0
        self._drains: set[asyncio.Task[None]] = set()
        self._queue: list[tuple[Sequence[Message], asyncio.Future[list[PutOutcome]]]] = []
        self.batches = 0  # rounds run, for the metrics
        self.messages = 0

    async def put(self, msgs: Sequence[Message]) -> list[PutOutcome]:
        """Store ``msgs`` as one all-or-nothing group within a round; one outcome per message."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[list[PutOutcome]] = loop.create_future()
        self._queue.append((msgs, fut))
        if self._running < self._rounds:
            self._running += 1
            task = loop.create_task(self._drain())
            self._drains.add(task)
            task.add_done_callback(self._drains.discard)
        return await fut

    async def _drain(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            while self._queue:
                taken: list[tuple[Sequence[Message], asyncio.Future[list[PutOutcome]]]] = []
                count = 0
                while self._queue and (not taken or count + len(self._queue[0][0]) <= self._max_batch):
                    item = self._queue.pop(0)
                    taken.append(item)
                    count += len(item[0])
                groups = [msgs for msgs, _ in taken]
                try:
                    outcomes = await loop.run_in_executor(self._executor, self._put_groups, groups)
                except BaseException as exc:  # the store is closed, a flush failed: every sender hears it
                    outcomes = [[exc] * len(g) for g in groups]
                self.batches += 1
                self.messages += count
                for (_, fut), outcome in zip(taken, outcomes):
                    if not fut.done():
                        fut.set_result(outcome)
        finally:
            self._running -= 1

    def _put_groups(self, groups: list[Sequence[Message]]) -> list[list[PutOutcome]]:
        """One store call for every group; a refused batch again group by group."""
        flat = [m for g in groups for m in g]
        try:
            results = self._store.put_messages(flat, internal=self._internal)
        except InvalidMessageError:
            if len(groups) == 1:
                raise
            return [self._put_one_group(g) for g in groups]
        out: list[list[PutOutcome]] = []
        i = 0
        for g in groups:
            out.append(list(results[i : i + len(g)]))
            i += len(g)
        return out

    def _put_one_group(self, group: Sequence[Message]) -> list[PutOutcome]:
        try:
            return list(self._store.put_messages(group, internal=self._internal))
        except InvalidMessageError as exc:
            return [exc] * len(group)
