"""What one client can make the broker keep, and the answers to its mistakes: producer and
consumer groups per connection (forgotten at close in one visit of the connection's own), locks
only on queues that exist, name-server KV bytes, QUERY_MESSAGE's results, and group names
refused with a clear remark and no traceback."""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import time
from pathlib import Path
from typing import Any

import pytest

from rocketstore.broker.consumer_groups import ConsumerGroups, ConsumerMember, Subscription
from rocketstore.broker.queue_locks import QueueLocks
from rocketstore.broker.remoting import admin, consumers, namesrv, producers
from rocketstore.broker.remoting.codes import RequestCode, ResponseCode
from rocketstore.broker.remoting.command import RemotingCommand, encode_command
from rocketstore.broker.remoting.producers import MAX_GROUPS_PER_CONNECTION, ProducerGroups
from rocketstore.broker.transactions import Orphan
from rocketstore.codec.message_id import decode_offset_msg_id
from rocketstore.message import Message

from .client import RawClient
from .conftest import StartRemoting
from .test_acl_accounts import FakeConnection
from .test_answer_bounds import _slow_reader
from .test_consumer_requests import bodies, heartbeat
from .test_heartbeat import on_loop, wait_for
from .test_producer import transactional


def _producer_heartbeat(client_id: str, groups: list[str]) -> bytes:
    body = {
        "clientID": client_id,
        "consumerDataSet": [],
        "producerDataSet": [{"groupName": g} for g in groups],
    }
    return json.dumps(body).encode()


def _no_tracebacks(caplog: pytest.LogCaptureFixture) -> None:
    assert [r.getMessage() for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR] == []


def test_group_names_are_refused_with_a_remark_and_no_traceback(
    start_remoting: StartRemoting, caplog: pytest.LogCaptureFixture
) -> None:
    r = start_remoting()
    r.store.create_topic("T", 1)
    with caplog.at_level(logging.INFO), RawClient(r.port) as c:
        for bad in ("../x", "a/b", "x" * 121):
            got = c.call(RequestCode.HEART_BEAT, body=heartbeat("A", group=bad))
            assert got.code == ResponseCode.SYSTEM_ERROR, bad
            assert ("not valid" if len(bad) < 121 else "too long") in (got.remark or "")
        got = c.call(RequestCode.HEART_BEAT, body=_producer_heartbeat("A", ["../x"]))
        assert got.code == ResponseCode.SYSTEM_ERROR and "group[../x] is not valid" in (got.remark or "")
        back = {"offset": "0", "group": "../x", "delayLevel": "0", "originMsgId": "x", "originTopic": "T"}
        got = c.call(RequestCode.CONSUMER_SEND_MSG_BACK, back)
        assert got.code == ResponseCode.SYSTEM_ERROR and "not valid" in (got.remark or "")
        lock = {
            "clientId": "A",
            "consumerGroup": "../x",
            "mqSet": [{"brokerName": "b", "queueId": 0, "topic": "T"}],
        }
        got = c.call(RequestCode.LOCK_BATCH_MQ, body=json.dumps(lock).encode())
        assert got.code == ResponseCode.SYSTEM_ERROR and "not valid" in (got.remark or "")
        nested = b"[" * 100_000 + b"]" * 100_000
        got = c.call(RequestCode.HEART_BEAT, body=nested)
        assert got.code == ResponseCode.SYSTEM_ERROR and "nests too deeply" in (got.remark or "")
        assert c.call(RequestCode.HEART_BEAT, body=heartbeat("A")).code == ResponseCode.SUCCESS
    assert not any(t.startswith("%RETRY%..") for t in r.store.topic_configs())
    _no_tracebacks(caplog)


