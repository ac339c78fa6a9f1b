"""The broker's lifecycle: the gRPC listener (``grpc/``) and the remoting listeners
(``remoting/``) over an open store, the workers that touch the disk, the arrival watcher, the
transaction checker of both protocols, the state file for ``rocketstore status``, and the
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
import socket
import threading
import time
from collections.abc import Mapping

import uvloop

from rocketstore.broker.arrival import ArrivalSignal
from rocketstore.broker.auth import Acl
from rocketstore.broker.config import BrokerConfig
from rocketstore.broker.durable_waits import DurableWaits
from rocketstore.broker.group_commit import EncodedBatchCommit, GroupCommit
from rocketstore.broker.grpc.endpoint import GrpcEndpoint
from rocketstore.broker.grpc.messaging_service import MessagingService
from rocketstore.broker.metrics import BrokerMetrics
from rocketstore.broker.periodic import PeriodicTask
from rocketstore.broker.pop import PopService
from rocketstore.broker.remoting.context import RemotingContext
from rocketstore.broker.remoting.endpoint import RemotingEndpoint, bind_listener
from rocketstore.broker.remoting.registration import RegisterBrokerResult
from rocketstore.broker.remoting.registration_service import RegistrationService
from rocketstore.broker.remoting.server import RemotingLimits
from rocketstore.broker.remoting.slave_sync import SlaveSynchronizer
from rocketstore.broker.state import STATE_FILE, read_state
from rocketstore.broker.transaction_check import OrphanSender, TransactionChecker
from rocketstore.broker.transactions import TransactionLog
from rocketstore.config import BrokerRole
from rocketstore.errors import StoreConfigError
from rocketstore.storage.paths import atomic_write
from rocketstore.store import MessageStore

__all__ = ["STATE_FILE", "Broker", "advertised_address", "read_state", "remoting_limits"]

log = logging.getLogger("rocketstore.broker")


def remoting_limits(config: BrokerConfig) -> RemotingLimits:
    """The remoting listeners' limits, as the broker's configuration sets them."""
    return RemotingLimits(
        max_frame_size=config.max_frame_size,
        max_requests_per_connection=config.max_requests_per_connection,
        max_request_bytes_per_connection=config.max_request_bytes_per_connection,
        max_answer_bytes_per_connection=config.max_answer_bytes_per_connection,
        max_server_requests_per_connection=config.max_server_requests_per_connection,
        max_connections=config.max_connections,
        idle_timeout_s=config.idle_timeout_ms / 1000,
        slow_request_ms=config.slow_request_ms,
    )


def advertised_address(config: BrokerConfig, port: int) -> str:
    """The ip:port routes and message ids give for the remoting broker (``broker_ip``, else the
    listen host; 127.0.0.1 for a listener on every interface, with a log line)."""
    assert config.remoting is not None
    host = config.broker_ip or config.remoting.rpartition(":")[0].strip("[]")
    if host in ("0.0.0.0", "::", ""):
        log.warning("remoting listens on every interface: routes say 127.0.0.1 (set brokerIP1 to change)")
        host = "127.0.0.1"
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


class Broker:
    """A RocketMQ 5 gRPC endpoint over ``store`` (see the module docstring)."""

    def __init__(self, store: MessageStore, config: BrokerConfig | None = None) -> None:
        self.store = store
        self.config = config or BrokerConfig()
        self.port: int | None = None
        self.metrics = BrokerMetrics(store, cluster=self.config.cluster_name)
        self.metrics_port: int | None = None
        self.remoting_port: int | None = None
        self.namesrv_port: int | None = None
        self._grpc: GrpcEndpoint | None = None
        self._remoting: RemotingEndpoint | None = None
        self.registration: RegistrationService | None = None
        self.slave_sync: SlaveSynchronizer | None = None
        self._bad_ha_address: str | None = None  # the last unusable one a name server gave
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None
        # (start) where sends wait for their flush or slave (None: puts wait for nothing)
        self._waits: DurableWaits | None = None
        self._arrival: ArrivalSignal | None = None
        self._pop: PopService | None = None
        self._tasks: list[PeriodicTask] = []
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._started_ms = 0
        self._state_written = False
        self._replication_written: dict[str, object] | None = None
        self._remoting_seen: tuple[int, list[dict[str, object]]] = (0, [])
        self._transactions: TransactionLog | None = None
        # set by reconfigure: the transaction checks' timer re-reads its interval at once
        self._check_interval_changed = asyncio.Event()

    @property
    def service(self) -> MessagingService:
        service = self._grpc.service if self._grpc is not None else None
        assert service is not None, "the broker is not started, or serves no gRPC"
        return service

    def reconfigure(self, changes: Mapping[str, object]) -> BrokerConfig:
        """Apply new settings while serving (mqadmin updateBrokerConfig; only settings read at
        each request or check): both doors and the transaction checks see them from now on."""
        config = self.config = self.config.replace(**changes)
        if self._grpc is not None and self._grpc.service is not None:
            self._grpc.service.config = config
        if self._remoting is not None:
            self._remoting.ctx.config = config
        if self._transactions is not None:
            self._transactions.reconfigure(
                timeout_ms=config.transaction_timeout_ms, check_max=config.transaction_check_max
            )
        self._check_interval_changed.set()
        return config

    @property
    def remoting(self) -> RemotingEndpoint:
        assert self._remoting is not None, "the broker is not started, or serves no remoting"
        return self._remoting

    async def start(
        self,
        metrics_address: str | None = None,
        *,
        remoting_socket: socket.socket | None = None,
        namesrv_socket: socket.socket | None = None,
    ) -> int:
        """Bind, start serving, and return the gRPC port (the listen port, or the one picked for
        0), or the remoting port when gRPC is off. ``remoting_socket``/``namesrv_socket``:
        listeners bound already (``bind_listener``), used instead of binding ``config.remoting``
        and ``config.namesrv``."""
        config = self.config
        if config.listen is None and config.remoting is None:
            raise StoreConfigError("nothing to serve: gRPC (listen) and remoting are both off")
        acl = Acl.from_file(config.acl_file) if config.acl_file else None
        loop = asyncio.get_running_loop()
        self._executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=8, thread_name_prefix="broker-store"
        )
        # sends are stored on the event loop (the hand-off to a thread and back cost more than
        # the put, docs/remoting.md), and answered once their flush or slave says (DurableWaits)
        self._waits = DurableWaits(self.store, self._executor) if self.store.config.puts_wait else None
        self._arrival = ArrivalSignal(self.store.dispatch_events, loop)
        transactions = TransactionLog(
            self.store, timeout_ms=config.transaction_timeout_ms, check_max=config.transaction_check_max
        )
        await loop.run_in_executor(self._executor, transactions.load)
        self._transactions = transactions
        system_puts = GroupCommit(
            self.store, self._waits, internal=True, max_batch=config.max_messages_per_send
        )
        senders: list[OrphanSender] = []
        if config.listen is not None:
            await self._start_grpc(config.listen, acl, transactions)
            senders.append(self.service.send_orphan_check)
        if config.remoting is not None:
            await self._start_remoting(transactions, acl, remoting_socket, namesrv_socket)
            senders.append(self.remoting.send_orphan_check)
        checker = TransactionChecker(transactions, system_puts, self._executor, senders)
        self._started_ms = int(time.time() * 1000)
        self._arrival.start()
        if self._pop is not None:
            self._pop.start()
        if metrics_address:
            self.metrics_port = self.metrics.serve(metrics_address)
        self._tasks = [
            PeriodicTask(
                "transaction checks",
                lambda: self.config.transaction_check_interval_ms / 1000,
                checker.check_once,
                log=log,
                changed=self._check_interval_changed,
            ),
            PeriodicTask(
                "state file", lambda: self.config.state_interval_ms / 1000, self._write_state, log=log
            ),
        ]
        for task in self._tasks:
            task.start()
        await self._write_state()
        if self.store.ha_port is not None:
            log.info("replication (RocketMQ HA) on port %d", self.store.ha_port)
        port = self.port if self.port is not None else self.remoting_port
        assert port is not None
        return port

    async def _start_grpc(self, listen: str, acl: Acl | None, transactions: TransactionLog) -> None:
        config = self.config
        executor, arrival = self._executor, self._arrival
        assert executor is not None and arrival is not None
        pop = self._pop = PopService(self.store, broker_name=config.broker_name)

        def make_service(advertise: tuple[str, int]) -> MessagingService:
            return MessagingService(
                self.store,
                config,
                executor,
                arrival,
                self.metrics,
                waits=self._waits,
                pop=pop,
                acl=acl,
                advertise=advertise,
                transactions=transactions,
            )

        endpoint = GrpcEndpoint(config, make_service)
        port = await endpoint.start(listen)
        self._grpc = endpoint
        self.port = port
        log.info(
            "serving %s on %s%s (RocketMQ 5 gRPC)",
            self.store.layout.root,
            listen.rpartition(":")[0] + f":{port}",
            " with TLS" if config.tls_cert else "",
        )

    async def _start_remoting(
        self,
        transactions: TransactionLog,
        acl: Acl | None,
        remoting_socket: socket.socket | None,
        namesrv_socket: socket.socket | None,
    ) -> None:
        config = self.config
        assert config.remoting is not None and self._executor is not None and self._arrival is not None
        broker_sock = remoting_socket or bind_listener(config.remoting)
        namesrv_sock = namesrv_socket
        if namesrv_sock is None and config.namesrv is not None:
            namesrv_sock = bind_listener(config.namesrv)
        broker_address = advertised_address(config, int(broker_sock.getsockname()[1]))
        if broker_address != self.store.config.store_host:
            log.warning(
                "remoting serves %s but the store's records name %s as their store host "
                "(store_host): offset message ids point there",
                broker_address,
                self.store.config.store_host,
            )
        ctx = RemotingContext(
            store=self.store,
            config=config,
            executor=self._executor,
            durable_waits=self._waits,
            arrival=self._arrival,
            metrics=self.metrics,
            transactions=transactions,
            broker_address=broker_address,
            reconfigure=self.reconfigure,
            sends=GroupCommit(
                self.store,
                self._waits,
                max_batch=config.max_messages_per_send,
                on_batch=self.metrics.batches.inc,
            ),
            batch_sends=EncodedBatchCommit(self.store, self._waits, on_batch=self.metrics.batches.inc),
            system_puts=GroupCommit(
                self.store, self._waits, internal=True, max_batch=config.max_messages_per_send
            ),
        )
        limits = remoting_limits(config)
        registration = None
        if config.name_servers():
            registration = RegistrationService(ctx, on_result=self._registered)
            if self.store.config.broker_role is BrokerRole.SLAVE:
                self.slave_sync = SlaveSynchronizer(ctx)
        self._remoting = RemotingEndpoint(ctx, limits, acl)
        await self._remoting.start(broker_sock, namesrv_sock)
        self.remoting_port = self._remoting.broker.port if self._remoting.broker else None
        self.namesrv_port = self._remoting.namesrv.port if self._remoting.namesrv else None
        log.info(
            "serving %s on %s (RocketMQ remoting, broker %s of cluster %s)%s",
            self.store.layout.root,
            broker_address,
            config.broker_name,
            config.cluster_name,
            f", name server on port {self.namesrv_port}" if self.namesrv_port is not None else "",
        )
        if registration is not None:
            # after the listeners are up: a name server routes clients here at once
            await registration.start()
            self.registration = registration
        if self.slave_sync is not None:
            self.slave_sync.start()

    def _registered(self, result: RegisterBrokerResult) -> None:
        """A registration's result: a SLAVE without ``ha_master_address`` replicates from the HA
        address its master registered (every result that names one, as RocketMQ's slave)."""
        config, address = self.store.config, result.ha_server_addr
        if config.broker_role is BrokerRole.SLAVE and config.ha_master_address is None and address:
            try:
                self.store.update_ha_master_address(address)
            except (ValueError, StoreConfigError) as exc:  # said once, not at every registration
                if address != self._bad_ha_address:
                    log.warning("the name servers' HA address of the master is unusable: %s", exc)
                self._bad_ha_address = address
                return
            self._bad_ha_address = None
        if self.slave_sync is not None:
            self.slave_sync.set_master(result.master_addr)

    async def _write_state(self) -> None:
        service = self._grpc.service if self._grpc is not None else None
        remoting = self._remoting
        connections = remoting.connection_count() if remoting is not None else 0
        remoting_clients = remoting.clients() if remoting is not None else []
        # the store's replication state lives in this process: `status` shows it from here
        replication = self.store.ha_status()
        changed = (connections, remoting_clients) != self._remoting_seen
        changed = changed or replication != self._replication_written
        if service is not None:
            clients = service.clients
            clients.expire(int(time.time() * 1000))
            changed = changed or clients.changed
            clients.changed = False
        if not changed and self._state_written:
            return
        self._state_written = True
        self._remoting_seen = (connections, remoting_clients)
        self._replication_written = replication
        state = {
            "pid": os.getpid(),
            "listen": self.config.listen,
            "port": self.port,
            "remoting": self.config.remoting,
            "remoting_port": self.remoting_port,
            "namesrv_port": self.namesrv_port,
            "remoting_connections": connections,
            "metrics_port": self.metrics_port,
            "started_ms": self._started_ms,
            "updated_ms": int(time.time() * 1000),
            "clients": service.clients.snapshot() if service is not None else [],
            "remoting_clients": remoting_clients,
            "replication": replication,
        }
        path = self.store.layout.root / STATE_FILE
        text = json.dumps(state, indent=1)
        await asyncio.get_running_loop().run_in_executor(
            self._executor, atomic_write, path, text.encode(), self.store.config.file_mode
        )

    async def stop(self, grace: float = 2.0) -> None:
        """Stop taking requests, let the running ones finish (``grace`` seconds), stop the workers."""
        for task in self._tasks:
            await task.stop()
        self._tasks = []
        if self.slave_sync is not None:
            await self.slave_sync.stop()
            self.slave_sync = None
        if self.registration is not None:
            # first: the name servers stop routing clients here before the listeners close
            await self.registration.stop()
            self.registration = None
        if self._remoting is not None:
            await self._remoting.stop()
            self._remoting = None
        if self._grpc is not None:
            await self._grpc.stop(grace)
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
    def start_in_thread(
        self,
        metrics_address: str | None = None,
        *,
        remoting_socket: socket.socket | None = None,
        namesrv_socket: socket.socket | None = None,
    ) -> int:
        """``start`` on a new event loop in a daemon thread; returns the port."""
        loop = self._loop = uvloop.new_event_loop()  # the loop `rocketstore serve` runs on

        def run() -> None:
            asyncio.set_event_loop(loop)
            loop.run_forever()
            loop.close()

        self._thread = threading.Thread(target=run, name="broker-loop", daemon=True)
        self._thread.start()
        started = self.start(metrics_address, remoting_socket=remoting_socket, namesrv_socket=namesrv_socket)
        try:
            return asyncio.run_coroutine_threadsafe(started, loop).result()
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
