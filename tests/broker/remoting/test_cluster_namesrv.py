"""Brokers registering with a name server over the wire: the name server's answers to
REGISTER_BROKER, QUERY_DATA_VERSION, UNREGISTER_BROKER, wipes and deletions with several brokers
(a name server alone, and beside its own broker), and a broker's registration service (at start,
on topic changes, UNREGISTER_BROKER at stop, a name server that is down)."""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import uvloop

from rocketstore.broker.remoting import namesrv, registration_service
from rocketstore.broker.remoting.codes import RequestCode, ResponseCode
from rocketstore.broker.remoting.endpoint import bind_listener
from rocketstore.broker.remoting.namesrv import NameServer, NameServerProcessor
from rocketstore.broker.remoting.refusal import RequestRefused
from rocketstore.broker.remoting.registration import (
    BrokerIdentity,
    RegisterBrokerRequest,
    encode_query_data_version,
    encode_register_broker,
    encode_unregister_broker,
)
from rocketstore.broker.remoting.server import RemotingLimits, RemotingServer
from rocketstore.broker.routes import DataVersion, RouteTable
from rocketstore.clock import SystemClock
from rocketstore.codec.config_json import TopicConfig

from ..conftest import SMALL
from .client import RawClient
from .conftest import StartRemoting

A = BrokerIdentity("C1", "broker-x", "127.0.0.1:31911", 0)
A_SLAVE = BrokerIdentity("C1", "broker-x", "127.0.0.1:31921", 1)
B = BrokerIdentity("C1", "broker-y", "127.0.0.1:31931", 0)
V1 = DataVersion(1000, 1)


class Standalone:
    """A name server alone on a loop of its own (as ``rocketstore serve --remoting off``)."""

    def __init__(self, config_dir: Path) -> None:
        self.loop = uvloop.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.table = RouteTable(SystemClock())
        self.name_server = NameServer(NameServerProcessor(self.table, config_dir), RemotingLimits())
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        sock.listen(16)
        sock.setblocking(False)
        self.port = self.call(self.name_server.start(sock))
        self.address = f"127.0.0.1:{self.port}"

    def call(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(30)

    def stop(self) -> None:
        self.call(self.name_server.stop())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join()
        self.loop.close()


@pytest.fixture
def standalone(tmp_path: Path) -> Iterator[Standalone]:
    ns = Standalone(tmp_path / "ns")
    yield ns
    ns.stop()


def register(
    client: RawClient,
    broker: BrokerIdentity,
    topics: dict[str, TopicConfig],
    version: DataVersion = V1,
    *,
    compressed: bool = False,
) -> Any:
    cmd = encode_register_broker(
        RegisterBrokerRequest(broker, broker.broker_addr.replace("319", "329"), version, topics),
        compressed=compressed,
    )
    return client.call(cmd.code, cmd.ext_fields, bytes(cmd.body))


def route(client: RawClient, topic: str) -> Any:
    resp = client.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic})
    return json.loads(resp.body) if resp.code == ResponseCode.SUCCESS else resp.code


