"""RocketMQ 4.9's plain ACL over remoting (REMOTING.md §10): the request's ``AccessKey`` and
``Signature`` against the accounts of the broker's ACL file (the one the gRPC side reads,
``auth.Acl``), then every topic, group and stored record the request reaches against the
account's lists.

Signature: Base64(HmacSHA1(secret key, the values of every extField but ``Signature``, sorted by
key and joined without separators, in UTF-8, followed by the body)). RocketMQ's broker leaves
``_UNIQUE_KEY_QUERY`` out of the content while the 4.9.8 client signs it (its QUERY_MESSAGE bug);
a signature made either way is accepted.

What each request needs (the account's ``topics``/``groups``, ``"*"`` for any). A topic
``%RETRY%G`` is group ``G``'s (as in RocketMQ): it needs group ``G``, not a topic entry. A pop
retry topic ``%RETRY%{group}_{topic}`` (gRPC pop's, ``pop_copies.retry_topic``) holds copies of
``topic``'s messages: a ``%RETRY%`` name ending in ``_`` and a topic the broker has needs that
topic too (a consumer group ``G_T`` while a topic ``T`` exists is held to ``T`` as well).

==========================================  ===================================================
SEND_MESSAGE(_V2), SEND_BATCH_MESSAGE       the topic; a transactional one: its ``PGROUP`` too
END_TRANSACTION                             group ``producerGroup``; the half's real topic
CONSUMER_SEND_MSG_BACK                      group ``group``; the stored message's topic
VIEW_MESSAGE_BY_ID                          the stored message's topic
HEART_BEAT                                  every consumer group and subscribed topic (a
                                            producer group the account may not use is not
                                            registered: ``heartbeat.py``)
LOCK_BATCH_MQ, UNLOCK_BATCH_MQ,             the body's group and queues' topics
CHECK_CLIENT_CONFIG
UPDATE_AND_CREATE_TOPIC, DELETE_TOPIC...,   an account with ``admin = true``
UPDATE_BROKER_CONFIG, (UPDATE|DELETE)_
SUBSCRIPTIONGROUP
any other                                   the ``topic`` and the group (``consumerGroup``,
                                            ``group``, ``producerGroup``) its header names; an
                                            admin account: nothing more than its signature,
                                            but for the data path's requests (``_DATA_CODES``)
==========================================  ===================================================

"The stored message's topic" is ``access.owning_topic``: a delayed message or a half counts as
its real topic's. A retry message (``%RETRY%G``) needs group ``G`` only, not the topic it first
came from (``RETRY_TOPIC``): it is the group's own record, readable by pulling ``%RETRY%G``, and
a group's retries may come from a topic its account does not read (a consumer replaying a
dead-letter topic sends back copies whose ``RETRY_TOPIC`` is the original topic).

The checks that need what a handler reads (a body, a stored record) are made by the handler
through ``require``/``require_record`` with the request's account (``account``); the ones the
header shows are made by ``check`` before the handler runs. A refusal is an ``AclException`` as
RocketMQ's broker reports it: SYSTEM_ERROR with the remark
``org.apache.rocketmq.acl.common.AclException: <why>`` (sends retry on that code). The name
server never checks (nor does RocketMQ's).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from collections.abc import Callable, Iterable, Mapping
from typing import Final

from rocketstore.broker.access import owning_topic
from rocketstore.broker.auth import Account, Acl
from rocketstore.broker.remoting.codes import RequestCode, ResponseCode
from rocketstore.broker.remoting.command import RemotingCommand
from rocketstore.broker.remoting.refusal import RequestRefused
from rocketstore.message import MessageExt

__all__ = ["RemotingAcl", "acl_denied", "signature"]

ACCESS_KEY: Final = "AccessKey"
SIGNATURE: Final = "Signature"
SECURITY_TOKEN: Final = "SecurityToken"
UNIQUE_KEY_QUERY: Final = "_UNIQUE_KEY_QUERY"
RETRY_PREFIX: Final = "%RETRY%"
# every client instance lists it in its heartbeats (RocketMQ's MixAll.CLIENT_INNER_PRODUCER_GROUP)
CLIENT_INNER_PRODUCER: Final = "CLIENT_INNER_PRODUCER"

_ADMIN_CODES: Final = frozenset(
    {
        RequestCode.UPDATE_AND_CREATE_TOPIC,
        RequestCode.UPDATE_BROKER_CONFIG,
        RequestCode.DELETE_TOPIC_IN_BROKER,
        RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
        RequestCode.DELETE_SUBSCRIPTIONGROUP,
    }
)
_SEND_CODES: Final = frozenset(
    {RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE}
)
# the clients' data path: an admin account is held to its lists here, and passes the other
# requests (mqadmin's reads) on its signature, as RocketMQ's checkPerm passes an admin
_DATA_CODES: Final = _SEND_CODES | frozenset(
    {
        RequestCode.PULL_MESSAGE,
        RequestCode.HEART_BEAT,
        RequestCode.UNREGISTER_CLIENT,
        RequestCode.CONSUMER_SEND_MSG_BACK,
        RequestCode.END_TRANSACTION,
        RequestCode.LOCK_BATCH_MQ,
        RequestCode.UNLOCK_BATCH_MQ,
        RequestCode.CHECK_CLIENT_CONFIG,
        RequestCode.QUERY_CONSUMER_OFFSET,
        RequestCode.UPDATE_CONSUMER_OFFSET,
        RequestCode.VIEW_MESSAGE_BY_ID,
        RequestCode.QUERY_MESSAGE,
    }
)
# header fields that name a topic or a group, checked on every request not listed apart
_TOPIC_FIELDS: Final = ("topic",)
_GROUP_FIELDS: Final = ("consumerGroup", "group", "producerGroup")


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


def acl_denied(why: str) -> RequestRefused:
    """A refusal as RocketMQ's broker answers an AclException."""
    return RequestRefused(ResponseCode.SYSTEM_ERROR, f"org.apache.rocketmq.acl.common.AclException: {why}")


