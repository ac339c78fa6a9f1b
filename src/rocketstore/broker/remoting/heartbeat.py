"""HEART_BEAT and UNREGISTER_CLIENT (REMOTING.md §6.1): who is connected, as which client, in
which producer groups (and, by the consumer processor, which consumer groups).

The ``clientID`` is bound to the connection (and account) that used it first
(``client_ids.py``): a heartbeat or unregister naming another live connection's id is refused.
The connection remembers the heartbeat's ``clientID``, language and version
(``conn.attributes``: ``client_id``, ``language``, ``version``); producer groups go to
``ctx.producers`` (the transaction checks look there); then ``ctx.heartbeat_hooks`` /
``ctx.unregister_hooks`` run (the consumer registry registers one of each). The answer is
SUCCESS with version 409 in every case the body parses: the client keeps that version per
broker and refuses SQL92 pulls to brokers older than 4.1.

Producer groups: ``CLIENT_INNER_PRODUCER`` (every Java client lists it; nothing is ever checked
back on it) is not registered, nor, with the ACL, a group the account may not use (RocketMQ's
ACL checks no producer group in a heartbeat; here such a group gets no transaction checks, with
one rate-limited line). A group refused for a bound refuses the heartbeat, but only after the
consumer hooks ran: a client's consumers are not kept out by its producers. A heartbeat handled
after its connection closed registers nothing.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

from rocketstore.broker.remoting.acl import CLIENT_INNER_PRODUCER
from rocketstore.broker.remoting.codes import RequestCode, ResponseCode
from rocketstore.broker.remoting.command import RemotingCommand
from rocketstore.broker.remoting.context import RemotingContext
from rocketstore.broker.remoting.headers import text
from rocketstore.broker.remoting.refusal import RequestRefused
from rocketstore.broker.remoting.server import Connection, Handler
from rocketstore.message import TOPIC_PATTERN
from rocketstore.offsets import GROUP_PATTERN

__all__ = ["HEARTBEAT_ACCOUNT", "HeartbeatProcessor", "check_group_name", "parse_json_body"]

log = logging.getLogger("rocketstore.broker.remoting")

# ``conn.attributes`` key: the ACL access key that signed the connection's last heartbeat (None
# without the ACL), what the registries count per account
HEARTBEAT_ACCOUNT = "heartbeat_account"
# producer groups one heartbeat may list (a client has a few: its own and CLIENT_INNER_PRODUCER)
MAX_PRODUCER_GROUPS = 1024


def parse_json_body(cmd: RemotingCommand, what: str) -> dict[str, Any]:
    """A request's JSON object body; SYSTEM_ERROR naming ``what`` when it is not one."""
    try:
        value = json.loads(bytes(cmd.body))
    except (ValueError, UnicodeDecodeError) as exc:
        raise RequestRefused(ResponseCode.SYSTEM_ERROR, f"{what} body does not parse: {exc}") from None
    except RecursionError:
        raise RequestRefused(ResponseCode.SYSTEM_ERROR, f"{what} body nests too deeply") from None
    if not isinstance(value, dict):
        raise RequestRefused(ResponseCode.SYSTEM_ERROR, f"{what} body is not a JSON object")
    return value


def check_group_name(group: object, consumer: bool = True) -> str:
    """``group`` when it is a valid group name (RocketMQ's ``Validators.checkGroup``: 1..255
    characters of ``[%|a-zA-Z0-9_-]``) and, for a consumer group, its retry topic
    ``%RETRY%<group>`` a valid topic name (at most 127 characters); else SYSTEM_ERROR saying so."""
    if not isinstance(group, str) or not GROUP_PATTERN.fullmatch(group):
        shown = str(group) if len(str(group)) <= 255 else f"{str(group)[:255]}..."  # answers stay small
        raise RequestRefused(
            ResponseCode.SYSTEM_ERROR,
            f"the specified group[{shown}] is not valid: 1..255 characters of [%|a-zA-Z0-9_-]",
        )
    if consumer and not TOPIC_PATTERN.fullmatch(f"%RETRY%{group}"):
        raise RequestRefused(
            ResponseCode.SYSTEM_ERROR,
            f"the specified group[{group}] is too long for a consumer group: its retry topic "
            "%RETRY%<group> must be at most 127 characters",
        )
    return group


class HeartbeatProcessor:
    def __init__(self, ctx: RemotingContext) -> None:
        self.ctx = ctx

    def handlers(self) -> dict[int, Handler]:
        return {
            RequestCode.HEART_BEAT: self.heartbeat,
            RequestCode.UNREGISTER_CLIENT: self.unregister,
        }

    async def heartbeat(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        data = parse_json_body(cmd, "HeartbeatData")
        client_id = data.get("clientID")
        if not isinstance(client_id, str) or not client_id:
            raise RequestRefused(ResponseCode.SYSTEM_ERROR, "HeartbeatData has no clientID")
        self.ctx.claim_client_id(client_id, cmd, conn)  # (refused for a closed connection)
        if conn.attributes.get("client_id") != client_id:
            log.info("client %s (%s %d) on %s", client_id, cmd.language, cmd.version, conn.peer)
        conn.attributes.update(client_id=client_id, language=cmd.language, version=cmd.version)
        now = int(time.time() * 1000)
        producers = data.get("producerDataSet") or []
        if not isinstance(producers, list) or len(producers) > MAX_PRODUCER_GROUPS:
            raise RequestRefused(
                ResponseCode.SYSTEM_ERROR,
                f"HeartbeatData: producerDataSet is not a list of at most {MAX_PRODUCER_GROUPS} groups",
            )
        # the access key that signed it (the ACL checked the signature before this handler)
        account = cmd.ext_fields.get("AccessKey") if self.ctx.acl is not None else None
        conn.attributes[HEARTBEAT_ACCOUNT] = account
        acl = self.ctx.acl
        refusal: RequestRefused | None = None
        for producer in producers:
            group = producer.get("groupName") if isinstance(producer, dict) else None
            if not isinstance(group, str) or not group or group == CLIENT_INNER_PRODUCER:
                continue
            try:
                check_group_name(group, consumer=False)
                if acl is not None and not acl.allows(account, groups=(group,)):
                    conn.server.client_log.warning(
                        "producer group not allowed",
                        "%s: the heartbeat of %s names producer group %s, which accessKey=%s may not "
                        "use: not registered (it gets no transaction checks)",
                        conn.server.name,
                        conn.peer,
                        group,
                        account,
                    )
                    continue
                self.ctx.producers.register(group, client_id, conn, now, account)
            except RequestRefused as exc:
                refusal = refusal or exc  # the others are still renewed, the consumers still join
        for hook in self.ctx.heartbeat_hooks:
            await hook(data, conn)
        if refusal is not None:
            raise refusal
        return cmd.response()

    async def unregister(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        ext = cmd.ext_fields
        client_id = text(ext, "clientID")
        self.ctx.claim_client_id(client_id, cmd, conn)
        group = ext.get("producerGroup")
        if group:
            self.ctx.producers.unregister(group, client_id)
        for hook in self.ctx.unregister_hooks:
            await hook(ext, conn)
        return cmd.response()
