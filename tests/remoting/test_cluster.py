"""rocketstore in RocketMQ 4.9.8 clusters, with RocketMQ's Java client and mqadmin:

* two rocketstore brokers registered with RocketMQ's own name server: both in ``clusterList``,
  ``updateTopic -c`` creates the topic on both, sends spread over both, one consumer group
  receives every message once;
* a mixed cluster under rocketstore's name server alone (``serve --remoting off --listen off``):
  a RocketMQ broker and a rocketstore broker, the same checks, then kill -9 of the RocketMQ
  broker while a producer sends (every send acknowledged, the dead broker dropped from the
  route) and a clean stop of the rocketstore broker (UNREGISTER_BROKER: gone at once);
* a rocketstore master with a rocketstore slave and a RocketMQ slave, both finding it through the
  name server: each replicates, and a new group reads every message from the rocketstore slave
  after the master is killed, then from the RocketMQ slave after the other slave stops.

Each cluster is started once per module and shared by its checks (JVMs boot slowly)."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from rocketstore.broker.remoting.codes import RequestCode, ResponseCode

from ..broker.remoting.client import RawClient
from .harness import (
    JavaPrograms,
    RocketMQDist,
    RocketMQServers,
    Served,
    start_rocketmq_broker,
    start_rocketmq_namesrv,
    start_serve,
    wait_until,
)

pytestmark = pytest.mark.slow

CLUSTER = "DefaultCluster"


@dataclass
class Cluster:
    dist: RocketMQDist
    namesrv: str
    # broker name -> remoting address
    brokers: dict[str, str]
    served: dict[str, Served] = field(default_factory=dict)
    rocketmq: list[RocketMQServers] = field(default_factory=list)

    def admin(self, *args: str) -> str:
        out = self.dist.mqadmin(*args, "-n", self.namesrv)
        assert out.returncode == 0, f"mqadmin {' '.join(args)}:\n{out.stdout}\n{out.stderr}"
        return out.stdout

    def route_brokers(self, topic: str) -> set[str]:
        """Broker names with queues in ``topic``'s route (``topicRoute -l``)."""
        out = self.dist.mqadmin("topicRoute", "-t", topic, "-l", "-n", self.namesrv)
        if out.returncode != 0:
            return set()
        return {line.split()[1] for line in out.stdout.splitlines() if line.startswith(CLUSTER)}

    def listed(self) -> set[str]:
        """``clusterList``'s broker names."""
        out = self.dist.mqadmin("clusterList", "-n", self.namesrv)
        return {line.split()[1] for line in out.stdout.splitlines() if line.startswith(CLUSTER)}

    def stop(self) -> None:
        for served in self.served.values():
            served.stop()
        for servers in self.rocketmq:
            servers.stop()


def store_port(offset_msg_id: str) -> int:
    """The store host's port in an offset message id (hex: 4-byte IPv4, 4-byte port, 8-byte offset)."""
    return int(offset_msg_id[8:16], 16)


def check_carried_on(events: list[dict[str, Any]], count: int, survivor: str) -> list[dict[str, Any]]:
    """A producer's sends across a broker's kill: every one answered SEND_OK but the one (or,
    with its tries, two) in flight to the broker when it died, which the client times out,
    whether or not it was stored; the sends after it went to ``survivor``. The acknowledged."""
    acked = [e for e in events if e["event"] == "sent"]
    failed = [e for e in events if e["event"] == "failed"]
    assert len(acked) + len(failed) == count and len(failed) <= 2, failed
    assert all(e["status"] == "SEND_OK" for e in acked)
    last = max(e["i"] for e in acked)
    assert last >= count - 3 and store_port(acked[-1]["offsetMsgId"]) == int(survivor.rpartition(":")[2])
    return acked


def copied(config: Path, name: str, text: str) -> bool:
    """Whether the broker's config file ``name`` (in ``config``) holds ``text`` (a slave's copy)."""
    path = config / name
    return path.exists() and text in path.read_text()


def consumed_bodies(cluster: Cluster, java: JavaPrograms, group: str, topic: str, count: int) -> set[str]:
    """The bodies a new push consumer ``group`` receives from ``topic`` (it stops at ``count``)."""
    events = java.run(
        "PushConsume", f"namesrv={cluster.namesrv}", f"group={group}", f"topic={topic}", f"expect={count}"
    )
    return {e["body"] for e in events if e["event"] == "consumed"}


def serve_broker(work: Path, name: str, namesrv: str) -> Served:
    return start_serve(work / name, settings=f"brokerName={name}\nnamesrvAddr={namesrv}\n", namesrv=False)


