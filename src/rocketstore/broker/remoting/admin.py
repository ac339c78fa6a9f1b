"""Queries and administration over remoting (REMOTING.md §7): what ``mqadmin`` clusterList,
topicList, topicRoute, topicStatus, updateTopic, deleteTopic, consumerProgress,
consumerConnection, producerConnection, brokerStatus, queryMsgByKey, queryMsgById,
queryMsgByOffset, getBrokerConfig, updateBrokerConfig, resetOffsetByTime and statsAll send to
the broker.

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
import math
import time
from typing import Any, Final

from rocketstore import disk_space, properties
from rocketstore.broker.remoting.broker_settings import (
    SettingRefused,
    broker_settings,
    parse_update,
    persist,
)
from rocketstore.broker.remoting.broker_topics import broker_topic_configs
from rocketstore.broker.remoting.codes import VERSION, RequestCode, ResponseCode
from rocketstore.broker.remoting.command import MAX_FRAME_SIZE, RemotingCommand
from rocketstore.broker.remoting.consumers import consumer_groups
from rocketstore.broker.remoting.context import RemotingContext
from rocketstore.broker.remoting.headers import number, text, to_ext
from rocketstore.broker.remoting.heartbeat import check_group_name
from rocketstore.broker.remoting.refusal import RequestRefused
from rocketstore.broker.remoting.server import Connection, Handler
from rocketstore.broker.send_back import retry_topic
from rocketstore.broker.stats_items import GROUP_GET_NUMS
from rocketstore.codec.json_body import json_body
from rocketstore.errors import RocketStoreError, StoreConfigError
from rocketstore.message import TOPIC_PATTERN
from rocketstore.system_topics import is_system_topic

__all__ = ["AdminProcessor", "message_queue_key"]

log = logging.getLogger("rocketstore.broker.remoting")

VERSION_DESC: Final = "V4_9_8"
_CLIENT_CALL_TIMEOUT_S: Final = 10.0
# RocketMQ's maxMsgsNumBatch: the most records one QUERY_MESSAGE answers, whatever maxNum says
MAX_QUERY_RESULTS: Final = 64
# and their bytes, so that the answer fits the frame a client accepts (its header is small)
MAX_QUERY_BYTES: Final = MAX_FRAME_SIZE - 64 * 1024
_LANGUAGE_CPP: Final = "CPP"
# brokerStatus keys from the broker's settings (prepareRuntimeInfo), shown as getBrokerConfig does
_CAPACITY_KEYS: Final = {
    "sendThreadPoolQueueCapacity": "sendThreadPoolQueueCapacity",
    "pullThreadPoolQueueCapacity": "pullThreadPoolQueueCapacity",
    "queryThreadPoolQueueCapacity": "queryThreadPoolQueueCapacity",
    "EndTransactionThreadPoolQueueCapacity": "endTransactionPoolQueueCapacity",
    "startAcceptSendRequestTimeStamp": "startAcceptSendRequestTimeStamp",
}


def message_queue_key(topic: str, broker_name: str, queue_id: int) -> str:
    """A MessageQueue as a JSON map key (REMOTING.md §2.4)."""
    return json.dumps({"brokerName": broker_name, "queueId": queue_id, "topic": topic}, separators=(",", ":"))


def _bytes(count: int) -> str:
    """MixAll.humanReadableByteCount(count, false): ``0 B``, ``1.5 KiB``, ``252.0 GiB``."""
    if count < 1024:
        return f"{count} B"
    exp = min(int(math.log(count) / math.log(1024)), 6)
    return f"{count / 1024**exp:.1f} {'KMGTPE'[exp - 1]}iB"


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
        self._config_version = 0
        self._config_update = asyncio.Lock()

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
            RequestCode.GET_PRODUCER_CONNECTION_LIST: self.producer_connections,
            RequestCode.UPDATE_BROKER_CONFIG: self.update_broker_config,
            RequestCode.INVOKE_BROKER_TO_RESET_OFFSET: self.reset_offset,
            RequestCode.VIEW_BROKER_STATS_DATA: self.stats_data,
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
    def _runtime_info(self) -> dict[str, str]:
        store = self.ctx.store
        info = store.runtime_info()
        settings = broker_settings(self.ctx.config, store, self.ctx.broker_address)
        stats = self.ctx.metrics.stats
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
            "EndTransactionQueueSize": "0",
            "dispatchMaxBuffer": "0",
            "getMessageEntireTimeMax": str(stats.get_max_ms),
            **{key: settings[name] for key, name in _CAPACITY_KEYS.items()},
            **stats.put_latency(),
        }
        for key, value in info.items():
            if key in ("putTps", "getFoundTps", "getMissTps", "getTransferedTps"):
                table[key] = _tps(value)
            elif key in ("remainHowManyDataToFlush", "remainHowManyDataToCommit") and isinstance(value, int):
                table[key] = _bytes(value)
            elif isinstance(value, bool):
                table[key] = "true" if value else "false"
            elif isinstance(value, (int, float, str)):
                table[key] = str(value)
        if not store.config.transient_store_pool_enable:
            table.pop("remainHowManyDataToCommit", None)  # RocketMQ shows it with the pool only
        found, miss = info.get("getFoundTps"), info.get("getMissTps")
        if isinstance(found, list) and isinstance(miss, list):
            table["getTotalTps"] = _tps([f + m for f, m in zip(found, miss)])
        puts = int(str(info.get("putMessageTimesTotal", 0)))
        table["putMessageAverageSize"] = str(int(str(info.get("putMessageSizeTotal", 0))) / max(puts, 1))
        # one commitlog directory: its ratio under its path too, as RocketMQ lists each of its paths
        commitlog = store.layout.root / "commitlog"
        table[f"commitLogDiskRatio_{commitlog}"] = table.get("commitLogDiskRatio", "0")
        total, free = disk_space.capacity(store.layout.root)
        table["commitLogDirCapacity"] = f"Total : {_bytes(total)}, Free : {_bytes(free)}."
        for level, (delivered, max_offset) in store.delay_progress().items():
            table[f"scheduleMessageOffset_{level}"] = f"{delivered},{max_offset}"
        return table

    async def runtime_info(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        table = await self.ctx.run(self._runtime_info)
        return cmd.response(body=json_body({"table": table}))

    async def broker_config(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        values = broker_settings(self.ctx.config, self.ctx.store, self.ctx.broker_address)
        version = json_body({"counter": self._config_version, "timestamp": int(time.time() * 1000)}).decode()
        return cmd.response(ext_fields={"version": version}, body=properties.text_of(values).encode())

    async def update_broker_config(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        """Change the settings the broker applies live, and keep them in its settings file
        (broker_settings.py); refused naming any other key."""
        reconfigure = self.ctx.reconfigure
        if not cmd.body:
            return cmd.response()  # RocketMQ: nothing to change is a success
        if reconfigure is None:
            raise RequestRefused(
                ResponseCode.SYSTEM_ERROR, "this broker's settings can not change while it runs"
            )
        try:
            persisted, changes = parse_update(bytes(cmd.body), self.ctx.config)
        except SettingRefused as exc:
            raise RequestRefused(ResponseCode.SYSTEM_ERROR, str(exc)) from None
        path = self.ctx.config.config_file
        async with self._config_update:  # one at a time: each rewrites the file
            if path is not None:
                try:
                    await self.ctx.run(persist, path, persisted)
                except StoreConfigError as exc:  # the new text would not load: says so itself
                    raise RequestRefused(ResponseCode.SYSTEM_ERROR, str(exc)) from None
                except (OSError, UnicodeError, RocketStoreError) as exc:
                    raise RequestRefused(
                        ResponseCode.SYSTEM_ERROR,
                        f"can not write the settings file {path}: {exc}; nothing changed",
                    ) from None
            reconfigure(changes)
            self._config_version += 1
        log.info(
            "broker settings changed over remoting by %s: %s%s",
            conn.peer,
            ", ".join(f"{k}={v}" for k, v in persisted.items()),
            f" (written to {path})" if path else " (serve has no --config file: not kept after a restart)",
        )
        return cmd.response()

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
        if is_system_topic(topic) or topic in (
            self.broker_name,
            getattr(config, "cluster_name", "DefaultCluster"),
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
        self.ctx.metrics.stats.forget_topic(topic)
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
        config = store.topic_config(topic) or broker_topic_configs(self.ctx).get(topic)
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
        consume_tps = 0.0
        for t in topics:
            config = configs.get(t)
            if config is None:
                continue
            if not topic and online is not None and online.members and t not in online.subscriptions:
                continue
            gets = self.ctx.metrics.stats.read(GROUP_GET_NUMS, f"{t}@{group}")
            consume_tps += gets[0].tps if gets is not None else 0.0  # over the last minute
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
        return {"consumeTps": consume_tps, "offsetTable": table}

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

    # --- producers --------------------------------------------------------------------------
    async def producer_connections(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        """GET_PRODUCER_CONNECTION_LIST: the group's connected producers (from heartbeats)."""
        group = text(cmd.ext_fields, "producerGroup")
        members = self.ctx.producers.members(group)
        if not members:
            raise RequestRefused(ResponseCode.SYSTEM_ERROR, f"the producer group[{group}] not exist")
        connections = []
        for member in members:
            attributes = member.connection.attributes
            connections.append(
                {
                    "clientAddr": member.connection.peer,
                    "clientId": member.client_id,
                    "language": str(attributes.get("language", "JAVA")),
                    "version": int(attributes.get("version", 0)),
                }
            )
        return cmd.response(body=json_body({"connectionSet": connections}))

    # --- offsets ----------------------------------------------------------------------------
    def _reset_targets(self, topic: str, group: str, timestamp: int, force: bool) -> dict[int, int]:
        """Broker2Client.resetOffset's table: per write queue, the offset at ``timestamp`` (-1:
        the end), or the stored one when that is earlier and ``force`` is off."""
        store = self.ctx.store
        config = store.topic_config(topic)
        if config is None:
            raise RequestRefused(
                ResponseCode.SYSTEM_ERROR,
                f"[reset-offset] reset offset failed, no topic in this broker. topic={topic}",
            )
        committed = store.consumer_offsets().get((topic, group), {})
        table: dict[int, int] = {}
        for q in range(config.write_queues):
            current = committed.get(q, -1)
            if current < 0:
                raise RequestRefused(ResponseCode.SYSTEM_ERROR, f"THe consumer group <{group}> not exist")
            if timestamp == -1:
                target = store.max_offset_in_queue(topic, q)
            else:
                target = store.offset_in_queue_by_time(topic, q, timestamp)
            target = max(target, 0)
            table[q] = target if force or target < current else current
        return table

    async def reset_offset(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        """INVOKE_BROKER_TO_RESET_OFFSET (REMOTING.md §7.7): the new offsets go to the group's
        connected consumers (RESET_CONSUMER_CLIENT_OFFSET, oneway), which apply and commit them;
        CONSUMER_NOT_ONLINE without one (mqadmin then commits them itself)."""
        ext = cmd.ext_fields
        topic, timestamp = text(ext, "topic"), number(ext, "timestamp")
        group = check_group_name(text(ext, "group"))
        force = ext.get("isForce", "true").lower() != "false"
        table = await self.ctx.run(self._reset_targets, topic, group, timestamp, force)
        offsets = {message_queue_key(topic, self.broker_name, q): o for q, o in table.items()}
        if cmd.language == _LANGUAGE_CPP:
            listed = [
                {"brokerName": self.broker_name, "offset": o, "queueId": q, "topic": topic}
                for q, o in table.items()
            ]
            notice_body = json_body({"offsetTable": listed})
        else:
            notice_body = json_body({"offsetTable": offsets})
        info = self.groups.get(group)
        live = [
            (m.client_id, m.connection)
            for m in (info.members.values() if info else ())
            if isinstance(m.connection, Connection) and not m.connection.closed
        ]
        if not live:
            raise RequestRefused(
                ResponseCode.CONSUMER_NOT_ONLINE,
                f"Consumer not online, so can not reset offset, Group: {group} Topic: {topic} "
                f"Timestamp: {timestamp}",
            )
        for client_id, target in live:
            notice = RemotingCommand(
                code=RequestCode.RESET_CONSUMER_CLIENT_OFFSET,
                ext_fields=to_ext(topic=topic, group=group, timestamp=timestamp, isForce=False),
                body=notice_body,
            )
            try:
                await target.oneway(notice)
            except (ConnectionError, RequestRefused) as exc:
                log.warning("reset offset of %s on %s: not sent to %s: %s", group, topic, client_id, exc)
        log.info(
            "offsets of group %s on topic %s reset to %s (timestamp %d) by %s",
            group,
            topic,
            table,
            timestamp,
            conn.peer,
        )
        return cmd.response(body=json_body({"offsetTable": offsets}))

    # --- statistics -------------------------------------------------------------------------
    async def stats_data(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        """VIEW_BROKER_STATS_DATA: an item's sums and rates by minute, hour and day."""
        ext = cmd.ext_fields
        name, key = text(ext, "statsName"), text(ext, "statsKey")
        found = self.ctx.metrics.stats.read(name, key)
        if found is None:
            raise RequestRefused(ResponseCode.SYSTEM_ERROR, f"The stats <{name}> <{key}> not exist")
        minute, hour, day = ({"avgpt": s.avgpt, "sum": s.sum, "tps": s.tps} for s in found)
        return cmd.response(body=json_body({"statsDay": day, "statsHour": hour, "statsMinute": minute}))
