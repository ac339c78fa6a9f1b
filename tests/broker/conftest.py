"""A broker in this process over a store in tmp_path, and the official Python client against it."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from rocketmq.grpc_protocol import service_pb2_grpc

from rocketstore import MessageStore, StoreConfig
from rocketstore.broker import Broker, BrokerConfig

StartBroker = Callable[..., tuple[Broker, MessageStore, int]]

# small files: these tests write little, and the machine's disk is shared
SMALL = StoreConfig(
    commitlog_segment_size=8 << 20,
    consume_queue_entries=20_000,
    index_hash_slots=4096,
    index_max_entries=16_384,
)


@pytest.fixture
def start_broker(tmp_path: Path) -> Iterator[StartBroker]:
    """``start_broker(config=None, store_config=None) -> (broker, store, port)`` on a free port."""
    running: list[tuple[Broker, MessageStore]] = []

    def start(config: BrokerConfig | None = None, store_config: StoreConfig | None = None) -> Any:
        store = MessageStore.open(tmp_path / "store", store_config or SMALL)
        broker = Broker(store, (config or BrokerConfig()).replace(listen="127.0.0.1:0"))
        try:
            port = broker.start_in_thread()
        except BaseException:
            store.close()
            raise
        running.append((broker, store))
        return broker, store, port

    yield start
    for broker, store in reversed(running):
        broker.stop_in_thread()
        store.close()


@pytest.fixture
def stub_for() -> Iterator[Callable[[int], Any]]:
    """A raw MessagingService stub (for requests the official clients never make)."""
    channels: list[grpc.Channel] = []

    def make(port: int) -> Any:
        channel = grpc.insecure_channel(f"127.0.0.1:{port}")
        channels.append(channel)
        return service_pb2_grpc.MessagingServiceStub(channel)

    yield make
    for channel in channels:
        channel.close()


CLIENT = (("x-mq-client-id", "test-client"), ("x-mq-language", "PYTHON"))
