"""The remoting TCP server: connections, frames in and out, dispatch by request code, and the
requests the server itself sends on a client's connection.

One ``RemotingServer`` serves one listening address with one handler table (``code ->
handler``). Per connection, one reader task decodes frames; each request runs as its own task,
so a parked pull never holds up the heartbeats and sends behind it on the same connection, and
answers go out in whatever order they finish (the client matches them by opaque).
With bulk sends (``bulk_sends.py``; not with an ACL), there is no reader task: what each
connection's socket delivers goes into one buffer (``_BulkReading``), and once a turn of the
loop one read pass takes apart the whole frames of every connection that has some, each
connection's with one compiled pass (``command.scan_frames``). The sends it could decode whole
are stored and answered together, every connection's in one round; the rest of the frames go
to their handlers as above. With bulk pulls (``bulk_pulls.py``; not with an ACL either), every
PULL_MESSAGE goes to a round of pulls (started once the pass has handed on every connection's
frames, before the sends' round) instead of a task of its own, and it, QUERY_CONSUMER_OFFSET
and UPDATE_CONSUMER_OFFSET are read by a compiled pass (``command.scan_consumer_request``), not
decoded in Python.

* A response carries the request's opaque and header encoding; a oneway request (flag bit 1)
  gets none, whatever its handler returns.
* ``authorize`` (the ACL, ``acl.py``) sees every request with a handler first; its
  RequestRefused is the answer.
* A code without a handler: REQUEST_CODE_NOT_SUPPORTED, remark `` request type <code> not
  supported`` (RocketMQ's broker; its name server answers nothing, which costs the client a
  timeout).
* A handler's ``RequestRefused`` becomes its code and remark; any other exception SYSTEM_ERROR
  with the exception's text and a log line. The connection lives on.
* Limits (``RemotingLimits``): frame size (a larger length field closes the connection; an
  answer that would be larger is replaced by SYSTEM_ERROR), requests in progress per
  connection (more are answered SYSTEM_BUSY ``[OVERLOAD]``), bytes of requests in progress per
  connection (past it the connection is not read until some end), bytes of answers queued for
  a connection's socket (past it the connection is not read, and finished requests wait to
  queue their answers, until the client takes some; a read's answer that would make as many
  bytes again wait is answered SYSTEM_BUSY instead, see ``Connection.answer``),
  server-initiated requests awaiting an answer per connection, connections (more are closed
  at accept), and idle time (a connection with no frame for that long is closed, as the
  RocketMQ broker does after 120 s; clients heartbeat every 30 s).
  Waiting for one connection's client never holds up another connection.
* A malformed frame (bad length, header that does not decode) closes its connection with one
  warning line (rate-limited); nothing else is affected.
* Logged, rate-limited (``request_log``): a refused request (``_REFUSED``; for a request that
  stores, any answer but a stored status) with its code, and a request answered more than
  ``slow_request_ms`` after its frame was read (a pull's parked time not counted).

Thread safety: everything runs on the event loop of ``start``.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import socket
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import numpy.typing as npt

from rocketstore.broker.metrics import BrokerMetrics
from rocketstore.broker.rate_limited_log import RateLimitedLog
from rocketstore.broker.remoting.codes import STORED_CODES, RequestCode, ResponseCode
from rocketstore.broker.remoting.command import (
    CONSUMER_CODE,
    CONSUMER_COMMIT,
    CONSUMER_FLAG,
    CONSUMER_GROUP_AT,
    CONSUMER_KIND,
    CONSUMER_OPAQUE,
    CONSUMER_QUEUE,
    CONSUMER_SUB_VERSION,
    CONSUMER_SUBSCRIPTION_AT,
    CONSUMER_TOPIC_AT,
    CONSUMER_TYPE_AT,
    FLAG_ONEWAY,
    MAX_FRAME_SIZE,
    SCAN_AT,
    SCAN_HOT,
    SCAN_LEN,
    SCAN_TOPIC_AT,
    SCAN_TOPIC_LEN,
    RemotingCommand,
    decode_command,
    encode_command,
    frame_length,
    scan_consumer_request,
    scan_frames,
)
from rocketstore.broker.remoting.headers import PullHeader
from rocketstore.broker.remoting.refusal import RequestRefused
from rocketstore.broker.request_log import DEFAULT_SLOW_REQUEST_MS, RequestLog
from rocketstore.errors import CorruptDataError

if TYPE_CHECKING:
    from rocketstore.broker.remoting.bulk_pulls import BulkPulls
    from rocketstore.broker.remoting.bulk_sends import BulkSends

__all__ = ["Connection", "Handler", "RemotingLimits", "RemotingServer"]

log = logging.getLogger("rocketstore.broker.remoting")

Handler = Callable[[RemotingCommand, "Connection"], Awaitable[RemotingCommand | None]]

# write buffer above which a writer waits for the socket (asyncio's default high-water mark)
_WRITE_HIGH_WATER = 64 * 1024
_MAX_OPAQUE = 0x7FFFFFFF
_NO_ANSWER = -2  # the "response code" of a request answered nothing (a oneway one's)
# answers that refuse whatever was asked (an ACL refusal is SYSTEM_ERROR, as RocketMQ's)
_REFUSED = frozenset(
    (
        ResponseCode.SYSTEM_ERROR,
        ResponseCode.SYSTEM_BUSY,
        ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
        ResponseCode.MESSAGE_ILLEGAL,
        ResponseCode.SERVICE_NOT_AVAILABLE,
        ResponseCode.VERSION_NOT_SUPPORTED,
        ResponseCode.NO_PERMISSION,
    )
)
# requests that store a message: any answer but these refused it
_STORES = frozenset(
    (
        RequestCode.SEND_MESSAGE,
        RequestCode.SEND_MESSAGE_V2,
        RequestCode.SEND_BATCH_MESSAGE,
        RequestCode.CONSUMER_SEND_MSG_BACK,
        RequestCode.END_TRANSACTION,
    )
)


# the codes a refusal's or slow request's kind is keyed on; any other is one kind, -1 (OTHER)
_REQUEST_CODES = frozenset(RequestCode)
_RESPONSE_CODES = frozenset(ResponseCode)


def _request_label(code: int) -> str:
    return _label(RequestCode, code)


def _response_label(code: int) -> str:
    return "NONE" if code == _NO_ANSWER else _label(ResponseCode, code)


def _label(codes: type[IntEnum], code: int) -> str:
    """A log line's label of a code: ``NAME (number)``, or OTHER for a code RocketMQ does not
    define (so a client cannot make the kinds of rate-limited lines grow without bound)."""
    name = _code_name(codes, code)
    return name if name == "OTHER" else f"{name} ({code})"


def _code_name(codes: type[IntEnum], code: int) -> str:
    """A metric label: the code's name, OTHER for codes RocketMQ does not define (so a client
    cannot make the label set grow without bound)."""
    try:
        return codes(code).name
    except ValueError:
        return "OTHER"


@dataclass(frozen=True)
class RemotingLimits:
    max_frame_size: int = MAX_FRAME_SIZE
    # requests being handled at once on one connection (parked pulls included)
    max_requests_per_connection: int = 1024
    # bytes of those requests' frames: past it the connection is not read until some finish
    max_request_bytes_per_connection: int = 4 * MAX_FRAME_SIZE
    # bytes of answers (and server requests) queued for one connection's socket and not yet
    # taken by it (Redis' client-output-buffer-limit): past it the connection is not read, and
    # finished requests wait to queue their answers, until it drains below; answers with a
    # body that would make as many bytes again wait are answered SYSTEM_BUSY instead
    max_answer_bytes_per_connection: int = MAX_FRAME_SIZE
    # requests this server sent on one connection and still waits an answer for
    max_server_requests_per_connection: int = 256
    max_connections: int = 1024
    idle_timeout_s: float = 120.0
    # a request answered later than this is logged (0: none are)
    slow_request_ms: int = DEFAULT_SLOW_REQUEST_MS


class ConnectionClosedError(ConnectionError):
    """The connection closed before a server request on it was answered."""


@dataclass(eq=False)
class Connection:
    """One client's connection. ``attributes`` is for processors (a client id, a language ...);
    ``on_close`` callbacks run once when it closes (registries forget it there; add them with
    ``when_closed``)."""

    server: RemotingServer
    writer: asyncio.StreamWriter
    peer_host: str
    peer_port: int
    id: int
    attributes: dict[str, Any] = field(default_factory=dict)
    on_close: list[Callable[[Connection], None]] = field(default_factory=list)
    closed: bool = False
    last_read: float = 0.0
    requests_in_progress: int = 0
    bytes_in_progress: int = 0
    # answers finished and waiting for room in the output (see ``queued_bytes``)
    waiting_answer_bytes: int = 0
    _room: asyncio.Event = field(default_factory=asyncio.Event)
    _pending: dict[int, asyncio.Future[RemotingCommand]] = field(default_factory=dict)
    _out: list[bytes | bytearray | memoryview] = field(default_factory=list)
    _out_bytes: int = 0
    _flush_scheduled: bool = False
    _drain_lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    peer: str = field(init=False)
    """``host:port`` of the client, as RocketMQ prints a channel's remote address."""
    _loop: asyncio.AbstractEventLoop = field(init=False, repr=False)
    _transport: asyncio.WriteTransport = field(init=False, repr=False)

    def __post_init__(self) -> None:
        host = f"[{self.peer_host}]" if ":" in self.peer_host else self.peer_host
        self.peer = f"{host}:{self.peer_port}"
        self._loop = asyncio.get_running_loop()
        self._transport = self.writer.transport
        limit = self.server.limits.max_answer_bytes_per_connection
        if limit < _WRITE_HIGH_WATER:
            # the transport must pause (and ``drain`` wait) before the output passes the limit
            self._transport.set_write_buffer_limits(high=limit)

    @property
    def queued_bytes(self) -> int:
        """Bytes queued for this connection's socket and not yet taken by it: this turn's
        output and the transport's buffer."""
        return self._out_bytes + self._transport.get_write_buffer_size()

    def send(self, cmd: RemotingCommand) -> bool:
        """Write one command (a server request, or a small answer of the reader's own) without
        waiting for the client to read it, so a client that does not read never holds up the
        caller (a notice to every member of a group). While the output is past
        ``max_answer_bytes_per_connection`` a server request is dropped instead: a notice or a
        transaction check is sent again later in any case. True when it was queued."""
        if self.queued_bytes > self.server.limits.max_answer_bytes_per_connection and not cmd.is_response:
            log.debug(
                "%s: dropped request %d to %s: its output is full", self.server.name, cmd.code, self.peer
            )
            return False
        parts = encode_command(cmd)
        return self._queue(parts, sum(map(len, parts)))

    async def answer(self, cmd: RemotingCommand) -> None:
        """Write the answer to one of this connection's requests once the output has room
        (``max_answer_bytes_per_connection``). The first command queued in a turn of the loop
        leaves at once; those queued after it in the same turn go out together in one write at
        the turn's end (a group commit answers many sends of a connection at once).

        An answer over the frame size is replaced by SYSTEM_ERROR saying so. While the output
        is full, answers wait; an answer with a body (a read: a pull, a query, a list) that
        would take the bytes waiting past the limit too is replaced by SYSTEM_BUSY (the client
        asks again later), so what waits stays bounded. An answer without a body (a send's, a
        commit's) always waits: it is small, and never turned into an error for a write made."""
        limits = self.server.limits
        parts = encode_command(cmd)
        size = sum(map(len, parts))
        if size - 4 > limits.max_frame_size:
            self.server.client_log.warning(
                "answer too large",
                "%s: the answer to %s is %d bytes, over the frame limit: answered SYSTEM_ERROR",
                self.server.name,
                self.peer,
                size,
            )
            parts, size = self._replace(
                cmd,
                ResponseCode.SYSTEM_ERROR,
                f"the answer is {size} bytes, over the {limits.max_frame_size}-byte frame limit",
            )
        limit = limits.max_answer_bytes_per_connection
        if self.queued_bytes > limit:
            if len(cmd.body) and self.waiting_answer_bytes + size > limit:
                self.server.client_log.warning(
                    "answers not read",
                    "%s: %s does not read its answers (%d bytes queued, %d waiting): answered SYSTEM_BUSY",
                    self.server.name,
                    self.peer,
                    self.queued_bytes,
                    self.waiting_answer_bytes,
                )
                parts, size = self._replace(
                    cmd,
                    ResponseCode.SYSTEM_BUSY,
                    f"[OVERLOAD] {self.queued_bytes + self.waiting_answer_bytes} bytes of answers wait for "
                    "this connection's client to read them",
                )
            self.waiting_answer_bytes += size
            try:
                await self.room_to_write()
            finally:
                self.waiting_answer_bytes -= size
        self._queue(parts, size)

    @staticmethod
    def _replace(
        cmd: RemotingCommand, code: int, remark: str
    ) -> tuple[list[bytes | bytearray | memoryview], int]:
        parts = encode_command(
            RemotingCommand(
                code=code, opaque=cmd.opaque, flag=cmd.flag, remark=remark, serialize_type=cmd.serialize_type
            )
        )
        return parts, sum(map(len, parts))

    async def room_to_write(self) -> None:
        """Return once the output is within ``max_answer_bytes_per_connection`` (or the
        connection closed)."""
        limit = self.server.limits.max_answer_bytes_per_connection
        while not self.closed and self.queued_bytes > limit:
            # handed to the transport, the output past its high-water mark pauses it, and drain
            # waits until the client has taken most of it
            self._flush()
            try:
                async with self._drain_lock:
                    await self.writer.drain()
            except (ConnectionError, RuntimeError) as exc:
                log.debug("write to %s failed: %s", self.peer, exc)
                self.close()

    async def room_to_read(self) -> None:
        """Return once the bytes of the requests in progress are within
        ``max_request_bytes_per_connection`` (or the connection closed): until then it is not
        read."""
        limit = self.server.limits.max_request_bytes_per_connection
        while self.bytes_in_progress > limit and not self.closed:
            self._room.clear()
            await self._room.wait()

    def queue_frames(self, parts: Sequence[bytes | memoryview]) -> bool:
        """Write whole encoded frames (a round's answers for this connection, encoded together
        by ``bulk_sends`` or ``bulk_pulls``, in one or more byte views, never copied here) now,
        after whatever this turn queued before them: they are all of the round's answers, so
        waiting for the turn's end to join them to others would only delay them. False when
        the connection is closed. The caller saw to the room for them."""
        if self.closed:
            return False
        self._out.extend(parts)
        self._out_bytes += sum(map(len, parts))
        self._write_now()
        return True

    def wake_reader(self) -> None:
        """Requests finished: a reader that waits for the bytes in progress to fall looks again."""
        self._room.set()

    def _queue(self, parts: list[bytes | bytearray | memoryview], size: int) -> bool:
        """Write a frame's ``parts``: at once when it is the turn's first (a lone answer waits for
        nothing), else with the rest of the turn's at its end. False when the connection is
        closed."""
        if self.closed:
            return False
        self._out.extend(parts)
        self._out_bytes += size
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self._loop.call_soon(self._flush)
            self._write_now()
        return True

    def _flush(self) -> None:
        self._flush_scheduled = False
        self._write_now()

    def _write_now(self) -> None:
        """Hand what is queued to the transport."""
        out, self._out = self._out, []
        self._out_bytes = 0
        if self.closed or not out:
            return
        try:
            self.writer.writelines(out)
        except (ConnectionError, RuntimeError) as exc:
            log.debug("write to %s failed: %s", self.peer, exc)
            self.close()

    async def oneway(self, cmd: RemotingCommand) -> bool:
        """Send a request of the server's own that gets no answer (NOTIFY_CONSUMER_IDS_CHANGED,
        CHECK_TRANSACTION_STATE); True when it was queued (see ``send``)."""
        cmd.flag |= FLAG_ONEWAY
        cmd.opaque = self.server.next_opaque()
        return self.send(cmd)

    async def invoke(self, cmd: RemotingCommand, timeout_s: float) -> RemotingCommand:
        """Send a request of the server's own and wait for the client's answer. Raises
        TimeoutError, ConnectionClosedError, or RequestRefused(SYSTEM_BUSY) when this
        connection already has the most server requests pending or its output is full."""
        if self.closed:
            raise ConnectionClosedError(f"connection {self.peer} is closed")
        limit = self.server.limits.max_server_requests_per_connection
        if len(self._pending) >= limit:
            raise RequestRefused(
                ResponseCode.SYSTEM_BUSY, f"[OVERLOAD] {limit} requests to {self.peer} await an answer"
            )
        if self.queued_bytes > self.server.limits.max_answer_bytes_per_connection:
            raise RequestRefused(
                ResponseCode.SYSTEM_BUSY, f"[OVERLOAD] {self.peer} does not read what it is sent"
            )
        cmd.flag &= ~FLAG_ONEWAY
        opaque = cmd.opaque = self.server.next_opaque()
        future: asyncio.Future[RemotingCommand] = asyncio.get_running_loop().create_future()
        self._pending[opaque] = future
        try:
            self.send(cmd)
            return await asyncio.wait_for(future, timeout_s)
        finally:
            self._pending.pop(opaque, None)

    def _answered(self, cmd: RemotingCommand) -> None:
        future = self._pending.pop(cmd.opaque, None)
        if future is None:
            log.debug("dropped a response from %s with unknown opaque %d", self.peer, cmd.opaque)
        elif not future.done():
            future.set_result(cmd)

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        with contextlib.suppress(Exception):
            if self._out_bytes or self._transport.get_write_buffer_size():
                # a closing transport keeps its buffer until the client takes it, for ever if it
                # stays connected without reading: drop what it did not take
                self._transport.abort()
            else:
                self.writer.close()
        for future in self._pending.values():
            if not future.done():
                future.set_exception(ConnectionClosedError(f"connection {self.peer} closed"))
        self._pending.clear()
        self._room.set()
        for callback in self.on_close:
            self._run_close_callback(callback)

    def when_closed(self, callback: Callable[[Connection], None]) -> None:
        """Run ``callback(self)`` when this connection closes: at once if it already has (a
        request handled after its connection closed must not leave state nothing forgets)."""
        if self.closed:
            self._run_close_callback(callback)
        else:
            self.on_close.append(callback)

    def _run_close_callback(self, callback: Callable[[Connection], None]) -> None:
        try:
            callback(self)
        except Exception:
            log.exception("close callback of %s failed", self.peer)


