"""Hostile requests (issue 22): names a client may not use, handles of another group, enum values
the protocol lacks, and a client that floods its Telemetry stream. Raw generated stubs, since the
official client never sends these."""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import duration_pb2

from rocketstore.broker import BrokerConfig
from rocketstore.broker.clients import CommandQueue
from rocketstore.protocol import definition_pb2 as pb
from rocketstore.protocol import service_pb2 as rpc
from rocketstore.protocol import service_pb2_grpc

from .conftest import CLIENT, StartBroker
from .test_requests import Stub, send_request, signed

ACL = (
    '[[accounts]]\naccess_key = "a"\nsecret_key = "sa"\ntopics = ["TopicA"]\ngroups = ["GroupA"]\n'
    '[[accounts]]\naccess_key = "b"\nsecret_key = "sb"\ntopics = ["TopicB"]\ngroups = ["GroupB"]\n'
)


def stored(store: Any) -> int:
    return int(store.max_phy_offset())


class Telemetry:
    """An open Telemetry stream: commands go in with ``send``, answers are collected by a thread."""

    def __init__(self, stub: Any, metadata: Any) -> None:
        self._out: queue.Queue[Any] = queue.Queue()
        self.answers: queue.Queue[Any] = queue.Queue()
        self.error: grpc.RpcError | None = None
        self._call = stub.Telemetry(iter(self._out.get, None), metadata=metadata)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        try:
            for answer in self._call:
                self.answers.put(answer)
        except grpc.RpcError as exc:
            self.error = exc
        self.answers.put(None)

    def send(self, command: Any) -> None:
        self._out.put(command)

    def next(self, timeout: float = 60) -> Any:
        return self.answers.get(timeout=timeout)

    def close(self) -> None:
        self._out.put(None)
        self._call.cancel()
        self._reader.join(30)


def publishing(*topics: str, client_type: int = pb.ClientType.PRODUCER) -> Any:
    return rpc.TelemetryCommand(
        settings=pb.Settings(
            client_type=client_type,
            publishing=pb.Publishing(topics=[pb.Resource(name=t) for t in topics]),
        )
    )


def half_of(stub: Any, topic: str, metadata: Any) -> Any:
    """A transaction's half sent to ``topic``: its send result entry."""
    sent = stub.SendMessage(
        send_request(topic=topic, message_type=pb.MessageType.TRANSACTION), metadata=metadata
    )
    assert sent.status.code == pb.Code.OK, sent
    return sent.entries[0]


def _acl_broker(start_broker: StartBroker, stub_for: Stub, tmp_path: Path) -> Any:
    """A stub of a broker under ``ACL`` that checks open transactions every 200 ms."""
    acl = tmp_path / "acl.toml"
    acl.write_text(ACL)
    config = BrokerConfig(acl_file=str(acl), transaction_timeout_ms=1, transaction_check_interval_ms=200)
    _, _, port = start_broker(config)
    return stub_for(port)


# --- item 1: every name is checked against the caller's account ------------------------------------
def test_telemetry_settings_naming_another_accounts_topic_are_refused_and_get_no_orphan(
    start_broker: StartBroker, stub_for: Stub, tmp_path: Path
) -> None:
    stub = _acl_broker(start_broker, stub_for, tmp_path)
    as_a = (("x-mq-client-id", "client-a"), *signed("a", "sa")[1:])
    as_b = (("x-mq-client-id", "client-b"), *signed("b", "sb")[1:])
    half_of(stub, "TopicB", as_b)  # b's open transaction

    intruder = Telemetry(stub, as_a)
    owner = Telemetry(stub, as_b)
    try:
        intruder.send(publishing("TopicA", "TopicB"))
        refused = intruder.next()
        assert refused.status.code == pb.Code.FORBIDDEN
        assert "TopicB" in refused.status.message
        owner.send(publishing("TopicB"))
        assert owner.next().status.code == pb.Code.OK
        # two orphan checks: without the settings check, they went to the two producers listing
        # TopicB in turn
        for _ in range(2):
            answer = owner.next()
            assert answer.HasField("recover_orphaned_transaction_command")
            assert answer.recover_orphaned_transaction_command.message.topic.name == "TopicB"
        assert intruder.answers.empty()
    finally:
        intruder.close()
        owner.close()


