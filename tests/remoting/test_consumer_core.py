"""The protocol-free pieces of the consumer side: the consumer-group registry, orderly queue
locks, send-back decisions (retry or DLQ), the offset a group resumes from, and a stored message's
record bytes (what a pull response carries)."""

from __future__ import annotations

from pathlib import Path

from rocketstore import Message, MessageStore, StoreConfig
from rocketstore.broker.consumer_groups import ConsumerGroups, ConsumerMember, Subscription
from rocketstore.broker.consumer_offsets import resume_offset
from rocketstore.broker.queue_locks import QueueLocks
from rocketstore.broker.send_back import send_back
from rocketstore.codec.commitlog_record import decode_record

SMALL = StoreConfig(
    commitlog_segment_size=1 << 20, consume_queue_entries=1000, index_hash_slots=64, index_max_entries=256
)


def member(client_id: str, conn: object, now: int = 0) -> ConsumerMember:
    return ConsumerMember(client_id, conn, "127.0.0.1:5000", "JAVA", 409, now)  # type: ignore[arg-type]


def register(groups: ConsumerGroups, m: ConsumerMember, *subs: Subscription) -> bool:
    return groups.register(
        "g",
        m,
        subs,
        consume_type="CONSUME_PASSIVELY",
        message_model="CLUSTERING",
        consume_from_where="CONSUME_FROM_FIRST_OFFSET",
    )


def test_consumer_groups_report_every_change_of_members_and_subscriptions() -> None:
    groups = ConsumerGroups(expire_ms=120_000)
    a, b = object(), object()
    sub = Subscription.parse("T", "TagA || TagB", "TAG", 1)
    assert register(groups, member("c1", a), sub)
    assert not register(groups, member("c1", a, now=30_000), sub)  # a plain heartbeat changes nothing
    assert register(groups, member("c2", b), sub)
    info = groups.get("g")
    assert info is not None and info.client_ids() == ["c1", "c2"]
    assert info.subscriptions["T"].tags == ("TagA", "TagB")
    assert info.subscriptions["T"].store_filter() == "TagA || TagB"
    assert register(groups, member("c2", b), Subscription.parse("T", "*", None, 2))  # new expression
    assert groups.get("g").subscriptions["T"].store_filter() is None  # type: ignore[union-attr]
    assert groups.groups_subscribing("T") == ["g"]

    assert groups.forget_connection(b) == ["g"]
    assert groups.get("g").client_ids() == ["c1"]  # type: ignore[union-attr]
    assert groups.expire(now_ms=30_000 + 120_000) == []
    assert groups.expire(now_ms=30_000 + 120_001) == ["g"]
    assert groups.get("g") is None

    register(groups, member("c3", a), sub)
    assert not groups.unregister("g", "other")
    assert groups.unregister("g", "c3") and groups.get("g") is None


def test_queue_locks_grant_renew_refuse_and_expire() -> None:
    locks = QueueLocks(max_live_ms=60_000)
    q1, q2 = ("T", "b", 0), ("T", "b", 1)
    assert locks.lock("g", [q1, q2], "A", now_ms=0) == [q1, q2]
    assert locks.lock("g", [q1, q2], "B", now_ms=10_000) == []
    assert locks.lock("other", [q1], "B", now_ms=10_000) == [q1]  # per group
    assert locks.lock("g", [q1], "A", now_ms=50_000) == [q1]  # renewal
    assert locks.lock("g", [q1, q2], "B", now_ms=100_000) == [q2]  # q2 expired, q1 renewed at 50 s
    locks.unlock("g", [q1], "B")  # not its lock: nothing changes
    assert locks.holder("g", q1, now_ms=100_000) == "A"
    locks.unlock("g", [q1], "A")
    assert locks.holder("g", q1, now_ms=100_000) is None
    assert locks.lock("g", [q1], "B", now_ms=100_000) == [q1]


