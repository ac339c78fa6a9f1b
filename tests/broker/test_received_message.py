"""The Message a consumer receives, built from nested field dicts (``message_fields``), equals
the one built field by field from protobuf objects, read back with the official client's
protobuf classes; and one AckMessage of several entries answers and counts each entry."""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
from typing import Any

import pytest
from google.protobuf import timestamp_pb2
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as rpc

from rocketstore import Message, MessageStore
from rocketstore.broker import BrokerConfig
from rocketstore.broker.grpc.received_message import message_fields, message_type_of, to_proto_message
from rocketstore.broker.grpc.sent_message import SYSTEM_PROPERTIES
from rocketstore.codec.commitlog_record import SYSFLAG_COMPRESSED
from rocketstore.message import MessageExt

from .conftest import CLIENT, SMALL, StartBroker


def _timestamp(ms: int) -> Any:
    return timestamp_pb2.Timestamp(seconds=ms // 1000, nanos=(ms % 1000) * 1_000_000)


def field_by_field(
    msg: MessageExt, *, topic: str, receipt_handle: str, delivery_attempt: int, dead_letter_queue: str | None
) -> Any:
    """The received Message as the broker built it before ``message_fields``: one protobuf
    object per submessage, each field set by name."""
    props = msg.properties
    body = msg.body
    sp = pb.SystemProperties(
        message_id=props.get("UNIQ_KEY") or msg.msg_id,
        body_digest=pb.Digest(type=pb.DigestType.MD5, checksum=hashlib.md5(body).hexdigest().upper()),
        body_encoding=pb.Encoding.GZIP if msg.sys_flag & SYSFLAG_COMPRESSED else pb.Encoding.IDENTITY,
        message_type=message_type_of(props),
        born_timestamp=_timestamp(msg.born_timestamp),
        born_host=props.get("__BORNHOST") or msg.born_host.rpartition(":")[0],
        store_timestamp=_timestamp(msg.store_timestamp),
        store_host=msg.store_host,
        queue_id=msg.queue_id,
        queue_offset=msg.queue_offset,
    )
    if props.get("TAGS"):
        sp.tag = props["TAGS"]
    if msg.keys:
        sp.keys.extend(msg.keys)
    if props.get("__SHARDINGKEY"):
        sp.message_group = props["__SHARDINGKEY"]
    deliver = props.get("TIMER_DELIVER_MS")
    if deliver and deliver.isdigit():
        sp.delivery_timestamp.CopyFrom(_timestamp(int(deliver)))
    if props.get("TRACE_CONTEXT"):
        sp.trace_context = props["TRACE_CONTEXT"]
    if receipt_handle:
        sp.receipt_handle = receipt_handle
    if delivery_attempt:
        sp.delivery_attempt = delivery_attempt
    if dead_letter_queue:
        sp.dead_letter_queue.topic = dead_letter_queue
    return pb.Message(
        topic=pb.Resource(name=topic),
        system_properties=sp,
        body=body,
        user_properties={k: v for k, v in props.items() if k not in SYSTEM_PROPERTIES},
    )


STORED = [
    Message("T", b"plain"),
    Message("T", b"tagged", tags="A", keys=("k1", "k2"), properties={"n": "1", "TRACE_CONTEXT": "tc"}),
    Message("T", b"grouped", properties={"__SHARDINGKEY": "g1", "__BORNHOST": "10.0.0.9"}),
    Message("T", b"timed", properties={"TIMER_DELIVER_MS": "1700000000123", "x": "y"}),
    # as a RocketMQ 4.9 store may hold it (a put refuses it: TIMER_OUT_MS marks it already converted)
    Message("T", b"not-a-time", properties={"TIMER_DELIVER_MS": "soon", "TIMER_OUT_MS": "0"}),
    Message("T", b"half", properties={"TRAN_MSG": "true", "PGROUP": "T"}),
    Message("T", gzip.compress(b"zipped"), sys_flag=SYSFLAG_COMPRESSED),
    Message("T", b"k", keys=("only",), born_host="192.168.1.2:4567", born_timestamp=1_700_000_000_999),
]


@pytest.fixture(scope="module")
def stored(tmp_path_factory: pytest.TempPathFactory) -> Any:
    store = MessageStore.open(tmp_path_factory.mktemp("received") / "store", SMALL)
    try:
        store.create_topic("T", 1)
        results = store.put_messages([dataclasses.replace(m, queue_id=0) for m in STORED])
        assert all(r.ok for r in results)
        assert store.wait_dispatched(10)
        found = store.get_message("G", "T", 0, 0, len(STORED))
        assert len(found.messages) == len(STORED)
        yield found.messages
    finally:
        store.close()


@pytest.mark.parametrize(
    ("receipt_handle", "delivery_attempt", "dead_letter_queue"),
    [("", 0, None), ("handle-1", 1, None), ("handle-2", 3, "%DLQ%G")],
)
def test_message_fields_equal_the_message_built_field_by_field(
    stored: list[MessageExt], receipt_handle: str, delivery_attempt: int, dead_letter_queue: str | None
) -> None:
    for msg in stored:
        asked: dict[str, Any] = {
            "topic": "Original",
            "receipt_handle": receipt_handle,
            "delivery_attempt": delivery_attempt,
            "dead_letter_queue": dead_letter_queue,
        }
        expected = field_by_field(msg, **asked)
        # as a Telemetry check carries it, and as a receive's response does
        built = pb.Message.FromString(to_proto_message(msg, **asked).SerializeToString())
        assert built == expected, msg.body
        response = rpc.ReceiveMessageResponse.FromString(
            rpc.ReceiveMessageResponse(message=message_fields(msg, **asked)).SerializeToString()
        )
        assert response == rpc.ReceiveMessageResponse(message=expected), msg.body


def test_one_ack_of_several_entries_answers_and_counts_each(start_broker: StartBroker, stub_for: Any) -> None:
    broker, _, port = start_broker(BrokerConfig(invisible_min_ms=1000, long_polling_min_ms=0))
    stub = stub_for(port)
    group, topic = pb.Resource(name="AckG"), pb.Resource(name="AckT")
    receive = rpc.ReceiveMessageRequest(
        group=group,
        message_queue=pb.MessageQueue(topic=topic, id=-1),
        filter_expression=pb.FilterExpression(type=pb.FilterType.TAG, expression="*"),
        batch_size=2,
        invisible_duration={"seconds": 30},
    )

    def messages(wait_s: int) -> list[Any]:
        receive.long_polling_timeout.seconds = wait_s  # a receive waits this long for an arrival
        return [r.message for r in stub.ReceiveMessage(receive, metadata=CLIENT) if r.HasField("message")]

    assert messages(0) == []  # a new group starts at the end of the queues: from here on
    for body in (b"a", b"b"):
        sent = rpc.SendMessageRequest(
            messages=[
                pb.Message(
                    topic=topic, body=body, system_properties=pb.SystemProperties(message_id=body.hex())
                )
            ]
        )
        assert stub.SendMessage(sent, metadata=CLIENT).status.code == pb.Code.OK
    received: list[Any] = []
    for _ in range(20):
        received += messages(10)
        if len(received) >= 2:
            break
    assert sorted(m.body for m in received) == [b"a", b"b"]
    entries = [
        rpc.AckMessageEntry(
            message_id=m.system_properties.message_id, receipt_handle=m.system_properties.receipt_handle
        )
        for m in received
    ]
    bogus = rpc.AckMessageEntry(message_id="x", receipt_handle="not-a-handle")

    mixed = stub.AckMessage(
        rpc.AckMessageRequest(group=group, topic=topic, entries=[entries[0], bogus, entries[1]]),
        metadata=CLIENT,
    )
    assert mixed.status.code == pb.Code.MULTIPLE_RESULTS
    assert [e.status.code for e in mixed.entries] == [
        pb.Code.OK,
        pb.Code.INVALID_RECEIPT_HANDLE,
        pb.Code.OK,
    ]
    assert [e.status.message for e in mixed.entries][::2] == ["OK", "OK"]
    assert [(e.message_id, e.receipt_handle) for e in mixed.entries] == [
        (e.message_id, e.receipt_handle) for e in (entries[0], bogus, entries[1])
    ]
    refused = stub.AckMessage(
        rpc.AckMessageRequest(group=group, topic=topic, entries=[bogus, bogus]), metadata=CLIENT
    )
    assert refused.status.code == pb.Code.INVALID_RECEIPT_HANDLE
    assert refused.status == refused.entries[0].status
    empty = stub.AckMessage(rpc.AckMessageRequest(group=group, topic=topic), metadata=CLIENT)
    assert empty.status.code == pb.Code.OK and empty.status.message == "OK" and not empty.entries
    acks = broker.metrics.acks
    assert acks.labels("AckG", "AckT", "OK")._value.get() == 2
    assert acks.labels("AckG", "AckT", "INVALID_RECEIPT_HANDLE")._value.get() == 3


def test_one_send_of_several_messages_answers_and_counts_each(
    start_broker: StartBroker, stub_for: Any
) -> None:
    broker, _, port = start_broker()
    stub = stub_for(port)
    topic = pb.Resource(name="SendT")
    request = rpc.SendMessageRequest(
        messages=[
            pb.Message(topic=topic, body=b"m", system_properties=pb.SystemProperties(message_id=f"id{i}"))
            for i in range(3)
        ]
    )
    answer = stub.SendMessage(request, metadata=CLIENT)
    assert answer.status == pb.Status(code=pb.Code.OK, message="OK")
    assert [(e.message_id, e.status.code, e.status.message) for e in answer.entries] == [
        (f"id{i}", pb.Code.OK, "OK") for i in range(3)
    ]
    sends = broker.metrics.sends
    assert sends.labels("SendT", "MESSAGE_TYPE_UNSPECIFIED", "OK")._value.get() == 3
