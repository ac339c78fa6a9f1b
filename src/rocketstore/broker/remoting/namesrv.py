"""The name server's requests (REMOTING.md §4, CLUSTER.md §3): routes, the cluster, topic lists,
brokers' registrations and the KV configuration; ``NameServer`` is one name-server listener.

Two kinds of broker appear in its answers:

* brokers that registered (REGISTER_BROKER, from any RocketMQ 4.9 broker, Java or rocketstore),
  kept in a ``RouteTable`` (``broker/routes.py``): merged routes, expiry after 120 s of silence,
  removal at once when the connection they registered on closes;
* in ``rocketstore serve``'s combined mode, the broker of this process, whose routes are made
  from the store's topics at each request, so a topic created by any path (a send's
  auto-creation, mqadmin, a heartbeat's retry topic, gRPC, the CLI) is routable at once and a
  deleted one is gone. Its master (id 0) is the remoting address; slaves of its name that
  register are added to its broker set and told it is their master. ``TBW102``, the topic
  producers fall back to for a topic without a route, is routed (8 queues, perm 7) while topic
  auto-creation is on, as RocketMQ's broker registers it then; so are the other topics RocketMQ's
  broker has from its start (``broker_topics.py``: ``SELF_TEST_TOPIC``, ``BenchmarkTest``,
  the cluster's and the broker's own, ``OFFSET_MOVED_EVENT``, ``SCHEDULE_TOPIC_XXXX``,
  ``RMQ_SYS_TRANS_HALF_TOPIC``, ``<cluster>_REPLY_TOPIC``). A send to ``BenchmarkTest``, the
  cluster's or the broker's own topic or ``<cluster>_REPLY_TOPIC`` that the store does not have
  yet creates it with the routed queues; the others are refused to clients, as by RocketMQ's
  broker (``system_topics.sending_forbidden``). Wipes and deletions on the name
  server apply to registered brokers only (this broker's routes are its store's topics).

The KV configuration (PUT/GET/DELETE_KV_CONFIG, GET_KVLIST_BY_NAMESPACE; mqadmin updateTopic
``-o`` writes namespace ``ORDER_TOPIC_CONFIG``, which registration results carry) is kept in
``config/kvConfig.json`` of the directory served, in RocketMQ's shape (``{"configTable":
{namespace: {key: value}}}``). Routes carry no ``orderTopicConf`` (RocketMQ's name server adds it
only with ``orderMessageEnable``, off by default).
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket
from pathlib import Path
from typing import Final

from rocketstore.broker.metrics import BrokerMetrics
from rocketstore.broker.periodic import PeriodicTask
from rocketstore.broker.remoting.broker_topics import (
    broker_topic_configs,
    local_ha_address,
    local_topic_configs,
    registered_config,
)
from rocketstore.broker.remoting.codes import RequestCode, ResponseCode
from rocketstore.broker.remoting.command import RemotingCommand
from rocketstore.broker.remoting.context import RemotingContext
from rocketstore.broker.remoting.headers import text, to_ext
from rocketstore.broker.remoting.refusal import RequestRefused
from rocketstore.broker.remoting.registration import (
    BodyChecksumError,
    BrokerIdentity,
    RegisterBrokerResult,
    decode_data_version,
    decode_register_broker,
    encode_data_version,
    encode_register_result,
)
from rocketstore.broker.remoting.server import Connection, Handler, RemotingLimits, RemotingServer
from rocketstore.broker.routes import BrokerSet, MasterInfo, QueueData, RouteTable
from rocketstore.clock import SystemClock
from rocketstore.codec.config_json import TopicConfig
from rocketstore.codec.json_body import json_body
from rocketstore.errors import CorruptDataError
from rocketstore.storage.paths import DEFAULT_FILE_MODE, atomic_write

__all__ = [
    "KV_CONFIG_FILE",
    "ORDER_TOPIC_CONFIG",
    "NameServer",
    "NameServerProcessor",
]

log = logging.getLogger("rocketstore.broker.remoting")

KV_CONFIG_FILE: Final = "kvConfig.json"
# entries the KV configuration keeps (RocketMQ's name server has no bound; its clients write a
# handful, each a few bytes): past them a change is refused, so requests cannot grow the file
# (rewritten whole at each change) without end. Bytes are namespace + key + value in UTF-8.
MAX_KV_ENTRIES: Final = 10_000
MAX_KV_ENTRY_BYTES: Final = 64 * 1024
MAX_KV_BYTES: Final = 4 * 1024 * 1024
ORDER_TOPIC_CONFIG: Final = "ORDER_TOPIC_CONFIG"  # the KV namespace registration results carry
EXPIRY_SCAN_S: Final = 10.0  # NamesrvController's scanNotActiveBroker period
# brokers (addresses) registered at once on one connection (a RocketMQ broker uses one
# connection per name server for its one address) and in all (RocketMQ's largest clusters have
# hundreds): past them a registration is refused, so requests cannot grow the tables without end
MAX_BROKERS_PER_CONNECTION: Final = 16
MAX_REGISTERED_BROKERS: Final = 10_000
# a REGISTER_BROKER body larger than this is decoded off the event loop (a big topic table takes
# tens of milliseconds to parse; the loop also serves this process's broker in combined mode)
DECODE_INLINE_BYTES: Final = 64 * 1024


def _entry_bytes(namespace: str, key: str, value: str) -> int:
    return len(namespace.encode()) + len(key.encode()) + len(value.encode())


class NameServerProcessor:
    """Answers a name server's requests from ``table`` and, in combined mode, ``local`` (the
    remoting context of this process's broker). Runs on the name server's event loop."""

    def __init__(
        self,
        table: RouteTable,
        config_dir: Path,
        file_mode: int = DEFAULT_FILE_MODE,
        local: RemotingContext | None = None,
    ) -> None:
        self.table = table
        self.local = local
        self._file_mode = file_mode
        self._kv_path = config_dir / KV_CONFIG_FILE
        self._kv_update = asyncio.Lock()  # one change at a time: each rewrites the whole file
        self._kv: dict[str, dict[str, str]] = self._load_kv()
        self._kv_bytes = sum(
            _entry_bytes(ns, k, v) for ns, entries in self._kv.items() for k, v in entries.items()
        )

    @classmethod
    def of_broker(cls, ctx: RemotingContext) -> NameServerProcessor:
        """The combined mode's: this broker and the brokers that register; KV in the store."""
        store = ctx.store
        return cls(RouteTable(SystemClock()), store.layout.root / "config", store.config.file_mode, ctx)

    def handlers(self) -> dict[int, Handler]:
        return {
            RequestCode.GET_ROUTEINFO_BY_TOPIC: self.route,
            RequestCode.GET_BROKER_CLUSTER_INFO: self.cluster_info,
            RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER: self.all_topics,
            RequestCode.GET_TOPICS_BY_CLUSTER: self.cluster_topics,
            RequestCode.DELETE_TOPIC_IN_NAMESRV: self.delete_topic,
            RequestCode.REGISTER_BROKER: self.register_broker,
            RequestCode.UNREGISTER_BROKER: self.unregister_broker,
            RequestCode.QUERY_DATA_VERSION: self.query_data_version,
            RequestCode.WIPE_WRITE_PERM_OF_BROKER: self.wipe_write_perm,
            RequestCode.ADD_WRITE_PERM_OF_BROKER: self.add_write_perm,
            RequestCode.PUT_KV_CONFIG: self.put_kv,
            RequestCode.GET_KV_CONFIG: self.get_kv,
            RequestCode.DELETE_KV_CONFIG: self.delete_kv,
            RequestCode.GET_KVLIST_BY_NAMESPACE: self.kv_list,
            RequestCode.GET_UNIT_TOPIC_LIST: self.no_topics,
            RequestCode.GET_HAS_UNIT_SUB_TOPIC_LIST: self.no_topics,
            RequestCode.GET_HAS_UNIT_SUB_UNUNIT_TOPIC_LIST: self.no_topics,
        }

    # --- this process's broker ----------------------------------------------------------------
    def topic_configs(self) -> dict[str, TopicConfig]:
        """Every topic this process's broker serves, TBW102 included while auto-creation is on."""
        ctx = self.local
        if ctx is None:
            return {}
        return local_topic_configs(ctx)

    def _local_topic(self, topic: str) -> TopicConfig | None:
        ctx = self.local
        if ctx is None:
            return None
        config = ctx.store.topic_config(topic) or broker_topic_configs(ctx).get(topic)
        return None if config is None else registered_config(ctx, config)

    def _with_local(self, sets: list[BrokerSet]) -> list[BrokerSet]:
        """``sets`` with this broker as the master of its name (its registered slaves kept)."""
        ctx = self.local
        if ctx is None:
            return sets
        name = ctx.config.broker_name
        out = [s for s in sets if s.broker_name != name]
        registered = self.table.brokers.get(name)
        addresses = dict(registered.addresses) if registered is not None else {}
        addresses = {i: a for i, a in addresses.items() if a != ctx.broker_address}
        addresses[0] = ctx.broker_address
        return [BrokerSet(ctx.config.cluster_name, name, addresses), *out]

    # --- routes and the cluster ---------------------------------------------------------------
    async def route(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        topic = text(cmd.ext_fields, "topic")
        found = self.table.route(topic)
        queues, sets = found if found is not None else ([], [])
        local = self._local_topic(topic)
        if local is not None:
            assert self.local is not None
            name = self.local.config.broker_name
            own = QueueData(name, local.read_queues, local.write_queues, local.perm, local.sys_flag)
            queues = [own, *(q for q in queues if q.broker_name != name)]
            sets = self._with_local(sets)
        if not queues:
            raise RequestRefused(
                ResponseCode.TOPIC_NOT_EXIST,
                f"No topic route info in name server for the topic: {topic}",
            )
        route = {
            "brokerDatas": [s.to_json() for s in sets],
            "filterServerTable": {},
            "queueDatas": [q.to_json() for q in queues],
        }
        return cmd.response(body=json_body(route))

    async def cluster_info(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        sets = self._with_local(list(self.table.brokers.values()))
        clusters: dict[str, list[str]] = {c: sorted(names) for c, names in self.table.clusters.items()}
        for s in sets:
            names = clusters.setdefault(s.cluster, [])
            if s.broker_name not in names:
                names.append(s.broker_name)
        info = {"brokerAddrTable": {s.broker_name: s.to_json() for s in sets}, "clusterAddrTable": clusters}
        return cmd.response(body=json_body(info))

    async def all_topics(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        topics = set(self.topic_configs()) | set(self.table.topics)
        return cmd.response(body=json_body({"topicList": sorted(topics)}))

    async def cluster_topics(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        cluster = text(cmd.ext_fields, "cluster")
        topics = set(self.table.topics_of_cluster(cluster))
        if self.local is not None and cluster == self.local.config.cluster_name:
            topics |= set(self.topic_configs())
        return cmd.response(body=json_body({"topicList": sorted(topics)}))

    async def no_topics(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        return cmd.response(body=json_body({"topicList": []}))

    async def delete_topic(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        # this broker's routes are its topics: its DELETE_TOPIC_IN_BROKER removed it already
        topic = text(cmd.ext_fields, "topic")
        self.table.delete_topic(topic, cmd.ext_fields.get("clusterName") or None)
        return cmd.response()

    async def wipe_write_perm(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        name = text(cmd.ext_fields, "brokerName")
        count = self.table.wipe_write_perm(name)
        log.info("write permission of broker %s wiped on %d topics", name, count)
        return cmd.response(ext_fields=to_ext(wipeTopicCount=count))

    async def add_write_perm(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        name = text(cmd.ext_fields, "brokerName")
        count = self.table.add_write_perm(name)
        log.info("write permission of broker %s added on %d topics", name, count)
        return cmd.response(ext_fields=to_ext(addTopicCount=count))

    # --- brokers' registrations ---------------------------------------------------------------
    async def register_broker(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        try:
            if len(cmd.body) > DECODE_INLINE_BYTES:
                request = await asyncio.to_thread(decode_register_broker, cmd)
            else:
                request = decode_register_broker(cmd)
        except BodyChecksumError:
            raise RequestRefused(ResponseCode.SYSTEM_ERROR, "crc32 not match") from None
        except CorruptDataError as exc:
            raise RequestRefused(ResponseCode.SYSTEM_ERROR, str(exc)) from None
        broker = request.broker
        # in combined mode this process's broker is the master of its name: another master
        # under the name would be one in some answers and not in others, and its slaves'
        # master would depend on who registered last
        own = (
            self.local
            if self.local is not None and broker.broker_name == self.local.config.broker_name
            else None
        )
        if own is not None and broker.broker_id == 0 and broker.broker_addr != own.broker_address:
            raise RequestRefused(
                ResponseCode.SYSTEM_ERROR,
                f"broker name {broker.broker_name} is this name server's own broker's: its master is "
                f"{own.broker_address}, not {broker.broker_addr}",
            )
        known = broker.broker_addr in self.table.live
        self._check_broker_limits(broker.broker_addr, conn)
        master = self.table.register(
            cluster=broker.cluster_name,
            broker_name=broker.broker_name,
            broker_addr=broker.broker_addr,
            broker_id=broker.broker_id,
            ha_server_addr=request.ha_server_addr,
            version=request.version,
            topics=request.topics,
            channel=conn,
        )
        registered: set[str] | None = conn.attributes.get("namesrv_registrations")
        if registered is None:
            registered = conn.attributes["namesrv_registrations"] = set()
            conn.when_closed(self._connection_closed)  # (at once, when it closed meanwhile)
        registered.add(broker.broker_addr)
        if own is not None and broker.broker_id != 0:
            master = MasterInfo(own.broker_address, local_ha_address(own))
        if not known:
            log.info(
                "broker %s (id %d of %s, cluster %s) registered from %s with %d topics",
                broker.broker_addr,
                broker.broker_id,
                broker.broker_name,
                broker.cluster_name,
                conn.peer,
                len(request.topics),
            )
        result = RegisterBrokerResult(
            master.master_addr, master.ha_server_addr, self._kv.get(ORDER_TOPIC_CONFIG, {})
        )
        return encode_register_result(cmd, result)

    def _check_broker_limits(self, broker_addr: str, conn: Connection) -> None:
        """Refuse a new broker address past MAX_BROKERS_PER_CONNECTION on ``conn`` or
        MAX_REGISTERED_BROKERS in all (a known one re-registering always passes)."""
        live = self.table.live
        known = live.get(broker_addr)
        if known is not None and known.channel is conn:
            return
        registered: set[str] = conn.attributes.get("namesrv_registrations", set())
        registered -= {a for a in registered if (b := live.get(a)) is None or b.channel is not conn}
        if len(registered) >= MAX_BROKERS_PER_CONNECTION:
            raise RequestRefused(
                ResponseCode.SYSTEM_ERROR,
                f"{len(registered)} brokers are registered on this connection: the limit is "
                f"{MAX_BROKERS_PER_CONNECTION}",
            )
        if known is None and len(live) >= MAX_REGISTERED_BROKERS:
            raise RequestRefused(
                ResponseCode.SYSTEM_ERROR,
                f"{len(live)} brokers are registered with this name server: the limit is "
                f"{MAX_REGISTERED_BROKERS}",
            )

    def _connection_closed(self, conn: Connection) -> None:
        for addr in self.table.remove_channel(conn):
            log.info("broker %s removed: its registration connection %s closed", addr, conn.peer)

    async def unregister_broker(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        broker = BrokerIdentity.from_ext(cmd.ext_fields)
        self.table.unregister(broker.cluster_name, broker.broker_name, broker.broker_addr, broker.broker_id)
        log.info(
            "broker %s (id %d of %s) unregistered", broker.broker_addr, broker.broker_id, broker.broker_name
        )
        return cmd.response()

    async def query_data_version(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        broker = BrokerIdentity.from_ext(cmd.ext_fields)
        try:
            version = decode_data_version(cmd.body, "QUERY_DATA_VERSION body")
        except CorruptDataError as exc:
            raise RequestRefused(ResponseCode.SYSTEM_ERROR, str(exc)) from None
        changed, held = self.table.query_data_version(broker.broker_addr, version)
        body = encode_data_version(held) if held is not None else b""
        return cmd.response(ext_fields=to_ext(changed=changed), body=body)

    def expire(self) -> None:
        """Remove the brokers silent for 120 s and close their connections (every 10 s)."""
        for addr, channel in self.table.expire():
            log.info("broker %s removed: no registration for %d s", addr, self.table.expiry_ms // 1000)
            if isinstance(channel, Connection):
                channel.close()

    # --- KV configuration ---------------------------------------------------------------------
    def _load_kv(self) -> dict[str, dict[str, str]]:
        try:
            doc = json.loads(self._kv_path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            log.warning("%s is unreadable (%s): starting with an empty KV configuration", self._kv_path, exc)
            return {}
        table = doc.get("configTable") if isinstance(doc, dict) else None
        if not isinstance(table, dict):
            return {}
        return {
            str(ns): {str(k): str(v) for k, v in entries.items()}
            for ns, entries in table.items()
            if isinstance(entries, dict)
        }

    def _save_kv(self, table: dict[str, dict[str, str]]) -> None:
        self._kv_path.parent.mkdir(parents=True, exist_ok=True)
        data = json.dumps({"configTable": table}, indent=1, sort_keys=True).encode()
        atomic_write(self._kv_path, data, self._file_mode)

    async def put_kv(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        ext = cmd.ext_fields
        namespace, key, value = text(ext, "namespace"), text(ext, "key"), text(ext, "value")
        size = _entry_bytes(namespace, key, value)
        if size > MAX_KV_ENTRY_BYTES:
            raise RequestRefused(
                ResponseCode.SYSTEM_ERROR,
                f"a KV configuration entry of {size} bytes (namespace, key and value): "
                f"at most {MAX_KV_ENTRY_BYTES}",
            )
        async with self._kv_update:
            old = self._kv.get(namespace, {}).get(key)
            if old is None and sum(map(len, self._kv.values())) >= MAX_KV_ENTRIES:
                raise RequestRefused(
                    ResponseCode.SYSTEM_ERROR,
                    f"the KV configuration holds {MAX_KV_ENTRIES} entries: the limit",
                )
            total = self._kv_bytes + size - (0 if old is None else _entry_bytes(namespace, key, old))
            if total > MAX_KV_BYTES and total > self._kv_bytes:  # one already over it may shrink
                raise RequestRefused(
                    ResponseCode.SYSTEM_ERROR,
                    f"the KV configuration would hold {total} bytes: at most {MAX_KV_BYTES}",
                )
            table = {ns: dict(entries) for ns, entries in self._kv.items()}
            table.setdefault(namespace, {})[key] = value
            await asyncio.to_thread(self._save_kv, table)
            self._kv, self._kv_bytes = table, total
        return cmd.response()

    async def get_kv(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        ext = cmd.ext_fields
        namespace, key = text(ext, "namespace"), text(ext, "key")
        value = self._kv.get(namespace, {}).get(key)
        if value is None:
            raise RequestRefused(
                ResponseCode.QUERY_NOT_FOUND, f"No config item, Namespace: {namespace} Key: {key}"
            )
        return cmd.response(ext_fields=to_ext(value=value))

    async def delete_kv(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        ext = cmd.ext_fields
        namespace, key = text(ext, "namespace"), text(ext, "key")
        async with self._kv_update:
            if key in self._kv.get(namespace, {}):
                table = {ns: dict(entries) for ns, entries in self._kv.items()}
                size = _entry_bytes(namespace, key, table[namespace].pop(key))
                if not table[namespace]:
                    del table[namespace]
                await asyncio.to_thread(self._save_kv, table)
                self._kv, self._kv_bytes = table, self._kv_bytes - size
        return cmd.response()

    async def kv_list(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        namespace = text(cmd.ext_fields, "namespace")
        entries = self._kv.get(namespace)
        if not entries:
            raise RequestRefused(ResponseCode.QUERY_NOT_FOUND, f"No config item, Namespace: {namespace}")
        return cmd.response(body=json_body({"table": entries}))


class NameServer:
    """One name-server listener: ``processor``'s handlers on a remoting server, and the scan
    that expires silent brokers. ``start`` binds (or takes a bound socket); ``stop`` ends both."""

    def __init__(
        self, processor: NameServerProcessor, limits: RemotingLimits, metrics: BrokerMetrics | None = None
    ) -> None:
        self.processor = processor
        self.server = RemotingServer(processor.handlers(), limits, "namesrv", metrics=metrics)
        self._expiry = PeriodicTask("the name server's expiry scan", EXPIRY_SCAN_S, self._expire, log=log)

    async def start(self, sock: socket.socket) -> int:
        port = await self.server.start(sock=sock)
        self._expiry.start()
        return port

    async def _expire(self) -> None:
        self.processor.expire()

    async def stop(self) -> None:
        await self._expiry.stop()
        await self.server.stop()