def wait_for(condition: Callable[[], bool], what: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def test_standalone_merges_brokers_and_answers_slaves(standalone: Standalone) -> None:
    with (
        RawClient(standalone.port) as a,
        RawClient(standalone.port) as slave,
        RawClient(standalone.port) as b,
    ):
        resp = register(a, A, {"T": TopicConfig("T", 2, 2), "TBW102": TopicConfig("TBW102", 8, 8, 7)})
        assert (resp.code, resp.ext_fields, resp.body) == (0, {}, b"")
        assert register(b, B, {"T": TopicConfig("T", 4, 4)}, compressed=True).code == 0
        resp = register(slave, A_SLAVE, {})
        assert resp.ext_fields == {"masterAddr": A.broker_addr, "haServerAddr": "127.0.0.1:32911"}
        t = route(a, "T")
        assert sorted((q["brokerName"], q["writeQueueNums"]) for q in t["queueDatas"]) == [
            ("broker-x", 2),
            ("broker-y", 4),
        ]
        addrs = {d["brokerName"]: d["brokerAddrs"] for d in t["brokerDatas"]}
        assert addrs == {
            "broker-x": {"0": A.broker_addr, "1": A_SLAVE.broker_addr},
            "broker-y": {"0": B.broker_addr},
        }
        info = json.loads(a.call(RequestCode.GET_BROKER_CLUSTER_INFO).body)
        assert info["clusterAddrTable"] == {"C1": ["broker-x", "broker-y"]}
        topics = json.loads(a.call(RequestCode.GET_TOPICS_BY_CLUSTER, {"cluster": "C1"}).body)["topicList"]
        assert topics == ["T", "TBW102"]
        assert (
            json.loads(a.call(RequestCode.GET_TOPICS_BY_CLUSTER, {"cluster": "no"}).body)["topicList"] == []
        )

        # wipe, add back, delete: on the name server only
        wiped = a.call(RequestCode.WIPE_WRITE_PERM_OF_BROKER, {"brokerName": "broker-y"})
        assert wiped.ext_fields == {"wipeTopicCount": "1"}
        assert {q["brokerName"]: q["perm"] for q in route(a, "T")["queueDatas"]} == {
            "broker-x": 6,
            "broker-y": 4,
        }
        added = a.call(RequestCode.ADD_WRITE_PERM_OF_BROKER, {"brokerName": "broker-y"})
        assert added.ext_fields == {"addTopicCount": "1"}
        assert a.call(RequestCode.DELETE_TOPIC_IN_NAMESRV, {"topic": "T", "clusterName": "C1"}).code == 0
        assert route(a, "T") == ResponseCode.TOPIC_NOT_EXIST

        # QUERY_DATA_VERSION: the same version is unchanged (and keeps the broker alive)
        q = encode_query_data_version(A, V1)
        same = a.call(q.code, q.ext_fields, bytes(q.body))
        assert same.ext_fields == {"changed": "false"} and json.loads(same.body) == V1.to_json()
        q = encode_query_data_version(A, DataVersion(2000, 2))
        assert a.call(q.code, q.ext_fields, bytes(q.body)).ext_fields == {"changed": "true"}

        # a bad checksum registers nothing
        cmd = encode_register_broker(RegisterBrokerRequest(B, "h:1", V1, {"U": TopicConfig("U", 1, 1)}))
        cmd.ext_fields["bodyCrc32"] = "1"
        bad = b.call(cmd.code, cmd.ext_fields, bytes(cmd.body))
        assert (bad.code, bad.remark) == (ResponseCode.SYSTEM_ERROR, "crc32 not match")
        assert route(b, "U") == ResponseCode.TOPIC_NOT_EXIST

        # UNREGISTER_BROKER removes the slave's id only
        u = encode_unregister_broker(A_SLAVE)
        assert slave.call(u.code, u.ext_fields).code == 0
        register(a, A, {"T": TopicConfig("T", 2, 2)}, DataVersion(3000, 3))
        assert {d["brokerName"]: d["brokerAddrs"] for d in route(a, "T")["brokerDatas"]}["broker-x"] == {
            "0": A.broker_addr
        }
    # the registration connections closed: every broker is gone at once
    with RawClient(standalone.port) as c:
        wait_for(lambda: route(c, "T") == ResponseCode.TOPIC_NOT_EXIST, "the brokers' removal")
        info = json.loads(c.call(RequestCode.GET_BROKER_CLUSTER_INFO).body)
        assert info == {"brokerAddrTable": {}, "clusterAddrTable": {}}


def test_combined_name_server_lists_its_broker_and_registered_ones(start_remoting: StartRemoting) -> None:
    r = start_remoting(cluster_name="C1")
    r.store.create_topic("T", 3)
    with RawClient(r.namesrv_port) as ns:
        assert register(ns, B, {"T": TopicConfig("T", 4, 4), "OnlyB": TopicConfig("OnlyB", 1, 1)}).code == 0
        # a slave of this process's broker is told it is its master
        slave = BrokerIdentity("C1", "broker-a", "127.0.0.1:31941", 1)
        resp = register(ns, slave, {})
        assert resp.ext_fields["masterAddr"] == r.address
        t = route(ns, "T")
        assert [q["brokerName"] for q in t["queueDatas"]] == ["broker-a", "broker-y"]
        addrs = {d["brokerName"]: d["brokerAddrs"] for d in t["brokerDatas"]}
        assert addrs == {
            "broker-a": {"0": r.address, "1": slave.broker_addr},
            "broker-y": {"0": B.broker_addr},
        }
        assert route(ns, "OnlyB")["brokerDatas"] == [
            {"brokerAddrs": {"0": B.broker_addr}, "brokerName": "broker-y", "cluster": "C1"}
        ]
        info = json.loads(ns.call(RequestCode.GET_BROKER_CLUSTER_INFO).body)
        assert sorted(info["brokerAddrTable"]) == ["broker-a", "broker-y"]
        assert sorted(info["clusterAddrTable"]["C1"]) == ["broker-a", "broker-y"]
        topics = json.loads(ns.call(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER).body)["topicList"]
        assert {"T", "OnlyB", "TBW102"} <= set(topics)


def test_broker_registers_on_start_on_topic_change_and_unregisters_at_stop(
    standalone: Standalone, start_remoting: StartRemoting, caplog: pytest.LogCaptureFixture
) -> None:
    down = socket.socket()
    down.bind(("127.0.0.1", 0))  # bound, not listening: connections are refused
    dead = f"127.0.0.1:{down.getsockname()[1]}"
    caplog.set_level(logging.INFO, "rocketstore.broker.registration")
    r = start_remoting(namesrv_addr=f"{standalone.address};{dead}", cluster_name="C9")
    try:
        with RawClient(standalone.port) as ns:
            # registered before start returned, its topics with it
            tbw = route(ns, "TBW102")
            assert tbw["brokerDatas"] == [
                {"brokerAddrs": {"0": r.address}, "brokerName": "broker-a", "cluster": "C9"}
            ]
            assert tbw["queueDatas"][0]["perm"] == 7
            live = standalone.table.live[r.address]
            assert live.ha_server_addr.startswith("127.0.0.1:")
            r.store.create_topic("Later", 5)
            wait_for(lambda: route(ns, "Later") != ResponseCode.TOPIC_NOT_EXIST, "the topic's registration")
            assert route(ns, "Later")["queueDatas"][0]["writeQueueNums"] == 5
            assert standalone.table.live[r.address].version.counter == 1
            # a new brokerPermission registers every topic with it at once (a drained broker)
            with RawClient(r.port) as c:
                assert c.call(RequestCode.UPDATE_BROKER_CONFIG, body=b"brokerPermission=4").code == 0
            wait_for(lambda: route(ns, "Later")["queueDatas"][0]["perm"] == 4, "the read-only registration")
            assert route(ns, "TBW102")["queueDatas"][0]["perm"] == 4
            assert standalone.table.live[r.address].version.counter == 2
            # one connection carries every registration
            assert len(standalone.name_server.server.connections) == 2  # the broker's and this client's
            r.broker.stop_in_thread()
            assert route(ns, "Later") == ResponseCode.TOPIC_NOT_EXIST
            assert r.address not in standalone.table.live
    finally:
        down.close()
    down_lines = [m for m in caplog.messages if dead in m]
    assert len(down_lines) == 1 and "unreachable" in down_lines[0]


def test_without_force_register_a_round_registers_only_what_changed(
    standalone: Standalone, start_remoting: StartRemoting
) -> None:
    r = start_remoting(namesrv_addr=standalone.address, force_register=False)
    registration, loop = r.broker.registration, r.broker._loop
    assert registration is not None and loop is not None

    def round_() -> Any:
        return asyncio.run_coroutine_threadsafe(registration.register_all(force=False), loop).result(30)

    before = standalone.table.live[r.address].last_update_ms
    time.sleep(0.01)
    assert round_() is None  # QUERY_DATA_VERSION: unchanged, no registration; kept alive
    assert standalone.table.live[r.address].last_update_ms > before
    # the name server lost the broker (a restart): the next round registers it again
    standalone.loop.call_soon_threadsafe(standalone.table.remove_address, r.address)
    wait_for(lambda: r.address not in standalone.table.live, "the broker's removal")
    assert round_() is not None
    assert r.address in standalone.table.live


def test_registrations_are_bounded_per_connection_and_in_all(
    standalone: Standalone, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(namesrv, "MAX_BROKERS_PER_CONNECTION", 2)
    monkeypatch.setattr(namesrv, "MAX_REGISTERED_BROKERS", 3)
    brokers = [BrokerIdentity("C1", f"broker-{i}", f"127.0.0.1:3190{i}", 0) for i in range(4)]
    with RawClient(standalone.port) as one, RawClient(standalone.port) as two:
        assert register(one, brokers[0], {}).code == 0
        assert register(one, brokers[1], {}).code == 0
        assert register(one, brokers[1], {}, DataVersion(2000, 2)).code == 0  # known: passes
        refused = register(one, brokers[2], {})
        assert (refused.code, refused.remark) == (
            ResponseCode.SYSTEM_ERROR,
            "2 brokers are registered on this connection: the limit is 2",
        )
        assert register(two, brokers[2], {}).code == 0
        refused = register(two, brokers[3], {})
        assert (refused.code, refused.remark) == (
            ResponseCode.SYSTEM_ERROR,
            "3 brokers are registered with this name server: the limit is 3",
        )
        assert sorted(standalone.table.live) == [b.broker_addr for b in brokers[:3]]
        # one unregistered frees its place on the connection
        u = encode_unregister_broker(brokers[0])
        assert one.call(u.code, u.ext_fields).code == 0
        assert register(one, brokers[3], {}).code == 0


def test_a_large_registration_is_decoded_off_the_event_loop(
    standalone: Standalone, monkeypatch: pytest.MonkeyPatch
) -> None:
    threads: list[str] = []
    decode = namesrv.decode_register_broker

    def recording(cmd: Any) -> Any:
        threads.append(threading.current_thread().name)
        return decode(cmd)

    monkeypatch.setattr(namesrv, "decode_register_broker", recording)
    many = {f"Topic-{i:05d}": TopicConfig(f"Topic-{i:05d}", 4, 4) for i in range(1000)}
    with RawClient(standalone.port) as c:
        assert register(c, A, {"T": TopicConfig("T", 2, 2)}).code == 0
        assert register(c, B, many).code == 0
        assert route(c, "Topic-00999")["queueDatas"][0]["brokerName"] == "broker-y"
    loop_thread = standalone.thread.name
    assert threads[0] == loop_thread and threads[1] != loop_thread


def test_combined_name_server_refuses_another_master_of_its_broker_name(
    start_remoting: StartRemoting,
) -> None:
    r = start_remoting(cluster_name="C1")
    r.store.create_topic("T", 3)
    impostor = BrokerIdentity("C1", "broker-a", "127.0.0.1:31951", 0)
    slave = BrokerIdentity("C1", "broker-a", "127.0.0.1:31961", 1)
    with RawClient(r.namesrv_port) as ns:
        refused = register(ns, impostor, {"T": TopicConfig("T", 8, 8)})
        assert refused.code == ResponseCode.SYSTEM_ERROR
        assert refused.remark == (
            f"broker name broker-a is this name server's own broker's: its master is {r.address}, "
            f"not {impostor.broker_addr}"
        )
        resp = register(ns, slave, {})
        assert resp.ext_fields["masterAddr"] == r.address
        assert resp.ext_fields["haServerAddr"] == f"127.0.0.1:{r.store.ha_port or 0}"
        t = route(ns, "T")
        assert [(q["brokerName"], q["writeQueueNums"]) for q in t["queueDatas"]] == [("broker-a", 3)]
        assert t["brokerDatas"][0]["brokerAddrs"] == {"0": r.address, "1": slave.broker_addr}


class ScriptedNameServer:
    """A name server whose REGISTER_BROKER answer the test sets (``answer``: ext fields and body,
    or a refusal's remark), on ``host``'s loop."""

    def __init__(self, host: Standalone) -> None:
        self.host = host
        self.answer: tuple[dict[str, str], bytes] | str = ({}, b"")

        async def reply(cmd: Any, conn: Any) -> Any:
            if isinstance(self.answer, str):
                raise RequestRefused(ResponseCode.SYSTEM_ERROR, self.answer)
            ext, body = self.answer
            return cmd.response(ext_fields=dict(ext), body=body)

        async def ok(cmd: Any, conn: Any) -> Any:
            return cmd.response()

        self.server = RemotingServer(
            {RequestCode.REGISTER_BROKER: reply, RequestCode.UNREGISTER_BROKER: ok}, RemotingLimits(), "fake"
        )
        self.port = host.call(self.server.start(sock=bind_listener("127.0.0.1:0")))
        self.address = f"127.0.0.1:{self.port}"

    def stop(self) -> None:
        self.host.call(self.server.stop())


def test_bad_registration_results_never_stop_the_broker_and_are_logged_once_each(
    standalone: Standalone, start_remoting: StartRemoting, caplog: pytest.LogCaptureFixture
) -> None:
    ns = ScriptedNameServer(standalone)
    caplog.set_level(logging.INFO, "rocketstore.broker")
    try:
        # a slave told an HA address that is not HOST:PORT: it starts, and says so once
        ns.answer = ({"masterAddr": "127.0.0.1:1", "haServerAddr": "no-port"}, b"")
        r = start_remoting(
            store_config=SMALL.replace(broker_role="SLAVE"), broker_id=1, namesrv_addr=ns.address
        )
        registration, loop = r.broker.registration, r.broker._loop
        assert registration is not None and loop is not None

        def round_() -> Any:
            return asyncio.run_coroutine_threadsafe(registration.register_all(force=True), loop).result(30)

        round_()
        assert [m for m in caplog.messages if "no-port" in m] == [
            "the name servers' HA address of the master is unusable: "
            "HA master address 'no-port': expected HOST:PORT"
        ]
        # a result body that is not a JSON object: the link is down for that reason, once
        ns.answer = ({}, b"[]")
        assert round_() is None and round_() is None
        bad = [m for m in caplog.messages if "bad result" in m]
        assert len(bad) == 1 and bad[0].startswith(f"name server {ns.address}: answered REGISTER_BROKER")
        assert "expected a JSON object" in bad[0]
        # refused next: a new state, logged once more; then registered again
        ns.answer = "not today"
        round_()
        round_()
        said = [r.getMessage() for r in caplog.records if r.name == "rocketstore.broker.registration"]
        assert len([m for m in said if "refused REGISTER_BROKER" in m]) == 1
        ns.answer = ({}, b"")
        assert round_() is not None and registration.links[0].up
    finally:
        ns.stop()


def test_a_topic_change_is_noticed_by_the_store_s_counter_without_copying_the_table(
    standalone: Standalone, start_remoting: StartRemoting, monkeypatch: pytest.MonkeyPatch
) -> None:
    r = start_remoting(namesrv_addr=standalone.address)
    registration, loop = r.broker.registration, r.broker._loop
    assert registration is not None and loop is not None
    copies: list[int] = []
    take = registration_service.local_topic_configs

    def counted(ctx: Any) -> Any:
        copies.append(1)
        return take(ctx)

    monkeypatch.setattr(registration_service, "local_topic_configs", counted)

    async def changed() -> bool:
        return registration._topics_changed()

    def check() -> bool:
        return asyncio.run_coroutine_threadsafe(changed(), loop).result(30)

    assert check() is False and copies == []
    version = registration.version
    r.store.create_topic("Fresh", 2)
    # the service's own loop (every second) or this check notices it: either way, once
    check()
    wait_for(lambda: registration.version.counter == version.counter + 1, "the change noticed")
    assert len(copies) == 1
    assert registration._topics is not None and "Fresh" in registration._topics
    assert check() is False and len(copies) == 1
