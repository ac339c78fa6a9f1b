"""Accounts held to their keys over remoting (issue 29, item 2): with the ACL on, a request that
reaches another account's topic or group through a stored message, a transaction half, a queue
lock or a client id is refused as RocketMQ's broker refuses (an AclException), and nothing is
stored or changed; the same requests on an account's own resources work."""

from __future__ import annotations

import json
import logging
import select
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from rocketstore import Message
from rocketstore.broker import BrokerConfig
from rocketstore.broker.pop_copies import retry_topic as pop_retry_topic
from rocketstore.broker.remoting.client_ids import ClientIds
from rocketstore.broker.remoting.codes import RequestCode, ResponseCode
from rocketstore.broker.remoting.command import RemotingCommand
from rocketstore.broker.remoting.refusal import RequestRefused
from rocketstore.codec.commitlog_record import decode_record
from rocketstore.codec.message_id import decode_offset_msg_id

from .client import RawClient
from .conftest import Remoting, StartRemoting
from .test_acl import signed
from .test_consumer_requests import bodies, heartbeat, pull_ext
from .test_heartbeat import on_loop
from .test_producer import transactional, wait_for

# access key: (secret key, topics, groups, admin)
ACCOUNTS: dict[str, tuple[str, list[str], list[str], bool]] = {
    "app1": ("secret-1", ["TopicA"], ["groupA", "pgA"], False),
    "app2": ("secret-2", ["TopicB"], ["groupB", "pgB"], False),
    "app3": ("secret-3", ["TopicA"], ["pgB"], False),
    "app4": ("secret-4", ["TopicA"], ["*"], False),
    "ops": ("secret-ops", [], [], True),  # admin, listing nothing
}
ACL = "".join(
    f'[[accounts]]\naccess_key = "{key}"\nsecret_key = "{secret}"\ntopics = {json.dumps(topics)}\n'
    f"groups = {json.dumps(groups)}\nadmin = {str(admin).lower()}\n"
    for key, (secret, topics, groups, admin) in ACCOUNTS.items()
)
SECRETS = {key: account[0] for key, account in ACCOUNTS.items()}
DENIED = "org.apache.rocketmq.acl.common.AclException: "


class Signed(RawClient):
    """A raw client whose requests are signed with one account's keys, as AclClientRPCHook signs."""

    def __init__(self, port: int, access_key: str) -> None:
        super().__init__(port)
        self.access_key = access_key

    def send(self, cmd: RemotingCommand) -> int:
        if not cmd.is_response:
            cmd.ext_fields = signed(
                cmd.ext_fields, bytes(cmd.body), self.access_key, SECRETS[self.access_key]
            )
        return super().send(cmd)

    def nothing_received(self) -> bool:
        """Whether the server sent this connection nothing it has not read."""
        return not self.server_requests and not select.select([self.sock], [], [], 0)[0]


def start(start_remoting: StartRemoting, tmp_path: Path, **changes: Any) -> Remoting:
    acl = tmp_path / "acl.toml"
    acl.write_text(ACL)
    r = start_remoting(BrokerConfig(acl_file=str(acl), **changes))
    r.store.create_topic("TopicA", 2)
    r.store.create_topic("TopicB", 2)
    return r


def refused(resp: RemotingCommand, why: str) -> bool:
    return resp.code == ResponseCode.SYSTEM_ERROR and (resp.remark or "").startswith(DENIED + why)


