"""Sends of the official Python client through `rocketstore serve`, read back from the store."""

from __future__ import annotations

import time
from typing import Any

import grpc
import pytest
from rocketmq.grpc_protocol import TransactionResolution, service_pb2_grpc
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as rpc
from rocketmq.v5.producer import TransactionChecker

from rocketstore.broker import BrokerConfig
from rocketstore.broker.stats_items import TOPIC_PUT_NUMS
from rocketstore.broker.transactions import CHECK_MAX_TOPIC, HALF_TOPIC, OP_TOPIC
from rocketstore.codec.java_hash import java_hash
from rocketstore.message import SCHEDULE_TOPIC, TIMER_TOPIC, MessageExt
from rocketstore.store import MessageStore

from .clients import message, producer
from .conftest import CLIENT, StartBroker


def stored(store: MessageStore, topic: str) -> list[MessageExt]:
    """Every message of ``topic``, queue by queue, after dispatch caught up."""
    assert store.wait_dispatched(10)
    out = []
    for queue_id in store.topics().get(topic, []):
        out.extend(store.get_message("test", topic, queue_id, 0, 1000).messages)
    return out


def test_normal_send_lands_in_the_store_as_rocketmq_5_maps_it(start_broker: StartBroker) -> None:
    _, store, port = start_broker()
    with producer(port, ("Orders",)) as p:
        receipt = p.send(
            message("Orders", b"first", tag="TagA", keys=("k1", "k2"), properties={"region": "eu"})
        )
    [msg] = stored(store, "Orders")
    assert msg.body == b"first"
    assert msg.tags == "TagA"
    assert sorted(msg.keys) == ["k1", "k2"]
    assert msg.uniq_key == receipt.message_id  # the client's id: consumers see it again
    assert msg.properties["region"] == "eu"
    assert msg.queue_offset == receipt.offset
    assert msg.sys_flag & 0xC == 0
    assert int(msg.properties["BORN_TIMESTAMP"]) // 1000 == msg.born_timestamp // 1000
    # topics are created on first use with the store's default queue count
    assert store.topic_configs()["Orders"].write_queues == store.config.default_topic_queue_nums
    # the query index finds it by key, as RocketMQ's does
    assert [m.body for m in store.query_message("Orders", "k2")] == [b"first"]


def test_fifo_messages_of_a_group_share_a_queue_in_send_order(start_broker: StartBroker) -> None:
    _, store, port = start_broker()
    with producer(port, ("Fifo",)) as p:
        for i in range(6):
            p.send(message("Fifo", f"a{i}".encode(), group="group-a"))
            p.send(message("Fifo", f"b{i}".encode(), group="group-b"))
    msgs = stored(store, "Fifo")
    queues = store.config.default_topic_queue_nums
    for group in ("group-a", "group-b"):
        mine = [m for m in msgs if m.properties.get("__SHARDINGKEY") == group]
        assert {m.queue_id for m in mine} == {abs(java_hash(group)) % queues}
        assert [m.body for m in sorted(mine, key=lambda m: m.queue_offset)] == [
            f"{group[-1]}{i}".encode() for i in range(6)
        ]