def test_another_accounts_client_id_is_refused(
    start_broker: StartBroker, stub_for: Stub, tmp_path: Path
) -> None:
    """A client id belongs to the account that used it first: another account can neither end
    that client, re-type it, nor take its Telemetry stream (and the orphan checks on it)."""
    stub = _acl_broker(start_broker, stub_for, tmp_path)
    as_b = (("x-mq-client-id", "client-b"), *signed("b", "sb")[1:])
    a_as_b = (("x-mq-client-id", "client-b"), *signed("a", "sa")[1:])
    owner = Telemetry(stub, as_b)
    try:
        owner.send(publishing("TopicB"))
        assert owner.next().status.code == pb.Code.OK
        for answer in (
            stub.NotifyClientTermination(rpc.NotifyClientTerminationRequest(), metadata=a_as_b),
            stub.Heartbeat(rpc.HeartbeatRequest(client_type=pb.ClientType.PRODUCER), metadata=a_as_b),
        ):
            assert answer.status.code == pb.Code.FORBIDDEN
            assert "client id 'client-b' is used by access key 'b'" in answer.status.message
        intruder = Telemetry(stub, a_as_b)
        try:
            assert intruder.next().status.code == pb.Code.FORBIDDEN
        finally:
            intruder.close()
        half_of(stub, "TopicB", as_b)  # its orphan check still reaches b's stream
        assert owner.next().HasField("recover_orphaned_transaction_command")
    finally:
        owner.close()


@pytest.mark.parametrize(
    "call",
    [
        "route",
        "send",
        "receive",
        "ack",
        "assignment",
        "heartbeat",
        "forward",
        "change",
        "end",
    ],
)
def test_every_name_a_request_gives_is_checked_against_the_account(
    start_broker: StartBroker, stub_for: Stub, tmp_path: Path, call: str
) -> None:
    acl = tmp_path / "acl.toml"
    acl.write_text(ACL)
    _, store, port = start_broker(BrokerConfig(acl_file=str(acl)))
    stub = stub_for(port)
    as_a = signed("a", "sa")
    before = stored(store)
    topic_b, group_b = pb.Resource(name="TopicB"), pb.Resource(name="GroupB")
    topic_a, group_a = pb.Resource(name="TopicA"), pb.Resource(name="GroupA")
    handle = "0 1 30000 0 0 rocketstore 0 0 0"
    requests: dict[str, list[Any]] = {
        "route": [lambda: stub.QueryRoute(rpc.QueryRouteRequest(topic=topic_b), metadata=as_a)],
        "send": [lambda: stub.SendMessage(send_request(topic="TopicB"), metadata=as_a)],
        "receive": [
            lambda g=g, t=t: next(
                iter(
                    stub.ReceiveMessage(
                        rpc.ReceiveMessageRequest(
                            group=g,
                            message_queue=pb.MessageQueue(topic=t),
                            batch_size=1,
                            invisible_duration=duration_pb2.Duration(seconds=30),
                        ),
                        metadata=as_a,
                        timeout=30,
                    )
                )
            )
            for g, t in ((group_a, topic_b), (group_b, topic_a))
        ],
        "ack": [
            lambda g=g, t=t: stub.AckMessage(
                rpc.AckMessageRequest(
                    group=g, topic=t, entries=[rpc.AckMessageEntry(message_id="01", receipt_handle=handle)]
                ),
                metadata=as_a,
            )
            for g, t in ((group_a, topic_b), (group_b, topic_a))
        ],
        "assignment": [
            lambda g=g, t=t: stub.QueryAssignment(rpc.QueryAssignmentRequest(group=g, topic=t), metadata=as_a)
            for g, t in ((group_a, topic_b), (group_b, topic_a))
        ],
        "heartbeat": [
            lambda: stub.Heartbeat(
                rpc.HeartbeatRequest(group=group_b, client_type=pb.ClientType.SIMPLE_CONSUMER), metadata=as_a
            )
        ],
        "forward": [
            lambda g=g, t=t: stub.ForwardMessageToDeadLetterQueue(
                rpc.ForwardMessageToDeadLetterQueueRequest(
                    group=g, topic=t, receipt_handle=handle, message_id="01"
                ),
                metadata=as_a,
            )
            for g, t in ((group_a, topic_b), (group_b, topic_a))
        ],
        "change": [
            lambda g=g, t=t: stub.ChangeInvisibleDuration(
                rpc.ChangeInvisibleDurationRequest(
                    group=g,
                    topic=t,
                    receipt_handle=handle,
                    message_id="01",
                    invisible_duration=duration_pb2.Duration(seconds=30),
                ),
                metadata=as_a,
            )
            for g, t in ((group_a, topic_b), (group_b, topic_a))
        ],
        "end": [
            lambda: stub.EndTransaction(
                rpc.EndTransactionRequest(
                    topic=topic_b,
                    message_id="01",
                    transaction_id="nonsense",
                    resolution=pb.TransactionResolution.COMMIT,
                ),
                metadata=as_a,
            )
        ],
    }
    for request in requests[call]:
        answer = request()
        assert answer.status.code == pb.Code.FORBIDDEN, answer
    assert stored(store) == before  # nothing written