@pytest.fixture(scope="module")
def two_stores_under_rocketmq(
    rocketmq_dist: RocketMQDist, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Cluster]:
    work = tmp_path_factory.mktemp("cluster-rmq-ns")
    ns = start_rocketmq_namesrv(rocketmq_dist, work / "ns")
    cluster = Cluster(rocketmq_dist, ns.namesrv, {}, rocketmq=[ns])
    try:
        for name in ("rs-a", "rs-b"):
            served = serve_broker(work, name, ns.namesrv)
            cluster.served[name] = served
            cluster.brokers[name] = served.broker
        wait_until(lambda: cluster.listed() == {"rs-a", "rs-b"}, "both rocketstore brokers in clusterList")
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="module")
def mixed_under_rocketstore(
    rocketmq_dist: RocketMQDist, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Cluster]:
    work = tmp_path_factory.mktemp("cluster-rs-ns")
    ns = start_serve(work / "ns", remoting=False)
    cluster = Cluster(rocketmq_dist, ns.namesrv, {}, served={"ns": ns})
    try:
        served = serve_broker(work, "rs-a", ns.namesrv)
        cluster.served["rs-a"] = served
        cluster.brokers["rs-a"] = served.broker
        # its registrations in the zlib form (rocketstore's own brokers send the JSON one)
        java = start_rocketmq_broker(
            rocketmq_dist, work / "rmq", ns.namesrv, settings="compressedRegister=true\n"
        )
        cluster.rocketmq.append(java)
        cluster.brokers["broker-a"] = java.broker
        wait_until(lambda: cluster.listed() == {"rs-a", "broker-a"}, "both brokers in clusterList")
        yield cluster
    finally:
        cluster.stop()


def spread_and_consume_once(cluster: Cluster, java: JavaPrograms, topic: str, group: str, count: int) -> None:
    """``updateTopic -c`` puts the topic on every master, sends land on every broker, and one
    consumer group receives every message once."""
    out = cluster.admin("updateTopic", "-c", CLUSTER, "-t", topic, "-r", "2", "-w", "2")
    assert out.count("success") == len(cluster.brokers), out
    wait_until(
        lambda: cluster.route_brokers(topic) == set(cluster.brokers), f"{topic} routed on every broker"
    )
    events = java.run("Produce", f"namesrv={cluster.namesrv}", f"topic={topic}", f"count={count}")
    sent = [e for e in events if e["event"] == "sent"]
    assert len(sent) == count and all(e["status"] == "SEND_OK" for e in sent)
    ports = Counter(store_port(e["offsetMsgId"]) for e in sent)
    assert set(ports) == {int(a.rpartition(":")[2]) for a in cluster.brokers.values()}, ports
    got = [
        e
        for e in java.run(
            "PushConsume", f"namesrv={cluster.namesrv}", f"group={group}", f"topic={topic}", f"expect={count}"
        )
        if e["event"] == "consumed"
    ]
    bodies = Counter(e["body"] for e in got)
    assert set(bodies) == {f"body-{i}" for i in range(count)}
    assert max(bodies.values()) == 1, [b for b, n in bodies.items() if n > 1]


def test_two_rocketstore_brokers_under_rocketmq_name_server(
    two_stores_under_rocketmq: Cluster, java: JavaPrograms
) -> None:
    cluster = two_stores_under_rocketmq
    listing = cluster.admin("clusterList")
    for name, address in cluster.brokers.items():
        assert any(name in line and address in line for line in listing.splitlines()), listing
    spread_and_consume_once(cluster, java, "ClusterSpread", "cluster_g", 40)
    status = cluster.admin("brokerStatus", "-c", CLUSTER)
    assert all(address in status for address in cluster.brokers.values()), status

    def progress_brokers() -> set[str]:
        # mqadmin may print nothing (exit 0) when one of its calls fails on a loaded machine: asked again
        out = cluster.admin("consumerProgress", "-g", "cluster_g")
        return {line.split()[1] for line in out.splitlines() if line.startswith("ClusterSpread")}

    wait_until(lambda: progress_brokers() == set(cluster.brokers), "consumerProgress naming both brokers")


