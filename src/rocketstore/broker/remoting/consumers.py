"""The consumer side of the broker over remoting (REMOTING.md §6): consumer groups from
heartbeats, rebalancing (GET_CONSUMER_LIST_BY_GROUP, NOTIFY_CONSUMER_IDS_CHANGED), committed
offsets, orderly consumers' queue locks, and messages sent back for a retry or the DLQ.

HEART_BEAT and UNREGISTER_CLIENT are answered by ``HeartbeatProcessor``; its hooks bring the
consumer groups here, into the shared ``ConsumerGroups`` registry. A heartbeat of a consumer
group makes its retry topic ``%RETRY%<group>`` (one queue) exist at once, so it is routable
before the first retry. When a group's members or subscriptions change (a join, a leave, a
closed connection, a member silent for 120 s, a new subscription), every member gets
NOTIFY_CONSUMER_IDS_CHANGED on its own connection and rebalances at once instead of within 20 s.

Offsets are the store's (``consumerOffset.json``): what the library's consumers, gRPC and
``rocketstore consumer-progress`` see.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable
from typing import Any, Final

from rocketstore.broker.consumer_groups import ConsumerGroup, ConsumerGroups, ConsumerMember, Subscription
from rocketstore.broker.consumer_offsets import CommitRefusal, CommitRefusedError, check_commit, resume_offset
from rocketstore.broker.queue_locks import QueueLocks
from rocketstore.broker.remoting.codes import RequestCode, ResponseCode
from rocketstore.broker.remoting.command import RemotingCommand
from rocketstore.broker.remoting.context import RemotingContext
from rocketstore.broker.remoting.headers import number, optional_number, text, to_ext
from rocketstore.broker.remoting.heartbeat import HEARTBEAT_ACCOUNT, check_group_name, parse_json_body
from rocketstore.broker.remoting.refusal import RequestRefused
from rocketstore.broker.remoting.server import Connection, Handler
from rocketstore.broker.send_back import DEFAULT_MAX_RECONSUME_TIMES, retry_topic, send_back
from rocketstore.codec.config_json import TopicConfig
from rocketstore.codec.json_body import json_body
from rocketstore.errors import InvalidArgumentError, StoreConfigError
from rocketstore.store import MessageStore

__all__ = [
    "ConsumerProcessor",
    "commit_offset",
    "consumer_groups",
    "ensure_topic",
    "queue_locks",
]

log = logging.getLogger("rocketstore.broker.remoting")

PERM_READ_WRITE: Final = 0x6
# senders older than V3_4_9 do not send maxReconsumeTimes (RocketMQ's broker ignores it from them)
_VERSION_WITH_MAX_RECONSUME: Final = 121
_GROUPS_KEY: Final = "consumer_groups"
_LOCKS_KEY: Final = "queue_locks"
# what one client makes the broker keep is bounded (members per group: by the connection limit)
MAX_GROUPS_PER_HEARTBEAT: Final = 1024
MAX_SUBSCRIPTIONS: Final = 1024  # per group
# groups one connection is a member of, and their subscriptions summed. No cap on groups or
# subscriptions in all, which one client with many connections could fill to keep the others
# out: these times the connections' limit (``max_connections``) bound the whole.
MAX_GROUPS_PER_CONNECTION: Final = 1024
MAX_SUBSCRIPTIONS_PER_CONNECTION: Final = 4096
# memberships whose heartbeat one ACL account signed
MAX_MEMBERSHIPS_PER_ACCOUNT: Final = 8192
# queues one LOCK_BATCH_MQ / UNLOCK_BATCH_MQ names
MAX_QUEUES_PER_LOCK_REQUEST: Final = 8192
# members silent for 120 s are looked for at most this often (each look visits every group)
_EXPIRE_EVERY_MS: Final = 1000
SQL92_UNSUPPORTED: Final = "The broker does not support consumer to filter message by SQL92"


def consumer_groups(ctx: RemotingContext) -> ConsumerGroups:
    """The context's consumer registry (the processors share it)."""
    groups = ctx.extensions.get(_GROUPS_KEY)
    if groups is None:
        groups = ctx.extensions[_GROUPS_KEY] = ConsumerGroups()
    assert isinstance(groups, ConsumerGroups)
    return groups