def test_a_stored_message_is_read_and_sent_back_only_by_accounts_of_its_topic(
    start_remoting: StartRemoting, tmp_path: Path
) -> None:
    r = start(start_remoting, tmp_path)
    store = r.store
    theirs = store.put_message(Message("TopicB", b"app2's", queue_id=0))
    mine = store.put_message(Message("TopicA", b"app1's", queue_id=0))
    # a retry of groupA first sent to a topic app1 does not read (a dead-letter replay's, say):
    # the group's own record, which app1 may pull from %RETRY%groupA
    retry = store.put_message(
        Message("%RETRY%groupA", b"retried", queue_id=0, properties={"RETRY_TOPIC": "TopicB"})
    )
    their_retry = store.put_message(
        Message("%RETRY%groupB", b"app2's retry", queue_id=0, properties={"RETRY_TOPIC": "TopicB"})
    )
    store.wait_dispatched()
    with Signed(r.port, "app1") as app1, Signed(r.port, "app2") as app2:
        # 1. VIEW_MESSAGE_BY_ID reads only the account's topics' records
        view = app1.call(RequestCode.VIEW_MESSAGE_BY_ID, {"offset": str(theirs.physical_offset)})
        assert view.remark == (
            f"{DENIED}No permission for topic=TopicB: the message at offset {theirs.physical_offset} "
            "is TopicB's, accessKey=app1"
        )
        assert view.code == ResponseCode.SYSTEM_ERROR and view.body == b""
        view = app1.call(RequestCode.VIEW_MESSAGE_BY_ID, {"offset": str(their_retry.physical_offset)})
        assert refused(view, "No permission for group=groupB (its retry topic %RETRY%groupB)")
        own = app2.call(RequestCode.VIEW_MESSAGE_BY_ID, {"offset": str(theirs.physical_offset)})
        assert own.code == ResponseCode.SUCCESS and decode_record(own.body, 0).topic == "TopicB"
        own = app1.call(RequestCode.VIEW_MESSAGE_BY_ID, {"offset": str(mine.physical_offset)})
        assert own.code == ResponseCode.SUCCESS and bodies(own.body) == [(0, b"app1's")]

        # 2. CONSUMER_SEND_MSG_BACK copies into the group only what the account may read
        end = store.max_phy_offset()
        back = {"group": "groupA", "delayLevel": "-1", "maxReconsumeTimes": "16"}
        for offset in (theirs.physical_offset, their_retry.physical_offset):
            resp = app1.call(RequestCode.CONSUMER_SEND_MSG_BACK, {**back, "offset": str(offset)})
            assert refused(resp, "No permission for"), resp.remark
        store.wait_dispatched()
        assert store.max_phy_offset() == end and "%DLQ%groupA" not in store.topic_configs()
        # ... while a consumer of groupA sends back its own messages, retries included
        for offset in (mine.physical_offset, retry.physical_offset):
            resp = app1.call(RequestCode.CONSUMER_SEND_MSG_BACK, {**back, "offset": str(offset)})
            assert resp.code == ResponseCode.SUCCESS, resp.remark
        store.wait_dispatched()
        dead = store.get_message("x", "%DLQ%groupA", 0, 0, 32).messages
        assert [m.body for m in dead] == [b"app1's", b"retried"]

        # a %RETRY%G topic is group G's: pulled with group G, never with another account's
        pull = {**pull_ext("%RETRY%groupA", 0), "consumerGroup": "groupA"}
        got = app1.call(RequestCode.PULL_MESSAGE, pull)
        assert got.code == ResponseCode.SUCCESS and bodies(got.body) == [(0, b"retried")]
        other = app1.call(RequestCode.PULL_MESSAGE, {**pull, "topic": "%RETRY%groupB"})
        assert refused(other, "No permission for group=groupB")
        # header-named topics of the other requests too
        assert app1.call(RequestCode.GET_MAX_OFFSET, {"topic": "TopicA", "queueId": "0"}).code == 0
        assert refused(
            app1.call(RequestCode.GET_MAX_OFFSET, {"topic": "TopicB", "queueId": "0"}),
            "No permission for topic=TopicB",
        )
        query = {"consumerGroup": "groupB", "topic": "TopicB", "queueId": "0"}
        assert refused(app1.call(RequestCode.QUERY_CONSUMER_OFFSET, query), "No permission for topic=TopicB")


