"""Requests the broker must refuse, each with the protocol's status code and a message; group
commit; access keys; metrics and the broker's state for `rocketstore status`."""

from __future__ import annotations

import asyncio
import concurrent.futures
import hashlib
import hmac
import re
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import duration_pb2, timestamp_pb2
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as rpc

from rocketstore import Message, MessageStore
from rocketstore.broker import BrokerConfig
from rocketstore.broker.arrival import ArrivalSignal
from rocketstore.broker.coalesce import Coalescer
from rocketstore.broker.durable_waits import DurableWaits
from rocketstore.broker.group_commit import ColumnCommit, GroupCommit
from rocketstore.broker.server import STATE_FILE, read_state
from rocketstore.codec.message_batch import BatchEntry, EncodedBatch, encode_batch_body
from rocketstore.dispatch import DispatchService
from rocketstore.errors import InvalidMessageError
from rocketstore.follow import DispatchEvents

from .clients import message, producer
from .conftest import CLIENT, SMALL, StartBroker

Stub = Callable[[int], Any]


def send_request(topic: str = "T", body: bytes = b"x", **system: Any) -> Any:
    msg = pb.Message(topic=pb.Resource(name=topic), body=body)
    msg.system_properties.message_id = system.pop("message_id", "01ABCDEF")
    msg.system_properties.message_type = system.pop("message_type", pb.MessageType.NORMAL)
    for name, value in system.pop("user", {}).items():
        msg.user_properties[name] = value
    for name, value in system.items():
        if isinstance(value, timestamp_pb2.Timestamp):
            getattr(msg.system_properties, name).CopyFrom(value)
        else:
            setattr(msg.system_properties, name, value)
    return rpc.SendMessageRequest(messages=[msg])


@pytest.mark.parametrize(
    ("request_", "code", "text"),
    [
        (send_request(topic="bad topic"), pb.Code.ILLEGAL_TOPIC, "bad topic"),
        (send_request(topic="RMQ_SYS_TRANS_HALF_TOPIC"), pb.Code.ILLEGAL_TOPIC, "RMQ_SYS"),
        (send_request(body=b""), pb.Code.MESSAGE_BODY_EMPTY, "empty"),
        (send_request(body=b"x" * (1024 * 1024 + 1)), pb.Code.MESSAGE_BODY_TOO_LARGE, "exceeds"),
        (send_request(user={"UNIQ_KEY": "mine"}), pb.Code.ILLEGAL_MESSAGE_PROPERTY_KEY, "UNIQ_KEY"),
        (send_request(tag="a||b"), pb.Code.ILLEGAL_MESSAGE_TAG, "'|'"),
        (
            send_request(delivery_timestamp=timestamp_pb2.Timestamp(seconds=4_000_000_000)),
            pb.Code.ILLEGAL_DELIVERY_TIME,
            "ahead",
        ),
        (
            send_request(born_timestamp=timestamp_pb2.Timestamp(seconds=2**63 - 1)),
            pb.Code.BAD_REQUEST,
            "born_timestamp 9223372036854775807 s is past",
        ),
        (
            send_request(delivery_timestamp=timestamp_pb2.Timestamp(seconds=-(2**63))),
            pb.Code.ILLEGAL_DELIVERY_TIME,
            "delivery_timestamp -9223372036854775808 s is past",
        ),
        (
            send_request(message_type=pb.MessageType.TRANSACTION, message_group="g"),
            pb.Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
            "group",
        ),
        (rpc.SendMessageRequest(), pb.Code.BAD_REQUEST, "no message"),
    ],
)
def test_bad_sends_are_refused_with_their_code(
    start_broker: StartBroker, stub_for: Stub, request_: Any, code: int, text: str
) -> None:
    _, store, port = start_broker(BrokerConfig(max_body_size=1024 * 1024))
    response = stub_for(port).SendMessage(request_, metadata=CLIENT)
    assert response.status.code == code
    assert text in response.status.message
    assert store.max_phy_offset() == 0  # nothing stored


def test_requests_without_a_client_id_are_refused(start_broker: StartBroker, stub_for: Stub) -> None:
    _, _, port = start_broker()
    response = stub_for(port).SendMessage(send_request(), metadata=(("x-mq-language", "PYTHON"),))
    assert response.status.code == pb.Code.CLIENT_ID_REQUIRED


