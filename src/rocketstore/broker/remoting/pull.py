"""PULL_MESSAGE (REMOTING.md §6.3): the stored records of a queue from an offset, copied from the
commitlog as they lie there, filtered by the consumer's tags (hash code first, then the tag
itself, as RocketMQ's broker and client do between them), with long polling.

The filter is the request's own subscription when its sysFlag says so (lite pull, pull), else
the group's subscription from its heartbeats (push). A pull with the commit-offset flag stores
the group's offset for the queue first, as RocketMQ's broker does, even when the pull is then
parked.

Long polling: a pull that finds nothing new and allows suspension (sysFlag 0x2) is parked,
costing no thread and no polling, until the store's arrival signal reports messages in its
queue or its suspend time is over (at most the broker's ``long_polling_max_ms``, 20 s by default,
and never more than ``MAX_SUSPEND_S``, inside the client's 30 s timeout); then it is read again
and answered. At most ``max_suspended`` pulls are parked at once;
more are answered SYSTEM_BUSY, which the client retries a little later.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import Final

from rocketstore.broker.consumer_groups import Subscription
from rocketstore.broker.remoting.broker_topics import broker_host
from rocketstore.broker.remoting.codes import RequestCode, ResponseCode
from rocketstore.broker.remoting.command import RemotingCommand
from rocketstore.broker.remoting.consumers import SQL92_UNSUPPORTED, commit_offset, consumer_groups
from rocketstore.broker.remoting.context import RemotingContext
from rocketstore.broker.remoting.headers import PullHeader, number, optional_number, text, to_ext
from rocketstore.broker.remoting.heartbeat import check_group_name
from rocketstore.broker.remoting.refusal import RequestRefused
from rocketstore.broker.remoting.server import Connection, Handler
from rocketstore.broker.request_log import parked
from rocketstore.config import BrokerRole
from rocketstore.results import GetMessageResult, GetStatus

__all__ = ["MAX_SUSPEND_S", "PullArgs", "PullProcessor", "pull_processor", "pull_response", "response_code"]

log = logging.getLogger("rocketstore.broker.remoting")

FLAG_COMMIT_OFFSET: Final = 0x1
FLAG_SUSPEND: Final = 0x2
FLAG_SUBSCRIPTION: Final = 0x4
PERM_READ: Final = 0x4
# a parked pull is answered within this, whatever long_polling_max_ms says: the client gives up
# (and counts an error) after 30 s
MAX_SUSPEND_S: Final = 25.0
# RocketMQ's maxTransferCountOnMessageInMemory: the store bounds bytes as well
MAX_MESSAGES_PER_PULL: Final = 32
DEFAULT_MAX_SUSPENDED: Final = 10_000
_PROCESSOR_KEY: Final = "pull_processor"

_CODES: Final = {
    GetStatus.FOUND: ResponseCode.SUCCESS,
    GetStatus.MESSAGE_WAS_REMOVING: ResponseCode.PULL_RETRY_IMMEDIATELY,
    GetStatus.NO_MATCHED_MESSAGE: ResponseCode.PULL_RETRY_IMMEDIATELY,
    GetStatus.OFFSET_FOUND_NULL: ResponseCode.PULL_NOT_FOUND,
    GetStatus.OFFSET_OVERFLOW_ONE: ResponseCode.PULL_NOT_FOUND,
    GetStatus.OFFSET_OVERFLOW_BADLY: ResponseCode.PULL_OFFSET_MOVED,
    GetStatus.OFFSET_TOO_SMALL: ResponseCode.PULL_OFFSET_MOVED,
}


def response_code(status: GetStatus, offset: int) -> ResponseCode:
    """RocketMQ's PullMessageProcessor mapping of a read's status; a queue that has no message
    (or no file yet) is NOT_FOUND at offset 0 and OFFSET_MOVED elsewhere."""
    code = _CODES.get(status)
    if code is not None:
        return code
    return ResponseCode.PULL_NOT_FOUND if offset == 0 else ResponseCode.PULL_OFFSET_MOVED


def pull_response(
    cmd: RemotingCommand,
    code: int,
    status: GetStatus,
    next_begin_offset: int,
    min_offset: int,
    max_offset: int,
    body: bytes | memoryview,
) -> RemotingCommand:
    """The answer to the pull ``cmd`` (``command.encode_pull_answers`` writes the same bytes):
    any code but SUCCESS carries the read's status as its remark and no body."""
    header = to_ext(
        suggestWhichBrokerId=0, nextBeginOffset=next_begin_offset, minOffset=min_offset, maxOffset=max_offset
    )
    if code != ResponseCode.SUCCESS:
        return cmd.response(code, remark=status.value, ext_fields=header)
    return cmd.response(ext_fields=header, body=body)


