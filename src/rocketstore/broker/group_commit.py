"""Group commit of sends: the SendMessage calls of one turn of the event loop are appended by one
``put_messages`` call (producers' encoded batches: one ``put_encoded_batches`` call), on the loop,
through ``Coalescer``.

SYNC_FLUSH, SYNC_MASTER: the round's callers are answered once the round is durable
(``DurableWaits``: the group commit fsynced it, a slave holds it; or FLUSH_DISK_TIMEOUT ... as a
put that waits says), so a round of many sends waits for one flush; up to ``rounds`` rounds wait
at once, and the sends of the turns meanwhile form the next round.
A batch the store refuses as a whole (one bad message refuses all) is put again send by send, so
only the bad message's sender gets the error.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import TypeVar

from rocketstore.broker.coalesce import Coalescer
from rocketstore.broker.durable_waits import DurableWaits
from rocketstore.codec.message_batch import EncodedBatch
from rocketstore.errors import InvalidMessageError
from rocketstore.message import Message, waits_for_store
from rocketstore.results import PutBatchResult, PutMessageResult, PutStatus
from rocketstore.store import MessageStore

__all__ = ["EncodedBatchCommit", "GroupCommit", "PutOutcome"]

PutOutcome = PutMessageResult | BaseException
BatchOutcome = PutBatchResult | BaseException
T = TypeVar("T")
R = TypeVar("R")


class GroupCommit:
    """Batches puts of one kind (``internal`` as for ``MessageStore.put_messages``), at most
    ``max_batch`` messages in one store call; ``waits``: where their durability is waited for
    (None: the store's puts wait for nothing, ``StoreConfig.puts_wait``).

    Thread safety: ``put`` is called on the event loop only, and the store call is made there.
    """

    def __init__(
        self,
        store: MessageStore,
        waits: DurableWaits | None,
        *,
        internal: bool = False,
        max_batch: int = 1024,
        rounds: int = 2,
        on_batch: Callable[[], object] | None = None,
    ) -> None:
        self._store = store
        self._internal = internal
        self._waits = waits
        self._rounds: Coalescer[Sequence[Message], list[PutOutcome]] = Coalescer(
            self._put_groups,
            None,
            max_weight=max_batch,
            rounds=rounds,
            weight=len,
            on_round=on_batch,
            finish=None if waits is None else self._durable,
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

    async def _durable(
        self, groups: list[Sequence[Message]], outcomes: Sequence[list[PutOutcome] | BaseException]
    ) -> Sequence[list[PutOutcome] | BaseException]:
        """The round's outcomes once what it stored is durable (its statuses say if it is not)."""
        assert self._waits is not None
        stored = [(g, o) for g, o in zip(groups, outcomes) if not isinstance(o, BaseException)]
        ends = [
            r.physical_offset + r.wrote_bytes
            for _, o in stored
            for r in o
            if isinstance(r, PutMessageResult) and r.ok
        ]
        if not ends or not waits_for_store([m for g, _ in stored for m in g]):
            return outcomes
        status = await self._waits.status(max(ends))
        if status is PutStatus.PUT_OK:
            return outcomes
        return [
            o
            if isinstance(o, BaseException)
            else [r._replace(status=status) if isinstance(r, PutMessageResult) and r.ok else r for r in o]
            for o in outcomes
        ]

    def _put_all(self, groups: list[Sequence[Message]]) -> list[list[PutOutcome]]:
        results = self._store.put_messages(
            [m for g in groups for m in g], internal=self._internal, wait=False
        )
        out: list[list[PutOutcome]] = []
        i = 0
        for g in groups:
            out.append(list(results[i : i + len(g)]))
            i += len(g)
        return out


class EncodedBatchCommit:
    """Batches producers' encoded batches, at most ``max_batches`` of them in one store call; a
    call the store refuses (one bad batch refuses all) is made again batch by batch. ``waits``
    as ``GroupCommit``'s.

    Thread safety: ``put`` is called on the event loop only, and the store call is made there.
    """

    def __init__(
        self,
        store: MessageStore,
        waits: DurableWaits | None,
        *,
        max_batches: int = 64,
        rounds: int = 2,
        on_batch: Callable[[], object] | None = None,
    ) -> None:
        self._store = store
        self._waits = waits
        self._rounds: Coalescer[EncodedBatch, BatchOutcome] = Coalescer(
            self._put_all,
            None,
            max_weight=max_batches,
            rounds=rounds,
            on_round=on_batch,
            finish=None if waits is None else self._durable,
        )

    async def put(self, batch: EncodedBatch) -> BatchOutcome:
        """Store one producer's batch, all or none, within a round."""
        try:
            return await self._rounds.submit(batch)
        except Exception as exc:  # the store is closed, a flush failed
            return exc

    def _put_all(self, batches: list[EncodedBatch]) -> list[BatchOutcome]:
        return each_on_refusal(self._put, batches)

    def _put(self, batches: list[EncodedBatch]) -> list[PutBatchResult]:
        return self._store.put_encoded_batches(batches, wait=False)

    async def _durable(
        self, batches: list[EncodedBatch], outcomes: Sequence[BatchOutcome | BaseException]
    ) -> Sequence[BatchOutcome | BaseException]:
        """The round's outcomes once what it stored is durable (its statuses say if it is not)."""
        assert self._waits is not None
        ends = [
            int(o.physical_offsets[-1] + o.sizes[-1])
            for o in outcomes
            if isinstance(o, PutBatchResult) and o.ok and len(o)
        ]
        if not ends:
            return outcomes
        status = await self._waits.status(max(ends))
        if status is PutStatus.PUT_OK:
            return outcomes
        return [
            dataclasses.replace(o, status=status) if isinstance(o, PutBatchResult) and o.ok else o
            for o in outcomes
        ]


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
