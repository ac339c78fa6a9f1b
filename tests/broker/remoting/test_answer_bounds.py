"""The remoting server's output bound: answers a client does not read stop its connection from
being read, what waits for it stays within ``max_answer_bytes_per_connection``, other
connections go on, and nothing is lost once the client reads. Also: answers over the frame
size, deeply nested JSON headers, and the rate-limited warnings for client mistakes."""

from __future__ import annotations

import logging
import socket
import struct
import time
from collections.abc import Iterator
from typing import Any

import pytest

from rocketstore.broker.rate_limited_log import RateLimitedLog
from rocketstore.broker.remoting.codes import ResponseCode
from rocketstore.broker.remoting.command import RemotingCommand, encode_command
from rocketstore.broker.remoting.server import Connection, RemotingLimits
from rocketstore.clock import ManualClock

from .client import RawClient, _opaques
from .test_server import ECHO, Harness, _wait_for

BIG = 1100  # answers with a body of ext "size" bytes
KIB = 1024
MIB = 1024 * KIB


class BigHarness(Harness):
    """The test server's harness plus a handler whose answer is as large as asked."""

    def __init__(self, limits: RemotingLimits) -> None:
        super().__init__(limits)
        self.handled = 0
        self.server._handlers[BIG] = self.big

    async def big(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        self.handled += 1
        self.connections.append(conn)
        return cmd.response(body=b"x" * int(cmd.ext_fields["size"]))


@pytest.fixture
def big_harness() -> Iterator[Any]:
    made: list[BigHarness] = []

    def make(**limits: Any) -> BigHarness:
        h = BigHarness(RemotingLimits(**limits))
        made.append(h)
        return h

    yield make
    for h in made:
        h.stop()


def _slow_reader(port: int) -> RawClient:
    """A client whose socket takes little before the server's writes back up (a receive
    buffer set explicitly is not grown by the kernel)."""
    c = RawClient.__new__(RawClient)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16 * KIB)
    sock.settimeout(30)
    sock.connect(("127.0.0.1", port))
    c.sock = sock
    c.server_requests = []
    c._early = {}
    return c


def _big(size: int) -> RemotingCommand:
    return RemotingCommand(code=BIG, ext_fields={"size": str(size)})


def _send_at_once(c: RawClient, cmds: list[RemotingCommand]) -> list[int]:
    """Send ``cmds`` in one write (the server reads them in one go), their opaques."""
    for cmd in cmds:
        cmd.opaque = next(_opaques)
    c.send_raw(b"".join(bytes(part) for cmd in cmds for part in encode_command(cmd)))
    return [cmd.opaque for cmd in cmds]


def test_unread_answers_pause_the_connection_and_others_go_on(big_harness: Any) -> None:
    limit = 1 * MIB
    h = big_harness(max_answer_bytes_per_connection=limit)
    answer = 256 * KIB
    with _slow_reader(h.port) as c, RawClient(h.port) as other:
        opaques = []
        for _ in range(64):  # 16 MiB of answers: far more than the limit and the sockets' buffers
            opaques.append(c.send(_big(answer)))
        h.run(_wait_for(lambda: h.connections and h.connections[0].queued_bytes > limit))
        conn = h.connections[0]
        handled = h.handled
        # the output is full: later requests of this connection are not taken ...
        late = [c.send(RemotingCommand(code=ECHO, ext_fields={"n": str(i)})) for i in range(5)]
        # ... while another connection is answered at once
        for _ in range(3):
            assert other.call(ECHO).code == 0
            assert other.call(BIG, {"size": str(answer)}).body == b"x" * answer
        time.sleep(0.2)
        assert h.handled == handled + 3 and h.connections.count(conn) == handled  # no ECHO of c's
        # what is held for the connection stays bounded: one answer past the queue's limit,
        # and at most the limit waiting behind it
        assert conn.queued_bytes <= limit + answer + KIB
        assert conn.waiting_answer_bytes <= limit
        # the client reads: every request is answered, the late ones too
        for opaque in opaques:
            got = c.response_to(opaque)
            if got.code == ResponseCode.SUCCESS:
                assert len(got.body) == answer
            else:
                assert got.code == ResponseCode.SYSTEM_BUSY and "[OVERLOAD]" in (got.remark or "")
        assert [c.response_to(o).ext_fields["n"] for o in late] == [str(i) for i in range(5)]
        h.run(_wait_for(lambda: conn.queued_bytes == 0 and conn.waiting_answer_bytes == 0))