class RemotingAcl:
    """``acl``'s accounts over remoting; ``topic_exists`` tells a pop retry topic's topic (a
    topic the broker has)."""

    def __init__(self, acl: Acl, topic_exists: Callable[[str], bool]) -> None:
        self._acl = acl
        self._topic_exists = topic_exists

    def _allows(self, account: Account, topics: Iterable[str], groups: Iterable[str]) -> str | None:
        """Why ``account`` may not use ``topics`` and ``groups`` (a ``%RETRY%G`` topic is group
        G's, a pop retry topic its topic's too), None when it may."""
        for topic in topics:
            if topic.startswith(RETRY_PREFIX):
                group = topic[len(RETRY_PREFIX) :]
                if not account.allows_group(group):
                    return f"No permission for group={group} (its retry topic {topic})"
                for retried in self._pop_retried(group):
                    if not account.allows_topic(retried):
                        return f"No permission for topic={retried} (its pop retry topic {topic})"
            elif not account.allows_topic(topic):
                return f"No permission for topic={topic}"
        for group in groups:
            if not account.allows_group(group):
                return f"No permission for group={group}"
        return None

    def _pop_retried(self, name: str) -> list[str]:
        """The topics the broker has whose pop retry topic ``%RETRY%{name}`` may be: each ``T``
        of ``name`` = ``{group}_{T}``."""
        return [
            name[i + 1 :]
            for i, c in enumerate(name)
            if c == "_" and i + 1 < len(name) and self._topic_exists(name[i + 1 :])
        ]

    def check(self, cmd: RemotingCommand) -> Account:
        """The account that signed ``cmd``, after checking what its header names;
        RequestRefused if not."""
        ext = cmd.ext_fields
        access_key = ext.get(ACCESS_KEY)
        if not access_key:
            raise acl_denied("No accessKey is configured")
        account = self._acl.account(access_key)
        if account is None:
            raise acl_denied(f"No acl config for {access_key}")
        given = ext.get(SIGNATURE, "")
        body = cmd.body
        ok = hmac.compare_digest(given, signature(account.secret_key, ext, body, skip=(UNIQUE_KEY_QUERY,)))
        if not ok and UNIQUE_KEY_QUERY in ext:
            ok = hmac.compare_digest(given, signature(account.secret_key, ext, body))
        if not ok:
            raise acl_denied(f"Check signature failed for accessKey={access_key}")
        if cmd.code in _ADMIN_CODES:
            if not account.admin:
                raise acl_denied(
                    f"Need admin permission for request code={cmd.code}, but accessKey={access_key} is not"
                )
            return account
        if account.admin and cmd.code not in _DATA_CODES:
            return account
        topics, groups = self._resources(cmd)
        why = self._allows(account, topics, groups)
        if why is not None:
            raise acl_denied(f"{why}, accessKey={access_key}")
        return account

    def account(self, cmd: RemotingCommand) -> Account:
        """The account of a request ``check`` passed."""
        account = self._acl.account(cmd.ext_fields.get(ACCESS_KEY, ""))
        if account is None:  # check() refused such a request before its handler ran
            raise acl_denied("No accessKey is configured")
        return account

    def require(self, cmd: RemotingCommand, topics: Iterable[str] = (), groups: Iterable[str] = ()) -> None:
        """RequestRefused unless the account of ``cmd`` may use ``topics`` and ``groups`` (what a
        handler found in the body or the store)."""
        account = self.account(cmd)
        why = self._allows(account, topics, groups)
        if why is not None:
            raise acl_denied(f"{why}, accessKey={account.access_key}")

    def require_record(self, cmd: RemotingCommand, msg: MessageExt) -> None:
        """RequestRefused unless the account of ``cmd`` may read the stored record ``msg``: consume
        the topic it belongs to (``owning_topic``; a retry record: its group)."""
        topic = owning_topic(msg)
        account = self.account(cmd)
        why = self._allows(account, (topic,), ())
        if why is not None:
            offset = msg.physical_offset
            raise acl_denied(
                f"{why}: the message at offset {offset} is {topic}'s, accessKey={account.access_key}"
            )

    def allows(self, access_key: str | None, topics: Iterable[str] = (), groups: Iterable[str] = ()) -> bool:
        """Whether the account of ``access_key`` may use ``topics`` and ``groups``."""
        account = self._acl.account(access_key) if access_key else None
        return account is not None and self._allows(account, topics, groups) is None

    @staticmethod
    def _resources(cmd: RemotingCommand) -> tuple[list[str], list[str]]:
        """(topics, groups) the request's header (and a heartbeat's body) names."""
        ext = cmd.ext_fields
        code = cmd.code
        topics: list[str] = []
        groups: list[str] = []
        if code in _SEND_CODES:
            v2 = code != RequestCode.SEND_MESSAGE
            # (RocketMQ checks no topic of a batch: here a batch is checked like a single send;
            # a %RETRY%G topic needs group G)
            topics.append(ext.get("b" if v2 else "topic", ""))
        elif code == RequestCode.HEART_BEAT:
            try:
                data = json.loads(bytes(cmd.body))
            except (ValueError, UnicodeDecodeError, RecursionError):
                raise acl_denied("the heartbeat body does not parse") from None
            if not isinstance(data, dict):
                return topics, groups
            for consumer in _dicts(data.get("consumerDataSet")):
                groups.append(str(consumer.get("groupName", "")))
                topics.extend(
                    str(sub.get("topic", "")) for sub in _dicts(consumer.get("subscriptionDataSet"))
                )
            # (its producer groups are not checked, as in RocketMQ: heartbeat.py registers only
            # the account's own)
        else:
            topics.extend(ext[name] for name in _TOPIC_FIELDS if name in ext)
            groups.extend(ext[name] for name in _GROUP_FIELDS if name in ext)
            if code == RequestCode.UNREGISTER_CLIENT and ext.get("producerGroup") == CLIENT_INNER_PRODUCER:
                groups.remove(CLIENT_INNER_PRODUCER)  # every client's, unregistered at its shutdown
        return topics, groups


def _dicts(value: object) -> list[dict[str, object]]:
    """The JSON objects of a list in a heartbeat (anything else there names nothing)."""
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []
