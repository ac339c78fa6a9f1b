"""Queries and administration over remoting (REMOTING.md §7): what ``mqadmin`` clusterList,
topicList, topicRoute, topicStatus, updateTopic, deleteTopic, consumerProgress,
consumerConnection, brokerStatus, queryMsgByKey, queryMsgById, queryMsgByOffset and
getBrokerConfig send to the broker.

Message bodies (QUERY_MESSAGE, VIEW_MESSAGE_BY_ID) are the stored records as they lie in the
commitlog. Statistics come from the store (offsets, times, runtime figures) and the consumer
registry (connections, subscriptions). Map keys that are message queues are written as the
string of their JSON object, which RocketMQ's client reads as fastjson's object keys.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import time
from collections.abc import Mapping
from typing import Any, Final

from rocketstore.broker.remoting.codes import VERSION, RequestCode, ResponseCode
from rocketstore.broker.remoting.command import MAX_FRAME_SIZE, RemotingCommand
from rocketstore.broker.remoting.consumers import consumer_groups, json_body
from rocketstore.broker.remoting.context import RemotingContext
from rocketstore.broker.remoting.headers import number, text, to_ext
from rocketstore.broker.remoting.refusal import RequestRefused
from rocketstore.broker.remoting.server import Connection, Handler
from rocketstore.broker.send_back import retry_topic
from rocketstore.errors import RocketStoreError
from rocketstore.message import TOPIC_PATTERN

__all__ = ["AdminProcessor", "message_queue_key"]

log = logging.getLogger("rocketstore.broker.remoting")

VERSION_DESC: Final = "V4_9_8"
# topics a client may not create or delete (RocketMQ's TopicValidator.isSystemTopic + the broker's own)
_SYSTEM_TOPICS: Final = frozenset(
    (
        "TBW102",
        "SCHEDULE_TOPIC_XXXX",
        "BenchmarkTest",
        "RMQ_SYS_TRANS_HALF_TOPIC",
        "RMQ_SYS_TRACE_TOPIC",
        "RMQ_SYS_TRANS_OP_HALF_TOPIC",
        "TRANS_CHECK_MAX_TIME_TOPIC",
        "SELF_TEST_TOPIC",
        "OFFSET_MOVED_EVENT",
    )
)
_CLIENT_CALL_TIMEOUT_S: Final = 10.0
# RocketMQ's maxMsgsNumBatch: the most records one QUERY_MESSAGE answers, whatever maxNum says
MAX_QUERY_RESULTS: Final = 64
# and their bytes, so that the answer fits the frame a client accepts (its header is small)
MAX_QUERY_BYTES: Final = MAX_FRAME_SIZE - 64 * 1024
# StoreConfig settings getBrokerConfig shows under RocketMQ's names
_STORE_SETTINGS: Final = {
    "storePathRootDir": "store_path_root_dir",
    "mappedFileSizeCommitLog": "commitlog_segment_size",
    "maxMessageSize": "max_message_size",
    "defaultTopicQueueNums": "default_topic_queue_nums",
    "flushDiskType": "flush_disk_type",
    "brokerRole": "broker_role",
    "syncFlushTimeout": "sync_flush_timeout",
    "flushIntervalCommitLog": "flush_interval",
    "flushCommitLogLeastPages": "flush_least_pages",
    "transientStorePoolEnable": "transient_store_pool_enable",
    "deleteWhen": "delete_when",
    "fileReservedTime": "file_reserved_time",
    "diskMaxUsedSpaceRatio": "disk_max_used_space_ratio",
    "maxHashSlotNum": "index_hash_slots",
    "maxIndexNum": "index_max_entries",
    "messageIndexEnable": "message_index_enable",
    "defaultQueryMaxNum": "default_query_max_num",
    "maxTransferBytesOnMessageInMemory": "max_transfer_bytes_on_message_in_memory",
    "maxTransferCountOnMessageInMemory": "max_transfer_count_on_message_in_memory",
    "messageDelayLevel": "message_delay_level",
    "haListenPort": "ha_listen_port",
    "haMasterAddress": "ha_master_address",
}


def message_queue_key(topic: str, broker_name: str, queue_id: int) -> str:
    """A MessageQueue as a JSON map key (REMOTING.md §2.4)."""
    return json.dumps({"brokerName": broker_name, "queueId": queue_id, "topic": topic}, separators=(",", ":"))


def _java_properties(values: Mapping[str, object]) -> str:
    """``key=value`` lines as ``java.util.Properties.load`` reads them (backslashes escaped)."""
    lines = []
    for key, value in values.items():
        shown = (
            "" if value is None else ("true" if value is True else "false" if value is False else str(value))
        )
        lines.append(f"{key}={shown.replace(chr(92), chr(92) * 2)}")
    return "\n".join(lines) + "\n"


def _tps(value: object) -> str:
    """Rates over 10 s, 1 min, 10 min as RocketMQ prints them (space-separated)."""
    if isinstance(value, (list, tuple)):
        return " ".join(f"{float(v):.2f}" for v in value)
    return f"{float(value):.2f}" if isinstance(value, (int, float)) else "0.00"


def _runtime(ms: int) -> str:
    """How long the broker has run, as RocketMQ's brokerStatus shows it."""
    seconds = ms // 1000
    days, hours, minutes = seconds // 86400, seconds % 86400 // 3600, seconds % 3600 // 60
    return f"[ {days} days, {hours} hours, {minutes} minutes, {seconds % 60} seconds ]"