def test_unknown_topics_are_not_found_when_auto_creation_is_off(
    start_broker: StartBroker, stub_for: Stub
) -> None:
    _, store, port = start_broker(BrokerConfig(auto_create_topic=False))
    stub = stub_for(port)
    route = stub.QueryRoute(rpc.QueryRouteRequest(topic=pb.Resource(name="Nope")), metadata=CLIENT)
    assert route.status.code == pb.Code.TOPIC_NOT_FOUND
    assert (
        stub.SendMessage(send_request(topic="Nope"), metadata=CLIENT).status.code == pb.Code.TOPIC_NOT_FOUND
    )
    store.create_topic("Known", 2)
    route = stub.QueryRoute(rpc.QueryRouteRequest(topic=pb.Resource(name="Known")), metadata=CLIENT)
    assert route.status.code == pb.Code.OK
    assert [q.id for q in route.message_queues] == [0, 1]
    [endpoint] = route.message_queues[0].broker.endpoints.addresses
    assert (endpoint.host, endpoint.port) == ("127.0.0.1", port)
    assert set(route.message_queues[0].accept_message_types) >= {
        pb.MessageType.NORMAL,
        pb.MessageType.FIFO,
        pb.MessageType.DELAY,
        pb.MessageType.TRANSACTION,
    }


def test_end_transaction_of_an_unknown_id_is_invalid(start_broker: StartBroker, stub_for: Stub) -> None:
    _, _, port = start_broker()
    stub = stub_for(port)
    for txid in ("nonsense", "7F00000100002A9F0000000000000000"):
        response = stub.EndTransaction(
            rpc.EndTransactionRequest(
                topic=pb.Resource(name="T"),
                message_id="01",
                transaction_id=txid,
                resolution=pb.TransactionResolution.COMMIT,
            ),
            metadata=CLIENT,
        )
        assert response.status.code == pb.Code.INVALID_TRANSACTION_ID


def test_receive_with_an_illegal_invisible_duration_is_refused(
    start_broker: StartBroker, stub_for: Stub
) -> None:
    _, _, port = start_broker()
    request = rpc.ReceiveMessageRequest(
        group=pb.Resource(name="G"),
        message_queue=pb.MessageQueue(topic=pb.Resource(name="T")),
        filter_expression=pb.FilterExpression(type=pb.FilterType.TAG, expression="*"),
        batch_size=1,
        invisible_duration=duration_pb2.Duration(seconds=1),
    )
    [response] = list(stub_for(port).ReceiveMessage(request, metadata=CLIENT, timeout=10))
    assert response.status.code == pb.Code.ILLEGAL_INVISIBLE_TIME


# --- group commit -------------------------------------------------------------------------------
def test_concurrent_sends_share_one_store_append(tmp_path: Path) -> None:
    with MessageStore.open(tmp_path / "s", SMALL) as store, concurrent.futures.ThreadPoolExecutor(2) as pool:
        commit = GroupCommit(store, DurableWaits(store, pool))

        async def main() -> list[Any]:
            return await asyncio.gather(*(commit.put([Message("T", f"m{i}".encode())]) for i in range(100)))

        outcomes = asyncio.run(main())
        assert commit.messages == 100
        assert commit.batches <= 2  # every put queued before the first round ran
        assert all(o[0].ok for o in outcomes)
        assert len({o[0].physical_offset for o in outcomes}) == 100


def test_a_bad_message_in_a_round_fails_only_its_own_send(tmp_path: Path) -> None:
    with MessageStore.open(tmp_path / "s", SMALL) as store, concurrent.futures.ThreadPoolExecutor(1) as pool:
        commit = GroupCommit(store, DurableWaits(store, pool), rounds=1)

        async def main() -> list[Any]:
            good = [commit.put([Message("T", b"good")]) for _ in range(3)]
            bad = commit.put([Message("T", b"bad", keys=["has space"])])
            return await asyncio.gather(*good, bad)

        *good, bad = asyncio.run(main())
        assert all(o[0].ok for o in good)
        assert isinstance(bad[0], InvalidMessageError)
        assert store.wait_dispatched(5)
        assert sum(len(store.get_message("g", "T", q, 0).messages) for q in store.topics()["T"]) == 3


