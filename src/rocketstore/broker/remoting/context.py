"""What every remoting processor works with: the store, the broker's settings and shared core
(transactions, metrics, the arrival signal for long polls), the worker threads for disk work,
the registries of connected clients and their ids, the ACL, and the address the broker is
reached at."""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from rocketstore.broker.arrival import ArrivalSignal
from rocketstore.broker.config import BrokerConfig
from rocketstore.broker.durable_waits import DurableWaits
from rocketstore.broker.group_commit import EncodedBatchCommit, GroupCommit
from rocketstore.broker.metrics import BrokerMetrics
from rocketstore.broker.remoting.acl import ACCESS_KEY, RemotingAcl
from rocketstore.broker.remoting.client_ids import ClientIds
from rocketstore.broker.remoting.producers import ProducerGroups
from rocketstore.broker.transactions import TransactionLog
from rocketstore.store import MessageStore

if TYPE_CHECKING:
    from rocketstore.broker.remoting.command import RemotingCommand
    from rocketstore.broker.remoting.server import Connection

__all__ = ["RemotingContext"]

_T = TypeVar("_T")


@dataclass(eq=False)
class RemotingContext:
    store: MessageStore
    config: BrokerConfig
    executor: concurrent.futures.Executor
    # where sends (stored on the event loop) wait for their flush or slave; None: the store's
    # puts wait for nothing (``StoreConfig.puts_wait``)
    durable_waits: DurableWaits | None
    arrival: ArrivalSignal
    metrics: BrokerMetrics
    transactions: TransactionLog
    # the broker's advertised ip:port: routes, STOREHOST of new records, offset message ids
    broker_address: str
    # sends of clients (group commit), their batches, and the broker's own records (halves,
    # ops, retries)
    sends: GroupCommit
    batch_sends: EncodedBatchCommit
    system_puts: GroupCommit
    producers: ProducerGroups = field(default_factory=ProducerGroups)
    client_ids: ClientIds = field(default_factory=ClientIds)
    # the ACL (None: every request is allowed); it checked each request's header before its
    # handler, a handler checks what it reads through it (``acl.require``, ``require_record``)
    acl: RemotingAcl | None = None
    # applies new broker settings to the whole broker (both doors) and returns them; None: a
    # remoting endpoint without a broker around it, whose settings cannot change
    reconfigure: Callable[[Mapping[str, object]], BrokerConfig] | None = None
    # run by HEART_BEAT with the parsed HeartbeatData, and by UNREGISTER_CLIENT with its header,
    # after the producer groups are recorded: how other registries (consumers) learn of clients.
    # A hook's RequestRefused refuses the request.
    heartbeat_hooks: list[Callable[[dict[str, Any], Connection], Awaitable[None]]] = field(
        default_factory=list
    )
    unregister_hooks: list[Callable[[dict[str, str], Connection], Awaitable[None]]] = field(
        default_factory=list
    )
    # processors' own shared state, by name (e.g. the consumer registry)
    extensions: dict[str, Any] = field(default_factory=dict)

    def claim_client_id(self, client_id: str, cmd: RemotingCommand, conn: Connection) -> None:
        """``client_id`` is the client's on ``conn`` (``ClientIds``); RequestRefused if another's."""
        self.client_ids.claim(
            client_id, conn, cmd.ext_fields.get(ACCESS_KEY) if self.acl is not None else None
        )

    async def run(self, fn: Callable[..., _T], *args: Any) -> _T:
        """``fn(*args)`` on a worker thread: everything that touches the disk goes there."""
        return await asyncio.get_running_loop().run_in_executor(self.executor, fn, *args)
