"""A name server's tables of the brokers that registered with it (RocketMQ 4.9.8's
``RouteInfoManager``, CLUSTER.md §3): protocol-free, so the remoting name server
(``remoting/namesrv.py``) only decodes requests and encodes these answers.

Tables::

    clusters     cluster name -> broker names
    brokers      broker name  -> BrokerSet {cluster, addresses by broker id (0 master, >=1 slaves)}
    topics       topic        -> broker name -> QueueData {read, write, perm, sysFlag}
    live         broker addr  -> LiveBroker {last update (ms), DataVersion, channel, HA address}

Rules (§3.2-§3.4):

* A registration adds the name to its cluster and the address under its id (the same address
  under another id is dropped first: a promoted slave). Only a master (id 0) defines queues, and
  its topic table is applied only when the broker is new or its DataVersion changed; topics
  absent from the body are not removed.
* A slave's result names its master's address and the HA address that master registered.
* A broker silent for ``expiry_ms`` (120 s) is removed by ``expire``; one whose registration
  connection (``channel``: any object the adapter uses for it) closes, by ``remove_channel``.
  Removing a set's last address removes the name from its cluster and its queues from every
  topic (a topic left with none goes).
* Wipes of write permission and topic deletions are soft: the broker's next applied
  registration restores them.

Thread safety: none; the name server calls it from its event loop only.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from rocketstore.clock import Clock
from rocketstore.codec.config_json import PERM_READ, PERM_WRITE, TopicConfig

__all__ = [
    "BROKER_EXPIRY_MS",
    "BrokerSet",
    "DataVersion",
    "LiveBroker",
    "MasterInfo",
    "QueueData",
    "RouteTable",
]

BROKER_EXPIRY_MS: Final = 120_000  # RouteInfoManager.BROKER_CHANNEL_EXPIRED_TIME
MASTER_ID: Final = 0


@dataclass(frozen=True, slots=True)
class DataVersion:
    """A broker's topic-table version: a new one (timestamp, counter + 1) at every change."""

    timestamp: int = 0
    counter: int = 0

    def to_json(self) -> dict[str, int]:
        return {"counter": self.counter, "timestamp": self.timestamp}

    def next(self, now_ms: int) -> DataVersion:
        return DataVersion(now_ms, self.counter + 1)


@dataclass(frozen=True, slots=True)
class QueueData:
    broker_name: str
    read_queues: int
    write_queues: int
    perm: int
    sys_flag: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "brokerName": self.broker_name,
            "perm": self.perm,
            "readQueueNums": self.read_queues,
            "topicSysFlag": self.sys_flag,
            "writeQueueNums": self.write_queues,
        }


@dataclass(slots=True)
class BrokerSet:
    """A broker name's master and slaves (RocketMQ's BrokerData); ``cluster`` is fixed by the
    first registration."""

    cluster: str
    broker_name: str
    addresses: dict[int, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "brokerAddrs": {str(i): a for i, a in sorted(self.addresses.items())},
            "brokerName": self.broker_name,
            "cluster": self.cluster,
        }


@dataclass(slots=True)
class LiveBroker:
    last_update_ms: int
    version: DataVersion
    channel: Hashable | None
    ha_server_addr: str


@dataclass(frozen=True, slots=True)
class MasterInfo:
    """What a slave's registration result carries: its master, when one is registered."""

    master_addr: str | None = None
    ha_server_addr: str | None = None


