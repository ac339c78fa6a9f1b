"""Serve a store until SIGTERM or SIGINT, then close it cleanly (the ``rocketstore serve`` loop)."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import logging
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
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

__all__ = [
    "LOG_FILE_BACKUPS",
    "LOG_FILE_BYTES",
    "configure_logging",
    "log_file_of",
    "run_until_signalled",
    "serve",
    "serve_namesrv",
]

_STOP_SIGNALS: Final = (signal.SIGTERM, signal.SIGINT)
_YOUNG_COLLECTION_ALLOCATIONS: Final = 10_000  # CPython's default: 700


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
    previous = {sig: signal.getsignal(sig) for sig in _STOP_SIGNALS}
    try:
        code = _serve(Path(path), config, store_config, metrics_address)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    logging.getLogger("rocketstore.broker").info("store %s closed", path)
    return code


def run_until_signalled(start: Callable[[], Awaitable[object]], stop: Callable[[], Awaitable[object]]) -> int:
    """On a uvloop event loop (the remoting door's bottleneck: uvloop's costs less CPU per
    request, docs/remoting.md): ``start()``, then wait for SIGTERM or SIGINT, then ``stop()``
    (also when ``start`` fails). The exit code: 128 + the signal's number (143 SIGTERM, 130
    SIGINT), 0 without one. From the stop on both signals are ignored, so that what the caller
    does next (closing the store) finishes; the caller restores its handlers after that."""
    received: list[int] = []

    async def run() -> None:
        loop = asyncio.get_running_loop()
        stopping = asyncio.Event()

        def on_signal(sig: int) -> None:
            received.append(sig)
            stopping.set()

        for sig in _STOP_SIGNALS:
            loop.add_signal_handler(sig, on_signal, sig)
        try:
            await start()
            await stopping.wait()
            logging.getLogger("rocketstore.broker").info(
                "%s received: stopping", signal.Signals(received[0]).name
            )
        finally:
            await stop()
            for sig in _STOP_SIGNALS:
                loop.remove_signal_handler(sig)
                signal.signal(sig, signal.SIG_IGN)

    uvloop.run(run())
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
    # What is loaded by now lives as long as the process: kept out of every later collection
    gc.freeze()


@contextlib.contextmanager
def _collect_less() -> Iterator[None]:
    """While serving: a server allocates a few objects per request that die young, and makes few
    cycles; the cyclic collector's default (a young collection every 700 allocations) took 4 % of
    the remoting loop's time under single sends (py-spy). A young collection looks only at the
    objects still alive, so one 14 times rarer costs about the same: the collector's share falls
    to a fourteenth, and cyclic garbage waits for at most 10,000 allocations."""
    young, middle, old = gc.get_threshold()
    gc.set_threshold(_YOUNG_COLLECTION_ALLOCATIONS, middle, old)
    try:
        yield
    finally:
        gc.set_threshold(young, middle, old)


def serve_namesrv(path: str | os.PathLike[str], address: str, config: BrokerConfig | None = None) -> int:
    """A name server alone on ``address`` (no broker, no store): brokers register with it and
    clients ask it for routes; its KV configuration is kept in ``path/config``. Serves until
    SIGTERM or SIGINT; the exit code as ``serve``'s. Must run in the main thread."""
    config = config or BrokerConfig(listen=None)
    sock = bind_listener(address)
    name_server = NameServer(
        NameServerProcessor(RouteTable(SystemClock()), Path(path) / "config"), remoting_limits(config)
    )

    async def start() -> None:
        port = await name_server.start(sock)
        logging.getLogger("rocketstore.broker").info(
            "name server on %s:%d (no broker)", address.rpartition(":")[0], port
        )

    previous = {sig: signal.getsignal(sig) for sig in _STOP_SIGNALS}
    try:
        return run_until_signalled(start, name_server.stop)
    finally:
        sock.close()
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _serve(
    path: Path,
    config: BrokerConfig | None,
    store_config: StoreConfig | None,
    metrics_address: str | None,
) -> int:
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
        return _serve_store(path, config, store_config, metrics_address, remoting_sock, namesrv_sock)
    finally:
        for sock in sockets:
            sock.close()


def _serve_store(
    path: Path,
    config: BrokerConfig,
    store_config: StoreConfig | None,
    metrics_address: str | None,
    remoting_sock: socket.socket | None,
    namesrv_sock: socket.socket | None,
) -> int:
    with _collect_less(), MessageStore.open(path, store_config) as store:
        broker = Broker(store, config)
        # numba loads while the listeners start, not in the first batch send's time
        threading.Thread(target=_preload, name="preload-kernels", daemon=True).start()

        async def start() -> None:
            await broker.start(metrics_address, remoting_socket=remoting_sock, namesrv_socket=namesrv_sock)

        return run_until_signalled(start, broker.stop)