def one(topic: str, body: bytes, queue_id: int, properties: str = "UNIQ_KEY\x01U") -> EncodedBatch:
    """A send of one message as the gRPC door hands it to ``ColumnCommit``."""
    data = encode_batch_body([BatchEntry(0, body, properties)])
    return EncodedBatch(topic, queue_id, data, "10.0.0.1:5000", 1_700_000_000_000)


def test_column_sends_share_one_store_call_and_each_gets_its_own_result(tmp_path: Path) -> None:
    with MessageStore.open(tmp_path / "s", SMALL) as store, concurrent.futures.ThreadPoolExecutor(2) as pool:
        commit = ColumnCommit(store, DurableWaits(store, pool))

        async def main() -> list[Any]:
            sends = [commit.put([one("A", b"a%d" % i, i % 2), one("B", b"b%d" % i, 1)]) for i in range(50)]
            return await asyncio.gather(*sends)

        outcomes = asyncio.run(main())
        assert commit.messages == 100
        assert commit.batches <= 2  # every put queued before the first round ran
        assert store.wait_dispatched(5)
        for i, (a, b) in enumerate(outcomes):
            assert (a.topic, a.queue_id, b.topic, b.queue_id) == ("A", i % 2, "B", 1)
            assert a.ok and b.ok and a.wrote_bytes > 0
            assert store.look_message_by_offset(a.physical_offset).body == b"a%d" % i
            [stored] = store.get_message("g", "B", 1, b.queue_offset, 1).messages
            assert (stored.body, stored.physical_offset) == (b"b%d" % i, b.physical_offset)


def test_a_bad_column_send_in_a_round_fails_only_its_own_request(tmp_path: Path) -> None:
    with MessageStore.open(tmp_path / "s", SMALL) as store, concurrent.futures.ThreadPoolExecutor(1) as pool:
        commit = ColumnCommit(store, DurableWaits(store, pool), rounds=1)

        async def main() -> list[Any]:
            good = [commit.put([one("T", b"good", 0)]) for _ in range(3)]
            bad = commit.put([one("T", b"fine", 0), one("T", b"bad", 0, "DELAY\x013")])
            return await asyncio.gather(*good, bad)

        *good, bad = asyncio.run(main())
        assert all(o[0].ok for o in good)
        assert [type(o) for o in bad] == [InvalidMessageError] * 2  # a request is stored whole or not
        assert "DELAY" in str(bad[1])
        assert store.wait_dispatched(5)
        assert [m.body for m in store.get_message("g", "T", 0, 0).messages] == [b"good"] * 3


@pytest.mark.parametrize("on_loop", [False, True], ids=["executor", "event loop"])
def test_concurrent_calls_are_coalesced_and_each_caller_gets_its_own_outcome(on_loop: bool) -> None:
    calls: list[list[int]] = []
    threads: set[int] = set()

    def run(items: list[int]) -> list[int | BaseException]:
        calls.append(items)
        threads.add(threading.get_ident())
        return [ValueError(f"odd {i}") if i % 2 else i * 10 for i in items]

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        rounds: Coalescer[int, int] = Coalescer(run, None if on_loop else pool, max_weight=4, rounds=1)

        async def main() -> list[Any]:
            return await asyncio.gather(*(rounds.submit(i) for i in range(10)), return_exceptions=True)

        outcomes = asyncio.run(main())
    assert [o for o in outcomes if not isinstance(o, BaseException)] == [0, 20, 40, 60, 80]
    assert [str(o) for o in outcomes if isinstance(o, ValueError)] == [f"odd {i}" for i in range(1, 10, 2)]
    assert calls == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]  # at most max_weight items a round
    assert (threads == {threading.get_ident()}) is on_loop
    assert (rounds.batches, rounds.items) == (3, 10)


def test_a_round_on_the_loop_takes_what_one_turn_submitted_and_a_failed_one_tells_each_caller() -> None:
    calls: list[list[int]] = []

    def run(items: list[int]) -> list[int]:
        calls.append(items)
        if 13 in items:
            raise OSError("the store is closed")
        return items

    rounds: Coalescer[int, int] = Coalescer(run, None)

    async def main() -> list[Any]:
        first = await asyncio.gather(*(rounds.submit(i) for i in range(3)))
        alone = await rounds.submit(7)  # a lone call: its round at the next turn, not later
        failed = await asyncio.gather(rounds.submit(12), rounds.submit(13), return_exceptions=True)
        return [first, alone, failed]

    first, alone, failed = asyncio.run(main())
    assert (first, alone) == ([0, 1, 2], 7)
    assert [str(e) for e in failed] == ["the store is closed"] * 2
    assert calls == [[0, 1, 2], [7], [12, 13]]