# --- item 2: the broker's own topics and groups ------------------------------------------------------
SYSTEM_TOPICS = [
    "rmq_sys_ROCKETSTORE_POP_LOG",
    "RMQ_SYS_TRANS_HALF_TOPIC",
    "Rmq_Sys_Anything",
    "SCHEDULE_TOPIC_XXXX",
    "schedule_topic_xxxx",
    "TRANS_CHECK_MAX_TIME_TOPIC",
    "TBW102",
    "%RETRY%G_T",
]


@pytest.mark.parametrize("topic", [*SYSTEM_TOPICS, "%DLQ%G"])
def test_sends_to_system_retry_and_dead_letter_topics_are_illegal(
    start_broker: StartBroker, stub_for: Stub, topic: str
) -> None:
    _, store, port = start_broker()
    before = stored(store)
    answer = stub_for(port).SendMessage(send_request(topic=topic), metadata=CLIENT)
    assert answer.status.code == pb.Code.ILLEGAL_TOPIC, answer
    assert topic in answer.status.message
    assert stored(store) == before


@pytest.mark.parametrize("topic", SYSTEM_TOPICS)
def test_routes_receives_and_assignments_of_system_topics_are_illegal(
    start_broker: StartBroker, stub_for: Stub, topic: str
) -> None:
    _, store, port = start_broker()
    stub = stub_for(port)
    name = pb.Resource(name=topic)
    route = stub.QueryRoute(rpc.QueryRouteRequest(topic=name), metadata=CLIENT)
    assert route.status.code == pb.Code.ILLEGAL_TOPIC, route
    assignment = stub.QueryAssignment(
        rpc.QueryAssignmentRequest(group=pb.Resource(name="G"), topic=name), metadata=CLIENT
    )
    assert assignment.status.code == pb.Code.ILLEGAL_TOPIC, assignment
    [received] = stub.ReceiveMessage(
        rpc.ReceiveMessageRequest(
            group=pb.Resource(name="G"),
            message_queue=pb.MessageQueue(topic=name),
            batch_size=1,
            invisible_duration=duration_pb2.Duration(seconds=30),
        ),
        metadata=CLIENT,
        timeout=30,
    )
    assert received.status.code == pb.Code.ILLEGAL_TOPIC, received
    assert "SCHEDULE_TOPIC_XXXX" not in store.topic_configs() or topic.upper() != "SCHEDULE_TOPIC_XXXX"