def test_transactions_are_ended_and_checked_only_by_accounts_of_their_group_and_topic(
    start_remoting: StartRemoting, tmp_path: Path
) -> None:
    r = start(start_remoting, tmp_path, transaction_timeout_ms=1, transaction_check_interval_ms=100)
    with Signed(r.port, "app1") as app1, Signed(r.port, "app2") as app2, Signed(r.port, "app3") as app3:
        half = transactional(app2, "TopicB", "B1", group="pgB")
        assert half.code == ResponseCode.SUCCESS, half.remark
        _, _, half_offset = decode_offset_msg_id(half.ext_fields["msgId"])
        commit = {
            "producerGroup": "pgB",
            "tranStateTableOffset": half.ext_fields["queueOffset"],
            "commitLogOffset": str(half_offset),
            "commitOrRollback": "8",
            "fromTransactionCheck": "false",
            "msgId": "B1",
        }
        # 3. END_TRANSACTION: the header's group, then the half's real topic
        assert refused(app1.call(RequestCode.END_TRANSACTION, commit), "No permission for group=pgB")
        assert refused(
            app3.call(RequestCode.END_TRANSACTION, commit),
            f"No permission for topic=TopicB: the message at offset {half_offset} is TopicB's",
        )
        # a half naming another account's producer group is not stored
        assert refused(transactional(app1, "TopicA", "A0", group="pgB"), "No permission for group=pgB")

        # 5. CHECK_TRANSACTION_STATE: app1's heartbeat naming pgB does not make it pgB's producer
        # (answered SUCCESS, as RocketMQ's ACL checks no producer group); app3 may (its group)
        # but cannot see TopicB, so every check goes to app2's producer
        resp = app1.call(RequestCode.HEART_BEAT, body=heartbeat("app1@1", consumers={}, producers=("pgB",)))
        assert resp.code == ResponseCode.SUCCESS, resp.remark
        assert (
            app3.call(RequestCode.HEART_BEAT, body=heartbeat("app3@1", consumers={}, producers=("pgB",))).code
            == 0
        )
        assert (
            app2.call(RequestCode.HEART_BEAT, body=heartbeat("app2@1", consumers={}, producers=("pgB",))).code
            == 0
        )
        for _ in range(2):  # the two producers in turn, if app3 were asked too
            check = app2.server_request()
            assert check.code == RequestCode.CHECK_TRANSACTION_STATE
            assert decode_record(check.body, 0).topic == "TopicB"
        assert app3.nothing_received() and app1.nothing_received()
        # every client unregisters CLIENT_INNER_PRODUCER at its shutdown; another group needs its key
        leave = {"clientID": "app1@1", "producerGroup": "CLIENT_INNER_PRODUCER"}
        assert app1.call(RequestCode.UNREGISTER_CLIENT, leave).code == ResponseCode.SUCCESS
        resp = app1.call(RequestCode.UNREGISTER_CLIENT, {**leave, "producerGroup": "pgB"})
        assert refused(resp, "No permission for group=pgB")
        r.store.wait_dispatched()
        assert r.store.max_offset_in_queue("TopicB", 0) + r.store.max_offset_in_queue("TopicB", 1) == 0

        # app2 answers its check: committed
        answer = {**commit, "tranStateTableOffset": check.ext_fields["tranStateTableOffset"]}
        app2.oneway(RequestCode.END_TRANSACTION, {**answer, "fromTransactionCheck": "true"})
        queue = int(decode_record(check.body, 0).queue_id)
        wait_for(lambda: r.store.max_offset_in_queue("TopicB", queue) == 1, "app2's commit")
        [msg] = r.store.get_message("x", "TopicB", queue, 0, 1).messages
        assert msg.body == b"tx-B1"
        # and app1 ends its own transactions
        own = transactional(app1, "TopicA", "A1", group="pgA")
        _, _, own_offset = decode_offset_msg_id(own.ext_fields["msgId"])
        ended = app1.call(
            RequestCode.END_TRANSACTION,
            {
                **commit,
                "producerGroup": "pgA",
                "tranStateTableOffset": own.ext_fields["queueOffset"],
                "commitLogOffset": str(own_offset),
                "msgId": "A1",  # its UNIQ_KEY, as the Java client names it
            },
        )
        assert ended.code == ResponseCode.SUCCESS, ended.remark


def lock_body(client_id: str, group: str, *queues: int, topic: str = "TopicB") -> bytes:
    mqs = [{"brokerName": "broker-a", "queueId": q, "topic": topic} for q in queues]
    return json.dumps({"clientId": client_id, "consumerGroup": group, "mqSet": mqs}).encode()


def locked(c: RawClient, client_id: str, group: str, *queues: int) -> list[int]:
    resp = c.call(RequestCode.LOCK_BATCH_MQ, body=lock_body(client_id, group, *queues))
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    return sorted(mq["queueId"] for mq in json.loads(resp.body)["lockOKMQSet"])


