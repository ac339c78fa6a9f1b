"""The name server's requests (REMOTING.md §4): routes, the cluster, the topic list and the KV
configuration, for a name server whose one broker is this process.

Routes are made from the store's topics at each request, so a topic created by any path (a
send's auto-creation, mqadmin, a heartbeat's retry topic, gRPC, the CLI) is routable at once and
a deleted one is gone. Every route names one broker, ``brokerName`` in cluster
``brokerClusterName``, whose master (id 0) is the remoting address. ``TBW102``, the topic
producers fall back to for a topic without a route, is routed (8 queues, perm 7) while topic
auto-creation is on, as RocketMQ's broker registers it then.

The KV configuration (PUT/GET/DELETE_KV_CONFIG, GET_KVLIST_BY_NAMESPACE; mqadmin updateTopic
``-o`` writes namespace ``ORDER_TOPIC_CONFIG``) is kept in ``config/kvConfig.json`` of the
store in RocketMQ's shape (``{"configTable": {namespace: {key: value}}}``). Routes carry no
``orderTopicConf`` (RocketMQ's name server adds it only with ``orderMessageEnable``, off by
default; producers would then pick queues from it instead of from the broker's topic).
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any, Final

from rocketstore.broker.remoting.codes import RequestCode, ResponseCode
from rocketstore.broker.remoting.command import RemotingCommand
from rocketstore.broker.remoting.context import RemotingContext
from rocketstore.broker.remoting.headers import text, to_ext
from rocketstore.broker.remoting.refusal import RequestRefused
from rocketstore.broker.remoting.server import Connection, Handler
from rocketstore.codec.config_json import PERM_READ, PERM_WRITE, TopicConfig
from rocketstore.storage.paths import atomic_write

__all__ = [
    "DEFAULT_TOPIC",
    "KV_CONFIG_FILE",
    "PERM_INHERIT",
    "NameServerProcessor",
    "default_topic_config",
    "json_body",
]

log = logging.getLogger("rocketstore.broker.remoting")

DEFAULT_TOPIC: Final = "TBW102"  # RocketMQ's AUTO_CREATE_TOPIC_KEY_TOPIC
PERM_INHERIT: Final = 0x1
KV_CONFIG_FILE: Final = "kvConfig.json"
# entries the KV configuration keeps (RocketMQ's name server has no bound; its clients write a
# handful, each a few bytes): past them a change is refused, so requests cannot grow the file
# (rewritten whole at each change) without end. Bytes are namespace + key + value in UTF-8.
MAX_KV_ENTRIES: Final = 10_000
MAX_KV_ENTRY_BYTES: Final = 64 * 1024
MAX_KV_BYTES: Final = 4 * 1024 * 1024


def default_topic_config(ctx: RemotingContext) -> TopicConfig:
    """TBW102 as RocketMQ's broker registers it while auto-creation is on: perm 7 (INHERIT),
    ``defaultTopicQueueNums`` queues."""
    queues = ctx.store.config.default_topic_queue_nums
    return TopicConfig(DEFAULT_TOPIC, queues, queues, PERM_READ | PERM_WRITE | PERM_INHERIT)


def json_body(value: object) -> bytes:
    """A JSON body as fastjson writes it: keys sorted, no spaces, UTF-8."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def _entry_bytes(namespace: str, key: str, value: str) -> int:
    return len(namespace.encode()) + len(key.encode()) + len(value.encode())


