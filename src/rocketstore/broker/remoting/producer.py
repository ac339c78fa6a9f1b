"""Producers' requests (REMOTING.md §5): SEND_MESSAGE, SEND_MESSAGE_V2, SEND_BATCH_MESSAGE and
END_TRANSACTION, and the broker's CHECK_TRANSACTION_STATE to a producer for a transaction left
open.

A send is checked as RocketMQ's ``SendMessageProcessor`` checks it (topic name, system topics,
queue id, auto-creation from the default topic ``c`` with ``min(d, 8)`` queues, size), stored
through the broker's group commit (a batch is one all-or-nothing group of one append), and
answered only when the store's flush policy acknowledged it: SUCCESS, or FLUSH_DISK_TIMEOUT /
FLUSH_SLAVE_TIMEOUT / SLAVE_NOT_AVAILABLE (stored, with its offsets) as RocketMQ answers them.

Stored as RocketMQ stores it: the body as sent (a compressed body keeps its sysflag bits), the
record's born host is the connection's peer, ``WAIT`` is dropped from single messages,
``CLUSTER`` is added, ``DELAY`` delays it, a ``%RETRY%`` message past its max reconsume times
goes to ``%DLQ%<group>``. A transactional message (sysflag PREPARED, ``TRAN_MSG``) is stored as
a half (``transactions.py``); END_TRANSACTION finds it by its commitlog offset.
"""

from __future__ import annotations

import functools
import logging
import random
import time
from dataclasses import dataclass
from typing import Any, Final

from rocketstore.broker.group_commit import PutOutcome
from rocketstore.broker.remoting.broker_topics import (
    DEFAULT_TOPIC,
    PERM_INHERIT,
    broker_host,
    broker_topic_configs,
    default_topic_config,
)
from rocketstore.broker.remoting.codes import STORED_CODES, RequestCode, ResponseCode
from rocketstore.broker.remoting.command import RemotingCommand
from rocketstore.broker.remoting.context import RemotingContext
from rocketstore.broker.remoting.headers import SendMessageHeader, flag, number, text
from rocketstore.broker.remoting.refusal import RequestRefused
from rocketstore.broker.remoting.server import Connection, Handler
from rocketstore.broker.send_check import batch_refusal, messages_refusal
from rocketstore.broker.transactions import (
    PROPERTY_PRODUCER_GROUP,
    PROPERTY_TRANSACTION,
    end_transaction,
    half_message,
    put_halves,
)
from rocketstore.codec.commitlog_record import (
    SYSFLAG_CONTENT,
    SYSFLAG_TX_MASK,
    TX_COMMIT,
    TX_PREPARED,
    TX_ROLLBACK,
)
from rocketstore.codec.config_json import PERM_READ, PERM_WRITE, TopicConfig
from rocketstore.codec.message_batch import EncodedBatch
from rocketstore.codec.properties import decode_properties
from rocketstore.errors import InvalidMessageError, RequestRefusedError, StoreClosedError
from rocketstore.message import (
    PROPERTY_DELAY,
    PROPERTY_KEYS,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_KEY,
    PROPERTY_WAIT,
    TOPIC_PATTERN,
    Message,
    split_keys,
)
from rocketstore.results import PutBatchResult, PutMessageResult, PutStatus
from rocketstore.system_topics import sending_forbidden

__all__ = [
    "DLQ_PREFIX",
    "PROPERTY_CLUSTER",
    "RETRY_PREFIX",
    "ProducerProcessor",
    "put_status_code",
    "refusal_of",
]

log = logging.getLogger("rocketstore.broker.remoting")

RETRY_PREFIX: Final = "%RETRY%"
DLQ_PREFIX: Final = "%DLQ%"
PROPERTY_CLUSTER: Final = "CLUSTER"
# RocketMQ's subscription group default retryMaxTimes
DEFAULT_MAX_RECONSUME_TIMES: Final = 16
_RESPONSE_EXTRAS: Final = {"MSG_REGION": "DefaultRegion", "TRACE_ON": "true"}
# stored with the message: the transaction type is set by the path taken, hosts by the store
_SENT_SYSFLAG: Final = SYSFLAG_CONTENT | SYSFLAG_TX_MASK
_MAX_SENDABLE_CACHED: Final = 4096

