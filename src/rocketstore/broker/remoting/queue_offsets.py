"""A queue's offsets and times (REMOTING.md §6.5): GET_MAX_OFFSET, GET_MIN_OFFSET,
SEARCH_OFFSET_BY_TIMESTAMP and GET_EARLIEST_MSG_STORETIME, straight from the store. A queue the
store does not have answers 0 (no message yet), as RocketMQ's broker does."""

from __future__ import annotations

from rocketstore.broker.remoting.codes import RequestCode
from rocketstore.broker.remoting.command import RemotingCommand
from rocketstore.broker.remoting.context import RemotingContext
from rocketstore.broker.remoting.headers import number, text, to_ext
from rocketstore.broker.remoting.server import Connection, Handler

__all__ = ["QueueOffsetsProcessor"]


class QueueOffsetsProcessor:
    def __init__(self, ctx: RemotingContext) -> None:
        self.ctx = ctx

    def handlers(self) -> dict[int, Handler]:
        return {
            RequestCode.GET_MAX_OFFSET: self.max_offset,
            RequestCode.GET_MIN_OFFSET: self.min_offset,
            RequestCode.SEARCH_OFFSET_BY_TIMESTAMP: self.offset_by_time,
            RequestCode.GET_EARLIEST_MSG_STORETIME: self.earliest_time,
        }

    async def max_offset(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        ext = cmd.ext_fields
        offset = self.ctx.store.max_offset_in_queue(text(ext, "topic"), number(ext, "queueId", java_int=True))
        return cmd.response(ext_fields=to_ext(offset=offset))

    async def min_offset(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        ext = cmd.ext_fields
        offset = self.ctx.store.min_offset_in_queue(text(ext, "topic"), number(ext, "queueId", java_int=True))
        return cmd.response(ext_fields=to_ext(offset=offset))

    async def offset_by_time(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        ext = cmd.ext_fields
        offset = await self.ctx.run(
            self.ctx.store.offset_in_queue_by_time,
            text(ext, "topic"),
            number(ext, "queueId", java_int=True),
            number(ext, "timestamp"),
        )
        return cmd.response(ext_fields=to_ext(offset=offset))

    async def earliest_time(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        ext = cmd.ext_fields
        timestamp = await self.ctx.run(
            self.ctx.store.earliest_message_time, text(ext, "topic"), number(ext, "queueId", java_int=True)
        )
        return cmd.response(ext_fields=to_ext(timestamp=timestamp))
