"""The name server's answers over the wire: routes at the remoting address, the cluster, the
topic list, KV config, and REQUEST_CODE_NOT_SUPPORTED for what it does not serve."""

from __future__ import annotations

import json

import pytest

from rocketstore.broker import BrokerConfig
from rocketstore.broker.remoting import namesrv
from rocketstore.broker.remoting.codes import RequestCode, ResponseCode

from .client import RawClient
from .conftest import StartRemoting


def test_route_of_a_topic_and_of_tbw102(start_remoting: StartRemoting) -> None:
    r = start_remoting()
    r.store.create_topic("Orders", 3)
    with RawClient(r.namesrv_port) as ns:
        resp = ns.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "Orders"})
        assert resp.code == ResponseCode.SUCCESS
        assert json.loads(resp.body) == {
            "brokerDatas": [
                {"brokerAddrs": {"0": r.address}, "brokerName": "broker-a", "cluster": "DefaultCluster"}
            ],
            "filterServerTable": {},
            "queueDatas": [
                {
                    "brokerName": "broker-a",
                    "perm": 6,
                    "readQueueNums": 3,
                    "topicSysFlag": 0,
                    "writeQueueNums": 3,
                }
            ],
        }
        tbw = json.loads(ns.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "TBW102"}).body)
        assert tbw["queueDatas"][0]["perm"] == 7  # INHERIT: producers auto-create through it
        missing = ns.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "Nope"})
        assert missing.code == ResponseCode.TOPIC_NOT_EXIST
        assert missing.remark == "No topic route info in name server for the topic: Nope"
        assert not missing.body
        # a topic created later is routable at once
        r.store.create_topic("Later", 2)
        assert ns.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "Later"}).code == 0


def test_no_tbw102_without_auto_creation(start_remoting: StartRemoting) -> None:
    r = start_remoting(BrokerConfig(auto_create_topic=False))
    with RawClient(r.namesrv_port) as ns:
        assert (
            ns.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "TBW102"}).code
            == ResponseCode.TOPIC_NOT_EXIST
        )
        topics = json.loads(ns.call(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER).body)["topicList"]
        assert "TBW102" not in topics


def test_cluster_info_and_topic_lists(start_remoting: StartRemoting) -> None:
    r = start_remoting(cluster_name="C1")
    r.store.create_topic("A", 1)
    with RawClient(r.namesrv_port) as ns:
        info = json.loads(ns.call(RequestCode.GET_BROKER_CLUSTER_INFO).body)
        assert info == {
            "brokerAddrTable": {
                "broker-a": {"brokerAddrs": {"0": r.address}, "brokerName": "broker-a", "cluster": "C1"}
            },
            "clusterAddrTable": {"C1": ["broker-a"]},
        }
        topics = json.loads(ns.call(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER).body)["topicList"]
        assert {"A", "TBW102"} <= set(topics)
        by_cluster = ns.call(RequestCode.GET_TOPICS_BY_CLUSTER, {"cluster": "C1"})
        assert "A" in json.loads(by_cluster.body)["topicList"]


def test_kv_config_is_kept_across_restarts(start_remoting: StartRemoting) -> None:
    r = start_remoting()
    ns_args = {"namespace": "ORDER_TOPIC_CONFIG", "key": "Orders"}
    with RawClient(r.namesrv_port) as ns:
        assert ns.call(RequestCode.GET_KV_CONFIG, ns_args).code == ResponseCode.QUERY_NOT_FOUND
        assert ns.call(RequestCode.PUT_KV_CONFIG, {**ns_args, "value": "broker-a:4"}).code == 0
        got = ns.call(RequestCode.GET_KV_CONFIG, ns_args)
        assert got.code == 0 and got.ext_fields["value"] == "broker-a:4"
    r.broker.stop_in_thread()
    r.store.close()
    r2 = start_remoting()
    with RawClient(r2.namesrv_port) as ns:
        assert ns.call(RequestCode.GET_KV_CONFIG, ns_args).ext_fields["value"] == "broker-a:4"
        listed = json.loads(
            ns.call(RequestCode.GET_KVLIST_BY_NAMESPACE, {"namespace": "ORDER_TOPIC_CONFIG"}).body
        )
        assert listed == {"table": {"Orders": "broker-a:4"}}
        assert ns.call(RequestCode.DELETE_KV_CONFIG, ns_args).code == 0
        assert ns.call(RequestCode.GET_KV_CONFIG, ns_args).code == ResponseCode.QUERY_NOT_FOUND


def test_name_server_answers_unknown_codes(start_remoting: StartRemoting) -> None:
    r = start_remoting()
    with RawClient(r.namesrv_port) as ns:
        # a broker code asked of the name server: not its business
        assert ns.call(RequestCode.SEND_MESSAGE_V2).code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
        assert ns.call(RequestCode.GET_ROUTEINFO_BY_TOPIC).code == ResponseCode.SYSTEM_ERROR  # no topic


def test_kv_config_is_bounded(start_remoting: StartRemoting, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(namesrv, "MAX_KV_ENTRIES", 3)
    r = start_remoting()
    with RawClient(r.namesrv_port) as ns:
        for i in range(3):
            assert (
                ns.call(RequestCode.PUT_KV_CONFIG, {"namespace": "N", "key": f"k{i}", "value": "v"}).code == 0
            )
        full = ns.call(RequestCode.PUT_KV_CONFIG, {"namespace": "N", "key": "k3", "value": "v"})
        assert full.code == ResponseCode.SYSTEM_ERROR and "the limit" in (full.remark or "")
        # changing a key it has is still allowed
        assert ns.call(RequestCode.PUT_KV_CONFIG, {"namespace": "N", "key": "k0", "value": "w"}).code == 0