class NameServerProcessor:
    def __init__(self, ctx: RemotingContext) -> None:
        self.ctx = ctx
        self._kv_path = ctx.store.layout.root / "config" / KV_CONFIG_FILE
        self._kv_update = asyncio.Lock()  # one change at a time: each rewrites the whole file
        self._kv: dict[str, dict[str, str]] = self._load_kv()
        self._kv_bytes = sum(
            _entry_bytes(ns, k, v) for ns, entries in self._kv.items() for k, v in entries.items()
        )

    def handlers(self) -> dict[int, Handler]:
        return {
            RequestCode.GET_ROUTEINFO_BY_TOPIC: self.route,
            RequestCode.GET_BROKER_CLUSTER_INFO: self.cluster_info,
            RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER: self.all_topics,
            RequestCode.GET_TOPICS_BY_CLUSTER: self.cluster_topics,
            RequestCode.DELETE_TOPIC_IN_NAMESRV: self.delete_topic,
            RequestCode.PUT_KV_CONFIG: self.put_kv,
            RequestCode.GET_KV_CONFIG: self.get_kv,
            RequestCode.DELETE_KV_CONFIG: self.delete_kv,
            RequestCode.GET_KVLIST_BY_NAMESPACE: self.kv_list,
            RequestCode.GET_UNIT_TOPIC_LIST: self.no_topics,
            RequestCode.GET_HAS_UNIT_SUB_TOPIC_LIST: self.no_topics,
            RequestCode.GET_HAS_UNIT_SUB_UNUNIT_TOPIC_LIST: self.no_topics,
        }

    # --- what the broker has ----------------------------------------------------------------
    def topic_configs(self) -> dict[str, TopicConfig]:
        """Every topic the broker serves, TBW102 included while auto-creation is on."""
        topics = dict(self.ctx.store.topic_configs())
        if self.ctx.config.auto_create_topic and DEFAULT_TOPIC not in topics:
            topics[DEFAULT_TOPIC] = default_topic_config(self.ctx)
        return topics

    def broker_data(self) -> dict[str, Any]:
        config = self.ctx.config
        return {
            "brokerAddrs": {"0": self.ctx.broker_address},
            "brokerName": config.broker_name,
            "cluster": config.cluster_name,
        }

    # --- handlers -----------------------------------------------------------------------------
    async def route(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        topic = text(cmd.ext_fields, "topic")
        config = self.ctx.store.topic_config(topic)
        if config is None and topic == DEFAULT_TOPIC and self.ctx.config.auto_create_topic:
            config = default_topic_config(self.ctx)
        if config is None:
            raise RequestRefused(
                ResponseCode.TOPIC_NOT_EXIST,
                f"No topic route info in name server for the topic: {topic}",
            )
        route = {
            "brokerDatas": [self.broker_data()],
            "filterServerTable": {},
            "queueDatas": [
                {
                    "brokerName": self.ctx.config.broker_name,
                    "perm": config.perm,
                    "readQueueNums": config.read_queues,
                    "topicSysFlag": config.sys_flag,
                    "writeQueueNums": config.write_queues,
                }
            ],
        }
        return cmd.response(body=json_body(route))

    async def cluster_info(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        config = self.ctx.config
        info = {
            "brokerAddrTable": {config.broker_name: self.broker_data()},
            "clusterAddrTable": {config.cluster_name: [config.broker_name]},
        }
        return cmd.response(body=json_body(info))

    async def all_topics(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        return cmd.response(body=json_body({"topicList": sorted(self.topic_configs())}))

    async def cluster_topics(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        cluster = text(cmd.ext_fields, "cluster")
        topics = sorted(self.topic_configs()) if cluster == self.ctx.config.cluster_name else []
        return cmd.response(body=json_body({"topicList": topics}))

    async def no_topics(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        return cmd.response(body=json_body({"topicList": []}))

    async def delete_topic(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        # routes are the broker's topics: the broker's DELETE_TOPIC_IN_BROKER removed it already
        text(cmd.ext_fields, "topic")
        return cmd.response()

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
        atomic_write(self._kv_path, data, self.ctx.store.config.file_mode)

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
            await self.ctx.run(self._save_kv, table)
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
                await self.ctx.run(self._save_kv, table)
                self._kv, self._kv_bytes = table, self._kv_bytes - size
        return cmd.response()

    async def kv_list(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        namespace = text(cmd.ext_fields, "namespace")
        entries = self._kv.get(namespace)
        if not entries:
            raise RequestRefused(ResponseCode.QUERY_NOT_FOUND, f"No config item, Namespace: {namespace}")
        return cmd.response(body=json_body({"table": entries}))