def test_send_back_goes_to_retry_with_growing_delay_then_to_the_dlq(tmp_path: Path) -> None:
    with MessageStore.open(tmp_path / "s", SMALL) as store:
        r = store.put_message(
            Message("T", b"payload", tags="tg", keys=["k1"], properties={"p": "v"}, flag=7, sys_flag=0)
        )
        store.wait_dispatched()
        original = store.look_message_by_offset(r.physical_offset)
        assert original is not None

        first = send_back(original, "g", delay_level=0, max_reconsume_times=2)
        m = first.message
        assert not first.dead_letter and m.topic == "%RETRY%g" and m.queue_id == 0
        assert m.delay_level == 3 and m.reconsume_times == 1
        assert (m.body, m.tags, list(m.keys), m.flag, m.uniq_key) == (
            b"payload",
            "tg",
            ["k1"],
            7,
            original.uniq_key,
        )
        assert m.properties == {"p": "v", "RETRY_TOPIC": "T", "ORIGIN_MESSAGE_ID": original.msg_id}
        assert send_back(original, "g", delay_level=5, max_reconsume_times=2).message.delay_level == 5

        # the retried copy as stored, sent back again: one level later, still the first topic
        [stored] = store.put_messages([Message(**{**_fields(m), "delay_level": 0})])
        store.wait_dispatched()
        retried = store.look_message_by_offset(stored.physical_offset)
        assert retried is not None and retried.reconsume_times == 1
        second = send_back(retried, "g", delay_level=0, max_reconsume_times=2)
        assert second.message.delay_level == 4 and second.message.reconsume_times == 2
        assert second.message.properties["RETRY_TOPIC"] == "T"  # type: ignore[index]
        assert second.message.properties["ORIGIN_MESSAGE_ID"] == original.msg_id  # type: ignore[index]

        # out of attempts, or asked for: the DLQ, undelayed
        [again] = store.put_messages([Message(**{**_fields(second.message), "delay_level": 0})])
        store.wait_dispatched()
        twice = store.look_message_by_offset(again.physical_offset)
        assert twice is not None
        dead = send_back(twice, "g", delay_level=0, max_reconsume_times=2)
        assert dead.dead_letter and dead.message.topic == "%DLQ%g" and dead.message.delay_level == 0
        assert send_back(original, "g", delay_level=-1, max_reconsume_times=16).dead_letter


def _fields(m: Message) -> dict[str, object]:
    return {f: getattr(m, f) for f in Message.__dataclass_fields__}


def test_resume_offset_is_the_committed_one_else_zero_on_a_young_queue(tmp_path: Path) -> None:
    with MessageStore.open(tmp_path / "s", SMALL) as store:
        assert resume_offset(store, "g", "T", 0) == 0  # nothing there yet: start at 0
        store.put_messages([Message("T", b"x", queue_id=0) for _ in range(3)])
        store.wait_dispatched()
        assert resume_offset(store, "g", "T", 0) == 0  # a young queue: from its first message
        store.commit_offset("g", "T", 0, 2)
        assert resume_offset(store, "g", "T", 0) == 2


def test_record_view_is_the_record_as_stored_in_the_commitlog(tmp_path: Path) -> None:
    with MessageStore.open(tmp_path / "s", SMALL) as store:
        results = store.put_messages([Message("T", b"body-%d" % i, tags="a", queue_id=0) for i in range(3)])
        store.wait_dispatched()
        got = store.get_message("g", "T", 0, 0, 32).messages
        segment = next((tmp_path / "s" / "commitlog").iterdir()).read_bytes()
        for msg, r in zip(got, results):
            view = msg.record_view
            assert bytes(view) == segment[r.physical_offset : r.physical_offset + msg.store_size]
        joined = b"".join(m.record_view for m in got)
        pos, bodies = 0, []
        while pos < len(joined):
            rec = decode_record(joined, pos)
            bodies.append(bytes(joined[rec.body_start : rec.body_start + rec.body_len]))
            pos += rec.total_size
        assert bodies == [b"body-0", b"body-1", b"body-2"]
