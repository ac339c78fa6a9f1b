"""Sends in bulk: the sends that every connection's reader found in one turn of the loop stored
by one columnar store call and answered in one pass per connection, with no Python object per
request (issue 30).

The server's read pass takes every connection's whole frames apart with a compiled pass
(``command.scan_frames``) and hands over the sends it could decode whole, as columns; once every
connection has, what is waiting forms a round, put on the loop at once, so a lone send goes at
once and batches grow only with the load: no timer anywhere. When the
store's puts wait (for the flush, or a slave), a round is answered once that wait is over
(``DurableWaits``: the group commit tells the loop, or a store thread waits for the slave); up to
two rounds wait at once, and the sends that come meanwhile form the next round.

Per round, the broker's judgement is per topic, not per send: a topic that does not exist, takes
no writes, or is not a plain name, and a queue id past the topic's queues, send their requests
to the handler (``ProducerProcessor.send``), which creates the topic or gives the refusal its
code and remark.
So does every send of a round the store refuses whole (nothing stored: a damaged batch, a full
disk, a slave): the handler tries each again and answers it. An error after the write (a failed
flush) is answered to each send as the handler answers it, never by storing again.

Answers are byte for byte those of the handler (``encode_send_answers``): SUCCESS, or
FLUSH_DISK_TIMEOUT / FLUSH_SLAVE_TIMEOUT / SLAVE_NOT_AVAILABLE with "stored, but ...".

Thread safety: everything here runs on the event loop, ``put_encoded_columns`` too; only the
durability waits run on the store's threads.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import time
from collections import deque
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

import numpy as np
import numpy.typing as npt

from rocketstore.broker.remoting.codes import STORED_CODES, ResponseCode
from rocketstore.broker.remoting.command import (
    FLAG_ONEWAY,
    HOT_BATCH,
    SCAN_AT,
    SCAN_BORN,
    SCAN_CODE,
    SCAN_DATA_AT,
    SCAN_DATA_LEN,
    SCAN_EXTRA_AT,
    SCAN_EXTRA_LEN,
    SCAN_FLAG,
    SCAN_HOT,
    SCAN_KIND,
    SCAN_LEN,
    SCAN_OPAQUE,
    SCAN_QUEUE,
    SCAN_RECONSUME,
    SCAN_SYS_FLAG,
    SCAN_TOPIC,
    RemotingCommand,
    encode_send_answers,
)
from rocketstore.broker.remoting.context import RemotingContext
from rocketstore.broker.remoting.producer import (
    PROPERTY_CLUSTER,
    ProducerProcessor,
    put_status_code,
    refusal_of,
)
from rocketstore.codec.message_batch import EncodedColumns
from rocketstore.codec.text_column import gather_spans
from rocketstore.errors import InvalidMessageError
from rocketstore.jit import kernel
from rocketstore.results import PutColumnsResult, PutStatus

if TYPE_CHECKING:
    from rocketstore import MessageStore
    from rocketstore.broker.remoting.server import Connection

__all__ = ["BulkSends"]

log = logging.getLogger("rocketstore.broker.remoting")

_ROUNDS: Final = 2  # rounds waiting to be durable at once (then the next waits for one of them)
_MAX_ROUND_REQUESTS: Final = 4096  # a round's sends at most (what waits beyond goes next round)
_NO_TEXT: Final = np.frombuffer(b"", dtype=np.uint8)
_ANSWERED_BEFORE_DISPATCH: Final = 8  # sends in a round at most, for its answers to go first
_DEFERRED_TURNS: Final = 16  # turns of the loop at most that a small round's dispatch pass waits


@dataclass(eq=False, slots=True)
class _Offer:
    """One connection's sends from one read: ``cols`` (``scan_frames``' rows, hot columns only;
    SCAN_TOPIC numbers ``topics``) over the read's bytes ``frames`` and the pass's ``data`` and
    ``extras``."""

    conn: Connection
    frames: bytes
    cols: npt.NDArray[np.int64]
    topics: list[str]
    data: npt.NDArray[np.uint8]
    extras: npt.NDArray[np.uint8]
    read_at: float
    frame_bytes: int
    released: bool = False  # its count in progress ended (answered, or handed on)

    def __len__(self) -> int:
        return int(self.cols.shape[1])


class _DeferredDispatch:
    """The dispatch pass of small rounds, put off while more sends come: one pass for the rounds
    of up to ``_DEFERRED_TURNS`` turns of the loop, not one each (a small round's pass is about
    two fifths of its put, most of it fixed: docs/remoting.md, Performance).

    The first small round opens the store's ``dispatch_deferred`` block. A check at the start of
    each later turn of the loop closes it, which dispatches, when the turn before ran no round and
    no sends wait for one. (The check may run before the turn's read pass hands over what the
    turn before read: sends show up a turn after they are read, hence the look at the turn before.)
    Nothing reads the store late for it: a read of this process dispatches what is owed first
    (a pull, a query). While a receive waits for messages (a parked pull, a gRPC receive:
    ``ArrivalSignal.watched``) the pass comes at the next turn; what else waits for it (a
    follower in another process) waits ``_DEFERRED_TURNS`` turns at most. No timer: a loop left
    idle dispatches at the second turn after its last round.

    While rounds wait to be durable (``durable_waiting``: SYNC_FLUSH, SYNC_MASTER) the pass waits
    for their answers (``answered``), not for an idle turn: the loop's idle turns then are the
    group commit's flush, and a pass run in them held the GIL that the group commit's thread
    needs back to tell the loop (single sends from 4 threads: docs/remoting.md). Each answer
    counts as a turn: a follower in another process waits ``_DEFERRED_TURNS`` of them at most,
    each at most a flush (or its deadline, ``sync_flush_timeout``) apart.

    On the loop's thread only: the block is that thread's."""

    def __init__(
        self,
        store: MessageStore,
        sends_waiting: Callable[[], bool],
        receives_waiting: Callable[[], bool],
        durable_waiting: Callable[[], bool],
    ) -> None:
        self._store = store
        self._sends_waiting = sends_waiting
        self._receives_waiting = receives_waiting
        self._durable_waiting = durable_waiting
        self._block: AbstractContextManager[None] | None = None
        self._turns = 0
        self._rounds_since_check = False
        self._check_scheduled = False

    def open(self) -> None:
        """The next puts of this thread are dispatched by the pass of a later turn."""
        if self._block is None:
            block = self._store.dispatch_deferred()
            block.__enter__()
            self._block = block
            self._turns = 0
        self._rounds_since_check = True
        self._check_next_turn()

    def answered(self) -> None:
        """A round waiting to be durable was answered: the pass it put off is checked again."""
        if self._block is not None:
            self._check_next_turn()

    def _check_next_turn(self) -> None:
        if not self._check_scheduled:
            self._check_scheduled = True
            asyncio.get_running_loop().call_soon(self._check)

    def _check(self) -> None:
        self._check_scheduled = False
        if self._block is None:
            return
        self._turns += 1
        busy, self._rounds_since_check = self._rounds_since_check or self._sends_waiting(), False
        if self._turns < _DEFERRED_TURNS and not self._receives_waiting():
            if busy:
                self._check_next_turn()
                return
            if self._durable_waiting():
                return  # checked again as a round is answered
        self.close()

    def close(self) -> None:
        """The pass, now, for what was put since ``open``."""
        block, self._block = self._block, None
        if block is not None:
            block.__exit__(None, None, None)


class BulkSends:
    """The broker's sends in bulk (see the module docstring)."""

    def __init__(self, ctx: RemotingContext, producer: ProducerProcessor) -> None:
        self.ctx = ctx
        self._producer = producer
        self.cluster = f"{PROPERTY_CLUSTER}\x01{ctx.config.cluster_name}".encode()
        self._waiting: deque[_Offer] = deque()
        self._scheduled = False
        self._running = 0
        self._prefix, self._prefix_bytes = "", _NO_TEXT  # the store's message id prefix, as bytes
        self._deferred = _DeferredDispatch(
            ctx.store, lambda: bool(self._waiting), lambda: ctx.arrival.watched, lambda: self._running > 0
        )
        self.requests = 0  # sends answered in bulk (tests count them)

    def dispatch_owed(self) -> None:
        """Dispatch what small rounds put and have not dispatched yet (the server stops)."""
        self._deferred.close()

    @property
    def max_body(self) -> int:
        """The largest body a send may carry (a larger one is the handler's to refuse)."""
        return self.ctx.config.max_body_size

    def offer(
        self,
        conn: Connection,
        frames: bytes,
        cols: npt.NDArray[np.int64],
        topics: list[str],
        data: npt.NDArray[np.uint8],
        extras: npt.NDArray[np.uint8],
        read_at: float,
    ) -> None:
        """Take the hot sends ``cols`` of one read of ``conn``; they are answered (or handed to
        their handler) once their round is done. Counted as requests in progress meanwhile. Their
        round starts at the next ``run``."""
        n = cols.shape[1]
        size = int(cols[SCAN_LEN].sum())
        conn.requests_in_progress += n
        conn.bytes_in_progress += size
        self._waiting.append(_Offer(conn, frames, cols, topics, data, extras, read_at, size))

    def run(self) -> None:
        """Start the rounds of the sends waiting now, at once (as many as may run): the server's
        read pass calls it once every connection it read has offered its sends."""
        while self._waiting and self._running < _ROUNDS:
            self._run(self._take())

    # --- rounds -------------------------------------------------------------------------------
    def _schedule(self) -> None:
        """The rounds of the sends left waiting at the loop's next turn (a round that was
        waiting to be durable is over), if none is scheduled yet."""
        if self._waiting and not self._scheduled:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self._scheduled_run)

    def _scheduled_run(self) -> None:
        self._scheduled = False
        self.run()

    def _take(self) -> list[_Offer]:
        taken: list[_Offer] = []
        count = 0
        while self._waiting and (not taken or count + self._waiting[0].cols.shape[1] <= _MAX_ROUND_REQUESTS):
            offer = self._waiting.popleft()
            taken.append(offer)
            count += offer.cols.shape[1]
        return taken

    def _run(self, offers: list[_Offer]) -> None:
        """Check the offers' topics and queues, and hand what passes to the store in one call."""
        kept: list[_Offer] = []
        for offer in offers:
            try:
                keep, kept_sends = self._checked(offer)
            except Exception:  # a bug must not strand the requests: their handler answers them
                log.exception("bulk sends: checking %d sends failed; their handler answers them", len(offer))
                keep, kept_sends = np.zeros(len(offer), dtype=np.bool_), 0
            if kept_sends < len(offer):
                self._to_handler(offer, ~keep)
                if not kept_sends:
                    continue
                offer = self._narrowed(offer, keep)
            kept.append(offer)
        if not kept:
            return
        try:
            cols = kept[0].cols if len(kept) == 1 else np.concatenate([o.cols for o in kept], axis=1)
            columns = self._columns(kept, cols)
        except Exception:
            log.exception("bulk sends: a round of %d sends failed; their handler answers them", len(kept))
            for offer in kept:
                self._to_handler(offer, np.ones(len(offer), dtype=np.bool_))
            return
        # a small round is answered before its dispatch pass, which waits while more sends do
        # (_DeferredDispatch). A large one's pass runs first: under load, answers sent sooner
        # only bring the next sends sooner, ahead of the pulls waiting
        if cols.shape[1] <= _ANSWERED_BEFORE_DISPATCH:
            self._deferred.open()
        else:
            self._deferred.close()
        self._put(kept, columns, cols)

    def _put(self, kept: list[_Offer], columns: EncodedColumns, cols: npt.NDArray[np.int64]) -> None:
        """Store the round's sends; answer them now, or once their durability wait is over."""
        self._running += 1
        started = time.monotonic()
        loop = asyncio.get_running_loop()
        future: asyncio.Future[PutColumnsResult] = loop.create_future()
        try:
            result = self.ctx.store.put_encoded_columns(columns, wait=False)
        except Exception as exc:
            future.set_exception(exc)
        else:
            self.ctx.metrics.batches.inc()
            waits = self.ctx.durable_waits
            if waits is not None and result.status is PutStatus.PUT_OK and len(result):
                end = int(result.physical_offsets[-1] + result.sizes[-1])
                waits.when_durable(
                    end, lambda status: self._durable(kept, columns, cols, result, status, started)
                )
                return
            future.set_result(result)
        self._done(kept, columns, cols, future, started)

    def _durable(
        self,
        offers: list[_Offer],
        columns: EncodedColumns,
        cols: npt.NDArray[np.int64],
        result: PutColumnsResult,
        status: PutStatus,
        started: float,
    ) -> None:
        """A round's durability wait is over: answered with its status."""
        future: asyncio.Future[PutColumnsResult] = asyncio.get_running_loop().create_future()
        future.set_result(
            result if status is PutStatus.PUT_OK else dataclasses.replace(result, status=status)
        )
        self._done(offers, columns, cols, future, started)

    def _checked(self, offer: _Offer) -> tuple[npt.NDArray[np.bool_], int]:
        """Which of the offer's sends may be stored as they are, and how many: to a topic that
        exists, takes writes and is a plain name; to a queue it has (a negative queue id gets
        one at random)."""
        configs = [self._producer.bulk_topic(topic) for topic in offer.topics]
        queues = np.array([-1 if c is None else max(c.read_queues, c.write_queues) for c in configs])
        writes = np.array([1 if c is None else max(1, c.write_queues) for c in configs])
        return _kept(offer.cols, queues, writes)

    @staticmethod
    def _narrowed(offer: _Offer, keep: npt.NDArray[np.bool_]) -> _Offer:
        """The offer without the sends handed to their handler (which took over their count)."""
        cols = np.ascontiguousarray(offer.cols[:, keep])  # (rows of one layout: one compiled form)
        size = int(cols[SCAN_LEN].sum())
        return _Offer(
            offer.conn, offer.frames, cols, offer.topics, offer.data, offer.extras, offer.read_at, size
        )

    def _columns(self, offers: list[_Offer], cols: npt.NDArray[np.int64]) -> EncodedColumns:
        """The round's sends as the store takes them; ``cols``: the offers' columns, in order."""
        if len(offers) == 1:  # (the usual round under few senders: its numbers stand as they are)
            offer = offers[0]
            data, data_at = gather_spans(offer.data, cols[SCAN_DATA_AT], cols[SCAN_DATA_LEN])
            props, props_at = gather_spans(offer.extras, cols[SCAN_EXTRA_AT], cols[SCAN_EXTRA_LEN])
            return EncodedColumns(
                data, data_at, offer.topics, cols[SCAN_TOPIC], cols[SCAN_QUEUE], [offer.conn.peer],
                np.zeros(cols.shape[1], dtype=np.int64), cols[SCAN_BORN], cols[SCAN_SYS_FLAG],
                cols[SCAN_RECONSUME], props, props_at,
            )  # fmt: skip
        topics: dict[str, int] = {}
        hosts: dict[str, int] = {}
        datas, extras, topic_ids, host_ids = [], [], [], []
        for offer in offers:
            mine = offer.cols
            datas.append(gather_spans(offer.data, mine[SCAN_DATA_AT], mine[SCAN_DATA_LEN])[0])
            extras.append(gather_spans(offer.extras, mine[SCAN_EXTRA_AT], mine[SCAN_EXTRA_LEN])[0])
            if topics:
                ids = np.array([topics.setdefault(t, len(topics)) for t in offer.topics], dtype=np.int64)
                topic_ids.append(ids[mine[SCAN_TOPIC]])
            else:  # the first offer's topics are the round's first: its numbers stand
                topics.update(zip(offer.topics, range(len(offer.topics))))
                topic_ids.append(mine[SCAN_TOPIC])
            host = hosts.setdefault(offer.conn.peer, len(hosts))
            host_ids.append(np.full(mine.shape[1], host, dtype=np.int64))
        return EncodedColumns(
            np.concatenate(datas),
            _starts(cols[SCAN_DATA_LEN]),
            list(topics),
            np.concatenate(topic_ids),
            cols[SCAN_QUEUE],
            list(hosts),
            np.concatenate(host_ids),
            cols[SCAN_BORN],
            cols[SCAN_SYS_FLAG],
            cols[SCAN_RECONSUME],
            np.concatenate(extras),
            _starts(cols[SCAN_EXTRA_LEN]),
        )

    # --- answers ------------------------------------------------------------------------------
    def _done(
        self,
        offers: list[_Offer],
        columns: EncodedColumns,
        cols: npt.NDArray[np.int64],
        future: asyncio.Future[PutColumnsResult],
        started: float,
    ) -> None:
        self._running -= 1
        try:
            self._answer(offers, columns, cols, future, started)
        except Exception:  # (the store wrote: never again) their clients time out, counts end
            log.exception("answering bulk sends failed")
            for offer in offers:
                self._release(offer)
        finally:
            self._schedule()
            self._deferred.answered()

    def _answer(
        self,
        offers: list[_Offer],
        columns: EncodedColumns,
        cols: npt.NDArray[np.int64],
        future: asyncio.Future[PutColumnsResult],
        started: float,
    ) -> None:
        error = future.exception()
        if isinstance(error, InvalidMessageError) or (error is None and not future.result().stored):
            # nothing was stored: each send again through its handler, which answers why
            for offer in offers:
                self._to_handler(offer, np.ones(offer.cols.shape[1], dtype=np.bool_))
            return
        if error is not None:  # after the write (a failed flush): answered as the handler answers
            refused = refusal_of(error)
            self.ctx.metrics.stats.count_put_failure()
            for offer in offers:
                self._refuse_all(offer, refused.code, refused.remark)
            return
        result = future.result()
        code = put_status_code(result.status)
        if code not in STORED_CODES:  # (a status with offsets is always one of these)
            code = ResponseCode.SYSTEM_ERROR
        self._count(offers, columns, cols, result, code, int((time.monotonic() - started) * 1000))
        if result.id_prefix != self._prefix:
            self._prefix, self._prefix_bytes = (
                result.id_prefix,
                np.frombuffer(result.id_prefix.encode(), np.uint8),
            )
        remark = "" if code == ResponseCode.SUCCESS else f"stored, but {result.status.name}"
        frames, at = encode_send_answers(
            cols,
            result.queue_offsets,
            result.physical_offsets,
            result.ends,
            int(code),
            self._prefix_bytes,
            np.frombuffer(json.dumps(remark).encode(), dtype=np.uint8) if remark else _NO_TEXT,
            np.frombuffer(remark.encode(), dtype=np.uint8) if remark else _NO_TEXT,
        )
        self.requests += cols.shape[1]  # (before the answers leave: a client may look then)
        # each offer's answers are the next of them (none for one-way sends), in one write
        view = frames.data  # (the answers leave as views of it, as a pull round's do)
        row = 0
        a = 0
        for offer in offers:
            row += len(offer)
            b = int(at[row])
            if b > a:
                self._write(offer, view[a:b])
            else:
                self._release(offer)
            a = b

    def _count(
        self,
        offers: list[_Offer],
        columns: EncodedColumns,
        cols: npt.NDArray[np.int64],
        result: PutColumnsResult,
        code: ResponseCode,
        elapsed_ms: int,
    ) -> None:
        """The sends' metrics and statistics, per topic and kind (as the handler counts each)."""
        by_key, by_code = _round_counts(columns.topic_ids, cols, result.ends, result.sizes)
        stats = self.ctx.metrics.stats
        for key, requests, count, size in by_key.tolist():
            topic = columns.topics[key // 2]
            self._producer.count(topic, "REMOTING_BATCH" if key % 2 else "REMOTING", code, count)
            stats.count_put(topic, count, size, elapsed_ms, requests)
        server = offers[0].conn.server
        for request, requests in by_code.tolist():
            server.count(request, int(code), requests)
        elapsed = time.monotonic() - min(o.read_at for o in offers)
        if elapsed > server.requests.slow_s:
            server.requests.slow(elapsed, int(cols[SCAN_CODE, 0]), int(code), offers[0].conn.peer)

    def _write(self, offer: _Offer, frames: memoryview) -> None:
        conn = offer.conn
        if conn.queued_bytes > conn.server.limits.max_answer_bytes_per_connection:
            # answers to writes made always wait for room (they are small), never refused
            task = asyncio.get_running_loop().create_task(self._write_later(offer, frames))
            conn.server.track(task)
            return
        conn.queue_frames([frames])
        self._release(offer)

    async def _write_later(self, offer: _Offer, frames: memoryview) -> None:
        conn = offer.conn
        conn.waiting_answer_bytes += len(frames)
        try:
            await conn.room_to_write()
        finally:
            conn.waiting_answer_bytes -= len(frames)
            conn.queue_frames([frames])
            self._release(offer)

    def _refuse_all(self, offer: _Offer, code: int, remark: str) -> None:
        conn = offer.conn
        cols = offer.cols
        for i in range(cols.shape[1]):
            request = RemotingCommand(
                int(cols[SCAN_CODE, i]),
                int(cols[SCAN_OPAQUE, i]),
                int(cols[SCAN_FLAG, i]),
                serialize_type=int(cols[SCAN_KIND, i]),
            )
            answer = request.response(code, remark)
            conn.server.refused(conn, request, answer)
            conn.server.count(request.code, code, 1)
            if not request.flag & FLAG_ONEWAY:
                conn.server.track(asyncio.get_running_loop().create_task(conn.answer(answer)))
        self._release(offer)

    @staticmethod
    def _to_handler(offer: _Offer, rows: npt.NDArray[np.bool_]) -> None:
        """The sends ``rows`` of the offer go to their handler as any request does (a task each,
        which takes over its count in progress and uncounts it when answered)."""
        conn = offer.conn
        cols = offer.cols
        view = memoryview(offer.frames)
        offer.released = bool(rows.all())  # (some rows left: the offer narrowed to them counts them)
        for i in np.flatnonzero(rows).tolist():
            at, length = int(cols[SCAN_AT, i]), int(cols[SCAN_LEN, i])
            conn.server.handle_frame(conn, view[at : at + length], offer.read_at)

    @staticmethod
    def _release(offer: _Offer) -> None:
        if offer.released:
            return
        offer.released = True
        conn = offer.conn
        conn.requests_in_progress -= offer.cols.shape[1]
        conn.bytes_in_progress -= offer.frame_bytes
        conn.wake_reader()


@kernel(cache=True)  # holds the GIL: a round is mostly a few sends
def _kept(
    cols: npt.NDArray[np.int64], queues: npt.NDArray[np.int64], writes: npt.NDArray[np.int64]
) -> tuple[npt.NDArray[np.bool_], int]:
    """``BulkSends._checked``'s pass over ``scan_frames``' rows ``cols``: each send's topic
    ``cols[SCAN_TOPIC]`` has ``queues`` queues (-1: not for bulk sends) of which ``writes``
    take writes; a negative queue id is given one of those at random."""
    n = cols.shape[1]
    keep = np.empty(n, dtype=np.bool_)
    kept = 0
    for i in range(n):
        t = cols[SCAN_TOPIC, i]
        q = cols[SCAN_QUEUE, i]
        ok = queues[t] >= 0 and q < queues[t]
        if ok and q < 0:
            cols[SCAN_QUEUE, i] = np.random.randint(0, writes[t])
        keep[i] = ok
        kept += 1 if ok else 0
    return keep, kept


@kernel(cache=True)  # holds the GIL: a round is mostly a few sends
def _round_counts(
    topic_ids: npt.NDArray[np.int64],
    cols: npt.NDArray[np.int64],
    ends: npt.NDArray[np.int64],
    sizes: npt.NDArray[np.int64],
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """A round's counts: rows (key, requests, messages, bytes) for each key (topic id * 2 + 1
    for a producer's batch, + 0 for a single message) that has sends, in the order first seen;
    rows (request code, requests) for each request code. Send i (``scan_frames``' row
    ``cols[:, i]``, to ``topic_ids[i]``) stored the messages ``ends[i - 1]:ends[i]``, of
    ``sizes``."""
    n = len(topic_ids)
    by_key = np.zeros((n, 4), dtype=np.int64)
    by_code = np.zeros((n, 2), dtype=np.int64)
    keys = 0
    codes = 0
    first = 0
    for i in range(n):
        key = topic_ids[i] * 2 + (1 if cols[SCAN_HOT, i] == HOT_BATCH else 0)
        k = 0
        while k < keys and by_key[k, 0] != key:
            k += 1
        if k == keys:
            by_key[k, 0] = key
            keys += 1
        size = 0
        for m in range(first, ends[i]):
            size += sizes[m]
        by_key[k, 1] += 1
        by_key[k, 2] += ends[i] - first
        by_key[k, 3] += size
        first = ends[i]
        c = 0
        while c < codes and by_code[c, 0] != cols[SCAN_CODE, i]:
            c += 1
        if c == codes:
            by_code[c, 0] = cols[SCAN_CODE, i]
            codes += 1
        by_code[c, 1] += 1
    return by_key[:keys], by_code[:codes]


def _starts(lengths: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    out = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=out[1:])
    return out