class AdminProcessor:
    def __init__(self, ctx: RemotingContext) -> None:
        self.ctx = ctx
        self.groups = consumer_groups(ctx)

    def handlers(self) -> dict[int, Handler]:
        return {
            RequestCode.QUERY_MESSAGE: self.query_message,
            RequestCode.VIEW_MESSAGE_BY_ID: self.view_message,
            RequestCode.GET_BROKER_RUNTIME_INFO: self.runtime_info,
            RequestCode.GET_BROKER_CONFIG: self.broker_config,
            RequestCode.GET_ALL_TOPIC_CONFIG: self.all_topic_config,
            RequestCode.UPDATE_AND_CREATE_TOPIC: self.create_topic,
            RequestCode.DELETE_TOPIC_IN_BROKER: self.delete_topic,
            RequestCode.GET_TOPIC_STATS_INFO: self.topic_stats,
            RequestCode.GET_CONSUME_STATS: self.consume_stats,
            RequestCode.GET_CONSUMER_CONNECTION_LIST: self.consumer_connections,
            RequestCode.QUERY_TOPIC_CONSUME_BY_WHO: self.consumed_by,
            RequestCode.GET_CONSUMER_RUNNING_INFO: self.consumer_running_info,
        }

    @property
    def broker_name(self) -> str:
        return str(self.ctx.config.broker_name)

    # --- messages ---------------------------------------------------------------------------
    async def query_message(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        ext = cmd.ext_fields
        topic, key = text(ext, "topic"), text(ext, "key")
        max_num = number(ext, "maxNum")
        begin, end = number(ext, "beginTimestamp"), number(ext, "endTimestamp")
        if ext.get("_UNIQUE_KEY_QUERY", "").lower() == "true":
            max_num = self.ctx.store.config.default_query_max_num
        store = self.ctx.store
        max_num = min(max(max_num, 1), MAX_QUERY_RESULTS)
        found = await self.ctx.run(self._query, topic, key, max_num, begin, end)
        if not found:
            raise RequestRefused(
                ResponseCode.QUERY_NOT_FOUND, "can not find message, maybe time range not correct"
            )
        headers = store.index_headers()
        last = headers[-1][1] if headers else {}
        body = b"".join(found)
        return cmd.response(
            ext_fields=to_ext(
                indexLastUpdateTimestamp=last.get("endTs", 0),
                indexLastUpdatePhyoffset=last.get("endPhyOffset", 0),
            ),
            body=body,
        )

    def _query(self, topic: str, key: str, max_num: int, begin: int, end: int) -> list[memoryview]:
        """The records of the newest ``max_num`` messages found, as many as fit in
        ``MAX_QUERY_BYTES``."""
        records: list[memoryview] = []
        size = 0
        for msg in itertools.islice(self.ctx.store.iter_query_message(topic, key, begin, end), max_num):
            record = msg.record_view
            if size + len(record) > MAX_QUERY_BYTES:
                if not records:
                    raise RequestRefused(
                        ResponseCode.SYSTEM_ERROR,
                        f"the message found is {len(record)} bytes, "
                        f"over the {MAX_FRAME_SIZE}-byte frame limit",
                    )
                break
            records.append(record)
            size += len(record)
        return records

    async def view_message(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        offset = number(cmd.ext_fields, "offset")
        msg = await self.ctx.run(self.ctx.store.look_message_by_offset, offset)
        if msg is None:
            raise RequestRefused(ResponseCode.SYSTEM_ERROR, f"can not find message by the offset, {offset}")
        if self.ctx.acl is not None:
            self.ctx.acl.require_record(cmd, msg)
        return cmd.response(body=bytes(msg.record_view))

    # --- the broker -------------------------------------------------------------------------
    async def runtime_info(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        info = await self.ctx.run(self.ctx.store.runtime_info)
        table: dict[str, str] = {
            "brokerVersionDesc": VERSION_DESC,
            "brokerVersion": str(VERSION),
            "msgPutTotalYesterdayMorning": "0",
            "msgPutTotalTodayMorning": "0",
            "msgPutTotalTodayNow": str(info.get("putMessageTimesTotal", 0)),
            "msgGetTotalYesterdayMorning": "0",
            "msgGetTotalTodayMorning": "0",
            "msgGetTotalTodayNow": str(info.get("getMessageTransferedMsgCount", 0)),
            "sendThreadPoolQueueSize": "0",
            "sendThreadPoolQueueHeadWaitTimeMills": "0",
            "pullThreadPoolQueueSize": "0",
            "pullThreadPoolQueueHeadWaitTimeMills": "0",
            "queryThreadPoolQueueSize": "0",
            "queryThreadPoolQueueHeadWaitTimeMills": "0",
            "runtime": _runtime(int(str(info.get("runtimeMillis", 0)))),
        }
        for key, value in info.items():
            if key in ("putTps", "getFoundTps", "getMissTps", "getTransferedTps"):
                table[key] = _tps(value)
            elif isinstance(value, bool):
                table[key] = "true" if value else "false"
            elif isinstance(value, (int, float, str)):
                table[key] = str(value)
        return cmd.response(body=json_body({"table": table}))

    async def broker_config(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        config, store_config = self.ctx.config, self.ctx.store.config
        values: dict[str, object] = {
            "brokerClusterName": getattr(config, "cluster_name", "DefaultCluster"),
            "brokerName": config.broker_name,
            "brokerId": 0,
            "brokerAddr": self.ctx.broker_address,
            "autoCreateTopicEnable": config.auto_create_topic,
            "autoCreateSubscriptionGroup": config.auto_create_group,
            "transactionTimeOut": config.transaction_timeout_ms,
            "transactionCheckInterval": config.transaction_check_interval_ms,
            "transactionCheckMax": config.transaction_check_max,
            "longPollingEnable": True,
            "aclEnable": config.acl_file is not None,
        }
        for name, attr in _STORE_SETTINGS.items():
            value = getattr(store_config, attr, None)
            if value is not None:
                values[name] = getattr(value, "name", value)  # enums by name
        version = json_body({"counter": 0, "timestamp": int(time.time() * 1000)}).decode()
        return cmd.response(ext_fields={"version": version}, body=_java_properties(values).encode())

    # --- topics -----------------------------------------------------------------------------
    def _topic_config_json(self) -> dict[str, Any]:
        return {name: c.to_json() for name, c in self.ctx.store.topic_configs().items()}

    async def all_topic_config(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        table = self._topic_config_json()
        if not table:
            raise RequestRefused(ResponseCode.SYSTEM_ERROR, "No topic in this broker")
        body = {
            "dataVersion": {"counter": 0, "timestamp": int(time.time() * 1000)},
            "topicConfigTable": table,
        }
        return cmd.response(body=json_body(body))

    def _check_topic_name(self, topic: str) -> None:
        if not TOPIC_PATTERN.fullmatch(topic):
            raise RequestRefused(
                ResponseCode.SYSTEM_ERROR, f"The specified topic[{topic}] contains illegal characters"
            )
        config = self.ctx.config
        if (
            topic in _SYSTEM_TOPICS
            or topic.upper().startswith("RMQ_SYS_")  # in any case, as sends refuse them
            or topic in (self.broker_name, getattr(config, "cluster_name", "DefaultCluster"))
        ):
            raise RequestRefused(
                ResponseCode.SYSTEM_ERROR, f"The topic[{topic}] is conflict with system topic."
            )

    async def create_topic(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        ext = cmd.ext_fields
        topic = text(ext, "topic")
        self._check_topic_name(topic)
        queues = max(number(ext, "readQueueNums"), number(ext, "writeQueueNums"))
        perm = number(ext, "perm")
        order = ext.get("order", "").lower() == "true"
        try:
            await self.ctx.run(
                lambda: self.ctx.store.create_topic(topic, queues, perm=perm & 0x7, order=order)
            )
        except RocketStoreError as exc:
            raise RequestRefused(ResponseCode.SYSTEM_ERROR, str(exc)) from None
        log.info("topic %s created or updated over remoting: %d queues, perm %d", topic, queues, perm)
        return cmd.response()

    async def delete_topic(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        topic = text(cmd.ext_fields, "topic")
        self._check_topic_name(topic)
        try:
            await self.ctx.run(self.ctx.store.delete_topic, topic)
        except RocketStoreError as exc:
            raise RequestRefused(ResponseCode.SYSTEM_ERROR, str(exc)) from None
        log.info("topic %s deleted over remoting", topic)
        return cmd.response()

    def _queue_time(self, topic: str, queue_id: int, offset: int) -> int:
        """Store time of the message at ``offset`` of a queue, 0 when there is none."""
        if offset < 0:
            return 0
        batch = self.ctx.store.read_batch(topic, queue_id, offset, 1, bodies=False)
        if len(batch) == 0 or int(batch.queue_offsets[0]) != offset:
            return 0
        return int(batch.store_timestamps[0])

    def _topic_stats(self, topic: str) -> dict[str, Any]:
        store = self.ctx.store
        config = store.topic_config(topic)
        if config is None:
            raise RequestRefused(ResponseCode.TOPIC_NOT_EXIST, f"topic[{topic}] not exist")
        table = {}
        for q in range(config.write_queues):
            max_offset = store.max_offset_in_queue(topic, q)
            table[message_queue_key(topic, self.broker_name, q)] = {
                "lastUpdateTimestamp": self._queue_time(topic, q, max_offset - 1),
                "maxOffset": max_offset,
                "minOffset": store.min_offset_in_queue(topic, q),
            }
        return {"offsetTable": table}

    async def topic_stats(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        stats = await self.ctx.run(self._topic_stats, text(cmd.ext_fields, "topic"))
        return cmd.response(body=json_body(stats))

    # --- consumers --------------------------------------------------------------------------
    def _consume_stats(self, group: str, topic: str | None) -> dict[str, Any]:
        store = self.ctx.store
        offsets = store.consumer_offsets()
        online = self.groups.get(group)
        topics = [topic] if topic else sorted({t for (t, g) in offsets if g == group})
        configs = store.topic_configs()
        table: dict[str, Any] = {}
        for t in topics:
            config = configs.get(t)
            if config is None:
                continue
            if not topic and online is not None and online.members and t not in online.subscriptions:
                continue
            committed = offsets.get((t, group), {})
            for q in range(config.write_queues):
                consumer_offset = max(committed.get(q, 0), 0)
                table[message_queue_key(t, self.broker_name, q)] = {
                    "brokerOffset": max(store.max_offset_in_queue(t, q), 0),
                    "consumerOffset": consumer_offset,
                    "lastTimestamp": self._queue_time(t, q, consumer_offset - 1)
                    if consumer_offset > 0
                    else 0,
                }
        return {"consumeTps": 0.0, "offsetTable": table}

    async def consume_stats(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        ext = cmd.ext_fields
        stats = await self.ctx.run(self._consume_stats, text(ext, "consumerGroup"), ext.get("topic") or None)
        return cmd.response(body=json_body(stats))

    async def consumer_connections(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        group = text(cmd.ext_fields, "consumerGroup")
        info = self.groups.get(group)
        if info is None or not info.members:
            raise RequestRefused(ResponseCode.CONSUMER_NOT_ONLINE, f"the consumer group[{group}] not online")
        body = {
            "connectionSet": [
                {
                    "clientAddr": m.address,
                    "clientId": m.client_id,
                    "language": m.language,
                    "version": m.version,
                }
                for m in info.members.values()
            ],
            "consumeFromWhere": info.consume_from_where,
            "consumeType": info.consume_type,
            "messageModel": info.message_model,
            "subscriptionTable": {
                t: {
                    "classFilterMode": False,
                    "codeSet": [],
                    "expressionType": s.expression_type,
                    "subString": s.expression,
                    "subVersion": s.version,
                    "tagsSet": list(s.tags),
                    "topic": t,
                }
                for t, s in info.subscriptions.items()
            },
        }
        return cmd.response(body=json_body(body))

    async def consumed_by(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        topic = text(cmd.ext_fields, "topic")
        groups = set(self.groups.groups_subscribing(topic))
        offsets = await self.ctx.run(self.ctx.store.consumer_offsets)
        groups.update(g for (t, g) in offsets if t == topic)
        groups.discard(retry_topic(""))
        return cmd.response(body=json_body({"groupList": sorted(groups)}))

    async def consumer_running_info(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        ext = cmd.ext_fields
        group, client_id = text(ext, "consumerGroup"), text(ext, "clientId")
        info = self.groups.get(group)
        target = next(
            (m.connection for m in (info.members.values() if info else ()) if m.client_id == client_id), None
        )
        if not isinstance(target, Connection) or target.closed:
            raise RequestRefused(
                ResponseCode.SYSTEM_ERROR, f"The Consumer <{group}> <{client_id}> not online"
            )
        request = RemotingCommand(code=cmd.code, ext_fields=dict(ext), body=cmd.body)
        try:
            answer = await target.invoke(request, _CLIENT_CALL_TIMEOUT_S)
        except asyncio.TimeoutError:
            raise RequestRefused(
                ResponseCode.CONSUME_MSG_TIMEOUT, f"consumer <{group}> <{client_id}> Timeout"
            ) from None
        except ConnectionError as exc:
            raise RequestRefused(ResponseCode.SYSTEM_ERROR, str(exc)) from None
        return cmd.response(answer.code, remark=answer.remark, ext_fields=answer.ext_fields, body=answer.body)