def pull_processor(ctx: RemotingContext) -> PullProcessor:
    """The context's pull processor: the handler's and the bulk path's (they share the count
    of parked pulls)."""
    processor = ctx.extensions.get(_PROCESSOR_KEY)
    if processor is None:
        processor = ctx.extensions[_PROCESSOR_KEY] = PullProcessor(ctx)
    assert isinstance(processor, PullProcessor)
    return processor


@dataclass(frozen=True, slots=True)
class PullArgs:
    """A pull request's header, checked (``PullProcessor.check``)."""

    group: str
    topic: str
    queue_id: int
    offset: int
    max_msgs: int
    tags: str | None
    suspends: bool  # it may park when it finds nothing (sysFlag 0x2) ...
    suspend_s: float  # ... for this long


class PullProcessor:
    def __init__(self, ctx: RemotingContext, max_suspended: int = DEFAULT_MAX_SUSPENDED) -> None:
        self.ctx = ctx
        self.groups = consumer_groups(ctx)
        self.max_suspended = max_suspended
        self.suspended = 0

    def handlers(self) -> dict[int, Handler]:
        return {RequestCode.PULL_MESSAGE: self.pull}

    def _subscription(
        self,
        group: str,
        topic: str,
        sys_flag: int,
        version: int,
        expression: str | None,
        expression_type: str | None,
    ) -> Subscription:
        if sys_flag & FLAG_SUBSCRIPTION:
            sub = Subscription.parse(topic, expression, expression_type, version)
        else:
            info = self.groups.get(group)
            if info is None:
                raise RequestRefused(
                    ResponseCode.SUBSCRIPTION_NOT_EXIST,
                    f"the consumer's group info not exist, group: {group}",
                )
            found = info.subscriptions.get(topic)
            if found is None:
                raise RequestRefused(
                    ResponseCode.SUBSCRIPTION_NOT_EXIST,
                    f"the consumer's subscription not exist, topic: {topic}",
                )
            if found.version < version:
                raise RequestRefused(
                    ResponseCode.SUBSCRIPTION_NOT_LATEST,
                    f"the consumer's subscription not latest, topic: {topic}",
                )
            sub = found
        if not sub.is_tag:
            raise RequestRefused(ResponseCode.SYSTEM_ERROR, SQL92_UNSUPPORTED)
        return sub

    async def _park(
        self, topic: str, queue_id: int, offset: int, timeout_s: float, mark: asyncio.Event
    ) -> None:
        """Return once ``topic``/``queue_id`` holds a message at or past ``offset``, or after
        ``timeout_s``. ``mark`` was taken before the read that found nothing; each look at the
        queue comes after a new mark, so no arrival between a look and the wait is missed."""
        if self.suspended >= self.max_suspended:
            raise RequestRefused(
                ResponseCode.SYSTEM_BUSY, f"[OVERLOAD] {self.max_suspended} pulls are suspended already"
            )
        loop = asyncio.get_running_loop()
        started = loop.time()
        deadline = started + timeout_s
        store, arrival = self.ctx.store, self.ctx.arrival
        self.suspended += 1
        try:
            while store.max_offset_in_queue(topic, queue_id) <= offset:
                remaining = deadline - loop.time()
                if remaining <= 0 or not await arrival.wait(remaining, mark):
                    return
                mark = arrival.mark()
        finally:
            self.suspended -= 1
            parked(loop.time() - started)  # waiting on purpose: not a slow request

    def check(self, cmd: RemotingCommand, conn: Connection, header: PullHeader | None = None) -> PullArgs:
        """The pull's header read (from ``cmd``'s extFields, or ``header`` when the compiled
        reader read it) and judged, and its commit-offset flag's offset stored, as RocketMQ's
        broker does before it reads; a refusal is raised as RequestRefused."""
        ext = cmd.ext_fields
        if header is None:
            group, topic = check_group_name(text(ext, "consumerGroup")), text(ext, "topic")
            queue_id, offset = number(ext, "queueId", java_int=True), number(ext, "queueOffset")
            max_msgs = min(max(number(ext, "maxMsgNums"), 1), MAX_MESSAGES_PER_PULL)
            sys_flag = number(ext, "sysFlag")
        else:
            group, topic = check_group_name(header.group), header.topic
            queue_id, offset, sys_flag = header.queue_id, header.offset, header.sys_flag
            max_msgs = min(max(header.max_msgs, 1), MAX_MESSAGES_PER_PULL)
        store = self.ctx.store
        if not self.ctx.config.broker_permission & PERM_READ:
            raise RequestRefused(
                ResponseCode.NO_PERMISSION,
                f"the broker[{broker_host(self.ctx)}] pulling message is forbidden",
            )
        config = store.topic_config(topic)
        if config is None:
            raise RequestRefused(
                ResponseCode.TOPIC_NOT_EXIST, f"topic[{topic}] not exist, apply first please!"
            )
        if not config.perm & PERM_READ:
            raise RequestRefused(
                ResponseCode.NO_PERMISSION, f"the topic[{topic}] pulling message is forbidden"
            )
        if not 0 <= queue_id < config.read_queues:
            raise RequestRefused(
                ResponseCode.SYSTEM_ERROR,
                f"queueId[{queue_id}] is illegal, topic:[{topic}] topicConfig.readQueueNums:"
                f"[{config.read_queues}] consumer:[{conn.peer}]",
            )
        if header is None:
            # absent: 0; other than a Java long: refused naming it, as Java's header decode does
            version = optional_number(ext, "subVersion") or 0
            sub = self._subscription(
                group, topic, sys_flag, version, ext.get("subscription"), ext.get("expressionType")
            )
        else:
            sub = self._subscription(
                group, topic, sys_flag, header.sub_version, header.subscription, header.expression_type
            )
        tags = sub.store_filter()
        # a slave keeps its master's offsets (RocketMQ's PullMessageProcessor: brokerRole != SLAVE)
        if (
            sys_flag & FLAG_COMMIT_OFFSET
            and not store.readonly
            and store.config.broker_role is not BrokerRole.SLAVE
        ):
            commit = number(ext, "commitOffset") if header is None else header.commit_offset
            try:
                commit_offset(store, group, topic, queue_id, commit)
            except RequestRefused as exc:
                # not stored; the pull is answered still, its nextBeginOffset correcting the client
                log.debug("pull of %s from %s: commit offset not taken: %s", group, conn.peer, exc.remark)
        suspend_s = 0.0
        suspends = bool(sys_flag & FLAG_SUSPEND)
        if suspends:
            requested_ms = max(
                number(ext, "suspendTimeoutMillis") if header is None else header.suspend_ms, 0
            )
            suspend_s = min(requested_ms, self.ctx.config.long_polling_max_ms, MAX_SUSPEND_S * 1000) / 1000
        return PullArgs(group, topic, queue_id, offset, max_msgs, tags, suspends, suspend_s)

    async def pull(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        args = self.check(cmd, conn)
        arrival = self.ctx.arrival
        with arrival.watching():
            mark = arrival.mark()
            result, read_ms = await self._read(args)
            if args.suspends and response_code(result.status, args.offset) is ResponseCode.PULL_NOT_FOUND:
                return await self._after_park(cmd, args, mark)
        return self._answer(cmd, args, result, read_ms)

    async def _after_park(self, cmd: RemotingCommand, args: PullArgs, mark: asyncio.Event) -> RemotingCommand:
        """The answer to a pull that found nothing at first: read again once messages arrive in
        its queue (``mark`` was taken before that first read) or its suspend time is over."""
        with self.ctx.arrival.watching():
            await self._park(args.topic, args.queue_id, args.offset, args.suspend_s, mark)
            result, read_ms = await self._read(args)
        return self._answer(cmd, args, result, read_ms)

    async def _read(self, args: PullArgs) -> tuple[GetMessageResult, int]:
        started = time.monotonic()
        result = await self.ctx.run(
            self.ctx.store.get_message,
            args.group,
            args.topic,
            args.queue_id,
            args.offset,
            args.max_msgs,
            args.tags,
        )
        return result, int((time.monotonic() - started) * 1000)

    def _answer(
        self, cmd: RemotingCommand, args: PullArgs, result: GetMessageResult, read_ms: int
    ) -> RemotingCommand:
        code = response_code(result.status, args.offset)
        body = b""
        if code is ResponseCode.SUCCESS:
            body = b"".join([m.record_view for m in result.messages])
            self.ctx.metrics.stats.count_get(args.topic, args.group, len(result.messages), len(body), read_ms)
        return pull_response(
            cmd, code, result.status, result.next_begin_offset, result.min_offset, result.max_offset, body
        )
