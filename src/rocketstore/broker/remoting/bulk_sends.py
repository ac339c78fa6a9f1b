"""Sends in bulk: the sends that every connection's reader found in one turn of the loop stored
by one columnar store call and answered in one pass per connection, with no Python object per
request (issue 30).

The reader's compiled pass (``command.scan_frames``) hands over the sends it could decode whole,
as columns; what is waiting when the loop comes round forms a round, and up to two rounds are
with the store at once (one writes while the other waits for its flush), so a lone send goes at
once and batches grow only with the load: no timer anywhere. Per round, the broker's judgement
is per topic, not per send: a topic that does not exist, takes no writes, or is not a plain
name, and a queue id past the topic's queues, send their requests to the handler
(``ProducerProcessor.send``), which creates the topic or gives the refusal its code and remark.
So does every send of a round the store refuses whole (nothing stored: a damaged batch, a full
disk, a slave): the handler tries each again and answers it. An error after the write (a failed
flush) is answered to each send as the handler answers it, never by storing again.

Answers are byte for byte those of the handler (``encode_send_answers``): SUCCESS, or
FLUSH_DISK_TIMEOUT / FLUSH_SLAVE_TIMEOUT / SLAVE_NOT_AVAILABLE with "stored, but ...".

Thread safety: everything here runs on the event loop but ``put_encoded_columns``, which runs
on the context's executor.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

import numpy as np
import numpy.typing as npt

from rocketstore.broker.remoting.codes import ResponseCode
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
    SCAN_TOPIC_AT,
    SCAN_TOPIC_HASH,
    SCAN_TOPIC_LEN,
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
from rocketstore.errors import InvalidMessageError
from rocketstore.jit import kernel
from rocketstore.results import PutColumnsResult

if TYPE_CHECKING:
    from rocketstore.broker.remoting.server import Connection

__all__ = ["BulkSends"]

log = logging.getLogger("rocketstore.broker.remoting")

_ROUNDS: Final = 2  # rounds with the store at once: one writes while the other waits for its flush
_MAX_ROUND_REQUESTS: Final = 4096  # a round's sends at most (what waits beyond goes next round)
# the fewest sends one read must hold to start a round: a round's fixed cost (the columnar store
# call's, ~300 us, and as much again on the loop) passes the handlers' per-request cost (~110 us
# each) below it; a read with fewer joins a round that is already waiting
MIN_ROUND: Final = 8
_STORED: Final = frozenset(
    (
        ResponseCode.SUCCESS,
        ResponseCode.FLUSH_DISK_TIMEOUT,
        ResponseCode.FLUSH_SLAVE_TIMEOUT,
        ResponseCode.SLAVE_NOT_AVAILABLE,
    )
)


@dataclass(eq=False, slots=True)
class _Offer:
    """One connection's sends from one read: ``cols`` (``scan_frames``' rows, hot columns only)
    over the read's bytes ``frames`` and the pass's ``data``, ``texts`` and ``extras``."""

    conn: Connection
    frames: bytes
    cols: npt.NDArray[np.int64]
    data: npt.NDArray[np.uint8]
    texts: npt.NDArray[np.uint8]
    extras: npt.NDArray[np.uint8]
    read_at: float
    frame_bytes: int


@kernel(cache=True)  # holds the GIL (see command.scan_frames)
def _gather(
    src: npt.NDArray[np.uint8], at: npt.NDArray[np.int64], length: npt.NDArray[np.int64]
) -> tuple[npt.NDArray[np.uint8], npt.NDArray[np.int64]]:
    """``src``'s spans joined, and where each starts (and the end)."""
    offsets = np.zeros(len(at) + 1, dtype=np.int64)
    for i in range(len(at)):
        offsets[i + 1] = offsets[i] + length[i]
    out = np.empty(offsets[-1], dtype=np.uint8)
    for i in range(len(at)):
        out[offsets[i] : offsets[i + 1]] = src[at[i] : at[i] + length[i]]
    return out, offsets