def test_kill_of_a_rocketstore_broker_mid_stream_loses_nothing_acknowledged(
    two_stores_under_rocketmq: Cluster, java: JavaPrograms
) -> None:
    cluster = two_stores_under_rocketmq
    topic, count = "KillRestart", 300
    cluster.admin("updateTopic", "-c", CLUSTER, "-t", topic, "-r", "2", "-w", "2")
    wait_until(lambda: cluster.route_brokers(topic) == set(cluster.brokers), f"{topic} routed on both")
    # 30 s per send (its tries included) rather than 10: a loaded CI machine is slow, not wrong;
    # sendLatencyFaultEnable: a broker that failed a send is avoided for a while
    producer = java.start(
        "Produce",
        f"namesrv={cluster.namesrv}",
        f"topic={topic}",
        f"count={count}",
        "timeout=30000",
        "latencyFault=true",
        "keepGoing=true",
        "pauseMs=20",  # paced (6 s or more): unpaced, the stream may end before the kill
    )
    victim = cluster.served["rs-b"]
    victim_port = int(victim.broker.rpartition(":")[2])

    def sent() -> list[dict[str, Any]]:
        return [e for e in producer.events if e["event"] == "sent"]

    wait_until(lambda: any(store_port(e["offsetMsgId"]) == victim_port for e in sent()), "a send on rs-b")
    victim.kill()
    # RocketMQ's name server drops it when its registration connection closes
    wait_until(lambda: cluster.route_brokers(topic) == {"rs-a"}, "rs-b's removal from the route", timeout=30)
    producer.finish()
    assert producer.proc.returncode == 0, producer.output[-4000:]
    acked = check_carried_on(producer.events, count, cluster.brokers["rs-a"])
    # restarted over the same store, it registers again; a new group reads every acknowledged message
    restarted = serve_broker(victim.store.parent, "rs-b", cluster.namesrv)
    cluster.served["rs-b"], cluster.brokers["rs-b"] = restarted, restarted.broker
    wait_until(lambda: cluster.route_brokers(topic) == {"rs-a", "rs-b"}, "rs-b back in the route")
    stored = sum(slave_max_offsets(address, topic, 2) for address in cluster.brokers.values())
    got = java.run(
        "PushConsume", f"namesrv={cluster.namesrv}", "group=kill_g", f"topic={topic}", f"expect={stored}"
    )
    assert {e["body"] for e in got if e["event"] == "consumed"} >= {f"body-{e['i']}" for e in acked}


def test_mixed_cluster_under_rocketstore_name_server(
    mixed_under_rocketstore: Cluster, java: JavaPrograms
) -> None:
    cluster = mixed_under_rocketstore
    spread_and_consume_once(cluster, java, "MixedSpread", "mixed_g", 40)


def test_kill_of_a_broker_mid_stream_and_a_clean_stop(
    mixed_under_rocketstore: Cluster, java: JavaPrograms
) -> None:
    cluster = mixed_under_rocketstore
    topic = "MixedKill"
    cluster.admin("updateTopic", "-c", CLUSTER, "-t", topic, "-r", "2", "-w", "2")
    wait_until(
        lambda: cluster.route_brokers(topic) == set(cluster.brokers), f"{topic} routed on both brokers"
    )
    count = 400
    producer = java.start(
        "Produce",
        f"namesrv={cluster.namesrv}",
        f"topic={topic}",
        f"count={count}",
        "timeout=30000",
        "keepGoing=true",
        "pauseMs=20",  # paced (8 s or more): unpaced, the stream may end before the kill
    )
    rocketmq_port = int(cluster.brokers["broker-a"].rpartition(":")[2])

    def sent() -> list[dict[str, Any]]:
        return [e for e in producer.events if e["event"] == "sent"]

    wait_until(
        lambda: any(store_port(e["offsetMsgId"]) == rocketmq_port for e in sent()), "a send on RocketMQ"
    )
    cluster.rocketmq[0].processes[0].kill()
    killed_at = time.monotonic()
    # the name server drops the killed broker when its connection closes
    wait_until(lambda: cluster.route_brokers(topic) == {"rs-a"}, "the killed broker's removal", timeout=30)
    assert time.monotonic() - killed_at < 30
    producer.finish()
    assert producer.proc.returncode == 0, producer.output[-4000:]
    check_carried_on(producer.events, count, cluster.brokers["rs-a"])

    # a clean stop unregisters at once: no broker is left for the topic
    cluster.served.pop("rs-a").stop()
    wait_until(lambda: not cluster.route_brokers(topic), "the stopped broker's removal", timeout=10)


def slave_max_offsets(address: str, topic: str, queues: int) -> int:
    """Messages in ``topic`` on the broker at ``address`` (GET_MAX_OFFSET per queue); -1 while
    that broker does not know the topic."""
    total = 0
    host, _, port = address.rpartition(":")
    with RawClient(int(port), host) as client:
        for queue_id in range(queues):
            resp = client.call(RequestCode.GET_MAX_OFFSET, {"topic": topic, "queueId": str(queue_id)})
            if resp.code != ResponseCode.SUCCESS:
                return -1
            total += int(resp.ext_fields["offset"])
    return total