def test_an_arrival_wakes_a_receive_watching_for_messages(tmp_path: Path) -> None:
    with MessageStore.open(tmp_path / "s", SMALL) as store:

        async def main() -> bool:
            loop = asyncio.get_running_loop()
            signal = ArrivalSignal(store.dispatch_events, loop)
            signal.start()
            try:
                with signal.watching():
                    mark = signal.mark()
                    await loop.run_in_executor(None, store.put_message, Message("T", b"new"))
                    return await signal.wait(60, mark)  # False only after 60 s without a wake-up
            finally:
                signal.stop()

        assert asyncio.run(main())


def _arrival_thread_runs() -> bool:
    return any(t.name == "broker-arrival" for t in threading.enumerate())


async def _quiet_while_unwatched(signal: ArrivalSignal, store: MessageStore) -> bool:
    """Puts on another thread, then one on the loop's, while no receive watches: True when they
    woke nothing (the signal's mark stayed as it was)."""
    loop = asyncio.get_running_loop()
    unwatched = signal.mark()
    for i in range(5):
        await loop.run_in_executor(None, store.put_message, Message("T", b"%d" % i))
        assert store.wait_dispatched(10)
    store.put_message(Message("T", b"on the loop"))
    await asyncio.sleep(0.2)  # a wake-up, if any, would have reached the loop by now
    return signal.mark() is unwatched and not unwatched.is_set()