def test_plain_sends_take_the_columnar_put_and_timers_put_messages(
    start_broker: StartBroker, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The door's sends are stored as the remoting door's are, by the store's columnar put
    (``put_encoded_columns``), spread round robin over the topic's queues; a message with a
    delivery time goes through ``put_messages``, which makes it a timer."""
    _, store, port = start_broker()
    calls: list[tuple[str, int]] = []
    for name in ("put_encoded_columns", "put_messages"):
        real = getattr(store, name)

        def spy(items: Any, *args: Any, _real: Any = real, _name: str = name, **kwargs: Any) -> Any:
            calls.append((_name, len(items)))
            return _real(items, *args, **kwargs)

        monkeypatch.setattr(store, name, spy)
    queues = store.config.default_topic_queue_nums
    with producer(port, ("Spread",)) as p:
        receipts = [p.send(message("Spread", b"m%d" % i, keys=(f"k{i}",))) for i in range(queues)]
        p.send(message("Spread", b"later", deliver_at_s=int(time.time()) + 60))
    assert {name for name, _ in calls} == {"put_encoded_columns", "put_messages"}
    assert sum(n for name, n in calls if name == "put_encoded_columns") == queues
    assert [n for name, n in calls if name == "put_messages"] == [1]
    msgs = stored(store, "Spread")
    assert sorted(m.queue_id for m in msgs) == list(range(queues))
    by_body = {m.body: m for m in msgs}
    for i, receipt in enumerate(receipts):
        m = by_body[b"m%d" % i]
        assert (m.uniq_key, m.keys, m.queue_offset) == (receipt.message_id, [f"k{i}"], receipt.offset)
    assert [m.body for m in store.query_message("Spread", "k3")] == [b"m3"]


def test_a_delivery_time_is_an_exact_timer(start_broker: StartBroker) -> None:
    """RocketMQ 5's proxy: delivery_timestamp becomes TIMER_DELIVER_MS, no delay level; the message
    waits in rmq_sys_wheel_timer and reaches its topic at that time, not before, with its id."""
    _, store, port = start_broker()
    deliver_at = int(time.time()) + 2  # whole seconds, as the official Python client sends them
    with producer(port, ("Later",)) as p:
        receipt = p.send(message("Later", b"later", deliver_at_s=deliver_at))
    assert stored(store, "Later") == [] and stored(store, SCHEDULE_TOPIC) == []
    [timer] = stored(store, TIMER_TOPIC)
    props = timer.properties
    assert props["REAL_TOPIC"] == "Later" and "DELAY" not in props
    assert props["TIMER_DELIVER_MS"] == str(deliver_at * 1000)
    deadline = time.monotonic() + 20
    while not stored(store, "Later") and time.monotonic() < deadline:
        time.sleep(0.02)
    [delivered] = stored(store, "Later")
    assert delivered.store_timestamp >= deliver_at * 1000  # never early
    assert delivered.uniq_key == receipt.message_id and delivered.body == b"later"


def test_a_delivery_time_in_milliseconds_is_refused_saying_so(start_broker: StartBroker) -> None:
    """The official Python client puts Message.delivery_timestamp into the Timestamp's seconds field
    (its docstring says ms): a time in ms lands 1000 times too far ahead, and the refusal says why."""
    _, store, port = start_broker()
    deliver_at_ms = int(time.time() * 1000) + 25_000
    with producer(port, ("Later",)) as p, pytest.raises(Exception, match=r"ahead.*looks like milliseconds"):
        p.send(message("Later", b"later", deliver_at_s=deliver_at_ms))
    assert stored(store, TIMER_TOPIC) == []


class Checker(TransactionChecker):  # type: ignore[misc]
    def __init__(self, answer: Any) -> None:
        self.answer = answer
        self.checked: list[str] = []

    def check(self, message: Any) -> Any:
        self.checked.append(message.message_id)
        return self.answer


def test_committed_transaction_is_a_commit_record_pointing_at_its_half(start_broker: StartBroker) -> None:
    _, store, port = start_broker()
    with producer(port, ("Tx",), Checker(TransactionResolution.COMMIT)) as p:
        tx = p.begin_transaction()
        receipt = p.send(message("Tx", b"paid", tag="T"), tx)
        assert stored(store, "Tx") == []  # a half is not visible in its topic
        tx.commit()
    [half] = stored(store, HALF_TOPIC)
    assert half.properties["REAL_TOPIC"] == "Tx"
    assert half.properties["TRAN_MSG"] == "true"
    assert half.sys_flag & 0xC == 0
    [committed] = stored(store, "Tx")
    assert committed.body == b"paid" and committed.tags == "T"
    assert committed.uniq_key == receipt.message_id
    assert committed.sys_flag & 0xC == 0x8
    assert committed.prepared_transaction_offset == half.physical_offset
    assert committed.queue_id == int(half.properties["REAL_QID"])
    assert "REAL_TOPIC" not in committed.properties
    [op] = stored(store, OP_TOPIC)
    assert (op.tags, op.body) == ("d", str(half.queue_offset).encode())


def test_rolled_back_transaction_leaves_only_the_op_record(start_broker: StartBroker) -> None:
    _, store, port = start_broker()
    with producer(port, ("Tx",), Checker(TransactionResolution.COMMIT)) as p:
        tx = p.begin_transaction()
        p.send(message("Tx", b"cancelled"), tx)
        tx.rollback()
    assert stored(store, "Tx") == []
    [half] = stored(store, HALF_TOPIC)
    [op] = stored(store, OP_TOPIC)
    assert op.body == str(half.queue_offset).encode()


def test_an_orphaned_transaction_is_checked_with_its_producer(start_broker: StartBroker) -> None:
    config = BrokerConfig(transaction_timeout_ms=0, transaction_check_interval_ms=200)
    _, store, port = start_broker(config)
    checker = Checker(TransactionResolution.COMMIT)
    with producer(port, ("Tx",), checker) as p:
        tx = p.begin_transaction()
        receipt = p.send(message("Tx", b"orphan"), tx)  # neither committed nor rolled back
        deadline = time.monotonic() + 30
        while not stored(store, "Tx") and time.monotonic() < deadline:
            time.sleep(0.1)
    assert receipt.message_id in checker.checked
    [committed] = stored(store, "Tx")
    assert committed.body == b"orphan" and committed.sys_flag & 0xC == 0x8


def test_a_transaction_checked_too_often_moves_to_the_check_max_topic(start_broker: StartBroker) -> None:
    config = BrokerConfig(
        transaction_timeout_ms=0, transaction_check_interval_ms=200, transaction_check_max=0
    )
    _, store, port = start_broker(config)
    with producer(port, ("Tx",), Checker(TransactionResolution.COMMIT)) as p:
        tx = p.begin_transaction()
        p.send(message("Tx", b"forgotten"), tx)
        deadline = time.monotonic() + 30
        while not stored(store, CHECK_MAX_TOPIC) and time.monotonic() < deadline:
            time.sleep(0.1)
        with pytest.raises(Exception, match=r"INVALID_TRANSACTION_ID|already ended|40008"):
            tx.commit()
    [moved] = stored(store, CHECK_MAX_TOPIC)
    assert moved.body == b"forgotten"
    assert stored(store, "Tx") == []


def test_restarted_broker_ends_a_transaction_begun_before(start_broker: StartBroker) -> None:
    broker, store, port = start_broker()
    with producer(port, ("Tx",), Checker(TransactionResolution.COMMIT)) as p:
        tx = p.begin_transaction()
        p.send(message("Tx", b"across a restart"), tx)
        broker.stop_in_thread()
        store.close()
        _, store, port2 = start_broker()
    # the transaction id names the half's commitlog offset: a new broker finds it
    [half] = stored(store, HALF_TOPIC)
    with grpc.insecure_channel(f"127.0.0.1:{port2}") as channel:
        stub = service_pb2_grpc.MessagingServiceStub(channel)
        request = rpc.EndTransactionRequest(
            topic=pb.Resource(name="Tx"),
            message_id=half.uniq_key,
            transaction_id=half.msg_id,
            resolution=pb.TransactionResolution.COMMIT,
            source=pb.TransactionSource.SOURCE_CLIENT,
        )
        assert stub.EndTransaction(request, metadata=CLIENT).status.code == pb.Code.OK
        again = stub.EndTransaction(request, metadata=CLIENT)
        assert again.status.code == pb.Code.INVALID_TRANSACTION_ID
    [committed] = stored(store, "Tx")
    assert committed.body == b"across a restart"


def test_sends_are_counted_in_the_stats_items(start_broker: StartBroker) -> None:
    """What mqadmin statsAll reads over remoting counts the gRPC door's sends too."""
    broker, _, port = start_broker()
    with producer(port, ("Counted",)) as p:
        p.send(message("Counted", b"a"))
        p.send(message("Counted", b"b"))
    assert broker.metrics.stats.counted(TOPIC_PUT_NUMS, "Counted") == (2, 2)
