"""The broker's lifecycle: a grpc.aio server over an open store, the workers that touch the disk,
the arrival watcher, the transaction checker, the state file for ``rocketstore status``, and the
metrics endpoint.

``Broker`` serves a store the caller opened (and closes nothing of it); ``start``/``stop`` run it
on the caller's event loop, ``start_in_thread``/``stop_in_thread`` on a loop of its own (tests,
applications that are not asyncio). The store is closed by whoever opened it, after ``stop``:
``stop`` ends the RPCs first, so nothing is put after it returns.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import json
import logging
import os
import threading
import time
from pathlib import Path
from typing import Any

import grpc

from rocketstore.broker.arrival import ArrivalSignal
from rocketstore.broker.auth import Acl
from rocketstore.broker.config import BrokerConfig
from rocketstore.broker.metrics import BrokerMetrics
from rocketstore.broker.pop import PopService
from rocketstore.broker.service import MessagingService
from rocketstore.protocol import service_pb2_grpc
from rocketstore.storage.paths import atomic_write
from rocketstore.store import MessageStore

__all__ = ["STATE_FILE", "Broker", "read_state"]

log = logging.getLogger("rocketstore.broker")

STATE_FILE = "broker.json"  # in the store directory, while a broker serves it


def read_state(store_dir: Path) -> dict[str, Any] | None:
    """The state a running broker of ``store_dir`` last wrote; None when no broker runs there."""
    try:
        state = json.loads((store_dir / STATE_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(state, dict):
        return None
    pid = state.get("pid")
    if not isinstance(pid, int):
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None  # left by a broker that was killed
    except PermissionError:
        pass
    return state


class Broker:
    """A RocketMQ 5 gRPC endpoint over ``store`` (see the module docstring)."""

    def __init__(self, store: MessageStore, config: BrokerConfig | None = None) -> None:
        self.store = store
        self.config = config or BrokerConfig()
        self.port: int | None = None
        self.metrics = BrokerMetrics(store)
        self.metrics_port: int | None = None
        self._server: Any = None
        self._service: MessagingService | None = None
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None
        self._arrival: ArrivalSignal | None = None
        self._pop: PopService | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._started_ms = 0
        self._state_written = False

    @property
    def service(self) -> MessagingService:
        assert self._service is not None, "the broker is not started"
        return self._service

    async def start(self, metrics_address: str | None = None) -> int:
        """Bind, start serving, and return the port (the listen port, or the one picked for 0)."""
        config = self.config
        acl = Acl.from_file(config.acl_file) if config.acl_file else None
        loop = asyncio.get_running_loop()
        self._executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=8, thread_name_prefix="broker-store"
        )
        self._arrival = ArrivalSignal(self.store.dispatch_events, loop)
        self._pop = PopService(self.store, broker_name=config.broker_name)
        host, _, port_text = config.listen.rpartition(":")
        server = grpc.aio.server(
            options=[
                ("grpc.max_receive_message_length", config.max_body_size + 1024 * 1024),
                ("grpc.max_send_message_length", 64 * 1024 * 1024),
                ("grpc.max_concurrent_streams", config.max_concurrent_streams),
            ],
        )
        address = f"{host}:{port_text}"
        if config.tls_cert and config.tls_key:
            credentials = grpc.ssl_server_credentials(
                [(Path(config.tls_key).read_bytes(), Path(config.tls_cert).read_bytes())]
            )
            port: int = server.add_secure_port(address, credentials)
        else:
            port = server.add_insecure_port(address)
        advertise = config.advertise or f"{host.strip('[]')}:{port}"
        ad_host, _, ad_port = advertise.rpartition(":")
        self._service = MessagingService(
            self.store,
            config,
            self._executor,
            self._arrival,
            self.metrics,
            pop=self._pop,
            acl=acl,
            advertise=(ad_host.strip("[]"), int(ad_port)),
        )
        await loop.run_in_executor(self._executor, self._service.transactions.load)
        service_pb2_grpc.add_MessagingServiceServicer_to_server(self._service, server)
        await server.start()
        self._server = server
        self.port = port
        self._started_ms = int(time.time() * 1000)
        self._arrival.start()
        if self._pop is not None:
            self._pop.start()
        if metrics_address:
            self.metrics_port = self.metrics.serve(metrics_address)
        self._tasks = [
            loop.create_task(self._every(config.transaction_check_interval_ms, self._service.check_orphans)),
            loop.create_task(self._every(config.state_interval_ms, self._write_state)),
        ]
        await self._write_state()
        log.info(
            "serving %s on %s%s (RocketMQ 5 gRPC)",
            self.store.layout.root,
            address.rsplit(":", 1)[0] + f":{port}",
            " with TLS" if config.tls_cert else "",
        )
        if self.store.ha_port is not None:
            log.info("replication (RocketMQ HA) on port %d", self.store.ha_port)
        return port

    async def _every(self, interval_ms: int, job: Any) -> None:
        while True:
            await asyncio.sleep(interval_ms / 1000)
            try:
                await job()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("broker task %s failed", getattr(job, "__name__", job))

    async def _write_state(self) -> None:
        service = self._service
        if service is None:
            return
        clients = service.clients
        clients.expire(int(time.time() * 1000))
        if not clients.changed and self._state_written:
            return
        clients.changed = False
        self._state_written = True
        state = {
            "pid": os.getpid(),
            "listen": self.config.listen,
            "port": self.port,
            "metrics_port": self.metrics_port,
            "started_ms": self._started_ms,
            "updated_ms": int(time.time() * 1000),
            "clients": service.clients.snapshot(),
        }
        path = self.store.layout.root / STATE_FILE
        text = json.dumps(state, indent=1)
        await asyncio.get_running_loop().run_in_executor(
            self._executor, atomic_write, path, text.encode(), self.store.config.file_mode
        )

    async def stop(self, grace: float = 2.0) -> None:
        """Stop taking requests, let the running ones finish (``grace`` seconds), stop the workers."""
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks = []
        if self._server is not None:
            await self._server.stop(grace)
            self._server = None
        if self._pop is not None:
            self._pop.stop()
        if self._arrival is not None:
            self._arrival.stop()
        if self._executor is not None:
            self._executor.shutdown(wait=True)
        self.metrics.close()
        with contextlib.suppress(FileNotFoundError):
            (self.store.layout.root / STATE_FILE).unlink()
        log.info("broker stopped")

    # --- on a loop of its own ------------------------------------------------------------------
    def start_in_thread(self, metrics_address: str | None = None) -> int:
        """``start`` on a new event loop in a daemon thread; returns the port."""
        loop = self._loop = asyncio.new_event_loop()

        def run() -> None:
            asyncio.set_event_loop(loop)
            loop.run_forever()
            loop.close()

        self._thread = threading.Thread(target=run, name="broker-loop", daemon=True)
        self._thread.start()
        try:
            return asyncio.run_coroutine_threadsafe(self.start(metrics_address), loop).result()
        except BaseException:
            self.stop_in_thread()
            raise

    def stop_in_thread(self, grace: float = 2.0) -> None:
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        asyncio.run_coroutine_threadsafe(self.stop(grace), loop).result()
        loop.call_soon_threadsafe(loop.stop)
        thread.join()
        self._loop = self._thread = None