def test_queue_locks_and_client_ids_stay_their_owners(start_remoting: StartRemoting, tmp_path: Path) -> None:
    r = start(start_remoting, tmp_path)
    with Signed(r.port, "app1") as app1, Signed(r.port, "app2") as peer:
        owner = Signed(r.port, "app2")
        beat = heartbeat("app2@1", consumers={"groupB": ["TopicB", "%RETRY%groupB"]})
        assert owner.call(RequestCode.HEART_BEAT, body=beat).code == 0
        assert locked(owner, "app2@1", "groupB", 0, 1) == [0, 1]

        # 4. another account: neither groupB's locks nor app2's client id
        for code in (RequestCode.UNLOCK_BATCH_MQ, RequestCode.LOCK_BATCH_MQ):
            resp = app1.call(code, body=lock_body("app2@1", "groupB", 0, 1))
            assert refused(resp, "No permission for topic=TopicB"), resp.remark
        resp = app1.call(RequestCode.LOCK_BATCH_MQ, body=lock_body("app2@1", "groupA", 0, topic="TopicA"))
        assert refused(resp, "client id app2@1 is held by another connection")
        resp = app1.call(RequestCode.HEART_BEAT, body=heartbeat("app2@1", consumers={"groupA": ["TopicA"]}))
        assert refused(resp, "client id app2@1 is held by another connection")
        # nor subscribe its own group to groupB's retries
        resp = app1.call(
            RequestCode.HEART_BEAT, body=heartbeat("app1@1", consumers={"groupA": ["%RETRY%groupB"]})
        )
        assert refused(resp, "No permission for group=groupB (its retry topic %RETRY%groupB)")
        resp = app1.call(RequestCode.UNREGISTER_CLIENT, {"clientID": "app2@1", "consumerGroup": "groupA"})
        assert refused(resp, "client id app2@1 is held by another connection")
        # the same account on another connection: the id is still the first connection's
        resp = peer.call(RequestCode.UNLOCK_BATCH_MQ, body=lock_body("app2@1", "groupB", 0, 1))
        assert resp.code == ResponseCode.SYSTEM_ERROR
        assert (
            resp.remark
            == f"client id app2@1 is held by another connection ({peer_of(owner)}) until it closes"
        )
        resp = peer.call(RequestCode.UNREGISTER_CLIENT, {"clientID": "app2@1", "consumerGroup": "groupB"})
        assert resp.code == ResponseCode.SYSTEM_ERROR
        assert locked(peer, "app2@2", "groupB", 0, 1) == []  # the locks are still app2@1's
        listed = peer.call(RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "groupB"})
        assert json.loads(listed.body) == {"consumerIdList": ["app2@1"]}

        # the owner reconnects with its id: its locks are its own again
        owner.close()
        again = Signed(r.port, "app2")
        try:
            wait_for(
                lambda: again.call(RequestCode.HEART_BEAT, body=beat).code == ResponseCode.SUCCESS,
                "the closed connection to free its client id",
            )
            assert locked(again, "app2@1", "groupB", 0, 1) == [0, 1]
        finally:
            again.close()


def peer_of(client: RawClient) -> str:
    """The client's address as the broker names it."""
    host, port = client.sock.getsockname()[:2]
    return f"{host}:{port}"


@dataclass(eq=False)
class FakeConnection:
    peer: str
    closed: bool = False
    last_read: float = 0.0
    attributes: dict[str, Any] = field(default_factory=dict)
    on_close: list[Any] = field(default_factory=list)

    def close(self) -> None:
        self.closed = True
        for callback in self.on_close:
            callback(self)

    def when_closed(self, callback: Any) -> None:
        if self.closed:
            callback(self)
        else:
            self.on_close.append(callback)


def test_a_client_id_is_free_once_its_connection_closed_or_went_silent() -> None:
    ids = ClientIds(expire_s=120, max_per_connection=2)
    first, second = FakeConnection("10.0.0.1:1"), FakeConnection("10.0.0.2:2")
    ids.claim("c", first, "app1", now=0)  # type: ignore[arg-type]
    ids.claim("c", first, "app1", now=1)  # type: ignore[arg-type]
    with pytest.raises(RequestRefused, match=r"held by another connection \(10\.0\.0\.1:1\)"):
        ids.claim("c", second, "app1", now=100)  # type: ignore[arg-type]
    with pytest.raises(RequestRefused, match="is accessKey=app1's on this connection, not accessKey=app2's"):
        ids.claim("c", first, "app2", now=100)  # type: ignore[arg-type]
    # silent past 120 s: a reconnecting client takes its id back
    second.last_read = 121
    ids.claim("c", second, "app1", now=121)  # type: ignore[arg-type]
    assert ids.holder("c", now=121) is second and ids.holder("c", now=300) is None
    assert first.attributes["client_ids"] == set()
    # closed: free at once, and forgotten
    ids.claim("d", second, None, now=121)  # type: ignore[arg-type]
    with pytest.raises(RequestRefused, match="2 client ids already"):
        ids.claim("e", second, None, now=121)  # type: ignore[arg-type]
    second.close()
    assert len(ids) == 0
    ids.claim("c", first, None, now=122)  # type: ignore[arg-type]


