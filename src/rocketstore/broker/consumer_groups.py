"""The consumer groups connected to the broker (RocketMQ's ConsumerManager): which clients are in
each group, on which connection, and what the group subscribes to.

Protocol-free: a member's ``connection`` is whatever handle the protocol adapter reaches the
client with (the registry only keeps it as a dictionary key). A member joins by heartbeat and
leaves on unregister, when its connection closes, or after ``expire_ms`` without a heartbeat
(RocketMQ: 120 s; clients heartbeat every 30 s). Every change that alters a group's membership or
subscriptions is reported to the caller, which tells the group's members to rebalance.

The registry counts what it holds (members per connection and per account, subscriptions in all)
for the caller to bound; a connection's groups are indexed, so its close costs time linear in
their number.

Thread safety: one thread (the event loop) only.
"""

from __future__ import annotations

import logging
from collections.abc import Hashable, Iterable
from dataclasses import dataclass, field

__all__ = ["ConsumerGroup", "ConsumerGroups", "ConsumerMember", "Subscription"]

log = logging.getLogger("rocketstore.broker.consumers")

SUBSCRIBE_ALL = "*"


@dataclass(frozen=True)
class Subscription:
    """A group's subscription to one topic: a TAG expression (``"*"``, ``"TagA || TagB"``) or
    another expression type (SQL92), with the version (creation time) the client gave it."""

    topic: str
    expression: str = SUBSCRIBE_ALL
    expression_type: str = "TAG"
    version: int = 0

    @classmethod
    def parse(
        cls, topic: str, expression: str | None, expression_type: str | None, version: int
    ) -> Subscription:
        expression = (expression or "").strip() or SUBSCRIBE_ALL
        return cls(topic, expression, (expression_type or "TAG").upper(), version)

    @property
    def is_tag(self) -> bool:
        return self.expression_type == "TAG"

    @property
    def tags(self) -> tuple[str, ...]:
        """The tags a TAG expression names (RocketMQ's FilterAPI: split on ``||``, trimmed); empty
        for ``"*"`` (everything matches)."""
        if self.expression == SUBSCRIBE_ALL:
            return ()
        return tuple(t for t in (part.strip() for part in self.expression.split("||")) if t)

    def store_filter(self) -> str | None:
        """The expression as ``MessageStore.get_message`` takes it: None for every message."""
        tags = self.tags
        return " || ".join(tags) if tags else None


@dataclass
class ConsumerMember:
    client_id: str
    connection: Hashable
    address: str  # the client's ip:port as the broker sees it
    language: str
    version: int
    last_heartbeat_ms: int
    account: str | None = None  # the ACL access key of its heartbeat


@dataclass
class ConsumerGroup:
    name: str
    consume_type: str = "CONSUME_PASSIVELY"
    message_model: str = "CLUSTERING"
    consume_from_where: str = "CONSUME_FROM_LAST_OFFSET"
    subscriptions: dict[str, Subscription] = field(default_factory=dict)
    members: dict[Hashable, ConsumerMember] = field(default_factory=dict)

    def client_ids(self) -> list[str]:
        """The members' client ids, each once, in the order they joined."""
        return list(dict.fromkeys(m.client_id for m in self.members.values()))


