"""The remoting server on its own (a handler table of the tests' making): dispatch, opaque,
oneway, unknown codes, errors, out-of-order answers, server requests, limits, and a malformed
frame closing only its own connection."""

from __future__ import annotations

import asyncio
import logging
import struct
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from rocketstore.broker.remoting.codes import ResponseCode
from rocketstore.broker.remoting.command import (
    FLAG_ONEWAY,
    SERIALIZE_ROCKETMQ,
    RemotingCommand,
    encode_command,
)
from rocketstore.broker.remoting.refusal import RequestRefused
from rocketstore.broker.remoting.server import Connection, Handler, RemotingLimits, RemotingServer

from .client import RawClient

ECHO, SLOW, FAIL, REFUSE, ASK, RELEASE = 1000, 1001, 1002, 1003, 1004, 1005


class Harness:
    """A RemotingServer on a loop in a thread, with test handlers."""

    def __init__(self, limits: RemotingLimits) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.release = threading.Event()
        self.oneways: list[RemotingCommand] = []
        self.answers: list[Any] = []
        self.connections: list[Connection] = []
        handlers: dict[int, Handler] = {
            ECHO: self.echo,
            SLOW: self.slow,
            FAIL: self.fail,
            REFUSE: self.refuse,
            ASK: self.ask,
        }
        self.server = RemotingServer(handlers, limits, "test")
        self.port = self.run(self.server.start("127.0.0.1", 0))

    def run(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(60)

    async def echo(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        if cmd.is_oneway:
            self.oneways.append(cmd)
        self.connections.append(conn)
        return cmd.response(ext_fields=dict(cmd.ext_fields), body=bytes(cmd.body))

    async def slow(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        while not self.release.is_set():
            await asyncio.sleep(0.01)
        return cmd.response(remark="slow")

    async def fail(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        raise ValueError("broken handler")

    async def refuse(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        raise RequestRefused(ResponseCode.TOPIC_NOT_EXIST, "no such topic")

    async def ask(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        """Asks the client something on its own connection, answers with what it said."""
        answer = await conn.invoke(RemotingCommand(code=307, ext_fields={"q": "?"}), 30)
        return cmd.response(remark=answer.remark)

    def stop(self) -> None:
        self.release.set()
        self.run(self.server.stop())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join()
        self.loop.close()


@pytest.fixture
def harness() -> Iterator[Any]:
    made: list[Harness] = []

    def make(**limits: Any) -> Harness:
        h = Harness(RemotingLimits(**limits))
        made.append(h)
        return h

    yield make
    for h in made:
        h.stop()


def test_answers_carry_the_opaque_and_the_request_encoding(harness: Any) -> None:
    h = harness()
    with RawClient(h.port) as c:
        for kind in (0, SERIALIZE_ROCKETMQ):
            r = c.call(ECHO, {"k": "v"}, b"body", serialize_type=kind)
            assert r.is_response and r.code == 0 and r.ext_fields == {"k": "v"}
            assert bytes(r.body) == b"body" and r.serialize_type == kind and r.version == 409


def test_unknown_code_errors_and_refusals_keep_the_connection(harness: Any) -> None:
    h = harness()
    with RawClient(h.port) as c:
        r = c.call(4242)
        assert (r.code, r.remark) == (
            ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
            " request type 4242 not supported",
        )
        r = c.call(FAIL)
        assert r.code == ResponseCode.SYSTEM_ERROR and "broken handler" in (r.remark or "")
        r = c.call(REFUSE)
        assert (r.code, r.remark) == (ResponseCode.TOPIC_NOT_EXIST, "no such topic")
        assert c.call(ECHO).code == 0


def test_oneway_gets_no_answer(harness: Any) -> None:
    h = harness()
    with RawClient(h.port) as c:
        c.oneway(ECHO, {"n": "1"})
        c.oneway(4242)  # not even for an unknown code
        last = c.call(ECHO, {"n": "2"})
        assert last.ext_fields == {"n": "2"}
        # nothing else came before the answer to the request
        assert not c._early and not c.server_requests
        assert [cmd.ext_fields for cmd in h.oneways] == [{"n": "1"}]


def test_a_slow_request_does_not_hold_up_the_others(harness: Any) -> None:
    h = harness()
    with RawClient(h.port) as c:
        slow = c.send(RemotingCommand(code=SLOW))
        fast = c.send(RemotingCommand(code=ECHO, ext_fields={"x": "1"}))
        first = c.read()
        assert first.opaque == fast
        h.release.set()
        assert c.response_to(slow).remark == "slow"


def test_server_request_on_the_client_connection(harness: Any) -> None:
    h = harness()
    with RawClient(h.port) as c:
        opaque = c.send(RemotingCommand(code=ASK))
        asked = c.server_request()
        assert asked.code == 307 and asked.ext_fields == {"q": "?"} and not asked.is_response
        c.send(asked.response(remark="forty-two"))
        assert c.response_to(opaque).remark == "forty-two"


def test_malformed_frame_closes_only_its_connection(harness: Any, caplog: pytest.LogCaptureFixture) -> None:
    h = harness()
    with (
        caplog.at_level(logging.WARNING, "rocketstore.broker.remoting"),
        RawClient(h.port) as good,
        RawClient(h.port, timeout=10) as bad,
    ):
        assert good.call(ECHO).code == 0
        body = b"{broken"
        bad.send_raw(struct.pack(">ii", 4 + len(body), len(body)) + body)
        assert bad.closed_by_server()
        assert good.call(ECHO).code == 0
    assert any("malformed frame" in r.message and "does not parse" in r.message for r in caplog.records)


def test_frame_over_the_limit_closes_the_connection(harness: Any) -> None:
    h = harness(max_frame_size=1024)
    with RawClient(h.port, timeout=10) as c:
        assert c.call(ECHO, body=b"x" * 900).code == 0
        c.send_raw(struct.pack(">i", 4096))
        assert c.closed_by_server()


def test_connections_over_the_limit_are_closed(harness: Any) -> None:
    h = harness(max_connections=1)
    with RawClient(h.port) as first, RawClient(h.port, timeout=10) as second:
        assert first.call(ECHO).code == 0
        assert second.closed_by_server()


def test_requests_in_progress_over_the_limit_are_answered_busy(harness: Any) -> None:
    h = harness(max_requests_per_connection=2)
    with RawClient(h.port) as c:
        slow = [c.send(RemotingCommand(code=SLOW)) for _ in range(2)]
        busy = c.call(ECHO)
        assert busy.code == ResponseCode.SYSTEM_BUSY and (busy.remark or "").startswith("[OVERLOAD]")
        h.release.set()
        for opaque in slow:
            assert c.response_to(opaque).code == 0
        assert c.call(ECHO).code == 0


def test_server_requests_pending_are_bounded(harness: Any) -> None:
    h = harness(max_server_requests_per_connection=1)
    with RawClient(h.port) as c:
        first = c.send(RemotingCommand(code=ASK))
        c.server_request()  # not answered yet
        second = c.call(ASK)
        assert second.code == ResponseCode.SYSTEM_BUSY and "await an answer" in (second.remark or "")
        assert first not in c._early


def test_closing_fails_pending_server_requests(harness: Any) -> None:
    h = harness()
    c = RawClient(h.port)
    c.send(RemotingCommand(code=ASK))
    c.server_request()
    conn = h.run(_first_connection(h))
    c.close()
    assert h.run(_wait_closed(conn))


async def _first_connection(h: Harness) -> Connection:
    for _ in range(1000):
        if h.server.connections:
            return next(iter(h.server.connections))
        await asyncio.sleep(0.01)
    raise AssertionError("no connection")


async def _wait_closed(conn: Connection) -> bool:
    for _ in range(3000):
        if conn.closed and not conn._pending:
            return True
        await asyncio.sleep(0.01)
    return False


def test_oneway_flag_is_kept_in_server_oneway(harness: Any) -> None:
    h = harness()
    with RawClient(h.port) as c:
        assert c.call(ECHO).code == 0
        conn = h.connections[-1]
        h.run(conn.oneway(RemotingCommand(code=40, ext_fields={"consumerGroup": "g"})))
        notice = c.server_request()
        assert notice.code == 40 and notice.flag & FLAG_ONEWAY and notice.ext_fields == {"consumerGroup": "g"}


def test_idle_connections_are_closed(harness: Any) -> None:
    h = harness(idle_timeout_s=0.5)
    with RawClient(h.port, timeout=60) as c:
        assert c.call(ECHO).code == 0
        assert c.closed_by_server()  # nothing read from it for 0.5 s


def test_a_connection_is_not_read_past_its_bytes_in_progress(harness: Any) -> None:
    h = harness(max_request_bytes_per_connection=2000)
    with RawClient(h.port) as c:
        slow = [c.send(RemotingCommand(code=SLOW, body=b"x" * 1500)) for _ in range(2)]
        echo = c.send(RemotingCommand(code=ECHO))
        conn = h.run(_first_connection(h))
        h.run(_wait_for(lambda: conn.requests_in_progress == 2))
        assert conn.bytes_in_progress > 2000  # and the reader waits: the echo is not taken
        h.release.set()
        first = c.read()
        assert first.opaque in slow  # the echo was read only once a slow request ended
        for opaque in [*slow, echo]:
            if opaque != first.opaque:
                assert c.response_to(opaque).code == 0
        # (a request's count ends just after its answer is written: read on the loop's thread)
        h.run(_wait_for(lambda: conn.bytes_in_progress == 0))


async def _wait_for(condition: Any) -> None:
    for _ in range(6000):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("condition not reached")


def test_a_turns_first_answer_leaves_at_once_and_the_rest_together_at_its_end() -> None:
    writes: list[bytes] = []

    class Transport:
        def get_write_buffer_size(self) -> int:
            return 0

        def set_write_buffer_limits(self, high: int) -> None:
            pass

    class Writer:
        transport = Transport()

        def writelines(self, parts: list[bytes]) -> None:
            writes.append(b"".join(bytes(p) for p in parts))

    def answer(opaque: int) -> RemotingCommand:
        return RemotingCommand(ResponseCode.SUCCESS, opaque=opaque, flag=1, remark=f"a{opaque}")

    def frame(cmd: RemotingCommand) -> bytes:
        return b"".join(bytes(p) for p in encode_command(cmd))

    async def main() -> None:
        server = RemotingServer({}, RemotingLimits(), "test")
        conn = Connection(server, Writer(), "127.0.0.1", 1, 1)  # type: ignore[arg-type]
        await conn.answer(answer(1))
        assert writes == [frame(answer(1))]  # a lone answer waits for nothing
        await conn.answer(answer(2))
        await conn.answer(answer(3))
        assert len(writes) == 1  # the turn's later answers wait for its end ...
        await asyncio.sleep(0)
        assert writes[1:] == [frame(answer(2)) + frame(answer(3))]  # ... and leave in one write
        await conn.answer(answer(4))
        assert writes[2:] == [frame(answer(4))]  # the next turn's first: at once again

    asyncio.run(main())