def test_a_heartbeat_registers_only_the_producer_groups_its_account_may_use(
    start_remoting: StartRemoting, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A producer group the account does not list is left out of the registrations (it gets no
    transaction checks), with one rate-limited line; the heartbeat's consumers still join."""
    r = start(start_remoting, tmp_path)
    beat = heartbeat("app1@1", consumers={"groupA": ["TopicA"]}, producers=("orders-producer", "pgA"))
    with caplog.at_level(logging.WARNING, "rocketstore.broker.remoting"), Signed(r.port, "app1") as app1:
        for _ in range(3):
            resp = app1.call(RequestCode.HEART_BEAT, body=beat)
            assert resp.code == ResponseCode.SUCCESS, resp.remark
        members = app1.call(RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "groupA"})
        assert members.code == ResponseCode.SUCCESS
        assert json.loads(members.body) == {"consumerIdList": ["app1@1"]}
        assert on_loop(r, lambda: sorted(r.broker.remoting.ctx.producers.groups())) == ["pgA"]
    lines = [rec.getMessage() for rec in caplog.records if "orders-producer" in rec.getMessage()]
    assert len(lines) == 1 and "accessKey=app1 may not use: not registered" in lines[0]


def test_an_admin_account_reads_what_mqadmin_reads_without_listing_it(
    start_remoting: StartRemoting, tmp_path: Path
) -> None:
    """As RocketMQ's checkPerm passes an admin: mqadmin's reads need no topic or group entry;
    the clients' data path still does."""
    r = start(start_remoting, tmp_path)
    with Signed(r.port, "ops") as ops:
        stats = ops.call(RequestCode.GET_CONSUME_STATS, {"consumerGroup": "billing"})
        assert not (stats.remark or "").startswith(DENIED), stats.remark
        topic = ops.call(RequestCode.GET_TOPIC_STATS_INFO, {"topic": "TopicB"})
        assert topic.code == ResponseCode.SUCCESS, topic.remark
        created = ops.call(
            RequestCode.UPDATE_AND_CREATE_TOPIC,
            {"topic": "New", "readQueueNums": "1", "writeQueueNums": "1", "perm": "6"},
        )
        assert created.code == ResponseCode.SUCCESS, created.remark
        sent = ops.call(
            RequestCode.SEND_MESSAGE_V2, {"a": "pg", "b": "TopicA", "e": "0", "g": "0"}, b"not its topic"
        )
        assert refused(sent, "No permission for topic=TopicA")
        pulled = ops.call(RequestCode.PULL_MESSAGE, pull_ext("TopicA", 0))
        assert refused(pulled, "No permission for topic=TopicA")


def test_a_pop_retry_topic_needs_its_topic(start_remoting: StartRemoting, tmp_path: Path) -> None:
    """gRPC pop re-puts a group's expired messages of topic T into %RETRY%{group}_{T}: over
    remoting that name needs topic T as well as group {group}_{T}."""
    r = start(start_remoting, tmp_path)
    store = r.store
    theirs, mine = (
        store.put_message(
            Message(pop_retry_topic("gx", t), f"{t}'s".encode(), queue_id=0, properties={"RETRY_TOPIC": t})
        )
        for t in ("TopicB", "TopicA")
    )
    store.wait_dispatched()
    with Signed(r.port, "app4") as app4:  # every group, topic TopicA only
        why = "No permission for topic=TopicB (its pop retry topic %RETRY%gx_TopicB)"
        pulled = app4.call(RequestCode.PULL_MESSAGE, pull_ext("%RETRY%gx_TopicB", 0))
        assert refused(pulled, why) and pulled.body == b""
        view = app4.call(RequestCode.VIEW_MESSAGE_BY_ID, {"offset": str(theirs.physical_offset)})
        assert refused(view, why) and view.body == b""
        # its own topic's pop retries and a group's own retry topic are readable
        pulled = app4.call(RequestCode.PULL_MESSAGE, pull_ext("%RETRY%gx_TopicA", 0))
        assert pulled.code == ResponseCode.SUCCESS and bodies(pulled.body) == [(0, b"TopicA's")]
        view = app4.call(RequestCode.VIEW_MESSAGE_BY_ID, {"offset": str(mine.physical_offset)})
        assert view.code == ResponseCode.SUCCESS
        offsets = app4.call(
            RequestCode.QUERY_CONSUMER_OFFSET, {"consumerGroup": "gy", "topic": "%RETRY%gy", "queueId": "0"}
        )
        assert not (offsets.remark or "").startswith(DENIED)