_PUT_CODES: Final = {
    PutStatus.PUT_OK: ResponseCode.SUCCESS,
    PutStatus.FLUSH_DISK_TIMEOUT: ResponseCode.FLUSH_DISK_TIMEOUT,
    PutStatus.FLUSH_SLAVE_TIMEOUT: ResponseCode.FLUSH_SLAVE_TIMEOUT,
    PutStatus.SLAVE_NOT_AVAILABLE: ResponseCode.SLAVE_NOT_AVAILABLE,
    PutStatus.MESSAGE_ILLEGAL: ResponseCode.MESSAGE_ILLEGAL,
    PutStatus.MESSAGE_SIZE_EXCEEDED: ResponseCode.MESSAGE_ILLEGAL,
    PutStatus.PROPERTIES_SIZE_EXCEEDED: ResponseCode.MESSAGE_ILLEGAL,
    PutStatus.SERVICE_NOT_AVAILABLE: ResponseCode.SERVICE_NOT_AVAILABLE,
    PutStatus.DISK_FULL: ResponseCode.SERVICE_NOT_AVAILABLE,
    PutStatus.OS_PAGECACHE_BUSY: ResponseCode.SYSTEM_BUSY,
}


def put_status_code(status: PutStatus) -> ResponseCode:
    """The response code RocketMQ's broker answers a put's status with."""
    return _PUT_CODES.get(status, ResponseCode.SYSTEM_ERROR)


def refusal_of(outcome: PutOutcome) -> RequestRefused:
    """Why a put that stored nothing failed, as the client is told."""
    if isinstance(outcome, PutMessageResult):
        code = put_status_code(outcome.status)
        if outcome.status is PutStatus.OS_PAGECACHE_BUSY:
            return RequestRefused(code, "[PC_SYNCHRONIZED]broker busy, start flow control for a while")
        return RequestRefused(code, f"the store answered {outcome.status.name}")
    if isinstance(outcome, InvalidMessageError):
        return RequestRefused(ResponseCode.MESSAGE_ILLEGAL, str(outcome))
    if isinstance(outcome, StoreClosedError):
        return RequestRefused(ResponseCode.SERVICE_NOT_AVAILABLE, "the store is closing")
    return RequestRefused(ResponseCode.SYSTEM_ERROR, f"{type(outcome).__name__}: {outcome}")


@dataclass(slots=True)
class _Target:
    """Where a send goes: the topic (after a retry's DLQ redirection) and the queue."""

    topic: str
    queue_id: int