def test_the_pop_logs_group_and_percent_groups_are_illegal(start_broker: StartBroker, stub_for: Stub) -> None:
    _, _, port = start_broker()
    stub = stub_for(port)
    for group in ("CID_RMQ_SYS_ROCKETSTORE_POP", "cid_rmq_sys_x", "%RETRY%x"):
        [received] = stub.ReceiveMessage(
            rpc.ReceiveMessageRequest(
                group=pb.Resource(name=group),
                message_queue=pb.MessageQueue(topic=pb.Resource(name="T")),
                batch_size=1,
                invisible_duration=duration_pb2.Duration(seconds=30),
            ),
            metadata=CLIENT,
            timeout=30,
        )
        assert received.status.code == pb.Code.ILLEGAL_CONSUMER_GROUP, received


def test_a_dead_letter_topic_can_be_consumed(start_broker: StartBroker, stub_for: Stub) -> None:
    _, _, port = start_broker(BrokerConfig(long_polling_min_ms=0))
    stub = stub_for(port)
    route = stub.QueryRoute(rpc.QueryRouteRequest(topic=pb.Resource(name="%DLQ%G")), metadata=CLIENT)
    assert route.status.code == pb.Code.OK


# --- item 3: a receipt handle serves its own group and topic --------------------------------------
def receive(stub: Any, group: str, topic: str) -> list[Any]:
    return list(
        stub.ReceiveMessage(
            rpc.ReceiveMessageRequest(
                group=pb.Resource(name=group),
                message_queue=pb.MessageQueue(topic=pb.Resource(name=topic)),
                batch_size=16,
                invisible_duration=duration_pb2.Duration(seconds=60),
                long_polling_timeout=duration_pb2.Duration(seconds=1),
            ),
            metadata=CLIENT,
            timeout=30,
        )
    )


def test_another_groups_handle_is_refused(start_broker: StartBroker, stub_for: Stub) -> None:
    _, _, port = start_broker()
    stub = stub_for(port)
    for group in ("GA", "GB"):
        receive(stub, group, "T")  # both groups start before the message
    assert stub.SendMessage(send_request(topic="T"), metadata=CLIENT).status.code == pb.Code.OK
    handles = {}
    for group in ("GA", "GB"):
        deadline = time.monotonic() + 60
        while group not in handles and time.monotonic() < deadline:
            got = [r.message for r in receive(stub, group, "T") if r.HasField("message")]
            if got:
                handles[group] = got[0].system_properties.receipt_handle
    ack_b = stub.AckMessage(
        rpc.AckMessageRequest(
            group=pb.Resource(name="GB"),
            topic=pb.Resource(name="T"),
            entries=[rpc.AckMessageEntry(message_id="01", receipt_handle=handles["GB"])],
        ),
        metadata=CLIENT,
    )
    assert ack_b.status.code == pb.Code.OK
    # GB is past the message and has nothing in flight: GA's handle must not pass for its own
    stolen = stub.AckMessage(
        rpc.AckMessageRequest(
            group=pb.Resource(name="GB"),
            topic=pb.Resource(name="T"),
            entries=[rpc.AckMessageEntry(message_id="01", receipt_handle=handles["GA"])],
        ),
        metadata=CLIENT,
    )
    assert stolen.status.code == pb.Code.INVALID_RECEIPT_HANDLE, stolen
    forwarded = stub.ForwardMessageToDeadLetterQueue(
        rpc.ForwardMessageToDeadLetterQueueRequest(
            group=pb.Resource(name="GB"),
            topic=pb.Resource(name="T"),
            receipt_handle=handles["GA"],
            message_id="01",
        ),
        metadata=CLIENT,
    )
    assert forwarded.status.code == pb.Code.INVALID_RECEIPT_HANDLE, forwarded


