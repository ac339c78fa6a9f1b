"""Failures found by the acceptance check of issue 16 (official clients installed apart from the
project, against `rocketstore serve`; how to rerun it by hand: docs/testing.md).

* Both official PushConsumers (Python 5.1.2, Node 1.0.8) receive with ``auto_renew=true`` and no
  ``invisible_duration``; RocketMQ's proxy then uses its default invisible time (60 s) and renews it
  itself. The broker validated the absent duration as 0 ms and answered every such receive
  ILLEGAL_INVISIBLE_TIME, so a PushConsumer never consumed anything.
* RocketMQ's proxy ends every receive stream with a ``{delivery_timestamp}`` response
  (ReceiveMessageResponseStreamWriter.onComplete); the Python PushConsumer computes its delivery
  latency metric from it (``current - None``: TypeError) before consuming, so without it every
  received batch is dropped client-side and comes back after its invisible time, for ever.
* RocketMQ's EndTransactionProcessor clears ``TRAN_MSG`` on the record a commit writes (4.9.8 and
  5.x alike); the broker kept it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from google.protobuf import duration_pb2
from rocketmq.grpc_protocol import TransactionResolution
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as rpc
from rocketmq.v5.consumer import ConsumeResult, MessageListener, PushConsumer
from rocketmq.v5.model import FilterExpression
from rocketmq.v5.producer import TransactionChecker

from rocketstore.broker import BrokerConfig
from rocketstore.store import MessageStore

from .clients import configuration, message, producer
from .conftest import CLIENT, StartBroker

Stub = Callable[[int], Any]
FAST = BrokerConfig(invisible_min_ms=1000, long_polling_min_ms=0)


def stored(store: MessageStore, topic: str) -> list[Any]:
    assert store.wait_dispatched(10)
    out = []
    for queue_id in store.topics().get(topic, []):
        out.extend(store.get_message("test", topic, queue_id, 0, 1000).messages)
    return out


def push_receive(group: str, topic: str) -> Any:
    """A receive exactly as both official PushConsumers make it: auto renew, no invisible duration."""
    return rpc.ReceiveMessageRequest(
        group=pb.Resource(name=group),
        message_queue=pb.MessageQueue(topic=pb.Resource(name=topic), id=0),
        filter_expression=pb.FilterExpression(type=pb.FilterType.TAG, expression="*"),
        batch_size=32,
        auto_renew=True,
        long_polling_timeout=duration_pb2.Duration(seconds=5),
    )


def test_a_push_consumer_receive_with_auto_renew_and_no_invisible_duration_is_served(
    start_broker: StartBroker, stub_for: Stub
) -> None:
    _, _, port = start_broker(BrokerConfig(long_polling_min_ms=0))
    stub = stub_for(port)
    first = list(stub.ReceiveMessage(push_receive("PG", "PT"), metadata=CLIENT, timeout=10))
    assert first[0].status.code == pb.Code.MESSAGE_NOT_FOUND, first[0].status.message
    with producer(port, ("PT",)) as p:
        p.send(message("PT", b"pushed"))
    responses = list(stub.ReceiveMessage(push_receive("PG", "PT"), metadata=CLIENT, timeout=10))
    assert responses[0].status.code == pb.Code.OK, responses[0].status.message
    assert [r.message.body for r in responses[1:] if r.HasField("message")] == [b"pushed"]
    # the broker chose an invisible time (RocketMQ's default, 60 s): the message is not handed out again now
    again = list(stub.ReceiveMessage(push_receive("PG", "PT"), metadata=CLIENT, timeout=10))
    assert again[0].status.code == pb.Code.MESSAGE_NOT_FOUND


def test_a_receive_stream_with_messages_carries_a_delivery_timestamp(
    start_broker: StartBroker, stub_for: Stub
) -> None:
    _, _, port = start_broker(BrokerConfig(long_polling_min_ms=0))
    stub = stub_for(port)
    request = push_receive("DG", "DT")
    request.auto_renew = False
    request.invisible_duration.seconds = 30
    list(stub.ReceiveMessage(request, metadata=CLIENT, timeout=10))  # the group starts at the end
    with producer(port, ("DT",)) as p:
        p.send(message("DT", b"stamped"))
    before_ms = int(time.time() * 1000) - 1000
    responses = list(stub.ReceiveMessage(request, metadata=CLIENT, timeout=10))
    assert responses[0].status.code == pb.Code.OK
    stamps = [r.delivery_timestamp.ToMilliseconds() for r in responses if r.HasField("delivery_timestamp")]
    assert stamps and stamps[0] >= before_ms, responses


class _Listener(MessageListener):  # type: ignore[misc]
    """Records (body, attempt); fails the first delivery of ``b"fail"``."""

    def __init__(self) -> None:
        self.seen: list[tuple[bytes, int]] = []
        self.lock = threading.Lock()

    def consume(self, message: Any) -> Any:
        with self.lock:
            self.seen.append((message.body, message.delivery_attempt))
        if message.body == b"fail" and message.delivery_attempt == 1:
            return ConsumeResult.FAILURE
        return ConsumeResult.SUCCESS


@pytest.mark.slow
def test_the_python_push_consumer_consumes_and_gets_a_failed_message_again(
    start_broker: StartBroker,
) -> None:
    _, store, port = start_broker(FAST)
    listener = _Listener()
    consumer = PushConsumer(configuration(port), "PushGroup", listener, {"PushTopic": FilterExpression("*")})
    with producer(port, ("PushTopic",)) as p:
        p.send(message("PushTopic", b"before"))  # creates the topic; the new group starts after it
        consumer.startup()
        try:
            # the group's first receive commits where it starts: wait for it before sending
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and all(
                store.query_offset("PushGroup", "PushTopic", q) < 0 for q in range(4)
            ):
                time.sleep(0.2)
            started = [store.query_offset("PushGroup", "PushTopic", q) for q in range(4)]
            assert any(o >= 0 for o in started), "the PushConsumer's receives never got through"
            for i in range(3):
                p.send(message("PushTopic", f"push{i}".encode()))
            p.send(message("PushTopic", b"fail"))
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and (b"fail", 2) not in listener.seen:
                time.sleep(0.2)
        finally:
            consumer.shutdown()
    bodies = {body for body, _ in listener.seen}
    assert {b"push0", b"push1", b"push2", b"fail"} <= bodies, listener.seen
    assert (b"fail", 2) in listener.seen, listener.seen


class _Commit(TransactionChecker):  # type: ignore[misc]
    def check(self, message: Any) -> Any:
        return TransactionResolution.COMMIT


def test_a_commit_record_has_no_tran_msg_property_as_rocketmq_writes_it(start_broker: StartBroker) -> None:
    # RocketMQ 4.9.8 EndTransactionProcessor.processRequest: clearProperty(PROPERTY_TRANSACTION_PREPARED)
    _, store, port = start_broker()
    with producer(port, ("TxA",), _Commit()) as p:
        tx = p.begin_transaction()
        p.send(message("TxA", b"paid"), tx)
        tx.commit()
    [committed] = stored(store, "TxA")
    assert committed.sys_flag & 0xC == 0x8
    assert "TRAN_MSG" not in committed.properties, committed.properties
    assert "REAL_TOPIC" not in committed.properties and "REAL_QID" not in committed.properties