def route_ids(cluster: Cluster, topic: str) -> dict[int, str]:
    """The addresses by broker id of ``topic``'s route line (``topicRoute -l``:
    ``{0=127.0.0.1:10911, 1=...}``)."""
    out = cluster.dist.mqadmin("topicRoute", "-t", topic, "-l", "-n", cluster.namesrv).stdout
    for line in out.splitlines():
        if line.startswith(CLUSTER) and "{" in line:
            inner = line[line.index("{") + 1 : line.index("}")]
            pairs = (item.strip().split("=", 1) for item in inner.split(","))
            return {int(k): v for k, v in pairs}
    return {}


@pytest.fixture(scope="module")
def master_and_slave(
    rocketmq_dist: RocketMQDist, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Cluster]:
    """A rocketstore master and a rocketstore slave that learns its master's HA address from the
    name server (no haMasterAddress), under rocketstore's name server alone."""
    work = tmp_path_factory.mktemp("cluster-slave")
    ns = start_serve(work / "ns", remoting=False)
    cluster = Cluster(rocketmq_dist, ns.namesrv, {}, served={"ns": ns})
    try:
        common = f"brokerName=rs-ms\nnamesrvAddr={ns.namesrv}\nbrokerIP2=127.0.0.1\n"
        master = start_serve(work / "master", settings=common + "haListenPort=0\n", namesrv=False)
        cluster.served["master"] = master
        cluster.brokers["master"] = master.broker
        slave = start_serve(work / "slave", settings=common + "brokerRole=SLAVE\nbrokerId=1\n", namesrv=False)
        cluster.served["slave"] = slave
        cluster.brokers["slave"] = slave.broker
        # and a RocketMQ slave of the same master (id 2), which also finds it through the name server
        rmq_slave = start_rocketmq_broker(
            rocketmq_dist,
            work / "rmq-slave",
            ns.namesrv,
            settings="brokerName=rs-ms\nbrokerRole=SLAVE\nbrokerId=2\n",
        )
        cluster.rocketmq.append(rmq_slave)
        cluster.brokers["rmq-slave"] = rmq_slave.broker
        wait_until(
            lambda: cluster.admin("clusterList").count("rs-ms") == 3, "master and slaves in clusterList"
        )
        yield cluster
    finally:
        cluster.stop()


def test_slave_found_through_the_name_server_serves_reads_after_the_master_dies(
    master_and_slave: Cluster, java: JavaPrograms
) -> None:
    cluster = master_and_slave
    topic, count = "FromSlave", 50
    out = cluster.admin("updateTopic", "-c", CLUSTER, "-t", topic, "-r", "2", "-w", "2")
    assert out.count("success") == 1, out  # masters only
    events = java.run("Produce", f"namesrv={cluster.namesrv}", f"topic={topic}", f"count={count}")
    assert sum(1 for e in events if e["event"] == "sent" and e["status"] == "SEND_OK") == count
    # the slave replicates (its HA master from the name server) and copies the topic (10 s period)
    slave = cluster.brokers["slave"]
    for address in (slave, cluster.brokers["rmq-slave"]):
        wait_until(
            lambda address=address: slave_max_offsets(address, topic, 2) == count,
            f"{address} holding every message",
            timeout=60,
        )
    # a group's offset and the delay progress reach both slaves (RocketMQ's copies, every 10 s);
    # the RocketMQ slave takes the group's settings too (GET_ALL_SUBSCRIPTIONGROUP_CONFIG)
    assert cluster.admin("updateTopic", "-c", CLUSTER, "-t", "FromSlaveLater").count("success") == 1
    delayed = java.run("Produce", f"namesrv={cluster.namesrv}", "topic=FromSlaveLater", "count=1", "delay=18")
    assert [e["status"] for e in delayed if e["event"] == "sent"] == ["SEND_OK"]
    master_port = int(cluster.brokers["master"].rpartition(":")[2])
    with RawClient(master_port) as client:
        update = {"consumerGroup": "synced_g", "topic": topic, "queueId": "0", "commitOffset": "1"}
        assert client.call(RequestCode.UPDATE_CONSUMER_OFFSET, update).code == ResponseCode.SUCCESS
    rmq_config = cluster.rocketmq[0].store / "config"

    for config in (cluster.served["slave"].store / "config", rmq_config):
        for name, text in (("consumerOffset.json", f"{topic}@synced_g"), ("delayOffset.json", "18")):
            wait_until(lambda c=config, n=name, t=text: copied(c, n, t), f"{name} in {config}")
    wait_until(lambda: copied(rmq_config, "subscriptionGroup.json", '"synced_g"'), "the group's settings")
    cluster.served.pop("master").kill()
    master = cluster.brokers["master"]
    wait_until(
        lambda: route_ids(cluster, topic) == {1: slave, 2: cluster.brokers["rmq-slave"]},
        f"the route naming the slaves only (not {master})",
        timeout=30,
    )
    assert consumed_bodies(cluster, java, "from_slave_g", topic, count) == {f"body-{i}" for i in range(count)}
    # the rocketstore slave stopped too: the RocketMQ slave serves a new group everything
    cluster.served.pop("slave").stop()
    rmq_slave = cluster.brokers["rmq-slave"]
    wait_until(
        lambda: route_ids(cluster, topic) == {2: rmq_slave}, "the route naming the RocketMQ slave only"
    )
    assert consumed_bodies(cluster, java, "from_rmq_slave_g", topic, count) == {
        f"body-{i}" for i in range(count)
    }