class RouteTable:
    """The tables of the module docstring. ``clock`` gives the times of registrations."""

    def __init__(self, clock: Clock, expiry_ms: int = BROKER_EXPIRY_MS) -> None:
        self._clock = clock
        self.expiry_ms = expiry_ms
        self.clusters: dict[str, set[str]] = {}
        self.brokers: dict[str, BrokerSet] = {}
        self.topics: dict[str, dict[str, QueueData]] = {}
        self.live: dict[str, LiveBroker] = {}

    # --- registrations ------------------------------------------------------------------------
    def register(
        self,
        *,
        cluster: str,
        broker_name: str,
        broker_addr: str,
        broker_id: int,
        ha_server_addr: str,
        version: DataVersion,
        topics: Mapping[str, TopicConfig],
        channel: Hashable | None = None,
    ) -> MasterInfo:
        """One REGISTER_BROKER (§3.2); the result a slave is told (empty for a master)."""
        self.clusters.setdefault(cluster, set()).add(broker_name)
        brokers = self.brokers.get(broker_name)
        first = brokers is None
        if brokers is None:
            brokers = self.brokers[broker_name] = BrokerSet(cluster, broker_name)
        for other_id, addr in list(brokers.addresses.items()):
            if addr == broker_addr and other_id != broker_id:
                del brokers.addresses[other_id]
        first = first or broker_id not in brokers.addresses
        brokers.addresses[broker_id] = broker_addr
        if broker_id == MASTER_ID:
            before = self.live.get(broker_addr)
            if first or before is None or before.version != version:
                for name, config in topics.items():
                    self.topics.setdefault(name, {})[broker_name] = QueueData(
                        broker_name, config.read_queues, config.write_queues, config.perm, config.sys_flag
                    )
        self.live[broker_addr] = LiveBroker(self._clock.now_ms(), version, channel, ha_server_addr)
        if broker_id == MASTER_ID:
            return MasterInfo()
        master = brokers.addresses.get(MASTER_ID)
        if master is None:
            return MasterInfo()
        master_live = self.live.get(master)
        return MasterInfo(master, master_live.ha_server_addr if master_live is not None else None)

    def query_data_version(self, broker_addr: str, version: DataVersion) -> tuple[bool, DataVersion | None]:
        """QUERY_DATA_VERSION (§2.5): (changed, the version held); an unchanged answer is the
        broker's keep-alive."""
        live = self.live.get(broker_addr)
        if live is None:
            return True, None
        if live.version != version:
            return True, live.version
        live.last_update_ms = self._clock.now_ms()
        return False, live.version

    def unregister(self, cluster: str, broker_name: str, broker_addr: str, broker_id: int) -> None:
        """UNREGISTER_BROKER: the address goes, and the id's entry of its broker set when that
        entry is this address (another broker's registration under the id stays)."""
        self.live.pop(broker_addr, None)
        brokers = self.brokers.get(broker_name)
        if brokers is not None:
            if brokers.addresses.get(broker_id) == broker_addr:
                del brokers.addresses[broker_id]
            if not brokers.addresses:
                self._drop_name(broker_name)

    def remove_address(self, broker_addr: str) -> None:
        """A broker gone (its connection closed, or expired): every entry of its address."""
        self.live.pop(broker_addr, None)
        for name, brokers in list(self.brokers.items()):
            for broker_id, addr in list(brokers.addresses.items()):
                if addr == broker_addr:
                    del brokers.addresses[broker_id]
            if not brokers.addresses:
                self._drop_name(name)

    def remove_channel(self, channel: Hashable) -> list[str]:
        """The brokers that registered on ``channel``, removed (its connection closed)."""
        gone = [addr for addr, live in self.live.items() if live.channel is channel]
        for addr in gone:
            self.remove_address(addr)
        return gone

    def expire(self) -> list[tuple[str, Hashable | None]]:
        """Remove the brokers silent for longer than ``expiry_ms``; their addresses and channels
        (the adapter closes them, as RocketMQ's name server does)."""
        deadline = self._clock.now_ms() - self.expiry_ms
        gone = [(addr, live.channel) for addr, live in self.live.items() if live.last_update_ms < deadline]
        for addr, _ in gone:
            self.remove_address(addr)
        return gone

    def _drop_name(self, broker_name: str) -> None:
        # every cluster: a registration adds the name to the cluster it names, which need not
        # be the one its set was first registered under (RocketMQ's onChannelDestroy)
        self.brokers.pop(broker_name, None)
        for cluster, names in list(self.clusters.items()):
            names.discard(broker_name)
            if not names:
                del self.clusters[cluster]
        for topic, queues in list(self.topics.items()):
            queues.pop(broker_name, None)
            if not queues:
                del self.topics[topic]

    # --- answers ------------------------------------------------------------------------------
    def route(self, topic: str) -> tuple[list[QueueData], list[BrokerSet]] | None:
        """The merged route of ``topic`` (§3.3): its QueueData per broker name and those names'
        broker sets (copies); None when no registered broker has it."""
        queues = self.topics.get(topic)
        if not queues:
            return None
        sets = [
            BrokerSet(b.cluster, b.broker_name, dict(b.addresses))
            for name in queues
            if (b := self.brokers.get(name)) is not None
        ]
        if not sets:
            return None
        return list(queues.values()), sets

    def topics_of_cluster(self, cluster: str) -> list[str]:
        names = self.clusters.get(cluster, set())
        return sorted(t for t, queues in self.topics.items() if names.intersection(queues))

    def wipe_write_perm(self, broker_name: str) -> int:
        """WIPE_WRITE_PERM_OF_BROKER: write permission off on every topic of the name; how many."""
        return self._set_perm(broker_name, lambda perm: perm & ~PERM_WRITE)

    def add_write_perm(self, broker_name: str) -> int:
        """ADD_WRITE_PERM_OF_BROKER: read and write on every topic of the name; how many."""
        return self._set_perm(broker_name, lambda _perm: PERM_READ | PERM_WRITE)

    def _set_perm(self, broker_name: str, change: Any) -> int:
        count = 0
        for queues in self.topics.values():
            q = queues.get(broker_name)
            if q is not None:
                queues[broker_name] = QueueData(
                    q.broker_name, q.read_queues, q.write_queues, change(q.perm), q.sys_flag
                )
                count += 1
        return count

    def delete_topic(self, topic: str, cluster: str | None = None) -> None:
        """DELETE_TOPIC_IN_NAMESRV: the topic's queues on the cluster's brokers, or everywhere."""
        if cluster is None:
            self.topics.pop(topic, None)
            return
        queues = self.topics.get(topic)
        if queues is None:
            return
        for name in self.clusters.get(cluster, set()):
            queues.pop(name, None)
        if not queues:
            del self.topics[topic]
