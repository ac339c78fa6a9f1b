"""What every remoting processor works with: the store, the broker's settings and shared core
(transactions, metrics, the arrival signal for long polls), the worker threads for disk work,
the registries of connected clients, and the address the broker is reached at."""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from rocketstore.broker.arrival import ArrivalSignal
from rocketstore.broker.config import BrokerConfig
from rocketstore.broker.group_commit import EncodedBatchCommit, GroupCommit
from rocketstore.broker.metrics import BrokerMetrics
from rocketstore.broker.remoting.producers import ProducerGroups
from rocketstore.broker.transactions import TransactionLog
from rocketstore.store import MessageStore

if TYPE_CHECKING:
    from rocketstore.broker.remoting.server import Connection

__all__ = ["RemotingContext"]

_T = TypeVar("_T")


@dataclass(eq=False)
class RemotingContext:
    store: MessageStore
    config: BrokerConfig
    executor: concurrent.futures.Executor
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

    async def run(self, fn: Callable[..., _T], *args: Any) -> _T:
        """``fn(*args)`` on a worker thread: everything that touches the disk goes there."""
        return await asyncio.get_running_loop().run_in_executor(self.executor, fn, *args)
