"""Serve a store until SIGTERM or SIGINT, then close it cleanly (the ``rocketstore serve`` loop)."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import sys
from pathlib import Path

from rocketstore.broker.config import BrokerConfig
from rocketstore.broker.server import Broker
from rocketstore.config import StoreConfig
from rocketstore.store import MessageStore

__all__ = ["configure_logging", "serve"]


class _JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "time": self.formatTime(record, "%Y-%m-%dT%H:%M:%S%z"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            entry["error"] = self.formatException(record.exc_info)
        return json.dumps(entry)


def configure_logging(as_json: bool, level: int = logging.INFO) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        _JsonFormatter() if as_json else logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)


def serve(
    path: str | os.PathLike[str],
    config: BrokerConfig | None = None,
    store_config: StoreConfig | None = None,
    *,
    metrics_address: str | None = None,
    on_started: object = None,
) -> int:
    """Open the store at ``path``, serve it until SIGTERM/SIGINT, close it; the exit code (0).
    Must run in the main thread (it sets the signal handlers)."""
    with MessageStore.open(Path(path), store_config) as store:
        broker = Broker(store, config)

        async def run() -> None:
            loop = asyncio.get_running_loop()
            stopping = asyncio.Event()
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, stopping.set)
            await broker.start(metrics_address)
            if callable(on_started):
                on_started(broker)
            try:
                await stopping.wait()
                logging.getLogger("rocketstore.broker").info("signal received: stopping")
            finally:
                await broker.stop()
                for sig in (signal.SIGTERM, signal.SIGINT):
                    loop.remove_signal_handler(sig)

        asyncio.run(run())
    return 0
