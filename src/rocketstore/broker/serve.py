"""Serve a store until SIGTERM or SIGINT, then close it cleanly (the ``rocketstore serve`` loop)."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import socket
import sys
import threading
import time
from logging.handlers import RotatingFileHandler
from pathlib import Path
from typing import Final

import uvloop

from rocketstore.broker.config import BrokerConfig
from rocketstore.broker.remoting.endpoint import bind_listener
from rocketstore.broker.remoting.namesrv import NameServer, NameServerProcessor
from rocketstore.broker.routes import RouteTable
from rocketstore.broker.server import Broker, advertised_address, remoting_limits
from rocketstore.clock import SystemClock
from rocketstore.config import StoreConfig
from rocketstore.store import MessageStore
from rocketstore.warm import preload

__all__ = ["LOG_FILE_BACKUPS", "LOG_FILE_BYTES", "configure_logging", "log_file_of", "serve", "serve_namesrv"]


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


# the log file: rotated at this size, this many old files kept (log.1 ... log.4): at most 80 MiB
LOG_FILE_BYTES: Final = 16 << 20
LOG_FILE_BACKUPS: Final = 4


def log_file_of(store: Path, config: BrokerConfig) -> Path:
    """Where ``rocketstore serve`` logs: the broker's ``log_file``, else the store's
    ``logs/rocketstore.log``."""
    return Path(config.log_file) if config.log_file else store / "logs" / "rocketstore.log"


def configure_logging(as_json: bool, level: int = logging.INFO, log_file: Path | None = None) -> None:
    """Log lines to stderr and, given ``log_file``, to that file too (its directory made if
    missing), rotated at ``LOG_FILE_BYTES`` with ``LOG_FILE_BACKUPS`` old files kept."""
    formatter = (
        _JsonFormatter() if as_json else logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
    )
    handlers: list[logging.Handler] = [logging.StreamHandler(sys.stderr)]
    if log_file is not None:
        log_file.parent.mkdir(parents=True, exist_ok=True)
        handlers.append(
            RotatingFileHandler(
                log_file, maxBytes=LOG_FILE_BYTES, backupCount=LOG_FILE_BACKUPS, encoding="utf-8"
            )
        )
    for handler in handlers:
        handler.setFormatter(formatter)
    root = logging.getLogger()
    for old in root.handlers:
        if isinstance(old, RotatingFileHandler):  # a previous call's
            old.close()
    root.handlers[:] = handlers
    root.setLevel(level)


def serve(
    path: str | os.PathLike[str],
    config: BrokerConfig | None = None,
    store_config: StoreConfig | None = None,
    *,
    metrics_address: str | None = None,
) -> int:
    """Open the store at ``path``, serve it until SIGTERM or SIGINT, close it cleanly; the exit
    code: 128 + the signal's number, as the CLI's (143 SIGTERM, 130 SIGINT). Must run in the
    main thread (it sets the signal handlers)."""
    received: list[int] = []
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        _serve(Path(path), config, store_config, metrics_address, received)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    logging.getLogger("rocketstore.broker").info("store %s closed", path)
    return 128 + received[0] if received else 0


def _preload() -> None:
    started = time.monotonic()
    try:
        preload()
    except Exception as exc:  # the first requests load what they need themselves: slower, no worse
        logging.getLogger("rocketstore.broker").warning("the compiled kernels were not preloaded: %r", exc)
    else:
        logging.getLogger("rocketstore.broker").info(
            "compiled kernels loaded in %.1f s", time.monotonic() - started
        )


def serve_namesrv(path: str | os.PathLike[str], address: str, config: BrokerConfig | None = None) -> int:
    """A name server alone on ``address`` (no broker, no store): brokers register with it and
    clients ask it for routes; its KV configuration is kept in ``path/config``. Serves until
    SIGTERM or SIGINT; the exit code as ``serve``'s. Must run in the main thread."""
    config = config or BrokerConfig(listen=None)
    received: list[int] = []
    sock = bind_listener(address)
    limits = remoting_limits(config)
    log = logging.getLogger("rocketstore.broker")

    async def run() -> None:
        loop = asyncio.get_running_loop()
        stopping = asyncio.Event()

        def stop(sig: int) -> None:
            received.append(sig)
            stopping.set()

        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop, sig)
        name_server = NameServer(
            NameServerProcessor(RouteTable(SystemClock()), Path(path) / "config"), limits
        )
        try:
            port = await name_server.start(sock)
            log.info("name server on %s:%d (no broker)", address.rpartition(":")[0], port)
            await stopping.wait()
            log.info("%s received: stopping", signal.Signals(received[0]).name)
        finally:
            await name_server.stop()
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.remove_signal_handler(sig)

    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        uvloop.run(run())
    finally:
        sock.close()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return 128 + received[0] if received else 0


def _serve(
    path: Path,
    config: BrokerConfig | None,
    store_config: StoreConfig | None,
    metrics_address: str | None,
    received: list[int],
) -> None:
    config = config or BrokerConfig()
    sockets: list[socket.socket] = []
    remoting_sock = namesrv_sock = None
    try:
        if config.remoting is not None:
            # bound before the store opens: its records name this port as their store host
            remoting_sock = bind_listener(config.remoting)
            sockets.append(remoting_sock)
            if config.namesrv is not None:
                namesrv_sock = bind_listener(config.namesrv)
                sockets.append(namesrv_sock)
            store_host = advertised_address(config, int(remoting_sock.getsockname()[1]))
            store_config = (store_config or StoreConfig()).replace(store_host=store_host)
        _serve_store(path, config, store_config, metrics_address, received, remoting_sock, namesrv_sock)
    finally:
        for sock in sockets:
            sock.close()


def _serve_store(
    path: Path,
    config: BrokerConfig,
    store_config: StoreConfig | None,
    metrics_address: str | None,
    received: list[int],
    remoting_sock: socket.socket | None,
    namesrv_sock: socket.socket | None,
) -> None:
    with MessageStore.open(path, store_config) as store:
        broker = Broker(store, config)
        # numba loads while the listeners start, not in the first batch send's time
        threading.Thread(target=_preload, name="preload-kernels", daemon=True).start()

        async def run() -> None:
            loop = asyncio.get_running_loop()
            stopping = asyncio.Event()

            def stop(sig: int) -> None:
                received.append(sig)
                stopping.set()

            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, stop, sig)
            try:
                await broker.start(
                    metrics_address, remoting_socket=remoting_sock, namesrv_socket=namesrv_sock
                )
                await stopping.wait()
                logging.getLogger("rocketstore.broker").info(
                    "%s received: stopping", signal.Signals(received[0]).name
                )
            finally:
                await broker.stop()
                for sig in (signal.SIGTERM, signal.SIGINT):
                    loop.remove_signal_handler(sig)
                    signal.signal(sig, signal.SIG_IGN)  # closing the store must finish

        # uvloop: the event loop is the remoting door's bottleneck, and uvloop's costs less CPU
        # per request (docs/remoting.md)
        uvloop.run(run())