class ProducerProcessor:
    def __init__(self, ctx: RemotingContext) -> None:
        self.ctx = ctx
        # the sends counter's children by (topic, kind, code): labels() costs a lock per call
        self._counted: dict[tuple[str, str, str], Any] = {}
        # topic names that passed _check_topic (a fixed rule of the name): checked once
        self._sendable: set[str] = set()

    def count(self, topic: str, kind: str, code: ResponseCode, n: int = 1) -> None:
        key = (topic, kind, code.name)
        child = self._counted.get(key)
        if child is None:
            child = self._counted[key] = self.ctx.metrics.sends.labels(*key)
        child.inc(n)

    def handlers(self) -> dict[int, Handler]:
        return {
            RequestCode.SEND_MESSAGE: self.send,
            RequestCode.SEND_MESSAGE_V2: self.send,
            RequestCode.SEND_BATCH_MESSAGE: self.send,
            RequestCode.END_TRANSACTION: self.end_transaction,
        }

    # --- topics -------------------------------------------------------------------------------
    def _new_topic(self, topic: str, default_topic: str, queue_nums: int) -> TopicConfig:
        """The configuration ``topic`` (which does not exist) gets when the send creates it, as
        RocketMQ auto-creates it (SendMessageProcessor.msgCheck); TOPIC_NOT_EXIST when it would
        not. Nothing is created here: a send is checked whole first (``send_check``)."""
        perm = PERM_READ | PERM_WRITE
        routed = broker_topic_configs(self.ctx).get(topic) if topic != DEFAULT_TOPIC else None
        if routed is not None:  # one of the broker's own topics: as its route says
            queues = routed.write_queues
            return TopicConfig(topic, queues, queues, routed.perm & ~PERM_INHERIT)
        if topic.startswith(RETRY_PREFIX):
            return TopicConfig(topic, 1, 1, perm)
        if default_topic == DEFAULT_TOPIC and self.ctx.config.auto_create_topic:
            queues = max(1, min(queue_nums, default_topic_config(self.ctx).write_queues))
            return TopicConfig(topic, queues, queues, perm)
        default = self.ctx.store.topic_config(default_topic)
        if default is not None and default.perm & PERM_INHERIT:
            queues = max(1, min(queue_nums, default.write_queues))
            return TopicConfig(topic, queues, queues, default.perm & ~PERM_INHERIT)
        raise RequestRefused(
            ResponseCode.TOPIC_NOT_EXIST,
            f"topic[{topic}] not exist, apply first please! "
            "(auto-creation is off, or the default topic does not allow it)",
        )

    async def _create(self, configs: list[TopicConfig], default_topic: str) -> None:
        """Create the topics a checked send goes to (its topic, a dead-letter topic)."""
        store = self.ctx.store
        for c in configs:
            if store.topic_config(c.topic) is not None:
                continue  # a concurrent send created it
            await self.ctx.run(lambda c=c: store.create_topic(c.topic, c.write_queues, perm=c.perm))
            if c.topic.startswith(DLQ_PREFIX):
                log.info("topic %s created (dead letters)", c.topic)
            else:
                log.info(
                    "topic %s created with %d queues (sent to, default topic %s)",
                    c.topic,
                    c.write_queues,
                    default_topic,
                )

    def bulk_topic(self, topic: str) -> TopicConfig | None:
        """The configuration of ``topic`` when a send may be stored to it without this
        processor's judgement (``bulk_sends``): it exists, takes writes, and its name may be
        sent to; None when ``send`` must judge (create it, or refuse)."""
        try:
            self._check_topic(topic)
        except RequestRefused:
            return None
        config = self.ctx.store.topic_config(topic)
        if config is None or not config.perm & PERM_WRITE:
            return None
        if config.order and not self.ctx.config.broker_permission & PERM_WRITE:
            return None
        return config

    def _check_topic(self, topic: str) -> None:
        if topic in self._sendable:
            return
        if not TOPIC_PATTERN.fullmatch(topic):
            raise RequestRefused(
                ResponseCode.SYSTEM_ERROR,
                f"the specified topic[{topic}] is not valid: 1..127 characters of [%|a-zA-Z0-9_-]",
            )
        if sending_forbidden(topic):
            raise RequestRefused(
                ResponseCode.NO_PERMISSION, f"Sending message to topic[{topic}] is forbidden."
            )
        if len(self._sendable) < _MAX_SENDABLE_CACHED:
            self._sendable.add(topic)

    def _target(self, header: SendMessageHeader, version: int) -> tuple[_Target, list[TopicConfig]]:
        """Where the send goes, and the topics to create for it (once it is checked whole)."""
        topic = header.topic
        self._check_topic(topic)
        store = self.ctx.store
        new: list[TopicConfig] = []
        config = store.topic_config(topic)
        if config is None:
            config = self._new_topic(topic, header.default_topic, header.default_topic_queue_nums)
            new.append(config)
        if not config.perm & PERM_WRITE:
            raise RequestRefused(
                ResponseCode.NO_PERMISSION, f"the topic[{topic}] sending message is forbidden"
            )
        if config.order and not self.ctx.config.broker_permission & PERM_WRITE:
            # RocketMQ refuses only an order topic's sends (the others are routed elsewhere)
            raise RequestRefused(
                ResponseCode.NO_PERMISSION,
                f"the broker[{broker_host(self.ctx)}] sending message is forbidden",
            )
        queues = max(config.read_queues, config.write_queues)
        queue_id = header.queue_id
        if queue_id < 0:
            queue_id = random.randrange(max(1, config.write_queues))
        elif queue_id >= queues:
            raise RequestRefused(
                ResponseCode.SYSTEM_ERROR,
                f"request queueId[{queue_id}] is illegal, topic:{topic} queues:{queues} "
                f"producer:{header.producer_group}",
            )
        target = _Target(topic, queue_id)
        if topic.startswith(RETRY_PREFIX):
            # sender versions before 3.4.9 (121) send no maxReconsumeTimes
            limit = header.max_reconsume_times
            if limit is None or version < 121:
                limit = DEFAULT_MAX_RECONSUME_TIMES
            if header.reconsume_times >= limit:
                dlq = DLQ_PREFIX + topic[len(RETRY_PREFIX) :]
                if store.topic_config(dlq) is None:
                    new.append(TopicConfig(dlq, 1, 1, PERM_READ | PERM_WRITE))
                target = _Target(dlq, 0)
        return target, new

    # --- sending ------------------------------------------------------------------------------
    def _message(
        self,
        topic: str,
        queue_id: int,
        body: bytes | bytearray | memoryview,
        props: dict[str, str],
        header: SendMessageHeader,
        flag_value: int,
        born_host: str,
    ) -> Message:
        pop = props.pop
        tags = pop(PROPERTY_TAGS, None)
        keys_text = pop(PROPERTY_KEYS, None)
        uniq = pop(PROPERTY_UNIQ_KEY, None)
        delay_text = pop(PROPERTY_DELAY, None)
        delay = 0
        if delay_text is not None:
            try:
                delay = max(0, min(int(delay_text), self.ctx.store.config.max_delay_level))
            except ValueError:
                raise RequestRefused(
                    ResponseCode.MESSAGE_ILLEGAL, f"DELAY {delay_text!r} is not a level"
                ) from None
        props[PROPERTY_CLUSTER] = self.ctx.config.cluster_name
        # positional: the fields in Message's order (topic, body, tags, keys, properties,
        # queue_id, flag, delay_level, uniq_key, born_timestamp, born_host, sys_flag,
        # prepared_transaction_offset, reconsume_times)
        return Message(
            topic,
            body if type(body) is bytes else bytes(body),
            tags,
            split_keys(keys_text),
            props,
            queue_id,
            flag_value,
            delay,
            uniq,
            header.born_timestamp,
            born_host,
            header.sys_flag & SYSFLAG_CONTENT,
            0,
            header.reconsume_times,
        )

    async def send(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        header = SendMessageHeader.from_ext(cmd.ext_fields, v2=cmd.code != RequestCode.SEND_MESSAGE)
        max_size = self.ctx.config.max_body_size
        if len(cmd.body) > max_size:
            raise RequestRefused(
                ResponseCode.MESSAGE_ILLEGAL, f"the message body size {len(cmd.body)} exceeds {max_size}"
            )
        target, new_topics = self._target(header, cmd.version)
        props = decode_properties(header.properties)
        if header.batch:
            return await self._send_batch(cmd, conn, header, target, props, new_topics)
        props.pop(PROPERTY_WAIT, None)
        transactional = (header.sys_flag & SYSFLAG_TX_MASK) == TX_PREPARED and props.get(
            PROPERTY_TRANSACTION
        ) == "true"
        if transactional:
            props.pop(PROPERTY_DELAY, None)
            if self.ctx.acl is not None:  # the group its checks go to
                self.ctx.acl.require(cmd, groups=(props.get(PROPERTY_PRODUCER_GROUP, ""),))
        msg = self._message(target.topic, target.queue_id, cmd.body, props, header, header.flag, conn.peer)
        if target.topic.startswith(DLQ_PREFIX):
            msg.delay_level = 0
        if transactional:
            msg = half_message(msg, target.queue_id)
        else:
            msg.sys_flag &= ~SYSFLAG_TX_MASK
        if new_topics:
            checked = functools.partial(messages_refusal, internal=transactional)
            refused = await self.ctx.run(checked, self.ctx.store.config, [msg])
            if refused is not None:
                raise refusal_of(refused)
            await self._create(new_topics, header.default_topic)
        started = time.monotonic()  # the put's latency: a new topic's check and creation not in it
        if transactional:
            (outcome,) = await put_halves(self.ctx.transactions, self.ctx.system_puts, [msg])
        else:
            (outcome,) = await self.ctx.sends.put([msg])
        stats = self.ctx.metrics.stats
        if not isinstance(outcome, PutMessageResult) or outcome.physical_offset < 0:
            stats.count_put_failure()
            raise refusal_of(outcome)
        code = put_status_code(outcome.status)
        if code not in STORED_CODES:
            stats.count_put_failure()
            raise refusal_of(outcome)
        self.count(target.topic, "REMOTING", code)
        stats.count_put(target.topic, 1, outcome.wrote_bytes, int((time.monotonic() - started) * 1000))
        return cmd.response(
            code,
            None if code == ResponseCode.SUCCESS else f"stored, but {outcome.status.name}",
            ext_fields={
                "msgId": outcome.msg_id or "",
                "queueId": str(target.queue_id),
                "queueOffset": str(outcome.queue_offset),
                **_RESPONSE_EXTRAS,
            },
        )

    async def _send_batch(
        self,
        cmd: RemotingCommand,
        conn: Connection,
        header: SendMessageHeader,
        target: _Target,
        batch_props: dict[str, str],
        new_topics: list[TopicConfig],
    ) -> RemotingCommand:
        if header.sys_flag & SYSFLAG_TX_MASK:
            raise RequestRefused(ResponseCode.MESSAGE_ILLEGAL, "batch request does not support transaction")
        batch_props[PROPERTY_CLUSTER] = self.ctx.config.cluster_name
        batch = EncodedBatch(
            target.topic,
            target.queue_id,
            bytes(cmd.body),
            conn.peer,
            header.born_timestamp,
            batch_props,
            header.sys_flag & SYSFLAG_CONTENT,
            header.reconsume_times,
        )
        if new_topics:
            refused = await self.ctx.run(batch_refusal, self.ctx.store.config, batch)
            if refused is not None:
                raise refusal_of(refused)
            await self._create(new_topics, header.default_topic)
        started = time.monotonic()
        outcome = await self.ctx.batch_sends.put(batch)
        stats = self.ctx.metrics.stats
        if not isinstance(outcome, PutBatchResult) or outcome.physical_offsets[0] < 0:
            stats.count_put_failure()
            raise refusal_of(outcome[0] if isinstance(outcome, PutBatchResult) else outcome)
        code = put_status_code(outcome.status)
        if code not in STORED_CODES:
            stats.count_put_failure()
            raise refusal_of(outcome[0])
        # offset message ids, as PutMessageResult.msg_id writes each
        prefix = outcome.id_prefix
        ids = ",".join([f"{prefix}{offset:016X}" for offset in outcome.physical_offsets.tolist()])
        self.count(target.topic, "REMOTING_BATCH", code, len(outcome))
        elapsed_ms = int((time.monotonic() - started) * 1000)
        stats.count_put(target.topic, len(outcome), int(outcome.sizes.sum()), elapsed_ms)
        return cmd.response(
            code,
            None if code == ResponseCode.SUCCESS else f"stored, but {outcome.status.name}",
            ext_fields={
                "msgId": ids,
                "queueId": str(target.queue_id),
                "queueOffset": str(int(outcome.queue_offsets[0])),
                **_RESPONSE_EXTRAS,
            },
        )

    # --- transactions ------------------------------------------------------------------------
    async def end_transaction(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        ext = cmd.ext_fields
        group = text(ext, "producerGroup")
        queue_offset = number(ext, "tranStateTableOffset")
        offset = number(ext, "commitLogOffset")
        kind = number(ext, "commitOrRollback")
        from_check = flag(ext, "fromTransactionCheck")
        if kind not in (TX_COMMIT, TX_ROLLBACK):
            if kind != 0:
                raise RequestRefused(ResponseCode.SYSTEM_ERROR, f"commitOrRollback {kind} is not 0, 8 or 12")
            log.info(
                "transaction of %s at %d left unknown by its producer (%s)%s",
                group,
                offset,
                "check answer" if from_check else "end",
                f": {cmd.remark}" if cmd.remark else "",
            )
            return cmd.response()
        txlog = self.ctx.transactions
        try:
            half = await self.ctx.run(
                txlog.half_at,
                offset,
                queue_offset,
                group,
                text(ext, "msgId"),
                ext.get("transactionId") or None,
            )
            if self.ctx.acl is not None:  # (the group was checked with the header)
                self.ctx.acl.require_record(cmd, half)
            failed = await end_transaction(txlog, self.ctx.system_puts, half, kind == TX_COMMIT)
        except RequestRefusedError as exc:
            raise RequestRefused(ResponseCode.SYSTEM_ERROR, exc.message) from None
        if failed is not None:
            raise refusal_of(failed)
        self.ctx.metrics.transactions.labels(
            "COMMIT" if kind == TX_COMMIT else "ROLLBACK", "RECOVERY" if from_check else "REMOTING"
        ).inc()
        return cmd.response()
