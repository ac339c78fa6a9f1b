"""Every field of every gRPC request made hostile in turn: each call of each RPC starts from a
well-formed request (a real receipt handle among them), one field is set to a hostile value (text
of every kind, the ends of its integer range, enum values the protocol lacks, negative and huge
durations and times, maps of odd keys, empty and repeated lists) or cleared, and the answer must
be a status, never INTERNAL_ERROR, and nothing may make a handler fail (its "... failed" log,
which is for the broker's own bugs)."""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import grpc
import pytest
from google.protobuf import duration_pb2
from google.protobuf.descriptor import FieldDescriptor

from rocketstore.broker import BrokerConfig
from rocketstore.protocol import definition_pb2 as pb
from rocketstore.protocol import service_pb2 as rpc

from .conftest import CLIENT, StartBroker
from .test_requests import Stub, send_request

TEXTS = [
    "",
    "\x00",
    "²",
    "%RETRY%G",
    "%DLQ%G",
    "RMQ_SYS_TRANS_HALF_TOPIC",
    "a b",
    "../x",
    "é" * 300,
    "x" * 70_000,
]
INTS = {
    FieldDescriptor.TYPE_INT32: [-1, 2**31 - 1, -(2**31)],
    FieldDescriptor.TYPE_SINT32: [-1, 2**31 - 1, -(2**31)],
    FieldDescriptor.TYPE_INT64: [-1, 2**63 - 1, -(2**63)],
    FieldDescriptor.TYPE_SINT64: [-1, 2**63 - 1, -(2**63)],
    FieldDescriptor.TYPE_UINT32: [0, 2**32 - 1],
    FieldDescriptor.TYPE_UINT64: [0, 2**64 - 1],
    FieldDescriptor.TYPE_ENUM: [-1, 99, 2**31 - 1],
    FieldDescriptor.TYPE_BOOL: [True, False],
}
MAPS = [
    {"": ""},
    {"²": "\x00"},
    {"UNIQ_KEY": "x", "TAGS": "a||b", "__TIMER": "1"},
    {"k" * 2000: "v" * 70_000},
]


def _is_map(field: FieldDescriptor) -> bool:
    return field.message_type is not None and field.message_type.GetOptions().map_entry


def _places(msg: Any, at: tuple[Any, ...] = ()) -> Iterator[tuple[tuple[Any, ...], FieldDescriptor]]:
    """Every field of ``msg`` and of the messages it holds (a list's first element for a list)."""
    for field in msg.DESCRIPTOR.fields:
        here = (*at, field.name)
        yield here, field
        if field.message_type is None or _is_map(field):
            continue
        if field.is_repeated:
            items = getattr(msg, field.name)
            if len(items):
                yield from _places(items[0], (*here, 0))
        else:
            yield from _places(getattr(msg, field.name), here)


def _variants(base: Any) -> Iterator[tuple[str, Any]]:
    """(what changed, the request) for each hostile value of each field of ``base``."""
    for path, field in _places(base):

        def changed(change: Callable[[Any, str], None], path: tuple[Any, ...] = path) -> Any:
            request = type(base)()
            request.CopyFrom(base)
            parent = request
            for step in path[:-1]:
                parent = parent[step] if isinstance(step, int) else getattr(parent, step)
            change(parent, path[-1])
            return request

        name = ".".join(map(str, path))
        if _is_map(field):
            for value in MAPS:
                yield f"{name}={value!r:.80}", changed(lambda p, f, v=value: getattr(p, f).update(v))
            continue
        if field.is_repeated:
            yield f"{name}=[]", changed(lambda p, f: p.ClearField(f))
            if field.message_type is not None:
                yield (
                    f"{name}*200",
                    changed(
                        lambda p, f: (
                            getattr(p, f).extend([getattr(p, f)[0]] * 199) if len(getattr(p, f)) else None
                        )
                    ),
                )
            continue
        if field.message_type is not None:
            yield f"{name} cleared", changed(lambda p, f: p.ClearField(f))
            continue
        if field.type == FieldDescriptor.TYPE_STRING:
            values: list[Any] = TEXTS
        elif field.type == FieldDescriptor.TYPE_BYTES:
            values = [b"", b"\xff" * 7, b"x" * 3_000_000]
        else:
            values = INTS.get(field.type, [])
        for value in values:
            yield f"{name}={value!r:.80}", changed(lambda p, f, v=value: setattr(p, f, v))


