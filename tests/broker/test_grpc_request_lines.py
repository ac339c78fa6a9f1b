"""The gRPC door's log lines about unary requests: a refusal with its code (rate-limited), a
request slower than slow_request_ms with its code and duration."""

from __future__ import annotations

import logging
import time
import types
from collections.abc import Callable
from typing import Any

import pytest
from rocketmq.grpc_protocol import definition_pb2 as pb

from rocketstore.broker import BrokerConfig
from rocketstore.broker.grpc import messaging_service

from .conftest import CLIENT, StartBroker
from .test_requests import send_request

LOGGER = "rocketstore.broker"


def lines(caplog: pytest.LogCaptureFixture, what: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == LOGGER and what in r.getMessage()]


def test_refused_sends_are_logged_with_their_code_once_a_minute(
    start_broker: StartBroker, stub_for: Callable[[int], Any], caplog: pytest.LogCaptureFixture
) -> None:
    _, _, port = start_broker(BrokerConfig(auto_create_topic=False))
    stub = stub_for(port)
    with caplog.at_level(logging.WARNING, LOGGER):
        for _ in range(3):
            answer = stub.SendMessage(send_request(topic="Missing"), metadata=CLIENT, timeout=30)
            assert answer.status.code == pb.Code.TOPIC_NOT_FOUND
    got = lines(caplog, "refused")
    assert len(got) == 1, got
    assert got[0].startswith("grpc: refused SendMessage from ipv4:127.0.0.1:")
    assert got[0].endswith(": TOPIC_NOT_FOUND topic 'Missing' does not exist")


def test_slow_requests_are_logged_with_code_and_duration(
    start_broker: StartBroker,
    stub_for: Callable[[int], Any],
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _, _, port = start_broker(BrokerConfig(slow_request_ms=500))
    stub = stub_for(port)
    assert (
        stub.SendMessage(send_request(topic="Quick"), metadata=CLIENT, timeout=30).status.code == pb.Code.OK
    )
    # the door's clock runs 2 s per reading from here: every request takes 2 s
    ticks = [time.monotonic()]

    def monotonic() -> float:
        ticks[0] += 2.0
        return ticks[0]

    monkeypatch.setattr(messaging_service, "time", types.SimpleNamespace(monotonic=monotonic, time=time.time))
    with caplog.at_level(logging.WARNING, LOGGER):
        assert (
            stub.SendMessage(send_request(topic="Quick"), metadata=CLIENT, timeout=30).status.code
            == pb.Code.OK
        )
    got = lines(caplog, "slow request")
    assert len(got) == 1, got
    assert got[0].startswith("grpc: slow request: SendMessage from ipv4:127.0.0.1:")
    assert got[0].endswith(" answered OK after 2000 ms (threshold 500 ms)")