@kernel(cache=True)  # holds the GIL (see command.scan_frames)
def _same_topics(
    texts: npt.NDArray[np.uint8],
    at: npt.NDArray[np.int64],
    length: npt.NDArray[np.int64],
    first: npt.NDArray[np.int64],
) -> npt.NDArray[np.bool_]:
    """Whether each row's topic is the same bytes as the topic of row ``first[i]`` (rows grouped
    by a hash: a collision is told apart here)."""
    out = np.ones(len(at), dtype=np.bool_)
    for i in range(len(at)):
        f = first[i]
        if length[i] != length[f]:
            out[i] = False
            continue
        for k in range(length[i]):
            if texts[at[i] + k] != texts[at[f] + k]:
                out[i] = False
                break
    return out


class BulkSends:
    """The broker's sends in bulk (see the module docstring)."""

    def __init__(self, ctx: RemotingContext, producer: ProducerProcessor) -> None:
        self.ctx = ctx
        self._producer = producer
        self.cluster = f"{PROPERTY_CLUSTER}\x01{ctx.config.cluster_name}".encode()
        self._waiting: list[_Offer] = []
        self._waiting_requests = 0
        self._scheduled = False
        self._running = 0
        self.rounds = 0  # store calls made, for tests and the metrics
        self.requests = 0

    @property
    def max_body(self) -> int:
        """The largest body a send may carry (a larger one is the handler's to refuse)."""
        return self.ctx.config.max_body_size

    def worth(self, sends: int) -> bool:
        """Whether ``sends`` hot sends of one read should go in bulk (see ``MIN_ROUND``)."""
        return sends >= MIN_ROUND or (sends > 0 and bool(self._waiting))

    def offer(
        self,
        conn: Connection,
        frames: bytes,
        cols: npt.NDArray[np.int64],
        data: npt.NDArray[np.uint8],
        texts: npt.NDArray[np.uint8],
        extras: npt.NDArray[np.uint8],
        read_at: float,
    ) -> None:
        """Take the hot sends ``cols`` of one read of ``conn``; they are answered (or handed to
        their handler) once their round is done. Counted as requests in progress meanwhile."""
        n = cols.shape[1]
        size = int(cols[SCAN_LEN].sum())
        conn.requests_in_progress += n
        conn.bytes_in_progress += size
        self._waiting.append(_Offer(conn, frames, cols, data, texts, extras, read_at, size))
        self._waiting_requests += n
        if not self._scheduled:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self._start_round)

    # --- rounds -------------------------------------------------------------------------------
    def _start_round(self) -> None:
        self._scheduled = False
        while self._waiting and self._running < _ROUNDS:
            offers = self._take()
            try:
                self._run(offers)
            except Exception:  # a bug here must not strand the requests: the handler answers them
                log.exception("bulk sends failed; their handler answers them")
                for offer in offers:
                    self._to_handler(offer, np.ones(offer.cols.shape[1], dtype=np.bool_))

    def _take(self) -> list[_Offer]:
        taken: list[_Offer] = []
        count = 0
        while self._waiting and (not taken or count + self._waiting[0].cols.shape[1] <= _MAX_ROUND_REQUESTS):
            offer = self._waiting.pop(0)
            taken.append(offer)
            count += offer.cols.shape[1]
        self._waiting_requests -= count
        return taken

    def _run(self, offers: list[_Offer]) -> None:
        """Check the offers' topics and queues, and hand what passes to the store in one call."""
        kept: list[_Offer] = []
        for offer in offers:
            keep = self._checked(offer)
            if not keep.all():
                self._to_handler(offer, ~keep)
                if not keep.any():
                    continue
                offer = self._narrowed(offer, keep)
            kept.append(offer)
        if not kept:
            return
        columns = self._columns(kept)
        self._running += 1
        self.rounds += 1
        started = time.monotonic()
        loop = asyncio.get_running_loop()
        future = loop.run_in_executor(self.ctx.executor, self.ctx.store.put_encoded_columns, columns)
        future.add_done_callback(lambda f: self._done(kept, columns, f, started))

    def _checked(self, offer: _Offer) -> npt.NDArray[np.bool_]:
        """Which of the offer's sends may be stored as they are: to a topic that exists, takes
        writes and is a plain name; to a queue it has (a negative queue id gets one at random)."""
        cols = offer.cols
        n = cols.shape[1]
        keep = np.ones(n, dtype=np.bool_)
        hashes = cols[SCAN_TOPIC_HASH]
        unique, first, inverse = np.unique(hashes, return_index=True, return_inverse=True)
        keep &= _same_topics(offer.texts, cols[SCAN_TOPIC_AT], cols[SCAN_TOPIC_LEN], first[inverse])
        queues = np.empty(len(unique), dtype=np.int64)
        writes = np.empty(len(unique), dtype=np.int64)
        for u, row in enumerate(first.tolist()):
            at, length = int(cols[SCAN_TOPIC_AT, row]), int(cols[SCAN_TOPIC_LEN, row])
            topic = offer.texts[at : at + length].tobytes().decode("ascii")
            config = self._producer.bulk_topic(topic)
            queues[u] = -1 if config is None else max(config.read_queues, config.write_queues)
            writes[u] = 1 if config is None else max(1, config.write_queues)
        row_queues = queues[inverse]
        queue_ids = cols[SCAN_QUEUE]
        keep &= (row_queues >= 0) & (queue_ids < row_queues)
        pick = keep & (queue_ids < 0)
        if pick.any():
            cols[SCAN_QUEUE, pick] = np.random.randint(0, writes[inverse][pick])
        return keep

    @staticmethod
    def _narrowed(offer: _Offer, keep: npt.NDArray[np.bool_]) -> _Offer:
        """The offer without the sends handed to their handler (which took over their count)."""
        cols = offer.cols[:, keep]
        size = int(cols[SCAN_LEN].sum())
        return _Offer(
            offer.conn, offer.frames, cols, offer.data, offer.texts, offer.extras, offer.read_at, size
        )

    def _columns(self, offers: list[_Offer]) -> EncodedColumns:
        topics: dict[str, int] = {}
        hosts: dict[str, int] = {}
        parts: list[
            tuple[npt.NDArray[np.uint8], npt.NDArray[np.int64], npt.NDArray[np.uint8], npt.NDArray[np.int64]]
        ] = []
        topic_ids: list[npt.NDArray[np.int64]] = []
        host_ids: list[npt.NDArray[np.int64]] = []
        for offer in offers:
            cols = offer.cols
            data, _ = _gather(offer.data, cols[SCAN_DATA_AT], cols[SCAN_DATA_LEN])
            extras, _ = _gather(offer.extras, cols[SCAN_EXTRA_AT], cols[SCAN_EXTRA_LEN])
            parts.append((data, cols[SCAN_DATA_LEN], extras, cols[SCAN_EXTRA_LEN]))
            unique, first, inverse = np.unique(cols[SCAN_TOPIC_HASH], return_index=True, return_inverse=True)
            ids = np.empty(len(unique), dtype=np.int64)
            for u, row in enumerate(first.tolist()):
                at, length = int(cols[SCAN_TOPIC_AT, row]), int(cols[SCAN_TOPIC_LEN, row])
                topic = offer.texts[at : at + length].tobytes().decode("ascii")
                ids[u] = topics.setdefault(topic, len(topics))
            topic_ids.append(ids[inverse])
            host_ids.append(
                np.full(cols.shape[1], hosts.setdefault(offer.conn.peer, len(hosts)), dtype=np.int64)
            )
        cols = np.concatenate([o.cols for o in offers], axis=1)
        data_lengths = np.concatenate([p[1] for p in parts])
        extra_lengths = np.concatenate([p[3] for p in parts])
        return EncodedColumns(
            np.concatenate([p[0] for p in parts]),
            _starts(data_lengths),
            list(topics),
            np.concatenate(topic_ids),
            cols[SCAN_QUEUE],
            list(hosts),
            np.concatenate(host_ids),
            cols[SCAN_BORN],
            cols[SCAN_SYS_FLAG],
            cols[SCAN_RECONSUME],
            np.concatenate([p[2] for p in parts]),
            _starts(extra_lengths),
        )

    # --- answers ------------------------------------------------------------------------------
    def _done(
        self,
        offers: list[_Offer],
        columns: EncodedColumns,
        future: asyncio.Future[PutColumnsResult],
        started: float,
    ) -> None:
        self._running -= 1
        try:
            self._answer(offers, columns, future, started)
        except Exception:
            log.exception("answering bulk sends failed")
        finally:
            if self._waiting and not self._scheduled:
                self._scheduled = True
                asyncio.get_running_loop().call_soon(self._start_round)

    def _answer(
        self,
        offers: list[_Offer],
        columns: EncodedColumns,
        future: asyncio.Future[PutColumnsResult],
        started: float,
    ) -> None:
        if future.cancelled():
            for offer in offers:
                self._release(offer)
            return
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
        if code not in _STORED:  # (a status with offsets is always one of these)
            code = ResponseCode.SYSTEM_ERROR
        remark = b"" if code == ResponseCode.SUCCESS else f"stored, but {result.status.name}".encode()
        elapsed_ms = int((time.monotonic() - started) * 1000)
        self._count(offers, columns, result, code, elapsed_ms)
        batch_ends = result.ends
        batch_firsts = np.concatenate(([0], batch_ends[:-1]))
        row = 0
        for offer in offers:
            n = offer.cols.shape[1]
            firsts = batch_firsts[row : row + n]
            ends = batch_ends[row : row + n]
            row += n
            answered = (offer.cols[SCAN_FLAG] & FLAG_ONEWAY) == 0
            if answered.any():
                frames, _ = encode_send_answers(
                    offer.cols[SCAN_KIND, answered],
                    offer.cols[SCAN_OPAQUE, answered],
                    offer.cols[SCAN_QUEUE, answered],
                    result.queue_offsets[firsts[answered]],
                    result.physical_offsets,
                    firsts[answered],
                    ends[answered],
                    int(code),
                    np.frombuffer(result.id_prefix.encode(), dtype=np.uint8),
                    np.frombuffer(json.dumps(remark.decode()).encode() if remark else b"", dtype=np.uint8),
                    np.frombuffer(remark, dtype=np.uint8),
                )
                self._write(offer, frames.tobytes())
            else:
                self._release(offer)
        self.requests += row

    def _count(
        self,
        offers: list[_Offer],
        columns: EncodedColumns,
        result: PutColumnsResult,
        code: ResponseCode,
        elapsed_ms: int,
    ) -> None:
        """The sends' metrics and statistics, per topic and kind (as the handler counts each)."""
        cols = np.concatenate([o.cols for o in offers], axis=1)
        batch = cols[SCAN_HOT] == HOT_BATCH
        messages = np.diff(np.concatenate(([0], result.ends)))
        sizes = (
            np.add.reduceat(result.sizes, np.concatenate(([0], result.ends[:-1])))
            if len(result)
            else messages
        )
        stats = self.ctx.metrics.stats
        for t, topic in enumerate(columns.topics):
            mine = columns.topic_ids == t
            for kind, rows in (("REMOTING", mine & ~batch), ("REMOTING_BATCH", mine & batch)):
                if rows.any():
                    count = int(messages[rows].sum())
                    self._producer.count(topic, kind, code, count)
                    stats.count_put(topic, count, int(sizes[rows].sum()), elapsed_ms, int(rows.sum()))
        server = offers[0].conn.server
        codes, counts = np.unique(cols[SCAN_CODE], return_counts=True)
        for request, n in zip(codes.tolist(), counts.tolist()):
            server.count(request, int(code), n)
        oldest = min(o.read_at for o in offers)
        elapsed = time.monotonic() - oldest
        if elapsed > server.requests.slow_s:
            server.requests.slow(elapsed, int(cols[SCAN_CODE, 0]), int(code), offers[0].conn.peer)

    def _write(self, offer: _Offer, frames: bytes) -> None:
        conn = offer.conn
        if conn.queued_bytes > conn.server.limits.max_answer_bytes_per_connection:
            # answers to writes made always wait for room (they are small), never refused
            task = asyncio.get_running_loop().create_task(self._write_later(offer, frames))
            conn.server.track(task)
            return
        conn.queue_frames(frames)
        self._release(offer)

    async def _write_later(self, offer: _Offer, frames: bytes) -> None:
        conn = offer.conn
        conn.waiting_answer_bytes += len(frames)
        try:
            await conn.room_to_write()
        finally:
            conn.waiting_answer_bytes -= len(frames)
            conn.queue_frames(frames)
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
        for i in np.flatnonzero(rows).tolist():
            at, length = int(cols[SCAN_AT, i]), int(cols[SCAN_LEN, i])
            conn.server.handle_frame(conn, view[at : at + length], offer.read_at)

    def _release(self, offer: _Offer) -> None:
        conn = offer.conn
        conn.requests_in_progress -= offer.cols.shape[1]
        conn.bytes_in_progress -= offer.frame_bytes
        conn.wake_reader()


def _starts(lengths: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    out = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=out[1:])
    return out