class ConsumerGroups:
    def __init__(self, expire_ms: int = 120_000) -> None:
        self._groups: dict[str, ConsumerGroup] = {}
        self._by_connection: dict[Hashable, set[str]] = {}
        self._per_account: dict[str, int] = {}
        self._subscriptions = 0
        self._expire_ms = expire_ms

    def register(
        self,
        group: str,
        member: ConsumerMember,
        subscriptions: Iterable[Subscription],
        *,
        consume_type: str,
        message_model: str,
        consume_from_where: str,
    ) -> bool:
        """A heartbeat of ``member`` for ``group``; True when the group's members or subscriptions
        changed (its members should rebalance)."""
        info = self._groups.get(group)
        if info is None:
            info = self._groups[group] = ConsumerGroup(group)
        info.consume_type, info.message_model = consume_type, message_model
        info.consume_from_where = consume_from_where
        known = info.members.get(member.connection)
        joined = known is None or known.client_id != member.client_id
        if known is not None:
            self._uncount(known)
        else:
            self._by_connection.setdefault(member.connection, set()).add(group)
        info.members[member.connection] = member
        if member.account is not None:
            self._per_account[member.account] = self._per_account.get(member.account, 0) + 1
        if joined:
            log.info("consumer %s joined group %s from %s", member.client_id, group, member.address)
        table = {s.topic: s for s in subscriptions}
        # a newer subscription replaces the old; an older one (a late heartbeat) does not
        changed = False
        held = len(info.subscriptions)
        for topic, sub in table.items():
            old = info.subscriptions.get(topic)
            if old is None or (old != sub and sub.version >= old.version):
                info.subscriptions[topic] = sub
                changed = True
        for topic in [t for t in info.subscriptions if t not in table]:
            del info.subscriptions[topic]
            changed = True
        self._subscriptions += len(info.subscriptions) - held
        return joined or changed

    def _uncount(self, member: ConsumerMember) -> None:
        if member.account is not None:
            held = self._per_account.pop(member.account) - 1
            if held:
                self._per_account[member.account] = held

    def _leave(self, group: str, info: ConsumerGroup, connection: Hashable) -> ConsumerMember:
        member = info.members.pop(connection)
        self._uncount(member)
        mine = self._by_connection.get(connection)
        if mine is not None:
            mine.discard(group)
            if not mine:
                del self._by_connection[connection]
        return member

    def unregister(self, group: str, client_id: str) -> bool:
        """The client left ``group``; True when it was a member."""
        info = self._groups.get(group)
        if info is None:
            return False
        gone = [c for c, m in info.members.items() if m.client_id == client_id]
        for c in gone:
            self._leave(group, info, c)
        self._drop_if_empty(group)
        if gone:
            log.info("consumer %s left group %s", client_id, group)
        return bool(gone)

    def forget_connection(self, connection: Hashable) -> list[str]:
        """The connection closed: its members leave; the groups that lost one."""
        changed = []
        for group in sorted(self._by_connection.get(connection, ())):
            member = self._leave(group, self._groups[group], connection)
            log.info("consumer %s of group %s disconnected", member.client_id, group)
            changed.append(group)
            self._drop_if_empty(group)
        return changed

    def expire(self, now_ms: int) -> list[str]:
        """Members silent for longer than ``expire_ms`` leave; the groups that lost one."""
        changed = []
        for group, info in list(self._groups.items()):
            stale = [c for c, m in info.members.items() if now_ms - m.last_heartbeat_ms > self._expire_ms]
            for c in stale:
                log.info(
                    "consumer %s of group %s: no heartbeat for %d s",
                    info.members[c].client_id,
                    group,
                    self._expire_ms // 1000,
                )
                self._leave(group, info, c)
            if stale:
                changed.append(group)
                self._drop_if_empty(group)
        return changed

    def _drop_if_empty(self, group: str) -> None:
        info = self._groups.get(group)
        if info is not None and not info.members:
            self._subscriptions -= len(info.subscriptions)
            del self._groups[group]

    def get(self, group: str) -> ConsumerGroup | None:
        return self._groups.get(group)

    def groups(self) -> dict[str, ConsumerGroup]:
        return dict(self._groups)

    def groups_subscribing(self, topic: str) -> list[str]:
        return [g for g, info in self._groups.items() if topic in info.subscriptions]

    def group_count(self) -> int:
        return len(self._groups)

    def groups_of(self, connection: Hashable) -> set[str]:
        """The groups ``connection`` is a member of."""
        return set(self._by_connection.get(connection, ()))

    def memberships_of_account(self, account: str) -> int:
        """Memberships whose heartbeat ``account`` signed."""
        return self._per_account.get(account, 0)

    def subscription_count(self) -> int:
        """Subscriptions of every group, summed."""
        return self._subscriptions

    def __len__(self) -> int:
        return sum(len(info.members) for info in self._groups.values())