def test_a_closed_connection_drops_the_answers_its_client_did_not_take(big_harness: Any) -> None:
    """Below the output limit too: a client that half-closes and stays connected without
    reading would keep a closing transport's buffer for ever, counted by nothing."""
    h = big_harness(max_answer_bytes_per_connection=16 * MIB)
    held = []
    for _ in range(2):
        c = _slow_reader(h.port)
        for _ in range(3):
            c.send(_big(4 * MIB))  # 12 MiB: within the limit
        h.run(_wait_for(lambda: len(h.connections) == 3 * (len(held) + 1)))
        conn = h.connections[-1]
        h.run(_wait_for(lambda conn=conn: conn.requests_in_progress == 0))
        assert conn.queued_bytes > 4 * MIB
        c.sock.shutdown(socket.SHUT_WR)
        h.run(_wait_for(lambda conn=conn: conn.closed))
        held.append((c, conn))
    assert h.run(_wait_for(lambda: not h.server.connections)) is None
    assert [conn._transport.get_write_buffer_size() for _, conn in held] == [0, 0]
    for c, _ in held:
        c.close()


def test_a_server_request_to_a_full_output_is_dropped_and_says_so(big_harness: Any) -> None:
    limit = 1 * MIB
    h = big_harness(max_answer_bytes_per_connection=limit)
    with _slow_reader(h.port) as c, RawClient(h.port) as other:
        for _ in range(64):  # far more than the limit and the sockets' buffers
            c.send(_big(256 * KIB))
        h.run(_wait_for(lambda: h.connections and h.connections[0].queued_bytes > limit))
        full = h.connections[0]
        other.call(BIG, {"size": "1"})
        fine = h.connections[-1]
        assert h.run(full.oneway(RemotingCommand(code=ECHO))) is False
        assert h.run(fine.oneway(RemotingCommand(code=ECHO))) is True
        assert other.server_request().code == ECHO


def test_answers_past_the_limit_are_busy_but_answers_without_a_body_wait(big_harness: Any) -> None:
    limit = 1 * MIB
    h = big_harness(max_answer_bytes_per_connection=limit)
    answer = 256 * KIB
    with _slow_reader(h.port) as c:
        cmds = []
        for i in range(64):  # read in one go: all handled before any answer is written
            cmds.append(_big(answer))
            cmds.append(RemotingCommand(code=ECHO, ext_fields={"n": str(i)}))
        opaques = _send_at_once(c, cmds)
        h.run(_wait_for(lambda: h.handled == 64))
        conn = h.connections[0]
        assert conn.queued_bytes <= limit + answer + KIB
        assert conn.waiting_answer_bytes <= limit + 64 * KIB  # bodies within the limit, and the ECHOs'
        codes = []
        for opaque, cmd in zip(opaques, cmds):
            got = c.response_to(opaque)
            if cmd.code == ECHO:  # a send's SUCCESS is never turned into an error: it waited
                assert got.code == ResponseCode.SUCCESS and got.ext_fields == cmd.ext_fields
            else:
                codes.append(got.code)
                assert got.code == ResponseCode.SYSTEM_BUSY or len(got.body) == answer
        # about the limit's worth waited (and the sockets took some); the rest were answered busy
        assert codes.count(ResponseCode.SUCCESS) >= 4 and codes.count(ResponseCode.SYSTEM_BUSY) >= 16


