"""HEART_BEAT and UNREGISTER_CLIENT: producer groups per connection, the hooks other registries
use, and answers the client can use."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

from rocketstore.broker.remoting.codes import RequestCode, ResponseCode
from rocketstore.broker.remoting.command import SERIALIZE_ROCKETMQ

from .client import RawClient
from .conftest import Remoting, StartRemoting

HEARTBEAT = {
    "clientID": "10.0.0.1@123#456",
    "consumerDataSet": [],
    "producerDataSet": [{"groupName": "pg"}, {"groupName": "CLIENT_INNER_PRODUCER"}],
}


def on_loop(r: Remoting, fn: Any) -> Any:
    loop = r.broker._loop
    assert loop is not None

    async def call() -> Any:
        return fn()

    return asyncio.run_coroutine_threadsafe(call(), loop).result(30)


def wait_for(condition: Any, what: str) -> None:
    deadline = time.monotonic() + 60
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def test_heartbeat_registers_producer_groups_until_unregister_or_close(start_remoting: StartRemoting) -> None:
    r = start_remoting()
    producers = r.broker.remoting.ctx.producers
    seen: list[tuple[str, str]] = []
    unregistered: list[dict[str, str]] = []

    async def heartbeat_hook(data: dict[str, Any], conn: Any) -> None:
        seen.append((data["clientID"], conn.attributes["client_id"]))

    async def unregister_hook(ext: dict[str, str], conn: Any) -> None:
        unregistered.append(ext)

    r.broker.remoting.ctx.heartbeat_hooks.append(heartbeat_hook)
    r.broker.remoting.ctx.unregister_hooks.append(unregister_hook)
    with RawClient(r.port) as c:
        resp = c.call(
            RequestCode.HEART_BEAT, body=json.dumps(HEARTBEAT).encode(), serialize_type=SERIALIZE_ROCKETMQ
        )
        assert resp.code == ResponseCode.SUCCESS and resp.version == 409
        assert seen == [("10.0.0.1@123#456", "10.0.0.1@123#456")]
        # (CLIENT_INNER_PRODUCER, which every client lists, is not registered: nothing asks it)
        assert on_loop(r, lambda: sorted(producers.groups())) == ["pg"]
        assert on_loop(r, lambda: producers.live_connection("pg")) is not None
        gone = c.call(RequestCode.UNREGISTER_CLIENT, {"clientID": "10.0.0.1@123#456", "producerGroup": "pg"})
        assert gone.code == ResponseCode.SUCCESS
        assert unregistered == [{"clientID": "10.0.0.1@123#456", "producerGroup": "pg"}]
        assert on_loop(r, lambda: sorted(producers.groups())) == []
        assert c.call(RequestCode.HEART_BEAT, body=json.dumps(HEARTBEAT).encode()).code == 0
        assert on_loop(r, lambda: sorted(producers.groups())) == ["pg"]
    wait_for(lambda: not on_loop(r, producers.groups), "the closed connection's groups to go")


def test_bad_heartbeats_are_refused(start_remoting: StartRemoting) -> None:
    r = start_remoting()
    with RawClient(r.port) as c:
        assert c.call(RequestCode.HEART_BEAT, body=b"{nope").code == ResponseCode.SYSTEM_ERROR
        assert c.call(RequestCode.HEART_BEAT, body=b"[]").code == ResponseCode.SYSTEM_ERROR
        no_id = c.call(RequestCode.HEART_BEAT, body=b'{"producerDataSet":[]}')
        assert no_id.code == ResponseCode.SYSTEM_ERROR and "clientID" in (no_id.remark or "")
        assert c.call(RequestCode.UNREGISTER_CLIENT, {}).code == ResponseCode.SYSTEM_ERROR


def test_heartbeat_with_too_many_producer_groups_is_refused(start_remoting: StartRemoting) -> None:
    r = start_remoting()
    beat = {"clientID": "c", "producerDataSet": [{"groupName": f"g{i}"} for i in range(1025)]}
    with RawClient(r.port) as c:
        resp = c.call(RequestCode.HEART_BEAT, body=json.dumps(beat).encode())
        assert resp.code == ResponseCode.SYSTEM_ERROR and "at most 1024" in (resp.remark or "")
        assert on_loop(r, r.broker.remoting.ctx.producers.groups) == {}