class _BulkReading(asyncio.streams.FlowControlMixin, asyncio.Protocol):
    """One connection of a server with bulk sends. What its socket delivers goes into one
    buffer; once that holds a whole frame, the server's read pass (``RemotingServer._read_pass``,
    at the next turn of the loop, for every such connection at once) takes the whole frames
    apart with one compiled pass (``scan_frames``), which also decodes the sends ``bulk`` can
    store as they are (a lone one too: a round costs less than its handler); the other frames
    are decoded and handled one by one. A frame not all here yet is looked at again only once
    all of it is. While the connection's client leaves its answers unread, or its requests in
    progress hold too many bytes, the connection is not read (``pause_reading``) and the frames
    not yet handed on wait."""

    def __init__(self, server: RemotingServer, bulk: BulkSends) -> None:
        super().__init__()
        self._server = server
        self._bulk = bulk
        self._cluster = np.frombuffer(bulk.cluster, dtype=np.uint8)
        self._conn: Connection | None = None
        self._transport: asyncio.Transport | None = None
        self._chunks: list[bytes] = []
        self._size = 0
        self._need = 4  # the bytes the buffer must hold for the read pass to find a frame
        self._listed = False  # in the server's next read pass
        self._held: _HeldFrames | None = None  # a pass's frames not handed on yet: the connection is full
        self._resuming = False
        self._eof = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = stream = cast(asyncio.Transport, transport)  # (uvloop's is no subclass)
        writer = asyncio.StreamWriter(stream, self, None, asyncio.get_running_loop())
        self._conn = self._server.accepted(writer)

    @property
    def peer(self) -> str:
        return "?" if self._conn is None else self._conn.peer

    def data_received(self, data: bytes) -> None:
        conn = self._conn
        if conn is None or conn.closed:
            return
        conn.last_read = time.monotonic()
        self._chunks.append(data)
        self._size += len(data)
        if self._size >= self._need:
            self._list()

    def eof_received(self) -> bool:
        self._eof = True  # the frames it sent before are handed on first
        if not self._listed and self._held is None:
            self.end()
        return True

    def connection_lost(self, exc: Exception | None) -> None:
        super().connection_lost(exc)
        self.end()

    def end(self) -> None:
        """The connection is read no more."""
        if self._conn is not None:
            self._server.ended(self._conn)

    def _list(self) -> None:
        if not self._listed:
            self._listed = True
            self._server.readable(self)

    def read(self) -> None:
        """The read pass's work for this connection: hand on its whole frames, as far as its
        limits allow."""
        self._listed = False
        conn = self._conn
        if conn is None or conn.closed:
            return
        if (self._held is not None and not self._hand_held(conn)) or self._blocked(conn):
            return
        if self._size >= self._need:
            self._scan(conn)
        if self._eof and self._held is None:
            self.end()

    def _scan(self, conn: Connection) -> None:
        server = self._server
        max_frame = server.limits.max_frame_size
        chunks = self._chunks
        buf = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        status, end, cols, topic_rows, data, texts, extras = scan_frames(
            np.frombuffer(buf, dtype=np.uint8), max_frame, self._bulk.max_body, self._cluster
        )
        rest = buf[end:]
        self._chunks = [rest] if rest else []
        self._size = len(rest)
        self._need = 4
        if status:
            length = int.from_bytes(rest[:4], "big", signed=True)
            server.malformed(conn, CorruptDataError(f"frame length {length} is outside 4..{max_frame}"))
        elif len(rest) >= 4:
            self._need = 4 + int.from_bytes(rest[:4], "big", signed=True)
        n = cols.shape[1]
        if n:
            spans = (cols[SCAN_TOPIC_AT, topic_rows], cols[SCAN_TOPIC_LEN, topic_rows])
            topics = [
                texts[a : a + k].tobytes().decode("ascii") for a, k in zip(*(x.tolist() for x in spans))
            ]
            hot = cols[SCAN_HOT] > 0
            room = server.limits.max_requests_per_connection - conn.requests_in_progress
            if hot.all() and n <= room:  # (the common read: sends only, none refused)
                self._bulk.offer(conn, buf, np.ascontiguousarray(cols), topics, data, extras, conn.last_read)
            else:
                if hot.any() and room > 0:
                    taken = np.flatnonzero(hot)[:room]
                    offered = np.ascontiguousarray(cols[:, taken])
                    self._bulk.offer(conn, buf, offered, topics, data, extras, conn.last_read)
                    hot[:] = False
                    hot[taken] = True
                rows = np.flatnonzero(~hot)
                frames = np.stack((cols[SCAN_AT, rows], cols[SCAN_LEN, rows]), axis=1).tolist()
                self._held = _HeldFrames(buf, frames)
                self._hand_held(conn)
        if status:  # (what was held dropped with the connection)
            self._held = None
            self.end()
        elif self._held is None:
            self._blocked(conn)  # (not read again until there is room)

    def _hand_held(self, conn: Connection) -> bool:
        """Hand on the held frames while the connection has room for them; True when all are."""
        held = self._held
        assert held is not None
        view = memoryview(held.buf)
        u8 = np.frombuffer(held.buf, dtype=np.uint8) if self._server.pulls is not None else None
        while held.next < len(held.spans):
            if self._blocked(conn):
                return False
            at, length = held.spans[held.next]
            held.next += 1
            if not self._server.admit_frame(conn, view, u8, at, length):
                self._held = None
                self.end()
                return False
        self._held = None
        return True

    def _blocked(self, conn: Connection) -> bool:
        """Whether the connection may take no more requests for now: its client leaves its
        answers unread, or its requests in progress hold too many bytes. Then it is not read
        until that is over."""
        limits = self._server.limits
        if (
            conn.queued_bytes <= limits.max_answer_bytes_per_connection
            and conn.bytes_in_progress <= limits.max_request_bytes_per_connection
        ):
            return False
        if not self._resuming and self._transport is not None:
            self._resuming = True
            self._transport.pause_reading()
            self._server.track(asyncio.get_running_loop().create_task(self._resume(conn)))
        return True

    async def _resume(self, conn: Connection) -> None:
        try:
            await conn.room_to_write()
            await conn.room_to_read()
        finally:
            self._resuming = False
        if not conn.closed and self._transport is not None:
            self._transport.resume_reading()
            self._list()