def test_producer_groups_per_connection_are_bounded(start_remoting: StartRemoting) -> None:
    r = start_remoting()
    registry = r.broker.remoting.ctx.producers
    groups = [f"pg{i}" for i in range(MAX_GROUPS_PER_CONNECTION)]
    with RawClient(r.port) as c, RawClient(r.port) as other:
        assert c.call(RequestCode.HEART_BEAT, body=_producer_heartbeat("A", groups)).code == 0
        assert (
            c.call(RequestCode.HEART_BEAT, body=_producer_heartbeat("A", groups[:10])).code == 0
        )  # renewals
        got = c.call(RequestCode.HEART_BEAT, body=_producer_heartbeat("A", ["one-more"]))
        assert got.code == ResponseCode.SYSTEM_ERROR and f"{MAX_GROUPS_PER_CONNECTION} groups" in (
            got.remark or ""
        )
        assert other.call(RequestCode.HEART_BEAT, body=_producer_heartbeat("B", ["one-more"])).code == 0
        assert on_loop(r, lambda: len(registry)) == MAX_GROUPS_PER_CONNECTION + 1
    wait_for(lambda: on_loop(r, registry.groups) == {}, "the closed connections' groups to go")


def test_closing_a_connection_visits_only_its_own_registrations(monkeypatch: pytest.MonkeyPatch) -> None:
    registry = ProducerGroups()
    a, b = FakeConnection("a:1"), FakeConnection("b:1")
    for i in range(1000):
        registry.register(f"g{i}", "A", a, 0)  # type: ignore[arg-type]
    for i in range(500, 1500):
        registry.register(f"g{i}", "B", b, 0)  # type: ignore[arg-type]
    # one close callback per connection (one per group made closing quadratic)
    assert len(a.on_close) == len(b.on_close) == 1
    visited: list[str] = []
    remove = registry._remove
    monkeypatch.setattr(registry, "_remove", lambda g, c: (visited.append(g), remove(g, c)))
    a.close()
    assert len(visited) == 1000 and len(registry) == 1000
    assert registry.groups_of(b) == {f"g{i}" for i in range(500, 1500)}  # type: ignore[arg-type]
    assert registry.live_connection("g1") is None and registry.live_connection("g600", 0) is b
    with pytest.raises(Exception, match="limit"):
        for i in range(producers.MAX_GROUPS_PER_CONNECTION + 1):
            registry.register(f"more{i}", "B", b, 0)  # type: ignore[arg-type]