def queue_locks(ctx: RemotingContext) -> QueueLocks:
    locks = ctx.extensions.get(_LOCKS_KEY)
    if locks is None:
        locks = ctx.extensions[_LOCKS_KEY] = QueueLocks()
    assert isinstance(locks, QueueLocks)
    return locks


async def ensure_topic(ctx: RemotingContext, topic: str, queues: int = 1) -> TopicConfig:
    """``topic``'s configuration, creating it (``queues`` queues, read-write) when it is unknown:
    retry and DLQ topics come to exist this way, routable at once."""
    config = ctx.store.topic_config(topic)
    if config is None:
        config = await ctx.run(lambda: ctx.store.create_topic(topic, queues, perm=PERM_READ_WRITE))
        log.info("created topic %s (%d queue%s)", topic, queues, "s" if queues > 1 else "")
    return config


def commit_offset(store: MessageStore, group: str, topic: str, queue_id: int, offset: int) -> None:
    """Store a client's offset commit, or refuse it (``consumer_offsets.check_commit``): an
    unknown topic TOPIC_NOT_EXIST, anything else SYSTEM_ERROR, the remark naming the value."""
    try:
        check_commit(store, topic, queue_id, offset)
        store.commit_offset(group, topic, queue_id, offset)
    except CommitRefusedError as exc:
        code = (
            ResponseCode.TOPIC_NOT_EXIST
            if exc.reason is CommitRefusal.NO_TOPIC
            else ResponseCode.SYSTEM_ERROR
        )
        raise RequestRefused(code, str(exc)) from None
    except (StoreConfigError, InvalidArgumentError) as exc:  # the group's name, a read-only store
        raise RequestRefused(ResponseCode.SYSTEM_ERROR, str(exc)) from None


def _now_ms() -> int:
    return int(time.time() * 1000)


def _queue_key(mq: Any) -> tuple[str, str, int]:
    """A MessageQueue of a lock request as (topic, brokerName, queueId)."""
    if not isinstance(mq, dict):
        raise RequestRefused(ResponseCode.SYSTEM_ERROR, f"a message queue is not a JSON object: {mq!r}")
    try:
        return str(mq["topic"]), str(mq.get("brokerName", "")), int(mq["queueId"])
    except (KeyError, TypeError, ValueError, OverflowError):  # (OverflowError: queueId Infinity)
        raise RequestRefused(
            ResponseCode.SYSTEM_ERROR, f"a message queue lacks topic or queueId: {mq!r}"
        ) from None


def _queue_json(key: tuple[str, str, int]) -> dict[str, Any]:
    return {"brokerName": key[1], "queueId": key[2], "topic": key[0]}


def _subscriptions(data: dict[str, Any]) -> list[Subscription]:
    subs = []
    listed = data.get("subscriptionDataSet") or []
    if not isinstance(listed, list) or len(listed) > MAX_SUBSCRIPTIONS:
        raise RequestRefused(
            ResponseCode.SYSTEM_ERROR,
            f"subscriptionDataSet is not a list of at most {MAX_SUBSCRIPTIONS} topics",
        )
    for sd in listed:
        if not isinstance(sd, dict) or not isinstance(sd.get("topic"), str):
            raise RequestRefused(ResponseCode.SYSTEM_ERROR, f"a subscription has no topic: {sd!r}")
        try:
            version = int(sd.get("subVersion") or 0)
        except (TypeError, ValueError, OverflowError):
            version = 0
        expression, expression_type = sd.get("subString"), sd.get("expressionType")
        for name, value in (("subString", expression), ("expressionType", expression_type)):
            if value is not None and not isinstance(value, str):
                raise RequestRefused(
                    ResponseCode.SYSTEM_ERROR,
                    f"the subscription of {sd['topic']!r}: {name} is a {type(value).__name__}, not a string",
                )
        subs.append(Subscription.parse(sd["topic"], expression, expression_type, version))
    return subs


