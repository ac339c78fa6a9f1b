"""A broker with its remoting listeners in this process, over a store in tmp_path whose records
name the remoting port as their store host (as `rocketstore serve` arranges)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from rocketstore import MessageStore, StoreConfig
from rocketstore.broker import Broker, BrokerConfig
from rocketstore.broker.remoting.endpoint import bind_listener

from ..conftest import SMALL


@dataclass
class Remoting:
    broker: Broker
    store: MessageStore
    port: int  # the broker's remoting port
    namesrv_port: int

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"


StartRemoting = Callable[..., Remoting]


@pytest.fixture
def start_remoting(tmp_path: Path) -> Iterator[StartRemoting]:
    """``start_remoting(config=None, store_config=None) -> Remoting`` on free ports, gRPC off."""
    running: list[Remoting] = []

    def start(
        config: BrokerConfig | None = None, store_config: StoreConfig | None = None, **changes: Any
    ) -> Any:
        broker_sock = bind_listener("127.0.0.1:0")
        namesrv_sock = bind_listener("127.0.0.1:0")
        port = broker_sock.getsockname()[1]
        store = MessageStore.open(
            tmp_path / "store", (store_config or SMALL).replace(store_host=f"127.0.0.1:{port}")
        )
        cfg = (config or BrokerConfig()).replace(
            listen=None, remoting="127.0.0.1:0", namesrv="127.0.0.1:0", broker_name="broker-a", **changes
        )
        broker = Broker(store, cfg)
        try:
            broker.start_in_thread(remoting_socket=broker_sock, namesrv_socket=namesrv_sock)
        except BaseException:
            store.close()
            raise
        r = Remoting(broker, store, port, namesrv_sock.getsockname()[1])
        running.append(r)
        return r

    yield start
    for r in reversed(running):
        r.broker.stop_in_thread()
        r.store.close()