def test_consumer_groups_forget_a_closed_connection_in_one_visit_of_its_own(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    registry = ConsumerGroups()
    a, b = object(), object()
    subs = [Subscription("T")]
    for i in range(1000):
        for conn, cid in ((a, "A"), (b, "B")) if i < 10 else ((b, "B"),):
            member = ConsumerMember(cid, conn, "peer", "JAVA", 409, 0, "app1")
            registry.register(f"g{i}", member, subs, consume_type="", message_model="", consume_from_where="")
    assert registry.memberships_of_account("app1") == 1010 and registry.subscription_count() == 1000
    visited: list[str] = []
    leave = registry._leave
    monkeypatch.setattr(registry, "_leave", lambda g, info, c: (visited.append(g), leave(g, info, c))[1])
    assert registry.forget_connection(a) == sorted(f"g{i}" for i in range(10))
    assert len(visited) == 10 and registry.memberships_of_account("app1") == 1000
    assert registry.forget_connection(b) and registry.group_count() == 0
    assert registry.subscription_count() == 0 and registry.memberships_of_account("app1") == 0


def test_producer_registrations_per_account_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(producers, "MAX_REGISTRATIONS_PER_ACCOUNT", 3)
    registry = ProducerGroups()
    a, b, c = FakeConnection("a:1"), FakeConnection("b:1"), FakeConnection("c:1")
    registry.register("g1", "A", a, 0, "app1")  # type: ignore[arg-type]
    registry.register("g2", "A", a, 0, "app1")  # type: ignore[arg-type]
    registry.register("g1", "B", b, 0, "app1")  # type: ignore[arg-type]
    with pytest.raises(Exception, match="access key app1"):
        registry.register("g3", "C", c, 0, "app1")  # type: ignore[arg-type]
    registry.register("g3", "C", c, 0, "app2")  # type: ignore[arg-type]
    a.close()  # its two registrations no longer count against app1
    registry.register("g3", "B", b, 0, "app1")  # type: ignore[arg-type]
    assert len(registry) == 3


def test_consumer_groups_and_subscriptions_per_connection_are_bounded(
    start_remoting: StartRemoting, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(consumers, "MAX_GROUPS_PER_CONNECTION", 3)
    monkeypatch.setattr(consumers, "MAX_SUBSCRIPTIONS_PER_CONNECTION", 5)
    r = start_remoting()
    r.store.create_topic("T", 1)

    def beat(*groups: str, topics: int = 1) -> bytes:
        data = json.loads(heartbeat("A"))
        cd = data["consumerDataSet"][0]
        cd["subscriptionDataSet"] = [dict(cd["subscriptionDataSet"][0], topic=f"T{i}") for i in range(topics)]
        data["consumerDataSet"] = [dict(cd, groupName=g) for g in groups]
        return json.dumps(data).encode()

    registry = consumers.consumer_groups(r.broker.remoting.ctx)
    with RawClient(r.port) as c:
        assert c.call(RequestCode.HEART_BEAT, body=beat("g1", "g2")).code == 0
        got = c.call(RequestCode.HEART_BEAT, body=beat("g3", "g4"))  # g1 and g2 held: four groups
        assert got.code == ResponseCode.SYSTEM_ERROR and "at most 3" in (got.remark or "")
        assert c.call(RequestCode.HEART_BEAT, body=beat("g3")).code == 0
        got = c.call(RequestCode.HEART_BEAT, body=beat("g1", topics=4))  # 4 + g2's 1 + g3's 1
        assert got.code == ResponseCode.SYSTEM_ERROR and "at most 5" in (got.remark or "")
        assert c.call(RequestCode.HEART_BEAT, body=beat("g1", topics=3)).code == 0
        assert on_loop(r, lambda: (registry.group_count(), registry.subscription_count())) == (3, 5)
    wait_for(lambda: on_loop(r, registry.group_count) == 0, "the closed connection's groups to go")
    assert on_loop(r, lambda: (registry.group_count(), registry.subscription_count())) == (0, 0)


def test_locks_are_granted_only_on_queues_that_exist(start_remoting: StartRemoting) -> None:
    r = start_remoting()
    r.store.create_topic("T", 2)

    def lock(c: RawClient, *queues: tuple[str, int]) -> list[list[Any]]:
        body = {
            "clientId": "A",
            "consumerGroup": "cg",
            "mqSet": [{"brokerName": "broker-a", "queueId": q, "topic": t} for t, q in queues],
        }
        resp = c.call(RequestCode.LOCK_BATCH_MQ, body=json.dumps(body).encode())
        return sorted([mq["topic"], mq["queueId"]] for mq in json.loads(resp.body)["lockOKMQSet"])

    with RawClient(r.port) as c:
        assert lock(c, ("T", 0), ("T", 1), ("T", 2), ("T", -1), ("Nope", 0)) == [["T", 0], ["T", 1]]
        too_many = {"clientId": "A", "consumerGroup": "cg", "mqSet": [{"topic": "T", "queueId": 0}] * 8193}
        got = c.call(RequestCode.LOCK_BATCH_MQ, body=json.dumps(too_many).encode())
        assert got.code == ResponseCode.SYSTEM_ERROR and "at most 8192" in (got.remark or "")
    assert len(consumers.queue_locks(r.broker.remoting.ctx)) == 2


def test_queue_locks_are_bounded_and_lapsed_ones_make_room() -> None:
    locks = QueueLocks(max_live_ms=60_000, max_locks=3)
    assert locks.lock("g", ["q1", "q2"], "A", 0) == ["q1", "q2"]
    assert locks.lock("h", ["q1", "q2"], "B", 1000) == ["q1"]  # full
    assert locks.lock("g", ["q1", "q2"], "A", 2000) == ["q1", "q2"]  # renewing needs no room
    # h/q1 lapses at 61,000: a new lock takes its room
    assert locks.lock("i", ["q1"], "C", 62_000) == ["q1"] and len(locks) == 3
    assert locks.holder("h", "q1", 62_000) is None


def test_locks_per_client_id_are_bounded_and_counted_exactly() -> None:
    locks = QueueLocks(max_live_ms=60_000, max_locks=100, max_per_client=3)
    assert locks.lock("g", ["q1", "q2", "q3", "q4"], "A", 0) == ["q1", "q2", "q3"]
    assert locks.lock("h", ["q1", "q2"], "B", 0) == ["q1", "q2"]  # the others are not held out
    assert locks.lock("g", ["q3", "q1"], "A", 1000) == ["q3", "q1"]  # renewing needs no room
    locks.unlock("g", ["q1", "q4"], "A")
    assert locks.held_by("A") == 2 and locks.lock("g", ["q4", "q5"], "A", 1000) == ["q4"]
    # g/q2 lapses (renewed at 0), g/q3 and q4 not (1000): B takes q2 over, A's count drops
    assert locks.lock("g", ["q2", "q3"], "B", 60_500) == ["q2"]
    assert (locks.held_by("A"), locks.held_by("B"), len(locks)) == (2, 3, 5)
    assert locks.lock("g", ["q5", "q6"], "A", 60_500) == ["q5"]  # at its cap again
    # at its cap, the lapsed locks (A's among them) are purged to make room
    assert locks.lock("g", ["q9"], "A", 200_000) == ["q9"]
    assert (locks.held_by("A"), locks.held_by("B"), len(locks)) == (1, 0, 1)
    locks.unlock("g", ["q9"], "A")
    assert (locks.held_by("A"), len(locks)) == (0, 0)


def test_locks_name_this_broker(start_remoting: StartRemoting) -> None:
    """A queue of another broker name is not this broker's: made-up broker names take no locks,
    and one client id cannot take the whole table."""
    r = start_remoting()
    r.store.create_topic("T", 4)

    def lock(c: RawClient, client_id: str, group: str, mqs: list[dict[str, Any]]) -> list[Any]:
        body = json.dumps({"clientId": client_id, "consumerGroup": group, "mqSet": mqs}).encode()
        resp = c.call(RequestCode.LOCK_BATCH_MQ, body=body)
        assert resp.code == ResponseCode.SUCCESS, resp.remark
        return list(json.loads(resp.body)["lockOKMQSet"])

    with RawClient(r.port) as bad, RawClient(r.port) as good:
        for batch in range(8):
            made_up = [{"topic": "T", "brokerName": f"x{batch}-{i}", "queueId": 0} for i in range(8192)]
            assert lock(bad, "bad@1", "g", made_up) == []
        assert len(consumers.queue_locks(r.broker.remoting.ctx)) == 0
        mine = [{"brokerName": "broker-a", "queueId": q, "topic": "T"} for q in range(4)]
        assert lock(good, "good@1", "legit", mine) == mine


def test_many_connections_of_producer_groups_keep_no_consumer_out(
    start_remoting: StartRemoting, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No cap in all that some clients could fill: a consumer's heartbeat joins its group however
    many producer groups others hold, and CLIENT_INNER_PRODUCER is not registered."""
    monkeypatch.setattr(producers, "MAX_GROUPS_PER_CONNECTION", 64)
    r = start_remoting()
    r.store.create_topic("T", 1)
    registry = r.broker.remoting.ctx.producers
    clients = [RawClient(r.port) for _ in range(16)]
    try:
        for n, c in enumerate(clients):
            beat = _producer_heartbeat(f"bad@{n}", [f"p{n}_{i}" for i in range(64)])
            assert c.call(RequestCode.HEART_BEAT, body=beat).code == 0
        with RawClient(r.port) as good:
            resp = good.call(RequestCode.HEART_BEAT, body=heartbeat("good@1", producers=("pg",)))
            assert resp.code == ResponseCode.SUCCESS, resp.remark
            members = good.call(RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "cg"})
            assert json.loads(members.body) == {"consumerIdList": ["good@1"]}
            assert "CLIENT_INNER_PRODUCER" not in on_loop(r, registry.groups)
            assert on_loop(r, lambda: len(registry)) == 16 * 64 + 1
            # a heartbeat past its connection's producer cap is refused, but its consumers join
            beat = json.loads(heartbeat("good@1", group="cg2", producers=tuple(f"q{i}" for i in range(64))))
            resp = good.call(RequestCode.HEART_BEAT, body=json.dumps(beat).encode())
            assert resp.code == ResponseCode.SYSTEM_ERROR and "64 groups" in (resp.remark or "")
            members = good.call(RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "cg2"})
            assert json.loads(members.body) == {"consumerIdList": ["good@1"]}
    finally:
        for c in clients:
            c.close()


def test_a_heartbeat_handled_after_its_connection_closed_registers_nothing(
    start_remoting: StartRemoting,
) -> None:
    """A heartbeat and the end of its connection read together: the connection closes before
    the heartbeat is handled, which then keeps nothing (no producer group, consumer group or
    client id that no close would ever forget)."""
    r = start_remoting()
    r.store.create_topic("T", 1)
    ctx = r.broker.remoting.ctx
    server = r.broker.remoting.broker
    assert server is not None

    def then_close(cmd: RemotingCommand) -> None:
        with socket.create_connection(("127.0.0.1", r.port)) as s:
            s.sendall(b"".join(bytes(p) for p in encode_command(cmd)))
            s.shutdown(socket.SHUT_WR)
            s.recv(1)  # the server closed it

    for n in range(5):
        beat = heartbeat(f"x@{n}", producers=tuple(f"p{n}_{i}" for i in range(8)))
        then_close(RemotingCommand(code=RequestCode.HEART_BEAT, opaque=n + 1, body=beat))
    wait_for(lambda: on_loop(r, lambda: len(server.connections)) == 0, "the connections to close")
    time.sleep(0.2)  # the heartbeats' handlers have run
    registry = consumers.consumer_groups(ctx)
    assert on_loop(r, lambda: (len(ctx.producers), len(ctx.client_ids), registry.group_count())) == (0, 0, 0)


def test_name_server_kv_bytes_are_bounded(
    start_remoting: StartRemoting, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(namesrv, "MAX_KV_BYTES", 200 * 1024)
    r = start_remoting()
    ns_args = {"namespace": "ns"}
    with RawClient(r.namesrv_port) as ns:
        big = {**ns_args, "key": "k", "value": "v" * (64 * 1024)}
        got = ns.call(RequestCode.PUT_KV_CONFIG, big)
        assert got.code == ResponseCode.SYSTEM_ERROR and "at most 65536" in (got.remark or "")
        value = "v" * (60 * 1024)
        for i in range(3):
            assert ns.call(RequestCode.PUT_KV_CONFIG, {**ns_args, "key": f"k{i}", "value": value}).code == 0
        got = ns.call(RequestCode.PUT_KV_CONFIG, {**ns_args, "key": "k3", "value": value})
        assert got.code == ResponseCode.SYSTEM_ERROR and "at most 204800" in (got.remark or "")
        # replacing a value counts its new size only; deleting makes room
        assert ns.call(RequestCode.PUT_KV_CONFIG, {**ns_args, "key": "k2", "value": "small"}).code == 0
        assert ns.call(RequestCode.PUT_KV_CONFIG, {**ns_args, "key": "k3", "value": value}).code == 0
        assert ns.call(RequestCode.DELETE_KV_CONFIG, {**ns_args, "key": "k0"}).code == 0
        assert ns.call(RequestCode.PUT_KV_CONFIG, {**ns_args, "key": "k4", "value": value[:-100]}).code == 0
        # a configuration over the cap (made under a larger one) may shrink, not grow
        monkeypatch.setattr(namesrv, "MAX_KV_BYTES", 100 * 1024)
        assert ns.call(RequestCode.PUT_KV_CONFIG, {**ns_args, "key": "k3", "value": value[:-200]}).code == 0
        got = ns.call(RequestCode.PUT_KV_CONFIG, {**ns_args, "key": "k3", "value": value[:-100]})
        assert got.code == ResponseCode.SYSTEM_ERROR and "at most 102400" in (got.remark or "")
        assert ns.call(RequestCode.DELETE_KV_CONFIG, {**ns_args, "key": "k3"}).code == 0
    kv = r.store.layout.root / "config" / namesrv.KV_CONFIG_FILE
    assert kv.stat().st_size < 200 * 1024 + 1024


def test_query_message_answers_at_most_64_records_within_a_frame(
    start_remoting: StartRemoting, monkeypatch: pytest.MonkeyPatch
) -> None:
    r = start_remoting()
    r.store.create_topic("T", 1)
    assert all(p.ok for p in r.store.put_messages([Message("T", b"b" * 1000, keys="K", queue_id=0)] * 70))
    r.store.wait_dispatched()
    query = {
        "topic": "T",
        "key": "K",
        "maxNum": str(2**31 - 1),
        "beginTimestamp": "0",
        "endTimestamp": str(2**62),
    }
    with RawClient(r.port) as c:
        got = c.call(RequestCode.QUERY_MESSAGE, query)
        assert got.code == ResponseCode.SUCCESS and len(bodies(got.body)) == admin.MAX_QUERY_RESULTS
        monkeypatch.setattr(admin, "MAX_QUERY_BYTES", 10_500)  # ten records of about 1,050 bytes
        got = c.call(RequestCode.QUERY_MESSAGE, query)
        assert got.code == ResponseCode.SUCCESS and len(bodies(got.body)) == 9
        monkeypatch.setattr(admin, "MAX_QUERY_BYTES", 100)
        got = c.call(RequestCode.QUERY_MESSAGE, query)
        assert got.code == ResponseCode.SYSTEM_ERROR and "frame limit" in (got.remark or "")


def test_unread_view_answers_of_the_broker_stay_within_its_limit(start_remoting: StartRemoting) -> None:
    r = start_remoting(max_answer_bytes_per_connection=1024 * 1024)
    r.store.create_topic("T", 1)
    [put] = r.store.put_messages([Message("T", b"v" * 200_000, queue_id=0)])
    r.store.wait_dispatched()
    view = {"offset": str(put.physical_offset)}
    with _slow_reader(r.port) as c, RawClient(r.port) as other:
        opaques = [
            c.send(RemotingCommand(code=RequestCode.VIEW_MESSAGE_BY_ID, ext_fields=view)) for _ in range(100)
        ]
        server = r.broker.remoting.broker
        assert server is not None
        conns = lambda: [x for x in server.connections if x.queued_bytes > 1024 * 1024]  # noqa: E731
        wait_for(lambda: on_loop(r, conns), "the connection's output to fill")
        [conn] = on_loop(r, conns)
        assert other.call(RequestCode.VIEW_MESSAGE_BY_ID, view).code == ResponseCode.SUCCESS
        assert on_loop(r, lambda: conn.queued_bytes) <= 1024 * 1024 + 250_000
        assert on_loop(r, lambda: conn.waiting_answer_bytes) <= 1024 * 1024
        codes = [c.response_to(o).code for o in opaques]
        assert (
            set(codes) <= {ResponseCode.SUCCESS, ResponseCode.SYSTEM_BUSY} and ResponseCode.SUCCESS in codes
        )


def test_a_transaction_check_dropped_on_a_full_output_is_not_counted_as_sent(
    start_remoting: StartRemoting,
) -> None:
    r = start_remoting(max_answer_bytes_per_connection=1024 * 1024)
    r.store.create_topic("T", 1)
    [put] = r.store.put_messages([Message("T", b"v" * 200_000, queue_id=0)])
    r.store.wait_dispatched()
    endpoint = r.broker.remoting
    with _slow_reader(r.port) as producer:
        assert producer.call(RequestCode.HEART_BEAT, body=_producer_heartbeat("P", ["txg"])).code == 0
        sent = transactional(producer, "T", "U1")
        half = r.store.look_message_by_offset(decode_offset_msg_id(sent.ext_fields["msgId"])[2])
        assert half is not None
        orphan = Orphan(half, "T", "U1", 0)
        view = {"offset": str(put.physical_offset)}
        for _ in range(100):  # answers it does not read: its output fills
            producer.send(RemotingCommand(code=RequestCode.VIEW_MESSAGE_BY_ID, ext_fields=view))
        conn = on_loop(r, lambda: endpoint.ctx.producers.live_connection("txg"))
        wait_for(lambda: on_loop(r, lambda: conn.queued_bytes) > 1024 * 1024, "the output to fill")
        assert endpoint.broker is not None
        checked = asyncio.run_coroutine_threadsafe(endpoint.send_orphan_check(orphan), r.broker._loop)
        assert checked.result(30) is False