def test_arrivals_wake_the_loop_only_while_a_receive_watches(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Dispatch passes while nothing watches fire no wake-up (the marks stay as they were); while
    a receive watches, each pass wakes it: a pass on the loop's own thread within the put, one
    on another thread through the loop. A writer's store tells the signal itself: no thread of
    the signal's own runs."""
    # the dispatcher's thread runs only when woken: a fallback round of its own that the watched
    # put met (likelier on a loaded machine) would take that put's round and wake the loop later
    monkeypatch.setattr(DispatchService, "FALLBACK_INTERVAL", 3600.0)
    with MessageStore.open(tmp_path / "s", SMALL) as store:

        async def main() -> tuple[bool, bool, bool, bool, bool]:
            loop = asyncio.get_running_loop()
            signal = ArrivalSignal(store.dispatch_events, loop)
            signal.start()
            try:
                own_thread = _arrival_thread_runs()
                quiet = await _quiet_while_unwatched(signal, store)
                with signal.watching():
                    mark = signal.mark()
                    store.put_message(Message("T", b"on the loop, watched"))
                    within_the_put = mark.is_set()
                    mark = signal.mark()
                    await asyncio.sleep(0.2)
                    no_arrival_no_wake = not mark.is_set()
                    await loop.run_in_executor(None, store.put_message, Message("T", b"new"))
                    woken = await signal.wait(60, mark)
                return own_thread, quiet, within_the_put, no_arrival_no_wake, woken
            finally:
                signal.stop()

        assert asyncio.run(main()) == (False, True, True, True, True)


class _Unlistened(DispatchEvents):
    """A writer's events as a follower's are: waited on, not listened to."""

    def __init__(self, events: DispatchEvents) -> None:
        self._events = events

    def position(self) -> int:
        return self._events.position()

    def queue_set(self) -> int | None:
        return self._events.queue_set()

    def wait(self, position: int, timeout: float) -> bool:
        return self._events.wait(position, timeout)


def test_arrivals_a_process_cannot_listen_to_are_waited_for_by_a_thread(tmp_path: Path) -> None:
    """Events of another process's passes (a follower's) are waited on by the signal's thread,
    only while a receive watches: the first receive to watch is woken once (what came between
    its look and the thread's wait), then each arrival wakes it."""
    with MessageStore.open(tmp_path / "s", SMALL) as store:

        async def main() -> tuple[bool, bool, bool, bool]:
            loop = asyncio.get_running_loop()
            signal = ArrivalSignal(_Unlistened(store.dispatch_events), loop)
            signal.start()
            try:
                own_thread = _arrival_thread_runs()
                quiet = await _quiet_while_unwatched(signal, store)
                with signal.watching():
                    first = await signal.wait(10, signal.mark())
                    mark = signal.mark()
                    await loop.run_in_executor(None, store.put_message, Message("T", b"new"))
                    woken = await signal.wait(60, mark)
                return own_thread, quiet, first, woken
            finally:
                signal.stop()

        assert asyncio.run(main()) == (True, True, True, True)


# --- access keys ----------------------------------------------------------------------------------
def signed(ak: str, sk: str, date: str = "20250101T000000Z") -> tuple[tuple[str, str], ...]:
    signature = hmac.new(sk.encode(), date.encode(), hashlib.sha1).hexdigest()
    auth = f"MQv2-HMAC-SHA1 Credential={ak}, SignedHeaders=x-mq-date-time, Signature={signature}"
    return (*CLIENT, ("x-mq-date-time", date), ("authorization", auth))


def test_access_keys_and_permissions(
    start_broker: StartBroker, stub_for: Stub, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    acl = tmp_path / "acl.toml"
    acl.write_text(
        '[[accounts]]\naccess_key = "app"\nsecret_key = "s3cret"\ntopics = ["Allowed"]\ngroups = []\n'
    )
    _, store, port = start_broker(BrokerConfig(acl_file=str(acl)))
    stub = stub_for(port)
    ok = stub.SendMessage(send_request(topic="Allowed"), metadata=signed("app", "s3cret"))
    assert ok.status.code == pb.Code.OK
    assert (
        stub.SendMessage(send_request(topic="Allowed"), metadata=CLIENT).status.code == pb.Code.UNAUTHORIZED
    )
    wrong = stub.SendMessage(send_request(topic="Allowed"), metadata=signed("app", "guess"))
    assert wrong.status.code == pb.Code.UNAUTHORIZED
    other = stub.SendMessage(send_request(topic="Other"), metadata=signed("app", "s3cret"))
    assert other.status.code == pb.Code.FORBIDDEN
    assert "Other" in other.status.message
    # one line in the server's log per refusal, saying what was refused and why
    refusals = [r.getMessage() for r in caplog.records if r.name == "rocketstore.broker.auth"]
    assert len(refusals) == 3, refusals
    assert all(r.startswith("refused SendMessage of client ") for r in refusals), refusals
    assert "UNAUTHORIZED" in refusals[0] and "no MQv2-HMAC-SHA1" in refusals[0]
    assert "UNAUTHORIZED" in refusals[1] and "signature of access key 'app' does not match" in refusals[1]
    assert "FORBIDDEN" in refusals[2] and "topic 'Other'" in refusals[2]
    # the official client signs with its credentials
    with producer(port, ("Allowed",), ak="app", sk="s3cret") as p:
        p.send(message("Allowed", b"signed"))
    assert store.wait_dispatched(5)
    assert sum(store.max_offset_in_queue("Allowed", q) for q in store.topics()["Allowed"]) == 2


# --- operations --------------------------------------------------------------------------------------
def test_metrics_and_state_show_sends_and_clients(start_broker: StartBroker, tmp_path: Path) -> None:
    broker, store, port = start_broker(BrokerConfig(state_interval_ms=100))
    with producer(port, ("Seen",)) as p:
        p.send(message("Seen", b"counted"))
        metrics_port = broker.metrics.serve("127.0.0.1:0")
        text = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10).read().decode()
        assert 'rocketstore_broker_sends_total{code="OK",topic="Seen",type="NORMAL"} 1.0' in text
        assert "rocketstore_broker_put_batches_total 1.0" in text  # the one send's append
        assert "rocketstore_store_commit_log_max_offset" in text
        # each thread's CPU by name: this test's own (the main thread) has spent some
        main = re.search(r'^rocketstore_thread_cpu_seconds_total\{thread="MainThread"\} (\S+)$', text, re.M)
        assert main is not None and float(main.group(1)) > 0
        assert 'rocketstore_thread_cpu_seconds_total{thread="rocketstore-dispatch"}' in text
        state = None
        for _ in range(100):
            state = read_state(store.layout.root)
            if state and state["clients"]:
                break
            time.sleep(0.1)
        assert state is not None and state["port"] == port
        [client] = state["clients"]
        assert client["language"] == "PYTHON" and client["type"] == "PRODUCER"
        assert "Seen" in client["topics"]
    broker.stop_in_thread()
    assert not (store.layout.root / STATE_FILE).exists()
