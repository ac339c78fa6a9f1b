"""What `rocketstore status` (the broker's state file) and the Prometheus metrics say about the
remoting side."""

from __future__ import annotations

import json
import time
from typing import Any

from rocketstore.broker.remoting.codes import RequestCode
from rocketstore.broker.server import read_state

from .client import RawClient
from .conftest import StartRemoting
from .test_producer import send


def wait_for(condition: Any, what: str) -> Any:
    deadline = time.monotonic() + 60
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def test_requests_and_connections_are_counted_and_clients_listed(start_remoting: StartRemoting) -> None:
    r = start_remoting(state_interval_ms=100)
    registry = r.broker.metrics.registry

    def sample(name: str, **labels: str) -> float:
        return registry.get_sample_value(name, labels) or 0.0

    beat = {"clientID": "10.1.1.1@42", "producerDataSet": [{"groupName": "pg"}], "consumerDataSet": []}
    with RawClient(r.port) as c, RawClient(r.namesrv_port) as ns:
        assert c.call(RequestCode.HEART_BEAT, body=json.dumps(beat).encode()).code == 0
        assert send(c, "Counted", b"x").code == 0
        assert send(c, "bad topic", b"x").code != 0
        c.call(9999)
        ns.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "Counted"})
        name = "rocketstore_broker_remoting_requests_total"
        wait_for(
            lambda: sample(name, listener="namesrv", request="GET_ROUTEINFO_BY_TOPIC", response="SUCCESS"),
            "ns",
        )
        assert sample(name, listener="remoting", request="SEND_MESSAGE_V2", response="SUCCESS") == 1
        assert sample(name, listener="remoting", request="SEND_MESSAGE_V2", response="SYSTEM_ERROR") == 1
        assert sample(name, listener="remoting", request="OTHER", response="REQUEST_CODE_NOT_SUPPORTED") == 1
        assert sample("rocketstore_broker_remoting_connections", listener="remoting") == 1
        assert sample("rocketstore_broker_sends_total", topic="Counted", type="REMOTING", code="SUCCESS") == 1
        state = wait_for(
            lambda: (s := read_state(r.store.layout.root)) and s["remoting_clients"] and s, "state"
        )
        assert state["remoting_port"] == r.port and state["namesrv_port"] == r.namesrv_port
        [client] = state["remoting_clients"]
        assert client["client_id"] == "10.1.1.1@42" and client["producer_groups"] == ["pg"]
        assert client["peer"] == f"127.0.0.1:{c.sock.getsockname()[1]}" and client["language"] == "JAVA"
    wait_for(lambda: not read_state(r.store.layout.root)["remoting_clients"], "the client to leave the state")
