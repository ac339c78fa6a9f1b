"""Group commit of sends: the SendMessage calls that arrive while the store is busy are appended
by one ``put_messages`` call (producers' encoded batches: one ``put_encoded_batches`` call), off
the event loop (issue item 5), through ``Coalescer``.

SYNC_FLUSH: ``put_messages`` returns only once the group commit fsynced the batch (or
FLUSH_DISK_TIMEOUT after ``sync_flush_timeout``), so a round of many sends waits for one flush.
A batch the store refuses as a whole (one bad message refuses all) is put again send by send, so
only the bad message's sender gets the error.
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Callable, Sequence

from rocketstore.broker.coalesce import Coalescer
from rocketstore.codec.message_batch import EncodedBatch
from rocketstore.errors import InvalidMessageError
from rocketstore.message import Message
from rocketstore.results import PutBatchResult, PutMessageResult
from rocketstore.store import MessageStore

__all__ = ["EncodedBatchCommit", "GroupCommit", "PutOutcome"]

PutOutcome = PutMessageResult | BaseException
BatchOutcome = PutBatchResult | BaseException


class GroupCommit:
    """Batches puts of one kind (``internal`` as for ``MessageStore.put_messages``), at most
    ``max_batch`` messages in one store call.

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
        on_batch: Callable[[], object] | None = None,
    ) -> None:
        self._store = store
        self._internal = internal
        self._rounds: Coalescer[Sequence[Message], list[PutOutcome]] = Coalescer(
            self._put_groups, executor, max_weight=max_batch, rounds=rounds, weight=len, on_round=on_batch
        )

    @property
    def batches(self) -> int:
        """Store calls made, for the metrics."""
        return self._rounds.batches

    @property
    def messages(self) -> int:
        """Messages stored (or refused) through those calls."""
        return self._rounds.total_weight

    async def put(self, msgs: Sequence[Message]) -> list[PutOutcome]:
        """Store ``msgs`` as one all-or-nothing group within a round; one outcome per message."""
        try:
            return await self._rounds.submit(msgs)
        except Exception as exc:  # the store is closed, a flush failed
            return [exc] * len(msgs)

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


class EncodedBatchCommit:
    """Batches producers' encoded batches, at most ``max_batches`` of them in one store call; a
    call the store refuses (one bad batch refuses all) is made again batch by batch.

    Thread safety: ``put`` is called on the event loop only; the store call runs on ``executor``.
    """

    def __init__(
        self,
        store: MessageStore,
        executor: concurrent.futures.Executor,
        *,
        max_batches: int = 64,
        rounds: int = 2,
        on_batch: Callable[[], object] | None = None,
    ) -> None:
        self._store = store
        self._rounds: Coalescer[EncodedBatch, BatchOutcome] = Coalescer(
            self._put_all, executor, max_weight=max_batches, rounds=rounds, on_round=on_batch
        )

    async def put(self, batch: EncodedBatch) -> BatchOutcome:
        """Store one producer's batch, all or none, within a round."""
        try:
            return await self._rounds.submit(batch)
        except Exception as exc:  # the store is closed, a flush failed
            return exc

    def _put_all(self, batches: list[EncodedBatch]) -> list[BatchOutcome]:
        try:
            return list(self._store.put_encoded_batches(batches))
        except InvalidMessageError:
            if len(batches) == 1:
                raise
        out: list[BatchOutcome] = []
        for batch in batches:
            try:
                out.extend(self._store.put_encoded_batches([batch]))
            except InvalidMessageError as exc:
                out.append(exc)
        return out
