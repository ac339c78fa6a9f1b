"""Group commit of sends: the SendMessage calls of one turn of the event loop are appended by one
store call, on the loop, through ``Coalescer``: ``put_messages`` for Messages (``GroupCommit``),
``put_encoded_columns`` for single messages in the batch encoding (``ColumnCommit``: the gRPC
door's plain sends) and for producers' encoded batches (``EncodedBatchCommit``).

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
from itertools import repeat
from typing import Generic, TypeVar

from rocketstore.broker.coalesce import Coalescer
from rocketstore.broker.durable_waits import DurableWaits
from rocketstore.codec.message_batch import EncodedBatch, EncodedColumns
from rocketstore.errors import InvalidMessageError
from rocketstore.message import Message, waits_for_store
from rocketstore.results import PutBatchResult, PutMessageResult, PutStatus
from rocketstore.store import MessageStore

__all__ = ["ColumnCommit", "EncodedBatchCommit", "GroupCommit", "PutOutcome"]

PutOutcome = PutMessageResult | BaseException
BatchOutcome = PutBatchResult | BaseException
T = TypeVar("T")
R = TypeVar("R")


class _RoundCommit(Generic[T]):
    """Rounds of sends, each send a group of items stored all or none, one store call a round
    (``_put_all``), at most ``max_batch`` items in it; ``waits``: where their durability is
    waited for (None: the store's puts wait for nothing, ``StoreConfig.puts_wait``).

    Thread safety: ``put`` is called on the event loop only, and the store call is made there.
    """

    def __init__(
        self,
        store: MessageStore,
        waits: DurableWaits | None,
        *,
        max_batch: int = 1024,
        rounds: int = 2,
        on_batch: Callable[[], object] | None = None,
    ) -> None:
        self._store = store
        self._waits = waits
        self._rounds: Coalescer[Sequence[T], list[PutOutcome]] = Coalescer(
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

    async def put(self, items: Sequence[T]) -> list[PutOutcome]:
        """Store ``items`` as one all-or-nothing group within a round; one outcome per item."""
        try:
            return await self._rounds.submit(items)
        except Exception as exc:  # the store is closed, a flush failed
            return [exc] * len(items)

    def _put_groups(self, groups: list[Sequence[T]]) -> list[list[PutOutcome] | BaseException]:
        """One store call for every group; a refused call again group by group."""
        return each_on_refusal(self._put_all, groups)

    def _put_all(self, groups: list[Sequence[T]]) -> list[list[PutOutcome]]:
        raise NotImplementedError

    def _waits_for_store(self, groups: list[Sequence[T]]) -> bool:
        """Whether a put of ``groups`` waits to be durable (RocketMQ's isWaitStoreMsgOK)."""
        return True

    async def _durable(
        self, groups: list[Sequence[T]], outcomes: Sequence[list[PutOutcome] | BaseException]
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
        if not ends or not self._waits_for_store([g for g, _ in stored]):
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


def _per_group(groups: list[Sequence[T]], results: Sequence[PutOutcome]) -> list[list[PutOutcome]]:
    out: list[list[PutOutcome]] = []
    i = 0
    for g in groups:
        out.append(list(results[i : i + len(g)]))
        i += len(g)
    return out


class GroupCommit(_RoundCommit[Message]):
    """Rounds of Message sends, one ``put_messages`` call a round (``internal`` as for
    ``MessageStore.put_messages``)."""

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
        super().__init__(store, waits, max_batch=max_batch, rounds=rounds, on_batch=on_batch)
        self._internal = internal

    def _put_all(self, groups: list[Sequence[Message]]) -> list[list[PutOutcome]]:
        results = self._store.put_messages(
            [m for g in groups for m in g], internal=self._internal, wait=False
        )
        return _per_group(groups, results)

    def _waits_for_store(self, groups: list[Sequence[Message]]) -> bool:
        return waits_for_store([m for g in groups for m in g])


class ColumnCommit(_RoundCommit[EncodedBatch]):
    """Rounds of sends of single messages, each given as a producer's batch of one with no
    properties of its own (the gRPC door's: ``as_batch_of_one``), one ``put_encoded_columns``
    call a round (``EncodedColumns.of`` the round's batches), each message answered from the
    result's columns."""

    def _put_all(self, groups: list[Sequence[EncodedBatch]]) -> list[list[PutOutcome]]:
        sends = [b for g in groups for b in g]
        result = self._store.put_encoded_columns(EncodedColumns.of(sends), wait=False)
        stored = result.stored
        results = list(
            map(
                PutMessageResult._make,
                zip(
                    repeat(result.status),
                    [b.topic for b in sends],
                    result.queue_ids.tolist(),
                    result.physical_offsets.tolist(),
                    result.queue_offsets.tolist(),
                    repeat(result.store_timestamp if stored else 0),
                    result.sizes.tolist() if stored else repeat(0),
                    repeat(result.id_prefix),
                ),
            )
        )
        return _per_group(groups, results)


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
