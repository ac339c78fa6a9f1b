"""The remoting server's log lines about requests: a refusal with its code (rate-limited), a
request slower than the threshold with its code and duration, a parked pull's wait not counted."""

from __future__ import annotations

import asyncio
import logging
import re
import threading
from collections.abc import Iterator

import pytest

from rocketstore.broker.remoting.codes import RequestCode, ResponseCode
from rocketstore.broker.remoting.command import RemotingCommand
from rocketstore.broker.remoting.refusal import RequestRefused
from rocketstore.broker.remoting.server import Connection, Handler, RemotingLimits, RemotingServer
from rocketstore.broker.request_log import parked

from .client import RawClient

LOGGER = "rocketstore.broker.remoting"
SLEEP, QUIET_REFUSAL = 1001, 1002


class Server:
    def __init__(self, limits: RemotingLimits) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        handlers: dict[int, Handler] = {
            RequestCode.SEND_MESSAGE_V2: self.send,
            RequestCode.PULL_MESSAGE: self.pull,
            RequestCode.HEART_BEAT: self.forbidden,
            SLEEP: self.sleep,
            QUIET_REFUSAL: self.not_found,
        }
        self.server = RemotingServer(handlers, limits, "broker")
        self.port = asyncio.run_coroutine_threadsafe(self.server.start("127.0.0.1", 0), self.loop).result(60)

    async def send(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        if cmd.ext_fields.get("topic") == "Missing":
            raise RequestRefused(ResponseCode.TOPIC_NOT_EXIST, "topic[Missing] not exist")
        if cmd.ext_fields.get("topic") == "Slow":
            return cmd.response(ResponseCode.FLUSH_DISK_TIMEOUT)  # stored: not a refusal
        return cmd.response()

    async def pull(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        wait = float(cmd.ext_fields["wait"])
        await asyncio.sleep(wait)
        parked(wait)  # as PullProcessor._park notes its wait
        return cmd.response(ResponseCode.PULL_NOT_FOUND)

    async def forbidden(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        raise RequestRefused(ResponseCode.NO_PERMISSION, "no permission for group G")

    async def sleep(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        await asyncio.sleep(float(cmd.ext_fields["wait"]))
        return cmd.response()

    async def not_found(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        raise RequestRefused(ResponseCode.QUERY_NOT_FOUND, "no such message")

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self.server.stop(), self.loop).result(60)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join()
        self.loop.close()


@pytest.fixture
def server() -> Iterator[Server]:
    s = Server(RemotingLimits(slow_request_ms=200))
    yield s
    s.stop()


def lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == LOGGER and r.levelno == logging.WARNING]


def test_refusals_are_logged_with_their_code_once_a_minute(
    server: Server, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, LOGGER), RawClient(server.port) as c:
        for _ in range(5):
            assert (
                c.call(RequestCode.SEND_MESSAGE_V2, {"topic": "Missing"}).code == ResponseCode.TOPIC_NOT_EXIST
            )
        assert c.call(RequestCode.HEART_BEAT).code == ResponseCode.NO_PERMISSION
        assert c.call(4242).code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
        # answers that are no refusal: stored, or a lookup that found nothing
        assert c.call(RequestCode.SEND_MESSAGE_V2, {"topic": "T"}).code == ResponseCode.SUCCESS
        assert c.call(RequestCode.SEND_MESSAGE_V2, {"topic": "Slow"}).code == ResponseCode.FLUSH_DISK_TIMEOUT
        assert c.call(QUIET_REFUSAL).code == ResponseCode.QUERY_NOT_FOUND
    assert [re.sub(r"from 127\.0\.0\.1:\d+", "from PEER", line) for line in lines(caplog)] == [
        "broker: refused SEND_MESSAGE_V2 (310) from PEER: TOPIC_NOT_EXIST (17) topic[Missing] not exist",
        "broker: refused HEART_BEAT (34) from PEER: NO_PERMISSION (16) no permission for group G",
        "broker: refused OTHER from PEER: REQUEST_CODE_NOT_SUPPORTED (3)  request type 4242 not supported",
    ]


def test_slow_requests_are_logged_with_code_and_duration_parked_pulls_are_not(
    server: Server, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, LOGGER), RawClient(server.port) as c:
        assert c.call(SLEEP, {"wait": "0"}).code == 0
        assert c.call(RequestCode.PULL_MESSAGE, {"wait": "0.4"}).code == ResponseCode.PULL_NOT_FOUND
        assert c.call(SLEEP, {"wait": "0.4"}).code == 0
    got = lines(caplog)
    assert len(got) == 1, got
    assert got[0].startswith("broker: slow request: OTHER from 127.0.0.1:")
    ms = int(got[0].split(" after ")[1].split(" ms")[0])
    assert 400 <= ms < 60_000 and got[0].endswith(f"answered SUCCESS (0) after {ms} ms (threshold 200 ms)")


def test_no_slow_lines_with_the_threshold_off(caplog: pytest.LogCaptureFixture) -> None:
    s = Server(RemotingLimits(slow_request_ms=0))
    try:
        with caplog.at_level(logging.WARNING, LOGGER), RawClient(s.port) as c:
            assert c.call(SLEEP, {"wait": "0.3"}).code == 0
    finally:
        s.stop()
    assert lines(caplog) == []