# --- item 4: a client that does not read is cut off -----------------------------------------------
def test_a_client_that_writes_settings_and_never_reads_is_cut_off(
    start_broker: StartBroker, stub_for: Stub
) -> None:
    broker, _, port = start_broker()
    # no window growth (BDP probes): what the client does not read stays in the broker
    channel = grpc.insecure_channel(f"127.0.0.1:{port}", options=[("grpc.http2.bdp_probe", 0)])
    stub = service_pb2_grpc.MessagingServiceStub(channel)
    # 128 kB of topic names per command, each echoed in its answer: 25 MB if all were kept
    big = publishing(*(f"T{i:05d}" + "x" * 120 for i in range(1000)))
    done = threading.Event()

    def commands() -> Iterator[Any]:
        for _ in range(200):
            yield big
        done.set()

    client_id = "flooder"
    call = stub.Telemetry(commands(), metadata=(("x-mq-client-id", client_id),), timeout=120)

    def cut_off() -> bool:
        info = broker.service.clients.get(client_id)
        return info is not None and getattr(info.commands, "reason", None) is not None

    deadline = time.monotonic() + 120
    while not (done.is_set() or cut_off()) and time.monotonic() < deadline:
        time.sleep(0.05)
    answers = 0
    try:
        with pytest.raises(grpc.RpcError) as refused:
            for _ in call:  # only now does the client read
                answers += 1
    finally:
        channel.close()
    assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "not yet read" in (refused.value.details() or "")
    assert answers <= 64


def test_one_client_has_a_bounded_number_of_waiting_receives(
    start_broker: StartBroker, stub_for: Stub
) -> None:
    broker, _, port = start_broker(BrokerConfig(long_polling_min_ms=120_000, long_polling_max_ms=120_000))
    stub = stub_for(port)

    def receive_as(client_id: str, timeout: float) -> Any:
        return stub.ReceiveMessage(
            rpc.ReceiveMessageRequest(
                group=pb.Resource(name="G"),
                message_queue=pb.MessageQueue(topic=pb.Resource(name="T")),
                batch_size=1,
                invisible_duration=duration_pb2.Duration(seconds=30),
            ),
            metadata=(("x-mq-client-id", client_id),),
            timeout=timeout,
        )

    waiting = [receive_as("greedy", 300) for _ in range(64)]
    try:
        deadline = time.monotonic() + 120
        info = None
        while time.monotonic() < deadline:
            info = broker.service.clients.get("greedy")
            if info is not None and info.receiving == 64:
                break
            time.sleep(0.05)
        assert info is not None and info.receiving == 64
        [refused] = list(receive_as("greedy", 60))
        assert refused.status.code == pb.Code.TOO_MANY_REQUESTS
        assert "64 receives of this client" in refused.status.message
        [other] = list(receive_as("modest", 3))  # another client still gets its (empty) answer
        assert other.status.code == pb.Code.MESSAGE_NOT_FOUND
    finally:
        for call in waiting:
            call.cancel()
    deadline = time.monotonic() + 120
    while info.receiving and time.monotonic() < deadline:
        time.sleep(0.05)
    assert info.receiving == 0  # cancelled receives leave no count behind


def test_pending_commands_are_bounded_in_bytes_too() -> None:
    pending = CommandQueue("c", max_items=100, max_bytes=1000)
    command = publishing("x" * 100)
    offered = 0
    while pending.offer(command):
        offered += 1
    assert 0 < offered < 10
    assert pending.reason is not None and "not yet read" in pending.reason
    assert not pending.offer(command)  # closed: nothing more is kept


def test_settings_naming_too_many_topics_are_refused(start_broker: StartBroker, stub_for: Stub) -> None:
    _, _, port = start_broker()
    stream = Telemetry(stub_for(port), CLIENT)
    try:
        stream.send(publishing(*(f"T{i}" for i in range(1025))))
        answer = stream.next()
        assert answer.status.code == pb.Code.BAD_REQUEST
        assert "1025 topics" in answer.status.message
    finally:
        stream.close()


