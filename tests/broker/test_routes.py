"""The name server's tables (RouteTable): registrations, merged routes, slaves' results,
expiry, removal by connection and by UNREGISTER_BROKER, wipes and deletions (CLUSTER.md §3)."""

from __future__ import annotations

from rocketstore.broker.routes import DataVersion, MasterInfo, QueueData, RouteTable
from rocketstore.clock import ManualClock
from rocketstore.codec.config_json import TopicConfig

A, A1, B = "127.0.0.1:10911", "127.0.0.1:10921", "127.0.0.1:10931"
V1, V2 = DataVersion(1000, 1), DataVersion(2000, 2)


def register(
    table: RouteTable,
    name: str,
    addr: str,
    broker_id: int = 0,
    *,
    version: DataVersion = V1,
    topics: dict[str, TopicConfig] | None = None,
    channel: object = None,
    cluster: str = "C",
) -> MasterInfo:
    return table.register(
        cluster=cluster,
        broker_name=name,
        broker_addr=addr,
        broker_id=broker_id,
        ha_server_addr=addr.replace("109", "209"),
        version=version,
        topics=topics if topics is not None else {"T": TopicConfig("T", 2, 2)},
        channel=channel,
    )


def test_two_masters_merge_into_one_route_and_cluster() -> None:
    table = RouteTable(ManualClock())
    assert register(table, "broker-a", A) == MasterInfo()
    register(
        table, "broker-b", B, topics={"T": TopicConfig("T", 4, 4), "Only-b": TopicConfig("Only-b", 1, 1)}
    )
    route = table.route("T")
    assert route is not None
    queues, sets = route
    assert sorted(queues, key=lambda q: q.broker_name) == [
        QueueData("broker-a", 2, 2, 6),
        QueueData("broker-b", 4, 4, 6),
    ]
    assert sorted(s.to_json()["brokerAddrs"]["0"] for s in sets) == [A, B]
    assert table.clusters == {"C": {"broker-a", "broker-b"}}
    assert table.topics_of_cluster("C") == ["Only-b", "T"]
    assert table.topics_of_cluster("nope") == []
    assert table.route("missing") is None


def test_slave_learns_its_master_and_does_not_define_queues() -> None:
    table = RouteTable(ManualClock())
    # a slave before its master: registered, told nothing, its topics ignored
    assert register(table, "broker-a", A1, 1, topics={"S": TopicConfig("S", 1, 1)}) == MasterInfo()
    assert table.route("S") is None
    register(table, "broker-a", A)
    assert register(table, "broker-a", A1, 1) == MasterInfo(A, "127.0.0.1:20911")
    route = table.route("T")
    assert route is not None and route[1][0].addresses == {0: A, 1: A1}
    # the master gone: its name keeps its queues while the slave is registered (consumers read it)
    table.remove_address(A)
    route = table.route("T")
    assert route is not None and route[1][0].addresses == {1: A1}
    table.remove_address(A1)
    assert table.route("T") is None and table.clusters == {}


def test_topics_are_reapplied_only_on_a_new_version() -> None:
    table = RouteTable(ManualClock())
    register(table, "broker-a", A)
    register(table, "broker-a", A, topics={"T": TopicConfig("T", 8, 8)})  # same version: kept
    assert table.topics["T"]["broker-a"].read_queues == 2
    register(table, "broker-a", A, version=V2, topics={"New": TopicConfig("New", 1, 1)})
    assert set(table.topics) == {"T", "New"}  # absent topics are not removed


def test_promoted_slave_replaces_its_old_id() -> None:
    table = RouteTable(ManualClock())
    register(table, "broker-a", A1, 1)
    register(table, "broker-a", A1, 0)
    assert table.brokers["broker-a"].addresses == {0: A1}


def test_expiry_after_120_s_and_query_data_version_keeps_alive() -> None:
    clock = ManualClock()
    table = RouteTable(clock)
    channel_a, channel_b = object(), object()
    register(table, "broker-a", A, channel=channel_a)
    register(table, "broker-b", B, channel=channel_b)
    clock.advance(100_000)
    assert table.query_data_version(A, V1) == (False, V1)  # unchanged: refreshed
    assert table.query_data_version(B, V2) == (True, V1)
    assert table.query_data_version("1.2.3.4:5", V1) == (True, None)
    clock.advance(20_001)
    assert table.expire() == [(B, channel_b)]
    assert set(table.brokers) == {"broker-a"}
    clock.advance(100_000)
    assert table.expire() == [(A, channel_a)]
    assert table.brokers == {} and table.topics == {} and table.live == {}


def test_connection_close_and_unregister_remove_at_once() -> None:
    table = RouteTable(ManualClock())
    conn = object()
    register(table, "broker-a", A, channel=conn)
    register(table, "broker-a", A1, 1, channel=object())
    register(table, "broker-b", B, channel=object())
    assert table.remove_channel(conn) == [A]
    assert table.brokers["broker-a"].addresses == {1: A1}
    assert table.remove_channel(object()) == []
    table.unregister("C", "broker-a", A1, 1)
    assert "broker-a" not in table.brokers and "broker-a" not in table.topics.get("T", {})
    assert table.clusters == {"C": {"broker-b"}}


def test_wipe_add_write_perm_and_delete_topic() -> None:
    table = RouteTable(ManualClock())
    register(table, "broker-a", A, topics={"T": TopicConfig("T", 2, 2), "U": TopicConfig("U", 1, 1)})
    register(table, "broker-b", B, cluster="D")
    assert table.wipe_write_perm("broker-a") == 2
    assert table.topics["T"]["broker-a"].perm == 4 and table.topics["T"]["broker-b"].perm == 6
    assert table.add_write_perm("broker-a") == 2
    assert table.topics["U"]["broker-a"].perm == 6
    table.delete_topic("T", "C")
    assert set(table.topics["T"]) == {"broker-b"}
    table.delete_topic("U")
    assert "U" not in table.topics
    # soft: the broker's next applied registration restores it
    register(table, "broker-a", A, version=V2, topics={"U": TopicConfig("U", 1, 1)})
    assert "U" in table.topics


def test_a_name_registered_under_two_clusters_leaves_both_when_gone() -> None:
    table = RouteTable(ManualClock())
    register(table, "broker-a", A, channel="first")
    register(table, "broker-a", A1, 1, cluster="D", channel="second")
    register(table, "broker-b", B, cluster="D")
    assert table.clusters == {"C": {"broker-a"}, "D": {"broker-a", "broker-b"}}
    table.remove_channel("first")
    table.remove_channel("second")
    assert "broker-a" not in table.brokers
    assert table.clusters == {"D": {"broker-b"}}  # C, left empty, is gone too


def test_unregister_leaves_another_address_registered_under_the_id() -> None:
    table = RouteTable(ManualClock())
    register(table, "broker-a", A)
    table.unregister("C", "broker-a", B, 0)  # not the address registered under id 0
    assert table.brokers["broker-a"].addresses == {0: A}
    assert table.route("T") is not None
