"""Receiving through `rocketstore serve` with the official Python SimpleConsumer: long polling,
tag filters, ack, change of invisible duration, redelivery with the attempt counted, the DLQ, FIFO
order, and consumer progress in the store's offsets."""

from __future__ import annotations

import time
from typing import Any

from rocketstore.broker import BrokerConfig

from .clients import message, producer, simple_consumer
from .conftest import StartBroker

# invisible durations of 1 s (RocketMQ refuses under 10 s) and short polls keep these tests short
FAST = BrokerConfig(invisible_min_ms=1000, long_polling_min_ms=0)


def receive_until(consumer: Any, count: int, invisible_s: int = 30, within_s: float = 30) -> list[Any]:
    got: list[Any] = []
    deadline = time.monotonic() + within_s
    while len(got) < count and time.monotonic() < deadline:
        got += consumer.receive(16, invisible_s)
    return got


def test_receive_ack_and_redelivery_of_what_was_not_acked(start_broker: StartBroker) -> None:
    _, store, port = start_broker(FAST)
    with simple_consumer(port, "G", "R", await_s=1) as c:
        assert c.receive(16, 30) == []  # a new group starts at the end of the queues
        with producer(port, ("R",)) as p:
            sent = [
                p.send(message("R", f"m{i}".encode(), tag="A", properties={"n": str(i)})) for i in range(6)
            ]
        got = receive_until(c, 6, invisible_s=2)
        assert sorted(m.body for m in got) == [f"m{i}".encode() for i in range(6)]
        assert {m.message_id for m in got} == {r.message_id for r in sent}
        assert all(m.delivery_attempt == 1 and m.topic == "R" and m.tag == "A" for m in got)
        assert {m.properties["n"] for m in got} == {str(i) for i in range(6)}
        acked = [m for m in got if m.body in (b"m0", b"m1", b"m2", b"m3")]
        for m in acked:
            c.ack(m)
        again = receive_until(c, 2, invisible_s=30)
        assert sorted(m.body for m in again) == [b"m4", b"m5"]
        assert all(m.delivery_attempt == 2 for m in again)
        for m in again:
            c.ack(m)
    # progress is the store's consumer offsets (what `rocketstore consumer-progress` shows)
    committed = store.consumer_offsets().get(("R", "G"), {})
    assert sum(committed.values()) >= 4


def test_tag_filter(start_broker: StartBroker) -> None:
    _, _, port = start_broker(FAST)
    with simple_consumer(port, "Tags", "F", tags="A || C", await_s=1) as c:
        assert c.receive(16, 30) == []
        with producer(port, ("F",)) as p:
            for tag in ("A", "B", "C", "B"):
                p.send(message("F", tag.encode(), tag=tag))
        got = receive_until(c, 2)
        assert sorted(m.body for m in got) == [b"A", b"C"]
        assert c.receive(16, 30) == []


def test_change_invisible_duration_gives_a_new_handle_that_acks(start_broker: StartBroker) -> None:
    _, _, port = start_broker(FAST)
    with simple_consumer(port, "Inv", "I", await_s=1) as c:
        assert c.receive(16, 30) == []
        with producer(port, ("I",)) as p:
            p.send(message("I", b"slow work"))
        [m] = receive_until(c, 1, invisible_s=1)
        old = m.receipt_handle
        c.change_invisible_duration(m, 60)
        assert m.receipt_handle != old
        c.ack(m)
        time.sleep(1.5)  # past the first invisible time: nothing comes back
        assert c.receive(16, 30) == []


def test_a_message_out_of_attempts_goes_to_the_dlq(start_broker: StartBroker) -> None:
    _, store, port = start_broker(FAST.replace(max_delivery_attempts=2))
    with simple_consumer(port, "Dead", "D", await_s=1) as c:
        assert c.receive(16, 30) == []
        with producer(port, ("D",)) as p:
            p.send(message("D", b"poison"))
        [first] = receive_until(c, 1, invisible_s=1)
        [second] = receive_until(c, 1, invisible_s=1)
        assert (first.delivery_attempt, second.delivery_attempt) == (1, 2)
        deadline = time.monotonic() + 30
        while "%DLQ%Dead" not in store.topics() and time.monotonic() < deadline:
            assert c.receive(16, 1) == []
    store.wait_dispatched(10)
    [dead] = store.get_message("check", "%DLQ%Dead", 0, 0).messages
    assert dead.body == b"poison"
    assert dead.properties.get("DLQ_ORIGIN_TOPIC") == "D"


def test_fifo_group_is_delivered_in_order_one_at_a_time(start_broker: StartBroker) -> None:
    _, store, port = start_broker(FAST)
    with simple_consumer(port, "Ordered", "O", await_s=1) as c:
        assert c.receive(16, 30) == []
        with producer(port, ("O",)) as p:
            for i in range(3):
                p.send(message("O", f"o{i}".encode(), group="g"))
        assert store.topic_configs()["O"].order  # the topic took FIFO messages
        order = []
        for _ in range(3):
            got = receive_until(c, 1, invisible_s=30)
            order += [m.body for m in got]
            assert c.receive(16, 30) == []  # nothing more of the group while these are un-acked
            for m in got:
                c.ack(m)
            if len(order) == 3:
                break
        assert order == [b"o0", b"o1", b"o2"]