@dataclass(eq=False, slots=True)
class _HeldFrames:
    """The frames of one read pass still to hand on: ``spans`` (start, length) in ``buf``, from
    ``next`` on."""

    buf: bytes
    spans: list[list[int]]
    next: int = 0


class RemotingServer:
    """Serves ``handlers`` on one address (see the module docstring). ``name`` goes into log
    lines; ``authorize`` (the ACL check) runs before every handler and refuses by raising
    RequestRefused."""

    def __init__(
        self,
        handlers: Mapping[int, Handler],
        limits: RemotingLimits,
        name: str,
        authorize: Callable[[RemotingCommand], object] | None = None,
        metrics: BrokerMetrics | None = None,
        bulk: BulkSends | None = None,
        pulls: BulkPulls | None = None,
    ) -> None:
        self._handlers = dict(handlers)
        # sends decoded and stored in bulk, pulls read and answered in bulk; not with an ACL,
        # which judges each request
        self._bulk = bulk if authorize is None else None
        self._pulls = pulls if authorize is None else None
        self._authorize = authorize
        self._metrics = metrics
        self._counted: dict[tuple[int, int], Any] = {}
        self.limits = limits
        self.name = name
        # what clients cause (malformed frames, unread answers, refused connections): one line
        # per kind and interval, however many clients do it
        self.client_log = RateLimitedLog(log)
        self.requests = RequestLog(
            log, name, limits.slow_request_ms, request_label=_request_label, code_label=_response_label
        )
        self.connections: set[Connection] = set()
        self.port: int | None = None
        self._server: asyncio.base_events.Server | None = None
        self._ids = itertools.count(1)
        self._opaque = 0
        self._sweeper: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._to_read: list[_BulkReading] = []  # connections with whole frames, for the read pass
        self._pass_scheduled = False

    @property
    def bulk(self) -> BulkSends | None:
        """The bulk sends this server hands its hot sends to (None: each goes to its handler)."""
        return self._bulk

    @property
    def pulls(self) -> BulkPulls | None:
        """The bulk pulls this server hands its pulls to (None: each goes to its handler)."""
        return self._pulls

    def next_opaque(self) -> int:
        self._opaque = (self._opaque + 1) & _MAX_OPAQUE
        return self._opaque

    async def start(self, host: str | None = None, port: int = 0, sock: socket.socket | None = None) -> int:
        """Listen on ``host:port`` (or an already bound ``sock``); returns the port."""
        if self._bulk is not None:
            bulk = self._bulk

            def reading() -> _BulkReading:
                return _BulkReading(self, bulk)

            loop = asyncio.get_running_loop()
            if sock is not None:
                server = await loop.create_server(reading, sock=sock)
            else:
                server = await loop.create_server(reading, host, port)
        elif sock is not None:
            server = await asyncio.start_server(self._serve, sock=sock, limit=1 << 20)
        else:
            server = await asyncio.start_server(self._serve, host, port, limit=1 << 20)
        self._server = server
        self.port = int(server.sockets[0].getsockname()[1])
        self._sweeper = asyncio.get_running_loop().create_task(self._sweep_idle())
        return self.port

    async def stop(self) -> None:
        """Stop accepting, close every connection, cancel the requests still running."""
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeper
            self._sweeper = None
        if self._server is not None:
            self._server.close()
        for conn in list(self.connections):
            conn.close()
        if self._bulk is not None:
            self._bulk.dispatch_owed()
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(BaseException):
                await task
        if self._server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 2.0)
            self._server = None

    async def _sweep_idle(self) -> None:
        idle = self.limits.idle_timeout_s
        if idle <= 0:
            return  # 0: idle connections are kept
        while True:
            await asyncio.sleep(min(10.0, max(0.05, idle / 4)))
            now = time.monotonic()
            limit = self.limits.max_answer_bytes_per_connection
            for conn in list(self.connections):
                # a connection not read for so long because its client takes no answers is idle too
                if now - conn.last_read > idle and (
                    conn.requests_in_progress == 0 or conn.queued_bytes > limit
                ):
                    log.info("%s: closing %s, idle for %.0f s", self.name, conn.peer, idle)
                    conn.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = self.accepted(writer)
        if conn is None:
            return
        try:
            await self._read(conn, reader)
        finally:
            self.ended(conn)

    def accepted(self, writer: asyncio.StreamWriter) -> Connection | None:
        """A new connection, served from now on (None: refused, past ``max_connections``)."""
        peer = writer.get_extra_info("peername") or ("?", 0)
        if len(self.connections) >= self.limits.max_connections:
            self.client_log.warning(
                "connections",
                "%s: refused a connection from %s: %d connections is the limit",
                self.name,
                peer[0],
                self.limits.max_connections,
            )
            writer.close()
            return None
        sock = writer.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conn = Connection(self, writer, str(peer[0]), int(peer[1]), next(self._ids))
        conn.last_read = time.monotonic()
        self.connections.add(conn)
        self._connections_changed()
        log.debug("%s: connection %d from %s", self.name, conn.id, conn.peer)
        return conn

    def ended(self, conn: Connection) -> None:
        """``conn`` is read no more: closed, and forgotten (again: nothing)."""
        if conn in self.connections:
            self.connections.discard(conn)
            self._connections_changed()
        conn.close()

    async def _read(self, conn: Connection, reader: asyncio.StreamReader) -> None:
        max_frame = self.limits.max_frame_size
        while not conn.closed:
            try:
                prefix = await reader.readexactly(4)
                length = frame_length(prefix, max_frame)
                frame = await reader.readexactly(length)
                cmd = decode_command(frame)
            except (asyncio.IncompleteReadError, ConnectionError):
                return  # the client went away (between or inside a frame)
            except CorruptDataError as exc:
                self.malformed(conn, exc)
                return
            conn.last_read = time.monotonic()
            if not await self._dispatch(conn, cmd, length, conn.last_read):
                return

    def readable(self, reading: _BulkReading) -> None:
        """``reading``'s connection has whole frames: the read pass at the loop's next turn takes
        them, with every other connection's of this turn."""
        self._to_read.append(reading)
        if not self._pass_scheduled:
            self._pass_scheduled = True
            asyncio.get_running_loop().call_soon(self._read_pass)

    def _read_pass(self) -> None:
        """Every connection with whole frames hands them on; then the pulls among them are
        answered and the sends stored, as one round each (a pull's answer waits for no put)."""
        self._pass_scheduled = False
        readings, self._to_read = self._to_read, []
        for reading in readings:
            try:
                reading.read()
            except Exception:  # a bug must not stop the other connections' requests
                log.exception("%s: reading %s failed; closed", self.name, reading.peer)
                reading.end()
        if self._pulls is not None:
            self._pulls.run()
        if self._bulk is not None:
            self._bulk.run()

    def admit_frame(
        self, conn: Connection, view: memoryview, u8: npt.NDArray[np.uint8] | None, at: int, length: int
    ) -> bool:
        """Decode and handle the frame ``view[at:at + length]``: a consumer's request (a pull, an
        offset's query or update) the compiled reader takes whole (``scan_consumer_request``;
        ``u8`` is ``view`` as an array) without a Python decode. False when it is malformed
        (its connection is to be closed)."""
        if u8 is not None:
            ok, numbers, texts = scan_consumer_request(u8, at, length)
            if ok:
                cmd, header = _consumer_request(numbers.tolist(), texts.tobytes())
                self._admit(conn, cmd, length, conn.last_read, header)
                return True
        try:
            cmd = decode_command(view[at : at + length])
        except CorruptDataError as exc:
            self.malformed(conn, exc)
            return False
        self._admit(conn, cmd, length, conn.last_read)
        return True

    def malformed(self, conn: Connection, exc: CorruptDataError) -> None:
        self.client_log.warning(
            "malformed frame", "%s: closing %s: malformed frame: %s", self.name, conn.peer, exc
        )

    async def _dispatch(self, conn: Connection, cmd: RemotingCommand, length: int, read_at: float) -> bool:
        """Start handling one request (or take a response) whose frame of ``length`` bytes was
        read at ``read_at``, within the connection's limits. False when the connection ends."""
        if cmd.is_response:
            conn._answered(cmd)
            return True
        if conn.queued_bytes > self.limits.max_answer_bytes_per_connection:
            # its client leaves its answers unread: this request waits, and no more are read
            await conn.room_to_write()
            if conn.closed:
                return False
        self._admit(conn, cmd, length, read_at)
        await conn.room_to_read()
        return True

    def _admit(
        self,
        conn: Connection,
        cmd: RemotingCommand,
        length: int,
        read_at: float,
        header: PullHeader | None = None,
    ) -> None:
        """Start handling one request (or take a response), or answer SYSTEM_BUSY when the
        connection has the most requests in progress (``header``: a pull's, which the compiled
        reader read; then ``cmd`` has no extFields)."""
        if cmd.is_response:
            conn._answered(cmd)
            return
        if conn.requests_in_progress >= self.limits.max_requests_per_connection:
            busy = cmd.response(
                ResponseCode.SYSTEM_BUSY,
                f"[OVERLOAD] {conn.requests_in_progress} requests of this connection are in progress",
            )
            self.refused(conn, cmd, busy)
            if not cmd.is_oneway:
                conn.send(busy)
            return
        conn.requests_in_progress += 1
        conn.bytes_in_progress += length
        if self._pulls is not None and cmd.code == RequestCode.PULL_MESSAGE:
            self._pulls.offer(conn, cmd, length, read_at, header)
        else:
            self._start(conn, cmd, length, read_at)

    def _start(self, conn: Connection, cmd: RemotingCommand, length: int, read_at: float) -> None:
        self.track(asyncio.get_running_loop().create_task(self._handle(conn, cmd, length, read_at)))

    def track(self, task: asyncio.Task[Any]) -> None:
        """Keep ``task`` (a request's, an answer's) until it ends: ``stop`` cancels those left."""
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def handle_frame(self, conn: Connection, frame: memoryview, read_at: float) -> None:
        """Handle one request frame (without its length field) already counted in progress on
        ``conn`` (a send ``bulk_sends`` leaves to its handler); the count ends with its answer."""
        try:
            cmd = decode_command(frame)
        except CorruptDataError as exc:
            conn.requests_in_progress -= 1
            conn.bytes_in_progress -= len(frame)
            self.malformed(conn, exc)
            conn.close()
            return
        self._start(conn, cmd, len(frame), read_at)

    async def _handle(self, conn: Connection, cmd: RemotingCommand, length: int, started: float) -> None:
        """Answer ``cmd``, whose frame was read at ``started`` (time.monotonic)."""
        try:
            response = await self._answer(conn, cmd)
            self.note(conn, cmd, response, started)
            if response is not None and not cmd.flag & FLAG_ONEWAY:
                await conn.answer(response)
        finally:
            conn.requests_in_progress -= 1
            conn.bytes_in_progress -= length
            conn._room.set()

    def note(
        self, conn: Connection, cmd: RemotingCommand, response: RemotingCommand | None, started: float
    ) -> None:
        """Count and log (a refusal, a slow answer) the ``response`` to ``cmd``, whose frame was
        read at ``started`` (time.monotonic)."""
        if response is not None:
            code = response.code
            if code and (code in _REFUSED or (cmd.code in _STORES and code not in STORED_CODES)):
                self.refused(conn, cmd, response)
        elapsed = time.monotonic() - started
        if elapsed > self.requests.slow_s:
            self.requests.slow(
                elapsed,
                cmd.code if cmd.code in _REQUEST_CODES else -1,
                _NO_ANSWER if response is None else response.code,
                conn.peer,
            )
        self.count(cmd.code, response.code if response is not None else -1)

    def refused(self, conn: Connection, cmd: RemotingCommand, response: RemotingCommand) -> None:
        """Log a refused request (rate-limited)."""
        code = response.code
        self.requests.refused(
            cmd.code if cmd.code in _REQUEST_CODES else -1,
            code if code in _RESPONSE_CODES else -1,
            conn.peer,
            response.remark,
        )

    def count(self, request: int, response: int, n: int = 1) -> None:
        """Count ``n`` requests of code ``request`` answered ``response`` (-1: none)."""
        if self._metrics is None:
            return
        child = self._counted.get((request, response))
        if child is None:
            child = self._counted[(request, response)] = self._metrics.remoting_requests.labels(
                self.name,
                _code_name(RequestCode, request),
                "NONE" if response < 0 else _code_name(ResponseCode, response),
            )
        child.inc(n)

    def _connections_changed(self) -> None:
        if self._metrics is not None:
            self._metrics.remoting_connections.labels(self.name).set(len(self.connections))

    async def _answer(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand | None:
        handler = self._handlers.get(cmd.code)
        if handler is None:
            return cmd.response(
                ResponseCode.REQUEST_CODE_NOT_SUPPORTED, f" request type {cmd.code} not supported"
            )
        try:
            if self._authorize is not None:
                self._authorize(cmd)
            return await handler(cmd, conn)
        except RequestRefused as exc:
            return cmd.response(exc.code, exc.remark)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.exception("%s: request code %d from %s failed", self.name, cmd.code, conn.peer)
            return cmd.response(ResponseCode.SYSTEM_ERROR, f"{type(exc).__name__}: {exc}")


def _consumer_request(numbers: list[int], texts: bytes) -> tuple[RemotingCommand, PullHeader | None]:
    """A consumer's request as ``scan_consumer_request`` read it: a pull's command (without
    extFields) and its header, or an offset's query or update with the extFields it read."""

    def text(k: int) -> str | None:
        at, n = numbers[k], numbers[k + 1]
        return None if at < 0 else texts[at : at + n].decode("ascii")

    code = numbers[CONSUMER_CODE]
    cmd = RemotingCommand(
        code, numbers[CONSUMER_OPAQUE], numbers[CONSUMER_FLAG], serialize_type=numbers[CONSUMER_KIND]
    )
    group, topic = text(CONSUMER_GROUP_AT) or "", text(CONSUMER_TOPIC_AT) or ""
    queue_id = numbers[CONSUMER_QUEUE]
    if code != RequestCode.PULL_MESSAGE:
        cmd.ext_fields = {"consumerGroup": group, "topic": topic, "queueId": str(queue_id)}
        if code == RequestCode.UPDATE_CONSUMER_OFFSET:
            cmd.ext_fields["commitOffset"] = str(numbers[CONSUMER_COMMIT])
        return cmd, None
    offset, max_msgs, sys_flag, commit, suspend, version = numbers[
        CONSUMER_QUEUE + 1 : CONSUMER_SUB_VERSION + 1
    ]
    header = PullHeader(
        group,
        topic,
        queue_id,
        offset,
        max_msgs,
        sys_flag,
        commit,
        suspend,
        version,
        text(CONSUMER_SUBSCRIPTION_AT),
        text(CONSUMER_TYPE_AT),
    )
    return cmd, header