class ConsumerProcessor:
    def __init__(self, ctx: RemotingContext) -> None:
        self.ctx = ctx
        self.groups = consumer_groups(ctx)
        self.locks = queue_locks(ctx)
        ctx.heartbeat_hooks.append(self._on_heartbeat)
        ctx.unregister_hooks.append(self._on_unregister)
        self._notices: set[asyncio.Task[None]] = set()
        self._expired_ms = 0

    def handlers(self) -> dict[int, Handler]:
        return {
            RequestCode.GET_CONSUMER_LIST_BY_GROUP: self.consumer_list,
            RequestCode.QUERY_CONSUMER_OFFSET: self.query_offset,
            RequestCode.UPDATE_CONSUMER_OFFSET: self.update_offset,
            RequestCode.LOCK_BATCH_MQ: self.lock,
            RequestCode.UNLOCK_BATCH_MQ: self.unlock,
            RequestCode.CHECK_CLIENT_CONFIG: self.check_client_config,
            RequestCode.CONSUMER_SEND_MSG_BACK: self.send_back,
        }

    # --- membership (HeartbeatProcessor answers HEART_BEAT and UNREGISTER_CLIENT; these are its hooks)
    async def _on_heartbeat(self, data: dict[str, Any], conn: Connection) -> None:
        client_id = str(data.get("clientID"))
        language = str(conn.attributes.get("language", "JAVA"))
        version = int(conn.attributes.get("version", 0))
        account = conn.attributes.get(HEARTBEAT_ACCOUNT)
        now = _now_ms()
        changed = set(self._expire(now))
        consumers = data.get("consumerDataSet") or []
        if not isinstance(consumers, list) or len(consumers) > MAX_GROUPS_PER_HEARTBEAT:
            raise RequestRefused(
                ResponseCode.SYSTEM_ERROR,
                f"HeartbeatData: consumerDataSet is not a list of at most {MAX_GROUPS_PER_HEARTBEAT} groups",
            )
        listed: list[tuple[str, dict[str, Any], list[Subscription]]] = []
        for cd in consumers:
            if not isinstance(cd, dict) or not isinstance(cd.get("groupName"), str) or not cd["groupName"]:
                raise RequestRefused(ResponseCode.SYSTEM_ERROR, f"a consumer data has no groupName: {cd!r}")
            listed.append((check_group_name(cd["groupName"]), cd, _subscriptions(cd)))
        self._check_bounds(conn, account, listed)
        for group, cd, subscriptions in listed:
            await ensure_topic(self.ctx, retry_topic(group))
            if conn.closed:
                break  # while the topic was made: nothing is kept for a closed connection
            if _GROUPS_KEY not in conn.attributes:
                conn.attributes[_GROUPS_KEY] = True
                conn.when_closed(self._closed)
            member = ConsumerMember(client_id, conn, conn.peer, language, version, now, account)
            if self.groups.register(
                group,
                member,
                subscriptions,
                consume_type=str(cd.get("consumeType") or "CONSUME_PASSIVELY"),
                message_model=str(cd.get("messageModel") or "CLUSTERING"),
                consume_from_where=str(cd.get("consumeFromWhere") or "CONSUME_FROM_LAST_OFFSET"),
            ):
                changed.add(group)
        await self._notify(changed)

    def _check_bounds(
        self,
        conn: Connection,
        account: str | None,
        listed: list[tuple[str, dict[str, Any], list[Subscription]]],
    ) -> None:
        """Refuse a heartbeat that would take ``conn`` (or ``account``) past its bounds, before
        anything of it is registered."""
        groups = self.groups
        mine = groups.groups_of(conn)
        joining = {group for group, _, _ in listed} - mine
        if len(mine) + len(joining) > MAX_GROUPS_PER_CONNECTION:
            raise RequestRefused(
                ResponseCode.SYSTEM_ERROR,
                f"this connection would be in {len(mine) + len(joining)} consumer groups: "
                f"at most {MAX_GROUPS_PER_CONNECTION}",
            )
        if (
            account is not None
            and groups.memberships_of_account(account) + len(joining) > MAX_MEMBERSHIPS_PER_ACCOUNT
        ):
            raise RequestRefused(
                ResponseCode.SYSTEM_ERROR,
                f"access key {account} would hold more than {MAX_MEMBERSHIPS_PER_ACCOUNT} "
                "consumer group memberships",
            )
        renewed = {group for group, _, _ in listed}
        held = {g: len(info.subscriptions) for g in mine if (info := groups.get(g)) is not None}
        new = sum(len(subs) for _, _, subs in listed)
        kept = sum(n for g, n in held.items() if g not in renewed)
        if kept + new > MAX_SUBSCRIPTIONS_PER_CONNECTION:
            raise RequestRefused(
                ResponseCode.SYSTEM_ERROR,
                f"the groups of this connection would have {kept + new} subscriptions: "
                f"at most {MAX_SUBSCRIPTIONS_PER_CONNECTION}",
            )

    def _expire(self, now: int) -> list[str]:
        if now - self._expired_ms < _EXPIRE_EVERY_MS:
            return []
        self._expired_ms = now
        return self.groups.expire(now)

    async def _on_unregister(self, ext: dict[str, str], conn: Connection) -> None:
        group = ext.get("consumerGroup")
        if group and self.groups.unregister(group, text(ext, "clientID")):
            await self._notify([group])

    def _closed(self, conn: Connection) -> None:
        changed = self.groups.forget_connection(conn)
        if changed:
            # close callbacks are synchronous: the notices go out from a task of their own
            task = asyncio.get_running_loop().create_task(self._notify(changed))
            self._notices.add(task)
            task.add_done_callback(self._notices.discard)

    async def _notify(self, groups: Iterable[str]) -> None:
        """NOTIFY_CONSUMER_IDS_CHANGED (oneway) to every member of each group."""
        for group in groups:
            info = self.groups.get(group)
            if info is None:
                continue
            for member in list(info.members.values()):
                conn = member.connection
                assert isinstance(conn, Connection)
                await conn.oneway(
                    RemotingCommand(
                        code=RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, ext_fields={"consumerGroup": group}
                    )
                )

    def _online(self, group: str) -> ConsumerGroup | None:
        self._expire(_now_ms())
        return self.groups.get(group)

    async def consumer_list(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        group = text(cmd.ext_fields, "consumerGroup")
        info = self._online(group)
        if info is None or not info.members:
            raise RequestRefused(ResponseCode.SYSTEM_ERROR, f"no consumer for this group, {group}")
        return cmd.response(body=json_body({"consumerIdList": info.client_ids()}))

    # --- offsets ------------------------------------------------------------------------------
    async def query_offset(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        ext = cmd.ext_fields
        group, topic = check_group_name(text(ext, "consumerGroup")), text(ext, "topic")
        queue_id = number(ext, "queueId", java_int=True)
        offset = await self.ctx.run(resume_offset, self.ctx.store, group, topic, queue_id)
        if offset is None:
            raise RequestRefused(
                ResponseCode.QUERY_NOT_FOUND,
                "Not found, V3_0_6_SNAPSHOT maybe this group consumer boot first",
            )
        return cmd.response(ext_fields=to_ext(offset=offset))

    async def update_offset(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        ext = cmd.ext_fields
        group, topic = check_group_name(text(ext, "consumerGroup")), text(ext, "topic")
        queue_id, offset = number(ext, "queueId", java_int=True), number(ext, "commitOffset")
        commit_offset(self.ctx.store, group, topic, queue_id, offset)
        return cmd.response()

    # --- orderly consumers --------------------------------------------------------------------
    def _lock_request(self, cmd: RemotingCommand, what: str) -> tuple[str, str, list[tuple[str, str, int]]]:
        body = parse_json_body(cmd, what)
        group, client_id = body.get("consumerGroup"), body.get("clientId")
        if not isinstance(group, str) or not isinstance(client_id, str):
            raise RequestRefused(ResponseCode.SYSTEM_ERROR, f"{what} needs consumerGroup and clientId")
        check_group_name(group)
        listed = body.get("mqSet") or ()
        if not isinstance(listed, list) or len(listed) > MAX_QUEUES_PER_LOCK_REQUEST:
            raise RequestRefused(
                ResponseCode.SYSTEM_ERROR,
                f"{what}: mqSet is not a list of at most {MAX_QUEUES_PER_LOCK_REQUEST} queues",
            )
        return group, client_id, [_queue_key(mq) for mq in listed]

    def _existing(self, queues: list[tuple[str, str, int]]) -> list[tuple[str, str, int]]:
        """The queues of this broker (its ``brokerName``) of topics it has, with queue ids in
        range (a consumer reads ``readQueueNums`` queues); the others cannot be locked."""
        store = self.ctx.store
        broker_name = self.ctx.config.broker_name
        configs: dict[str, TopicConfig | None] = {}
        out = []
        for key in queues:
            if key[1] != broker_name:
                continue
            if key[0] not in configs:
                configs[key[0]] = store.topic_config(key[0])
            config = configs[key[0]]
            if config is not None and 0 <= key[2] < config.read_queues:
                out.append(key)
        return out

    def _check_lock_request(
        self,
        cmd: RemotingCommand,
        conn: Connection,
        group: str,
        client_id: str,
        queues: list[tuple[str, str, int]],
    ) -> None:
        """The group and the queues' topics are the account's, the client id this connection's."""
        if self.ctx.acl is not None:
            self.ctx.acl.require(cmd, {q[0] for q in queues}, (group,))
        self.ctx.claim_client_id(client_id, cmd, conn)

    async def lock(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        group, client_id, queues = self._lock_request(cmd, "LockBatchRequestBody")
        self._check_lock_request(cmd, conn, group, client_id, queues)
        held = self.locks.lock(group, self._existing(queues), client_id, _now_ms())
        return cmd.response(body=json_body({"lockOKMQSet": [_queue_json(q) for q in held]}))  # type: ignore[arg-type]

    async def unlock(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        group, client_id, queues = self._lock_request(cmd, "UnlockBatchRequestBody")
        self._check_lock_request(cmd, conn, group, client_id, queues)
        self.locks.unlock(group, queues, client_id)
        return cmd.response()

    async def check_client_config(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        body = parse_json_body(cmd, "CheckClientRequestBody")
        sub = body.get("subscriptionData")
        if self.ctx.acl is not None:
            topic = sub.get("topic") if isinstance(sub, dict) else None
            self.ctx.acl.require(
                cmd, (topic,) if isinstance(topic, str) else (), (str(body.get("group", "")),)
            )
        client_id = body.get("clientId")
        if isinstance(client_id, str) and client_id:
            self.ctx.claim_client_id(client_id, cmd, conn)
        kind = str(sub.get("expressionType") or "TAG").upper() if isinstance(sub, dict) else "TAG"
        if kind != "TAG":
            raise RequestRefused(ResponseCode.SYSTEM_ERROR, SQL92_UNSUPPORTED)
        return cmd.response()

    # --- retries ------------------------------------------------------------------------------
    async def send_back(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        ext = cmd.ext_fields
        offset, group = number(ext, "offset"), text(ext, "group")
        delay_level = number(ext, "delayLevel")
        check_group_name(group)
        max_times = optional_number(ext, "maxReconsumeTimes")
        if max_times is None or cmd.version < _VERSION_WITH_MAX_RECONSUME:
            max_times = DEFAULT_MAX_RECONSUME_TIMES
        msg = await self.ctx.run(self.ctx.store.look_message_by_offset, offset)
        if msg is None:
            raise RequestRefused(ResponseCode.SYSTEM_ERROR, f"look message by offset failed, {offset}")
        if self.ctx.acl is not None:
            self.ctx.acl.require_record(cmd, msg)
        copy = await self.ctx.run(send_back, msg, group, delay_level, max_times)
        await ensure_topic(self.ctx, copy.message.topic)
        [outcome] = await self.ctx.system_puts.put([copy.message])
        if isinstance(outcome, BaseException):
            raise RequestRefused(ResponseCode.SYSTEM_ERROR, f"send back failed: {outcome}")
        if not outcome.ok:
            raise RequestRefused(ResponseCode.SYSTEM_ERROR, outcome.status.value)
        if copy.dead_letter:
            log.info("message %s of group %s went to %s", msg.msg_id, group, copy.message.topic)
        return cmd.response()