def test_no_hostile_field_makes_a_handler_fail(
    start_broker: StartBroker, stub_for: Stub, caplog: pytest.LogCaptureFixture
) -> None:
    _, store, port = start_broker(BrokerConfig(long_polling_min_ms=0, long_polling_max_ms=200))
    stub = stub_for(port)
    group, topic = pb.Resource(name="G"), pb.Resource(name="T")
    receive = rpc.ReceiveMessageRequest(
        group=group,
        message_queue=pb.MessageQueue(
            topic=topic, id=-1, permission=pb.Permission.READ_WRITE, broker=pb.Broker(name="broker-a")
        ),
        filter_expression=pb.FilterExpression(type=pb.FilterType.TAG, expression="*"),
        batch_size=1,
        invisible_duration=duration_pb2.Duration(seconds=300),
        auto_renew=False,
        long_polling_timeout=duration_pb2.Duration(seconds=1),
    )
    list(stub.ReceiveMessage(receive, metadata=CLIENT, timeout=30))  # the group starts here
    for _ in range(2):
        assert stub.SendMessage(send_request(), metadata=CLIENT).status.code == pb.Code.OK
    got: list[Any] = []
    deadline = time.monotonic() + 60
    while not got and time.monotonic() < deadline:
        got = [r for r in stub.ReceiveMessage(receive, metadata=CLIENT, timeout=30) if r.HasField("message")]
    assert got, "no message to take a receipt handle from"
    handle = got[0].message.system_properties.receipt_handle
    message_id = got[0].message.system_properties.message_id
    route = rpc.QueryRouteRequest(
        topic=topic,
        endpoints=pb.Endpoints(
            scheme=pb.AddressScheme.IPv4, addresses=[pb.Address(host="127.0.0.1", port=port)]
        ),
    )
    ack = rpc.AckMessageRequest(
        group=group, topic=topic, entries=[rpc.AckMessageEntry(message_id=message_id, receipt_handle=handle)]
    )
    change = rpc.ChangeInvisibleDurationRequest(
        group=group,
        topic=topic,
        receipt_handle=handle,
        message_id=message_id,
        invisible_duration=duration_pb2.Duration(seconds=300),
    )
    forward = rpc.ForwardMessageToDeadLetterQueueRequest(
        group=group,
        topic=topic,
        receipt_handle=handle,
        message_id=message_id,
        delivery_attempt=1,
        max_delivery_attempts=16,
    )
    end = rpc.EndTransactionRequest(
        topic=topic,
        message_id=message_id,
        transaction_id="7F00000100002A9F0000000000000000",
        resolution=pb.TransactionResolution.COMMIT,
        source=pb.TransactionSource.SOURCE_CLIENT,
    )
    unary: list[tuple[str, Callable[..., Any], Any]] = [
        ("QueryRoute", stub.QueryRoute, route),
        (
            "Heartbeat",
            stub.Heartbeat,
            rpc.HeartbeatRequest(group=group, client_type=pb.ClientType.SIMPLE_CONSUMER),
        ),
        ("SendMessage", stub.SendMessage, send_request(tag="a", user={"u": "v"})),
        ("QueryAssignment", stub.QueryAssignment, rpc.QueryAssignmentRequest(topic=topic, group=group)),
        ("AckMessage", stub.AckMessage, ack),
        ("ChangeInvisibleDuration", stub.ChangeInvisibleDuration, change),
        ("ForwardMessageToDeadLetterQueue", stub.ForwardMessageToDeadLetterQueue, forward),
        ("EndTransaction", stub.EndTransaction, end),
        (
            "NotifyClientTermination",
            stub.NotifyClientTermination,
            rpc.NotifyClientTerminationRequest(group=group),
        ),
    ]
    failures: list[str] = []

    def check(call: str, what: str, codes: list[int]) -> None:
        bad = [
            r.getMessage()
            for r in caplog.records
            if r.levelno >= logging.ERROR and "failed" in r.getMessage()
        ]
        if bad or pb.Code.INTERNAL_ERROR in codes:
            failures.append(f"{call} with {what}: {bad[:1] or codes}")
        caplog.clear()

    with caplog.at_level(logging.ERROR):
        for call, method, base in unary:
            for what, request in _variants(base):
                try:
                    answer = method(request, metadata=CLIENT, timeout=30)
                    codes = [answer.status.code]
                except grpc.RpcError as exc:  # (a request over gRPC's size limit is gRPC's to refuse)
                    if exc.code() not in (
                        grpc.StatusCode.RESOURCE_EXHAUSTED,
                        grpc.StatusCode.INVALID_ARGUMENT,
                    ):
                        failures.append(f"{call} with {what}: {exc.code()} {exc.details()}")
                    codes = []
                check(call, what, codes)
        for what, request in _variants(receive):
            try:
                answers = list(stub.ReceiveMessage(request, metadata=CLIENT, timeout=30))
                codes = [r.status.code for r in answers if r.HasField("status")]
            except grpc.RpcError as exc:
                failures.append(f"ReceiveMessage with {what}: {exc.code()} {exc.details()}")
                codes = []
            check("ReceiveMessage", what, codes)
        publishing = pb.Publishing(topics=[topic], max_body_size=4 * 1024 * 1024, validate_message_type=True)
        settings = rpc.TelemetryCommand(
            settings=pb.Settings(
                client_type=pb.ClientType.PRODUCER,
                request_timeout=duration_pb2.Duration(seconds=3),
                publishing=publishing,
            )
        )
        for what, command in _variants(settings):
            answers: queue.Queue[Any] = queue.Queue()
            call = stub.Telemetry(iter([command]), metadata=CLIENT, timeout=5)

            def read(call: Any = call, answers: queue.Queue[Any] = answers) -> None:
                try:
                    for answer in call:
                        answers.put(answer)
                except grpc.RpcError:
                    pass  # (the deadline ends the stream)

            reader = threading.Thread(target=read, daemon=True)
            reader.start()
            reader.join(10)
            codes = []
            while not answers.empty():
                answer = answers.get()
                if answer.HasField("status"):
                    codes.append(answer.status.code)
            check("Telemetry", what, codes)
    assert not failures, "\n".join(failures[:20])
    assert store.max_phy_offset() > 0
