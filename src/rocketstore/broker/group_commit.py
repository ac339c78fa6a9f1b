"""Group commit of sends: the SendMessage calls that arrive while the store is busy are appended
by one ``put_messages`` call (producers' encoded batches: one ``put_encoded_batches`` call),
through ``Coalescer``: on a thread when puts wait for their flush, else on the event loop at its
next turn.

SYNC_FLUSH: ``put_messages`` returns only once the group commit fsynced the batch (or
FLUSH_DISK_TIMEOUT after ``sync_flush_timeout``), so a round of many sends waits for one flush.
A batch the store refuses as a whole (one bad message refuses all) is put again send by send, so
only the bad message's sender gets the error.
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Callable, Sequence
from typing import TypeVar

from rocketstore.broker.coalesce import Coalescer
from rocketstore.codec.message_batch import EncodedBatch
from rocketstore.errors import InvalidMessageError
from rocketstore.message import Message
from rocketstore.results import PutBatchResult, PutMessageResult
from rocketstore.store import MessageStore

__all__ = ["EncodedBatchCommit", "GroupCommit", "PutOutcome"]

PutOutcome = PutMessageResult | BaseException
BatchOutcome = PutBatchResult | BaseException
T = TypeVar("T")
R = TypeVar("R")


class GroupCommit:
    """Batches puts of one kind (``internal`` as for ``MessageStore.put_messages``), at most
    ``max_batch`` messages in one store call.

    Thread safety: ``put`` is called on the event loop only; the store call runs on ``executor``
    (None: on the event loop, for a store whose puts wait for nothing: ``StoreConfig.puts_wait``).
    """

    def __init__(
        self,
        store: MessageStore,
        executor: concurrent.futures.Executor | None,
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

    def _put_groups(self, groups: list[Sequence[Message]]) -> list[list[PutOutcome] | BaseException]:
        """One store call for every group; a refused call again group by group."""
        return each_on_refusal(self._put_all, groups)

    def _put_all(self, groups: list[Sequence[Message]]) -> list[list[PutOutcome]]:
        results = self._store.put_messages([m for g in groups for m in g], internal=self._internal)
        out: list[list[PutOutcome]] = []
        i = 0
        for g in groups:
            out.append(list(results[i : i + len(g)]))
            i += len(g)
        return out


class EncodedBatchCommit:
    """Batches producers' encoded batches, at most ``max_batches`` of them in one store call; a
    call the store refuses (one bad batch refuses all) is made again batch by batch.

    Thread safety: ``put`` is called on the event loop only; the store call runs on ``executor``
    (None: on the event loop, as ``GroupCommit``'s).
    """

    def __init__(
        self,
        store: MessageStore,
        executor: concurrent.futures.Executor | None,
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
        return each_on_refusal(self._store.put_encoded_batches, batches)


def each_on_refusal(put: Callable[[list[T]], Sequence[R]], items: list[T]) -> list[R | BaseException]:
    """``put(items)``: one outcome per item. When the store refuses the call (one bad item refuses
    all), each item again on its own, so only the bad one's caller gets the InvalidMessageError
    (raised when it is the only one)."""
    try:
        return list(put(items))
    except InvalidMessageError:
        if len(items) == 1:
            raise
    out: list[R | BaseException] = []
    for item in items:
        try:
            out.extend(put([item]))
        except InvalidMessageError as exc:
            out.append(exc)
    return out