def test_one_connection_brings_a_bounded_number_of_client_ids(
    start_broker: StartBroker, stub_for: Stub
) -> None:
    _, _, port = start_broker()
    stub = stub_for(port)
    codes = [
        stub.Heartbeat(rpc.HeartbeatRequest(), metadata=(("x-mq-client-id", f"id-{i}"),)).status.code
        for i in range(65)
    ]
    assert codes == [pb.Code.OK] * 64 + [pb.Code.TOO_MANY_REQUESTS]
    gone = stub.NotifyClientTermination(
        rpc.NotifyClientTerminationRequest(), metadata=(("x-mq-client-id", "id-0"),)
    )
    assert gone.status.code == pb.Code.OK
    again = stub.Heartbeat(rpc.HeartbeatRequest(), metadata=(("x-mq-client-id", "id-64"),))
    assert again.status.code == pb.Code.OK


# --- item 5: every field is checked before a write ---------------------------------------------------
def test_an_unknown_message_type_is_refused_before_anything_is_stored(
    start_broker: StartBroker, stub_for: Stub
) -> None:
    _, store, port = start_broker()
    before = stored(store)
    for message_type in (99, pb.MessageType.LITE):
        answer = stub_for(port).SendMessage(send_request(message_type=message_type), metadata=CLIENT)
        assert answer.status.code == pb.Code.BAD_REQUEST, answer
        assert "message_type" in answer.status.message
    answer = stub_for(port).SendMessage(send_request(body_encoding=7), metadata=CLIENT)
    assert answer.status.code == pb.Code.BAD_REQUEST, answer
    assert stored(store) == before


def test_an_unknown_client_type_is_unrecognized(start_broker: StartBroker, stub_for: Stub) -> None:
    _, _, port = start_broker()
    stub = stub_for(port)
    answer = stub.Heartbeat(rpc.HeartbeatRequest(client_type=42), metadata=CLIENT)
    assert answer.status.code == pb.Code.UNRECOGNIZED_CLIENT_TYPE, answer
    stream = Telemetry(stub, CLIENT)
    try:
        stream.send(publishing("T", client_type=42))
        assert stream.next().status.code == pb.Code.UNRECOGNIZED_CLIENT_TYPE
    finally:
        stream.close()


def test_end_transaction_with_an_unknown_source_commits_nothing(
    start_broker: StartBroker, stub_for: Stub
) -> None:
    _, store, port = start_broker()
    stub = stub_for(port)
    entry = half_of(stub, "Tx", CLIENT)

    def end(source: int) -> Any:
        return stub.EndTransaction(
            rpc.EndTransactionRequest(
                topic=pb.Resource(name="Tx"),
                message_id=entry.message_id,
                transaction_id=entry.transaction_id,
                resolution=pb.TransactionResolution.COMMIT,
                source=source,
            ),
            metadata=CLIENT,
        )

    assert end(9).status.code == pb.Code.BAD_REQUEST
    assert store.wait_dispatched(30)
    assert sum(store.max_offset_in_queue("Tx", q) for q in store.topics().get("Tx", {})) == 0
    assert end(pb.TransactionSource.SOURCE_CLIENT).status.code == pb.Code.OK  # still open: it ends now
    assert store.wait_dispatched(30)
    assert sum(store.max_offset_in_queue("Tx", q) for q in store.topics()["Tx"]) == 1


def test_routing_to_the_schedule_topic_is_illegal_not_an_internal_error(
    start_broker: StartBroker, stub_for: Stub
) -> None:
    _, _, port = start_broker()
    answer = stub_for(port).QueryRoute(
        rpc.QueryRouteRequest(topic=pb.Resource(name="SCHEDULE_TOPIC_XXXX")), metadata=CLIENT
    )
    assert answer.status.code == pb.Code.ILLEGAL_TOPIC
