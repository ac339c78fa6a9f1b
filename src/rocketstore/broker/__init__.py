"""``rocketstore serve``: a RocketMQ 5 endpoint (gRPC ``apache.rocketmq.v2.MessagingService``) over
a store, for the official RocketMQ clients, and the consumer state under it (``pop``). See
docs/broker.md.

In-process use::

    with MessageStore.open("store") as store:
        broker = Broker(store, BrokerConfig(listen="127.0.0.1:0"))
        port = broker.start_in_thread()
        ...  # clients connect to 127.0.0.1:port
        broker.stop_in_thread()

``serve(path)`` opens the store, serves until SIGTERM or SIGINT, then closes the store cleanly.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rocketstore.broker.config import BrokerConfig
    from rocketstore.broker.serve import serve
    from rocketstore.broker.server import Broker

__all__ = ["Broker", "BrokerConfig", "serve"]

# loaded on first use (PEP 562): `rocketstore status` reads broker.state without gRPC
_WHERE = {
    "Broker": "rocketstore.broker.server",
    "BrokerConfig": "rocketstore.broker.config",
    "serve": "rocketstore.broker.serve",
}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'rocketstore.broker' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
