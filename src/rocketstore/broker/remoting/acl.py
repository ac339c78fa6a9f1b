"""RocketMQ 4.9's plain ACL over remoting (REMOTING.md §10): the request's ``AccessKey`` and
``Signature`` against the accounts of the broker's ACL file (the one the gRPC side reads,
``auth.Acl``), then the topics and groups the request names against the account's lists.

Signature: Base64(HmacSHA1(secret key, the values of every extField but ``Signature``, sorted by
key and joined without separators, in UTF-8, followed by the body)). RocketMQ's broker leaves
``_UNIQUE_KEY_QUERY`` out of the content while the 4.9.8 client signs it (its QUERY_MESSAGE bug);
a signature made either way is accepted.

What each request needs (the account's ``topics``/``groups``, ``"*"`` for any):

==========================================  ===================================================
SEND_MESSAGE(_V2)                           the topic; a ``%RETRY%G`` topic: group G
CONSUMER_SEND_MSG_BACK                      group ``group``
PULL_MESSAGE, UPDATE_CONSUMER_OFFSET        topic and group ``consumerGroup``
QUERY_MESSAGE                               the topic
HEART_BEAT                                  every consumer group and subscribed topic
UNREGISTER_CLIENT, GET_CONSUMER_LIST...     group ``consumerGroup``
UPDATE_AND_CREATE_TOPIC, DELETE_TOPIC...,   an account with ``admin = true``
UPDATE_BROKER_CONFIG, (UPDATE|DELETE)_
SUBSCRIPTIONGROUP
anything else                               a valid signature
==========================================  ===================================================

A refusal is an ``AclException`` as RocketMQ's broker reports it: SYSTEM_ERROR with the remark
``org.apache.rocketmq.acl.common.AclException: <why>`` (sends retry on that code). The name
server never checks (nor does RocketMQ's).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from collections.abc import Iterable, Mapping
from typing import Final

from rocketstore.broker.auth import Account, Acl
from rocketstore.broker.remoting.codes import RequestCode, ResponseCode
from rocketstore.broker.remoting.command import RemotingCommand
from rocketstore.broker.remoting.refusal import RequestRefused

__all__ = ["RemotingAcl", "signature"]

ACCESS_KEY: Final = "AccessKey"
SIGNATURE: Final = "Signature"
SECURITY_TOKEN: Final = "SecurityToken"
UNIQUE_KEY_QUERY: Final = "_UNIQUE_KEY_QUERY"
RETRY_PREFIX: Final = "%RETRY%"

_ADMIN_CODES: Final = frozenset(
    {
        RequestCode.UPDATE_AND_CREATE_TOPIC,
        RequestCode.UPDATE_BROKER_CONFIG,
        RequestCode.DELETE_TOPIC_IN_BROKER,
        RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
        RequestCode.DELETE_SUBSCRIPTIONGROUP,
    }
)


def signature(
    secret_key: str, ext: Mapping[str, str], body: bytes | bytearray | memoryview, *, skip: Iterable[str] = ()
) -> str:
    """The Signature of a request as RocketMQ's AclClientRPCHook computes it."""
    left_out = {SIGNATURE, *skip}
    content = "".join(ext[k] for k in sorted(ext) if k not in left_out).encode()
    mac = hmac.new(secret_key.encode(), content, hashlib.sha1)
    if len(body):
        mac.update(body)
    return base64.b64encode(mac.digest()).decode()


def _denied(why: str) -> RequestRefused:
    return RequestRefused(ResponseCode.SYSTEM_ERROR, f"org.apache.rocketmq.acl.common.AclException: {why}")


class RemotingAcl:
    def __init__(self, acl: Acl) -> None:
        self._acl = acl

    def check(self, cmd: RemotingCommand) -> Account:
        """The account that signed ``cmd``, after checking what it names; RequestRefused if not."""
        ext = cmd.ext_fields
        access_key = ext.get(ACCESS_KEY)
        if not access_key:
            raise _denied("No accessKey is configured")
        account = self._acl.account(access_key)
        if account is None:
            raise _denied(f"No acl config for {access_key}")
        given = ext.get(SIGNATURE, "")
        body = cmd.body
        ok = hmac.compare_digest(given, signature(account.secret_key, ext, body, skip=(UNIQUE_KEY_QUERY,)))
        if not ok and UNIQUE_KEY_QUERY in ext:
            ok = hmac.compare_digest(given, signature(account.secret_key, ext, body))
        if not ok:
            raise _denied(f"Check signature failed for accessKey={access_key}")
        topics, groups = self._resources(cmd)
        if cmd.code in _ADMIN_CODES and not account.admin:
            raise _denied(
                f"Need admin permission for request code={cmd.code}, but accessKey={access_key} is not"
            )
        for topic in topics:
            if topic not in account.topics and "*" not in account.topics:
                raise _denied(f"No permission for topic={topic}, accessKey={access_key}")
        for group in groups:
            if group not in account.groups and "*" not in account.groups:
                raise _denied(f"No permission for group={group}, accessKey={access_key}")
        return account

    @staticmethod
    def _resources(cmd: RemotingCommand) -> tuple[list[str], list[str]]:
        """(topics, groups) the request names (PlainAccessValidator.parse)."""
        ext = cmd.ext_fields
        code = cmd.code
        topics: list[str] = []
        groups: list[str] = []
        if code in (RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE):
            v2 = code != RequestCode.SEND_MESSAGE
            topic = ext.get("b" if v2 else "topic", "")
            # (RocketMQ checks no topic of a batch: here a batch is checked like a single send)
            if topic.startswith(RETRY_PREFIX):
                groups.append(topic[len(RETRY_PREFIX) :])
            else:
                topics.append(topic)
        elif code == RequestCode.CONSUMER_SEND_MSG_BACK:
            groups.append(ext.get("group", ""))
        elif code in (RequestCode.PULL_MESSAGE, RequestCode.UPDATE_CONSUMER_OFFSET):
            topics.append(ext.get("topic", ""))
            groups.append(ext.get("consumerGroup", ""))
        elif code == RequestCode.QUERY_MESSAGE:
            topics.append(ext.get("topic", ""))
        elif code in (RequestCode.UNREGISTER_CLIENT, RequestCode.GET_CONSUMER_LIST_BY_GROUP):
            group = ext.get("consumerGroup")
            if group:
                groups.append(group)
        elif code == RequestCode.HEART_BEAT:
            try:
                data = json.loads(bytes(cmd.body))
            except (ValueError, UnicodeDecodeError, RecursionError):
                raise _denied("the heartbeat body does not parse") from None
            for consumer in (data.get("consumerDataSet") or []) if isinstance(data, dict) else []:
                if not isinstance(consumer, dict):
                    continue
                groups.append(str(consumer.get("groupName", "")))
                for sub in consumer.get("subscriptionDataSet") or []:
                    topic = str(sub.get("topic", "")) if isinstance(sub, dict) else ""
                    if topic.startswith(RETRY_PREFIX):
                        continue  # the group's own retry topic: covered by the group
                    topics.append(topic)
        return topics, groups