def test_rocketstore_slave_of_a_rocketmq_master_serves_reads_after_the_master_dies(
    rocketmq_dist: RocketMQDist, java: JavaPrograms, tmp_path: Path
) -> None:
    """The other way round: RocketMQ's name server and master, a rocketstore slave that finds the
    master through the name server, replicates from it over RocketMQ's HA protocol, copies its
    topics and offsets from its listen port, and serves a new group every message once the
    master is killed (its offsets and delay offsets copied too)."""
    ns = start_rocketmq_namesrv(rocketmq_dist, tmp_path / "ns")
    cluster = Cluster(rocketmq_dist, ns.namesrv, {}, rocketmq=[ns])
    try:
        master = start_rocketmq_broker(
            rocketmq_dist, tmp_path / "rmq-master", ns.namesrv, settings="brokerName=rmq-ms\n"
        )
        cluster.rocketmq.append(master)
        cluster.brokers["master"] = master.broker
        slave = start_serve(
            tmp_path / "slave",
            settings=f"brokerName=rmq-ms\nnamesrvAddr={ns.namesrv}\nbrokerRole=SLAVE\nbrokerId=1\nbrokerIP2=127.0.0.1\n",
            namesrv=False,
        )
        cluster.served["slave"] = slave
        wait_until(
            lambda: cluster.admin("clusterList").count("rmq-ms") == 2, "master and slave in clusterList"
        )
        topic, count = "FromRocketStoreSlave", 40
        assert (
            cluster.admin("updateTopic", "-c", CLUSTER, "-t", topic, "-r", "2", "-w", "2").count("success")
            == 1
        )
        events = java.run("Produce", f"namesrv={cluster.namesrv}", f"topic={topic}", f"count={count}")
        assert sum(1 for e in events if e["event"] == "sent" and e["status"] == "SEND_OK") == count
        master_port = int(master.broker.rpartition(":")[2])
        with RawClient(master_port) as client:
            update = {"consumerGroup": "synced_g", "topic": topic, "queueId": "0", "commitOffset": "1"}
            assert client.call(RequestCode.UPDATE_CONSUMER_OFFSET, update).code == ResponseCode.SUCCESS
        wait_until(
            lambda: slave_max_offsets(slave.broker, topic, 2) == count,
            "the slave holding every message",
            timeout=60,
        )
        # RocketMQ's delayOffset.json (fastjson: unquoted integer keys; a level appears once its
        # first message was delivered, here after 1 s) read into the slave's
        assert cluster.admin("updateTopic", "-c", CLUSTER, "-t", f"{topic}Later").count("success") == 1
        delayed = java.run(
            "Produce", f"namesrv={cluster.namesrv}", f"topic={topic}Later", "count=1", "delay=1"
        )
        assert [e["status"] for e in delayed if e["event"] == "sent"] == ["SEND_OK"]
        config = slave.store / "config"
        for name, text in (("consumerOffset.json", f"{topic}@synced_g"), ("delayOffset.json", '"1": 1')):
            wait_until(
                lambda n=name, t=text: copied(config, n, t),
                f"the master's {name}",
            )
        master.processes[0].kill()
        wait_until(
            lambda: route_ids(cluster, topic) == {1: slave.broker},
            "the route naming the slave only",
            timeout=60,
        )
        assert consumed_bodies(cluster, java, "from_rs_slave_g", topic, count) == {
            f"body-{i}" for i in range(count)
        }
    finally:
        cluster.stop()