def test_server_requests_to_a_full_connection_are_dropped_not_waited_for(big_harness: Any) -> None:
    limit = 256 * KIB
    h = big_harness(max_answer_bytes_per_connection=limit)
    with _slow_reader(h.port) as c:
        _send_at_once(c, [_big(512 * KIB) for _ in range(24)])
        h.run(_wait_for(lambda: h.connections and h.connections[0].queued_bytes > limit))
        conn = h.connections[0]
        queued = conn.queued_bytes
        # a notice returns at once, adding nothing; a request awaiting an answer is refused
        h.run(conn.oneway(RemotingCommand(code=40, body=b"n" * 4096)))
        assert conn.queued_bytes <= queued
        with pytest.raises(Exception, match="OVERLOAD"):
            h.run(conn.invoke(RemotingCommand(code=307), 5))


def test_an_answer_over_the_frame_size_is_refused(big_harness: Any) -> None:
    h = big_harness(max_frame_size=64 * KIB)
    with RawClient(h.port) as c:
        got = c.call(BIG, {"size": str(100 * KIB)})
        assert got.code == ResponseCode.SYSTEM_ERROR and "frame limit" in (got.remark or "")
        assert c.call(BIG, {"size": str(10 * KIB)}).code == ResponseCode.SUCCESS


def _json_frame(header: bytes) -> bytes:
    return struct.pack(">ii", 4 + len(header), len(header)) + header


def test_deeply_nested_json_header_closes_with_one_warning(
    big_harness: Any, caplog: pytest.LogCaptureFixture
) -> None:
    h = big_harness()
    nested = b"[" * 100_000 + b"]" * 100_000
    in_ext = b'{"code":1000,"extFields":{"a":' + b"[" * 100_000 + b"]" * 100_000 + b"}}"
    with caplog.at_level(logging.WARNING, "rocketstore.broker.remoting"), RawClient(h.port) as good:
        for header in (nested, in_ext, nested):
            with RawClient(h.port, timeout=10) as bad:
                bad.send_raw(_json_frame(header))
                assert bad.closed_by_server()
        assert good.call(ECHO).code == 0
    lines = [r for r in caplog.records if r.name.startswith("rocketstore")]
    assert all(r.exc_info is None and r.levelno <= logging.WARNING for r in lines)
    malformed = [r for r in lines if "malformed frame" in r.getMessage()]
    assert len(malformed) == 1 and "nests too deeply" in malformed[0].getMessage()


def test_rate_limited_log_says_how_many_it_left_out(caplog: pytest.LogCaptureFixture) -> None:
    clock = ManualClock()
    logger = logging.getLogger("rocketstore.test.rate")
    limited = RateLimitedLog(logger, interval_s=60, clock=clock)
    with caplog.at_level(logging.WARNING, "rocketstore.test.rate"):
        assert limited.warning("kind", "bad %s", "one")
        assert not limited.warning("kind", "bad %s", "two")
        assert not limited.warning("kind", "bad %s", "three")
        assert limited.warning("other", "another %s", "kind")
        clock.advance(60_000)
        assert limited.warning("kind", "bad %s", "four")
    assert [r.getMessage() for r in caplog.records] == [
        "bad one",
        "another kind",
        "bad four (and 2 more of this kind in the last 60 s)",
    ]


def test_a_client_that_never_reads_is_closed_when_idle_and_its_output_dropped(
    big_harness: Any, caplog: pytest.LogCaptureFixture
) -> None:
    limit = 8 * MIB  # more than the sockets' buffers take, so the transport holds some
    h = big_harness(max_answer_bytes_per_connection=limit, idle_timeout_s=0.5)
    with caplog.at_level(logging.WARNING, "rocketstore.broker.remoting"), _slow_reader(h.port) as c:
        _send_at_once(c, [_big(MIB) for _ in range(24)])
        h.run(_wait_for(lambda: h.handled == 24))
        conn = h.connections[0]
        # not read for the idle time while its output stays full: closed, its buffer dropped,
        # and the connection forgotten (its reader does not wait on the unread output for ever)
        h.run(_wait_for(lambda: conn.closed and conn not in h.server.connections))
        assert conn.queued_bytes == 0
    assert any("does not read its answers" in r.getMessage() for r in caplog.records)
