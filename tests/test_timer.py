"""Timer messages (TIMER.md; docs/timers.md): stored in rmq_sys_wheel_timer, delivered to their
real topic at their time and never before, across restarts and crashes, cancellable, limited."""

from __future__ import annotations

import json
import shutil
import signal
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from rocketstore import (
    BrokerRole,
    GetStatus,
    InvalidMessageError,
    ManualClock,
    Message,
    MessageStore,
    PutMessageResult,
    PutStatus,
    StoreConfig,
)
from rocketstore.timer import cancel_message
from rocketstore.timer.request import slot_time
from tests.helpers import HAVE_ORACLE, ORACLE_SKIP_REASON, oracle_read, read_all, spawn_python, wait_until

CFG = StoreConfig(
    commitlog_segment_size=1 << 20,
    consume_queue_entries=1000,
    index_hash_slots=64,
    index_max_entries=4096,
    timer_log_segment_size=4096,
)
T0 = 1_700_000_000_000
TIMER_TOPIC = "rmq_sys_wheel_timer"


def settle(store: MessageStore, clock: ManualClock) -> None:
    """Wait (no clock sleep) until the timer service has run a round at the clock's time: every
    slot before now is read and every stored timer is in the wheel."""
    precision = store.timer_status()["precision_ms"]
    target = clock.now_ms() // precision * precision
    assert store.wait_dispatched(60)
    assert wait_until(
        lambda: store.timer_status()["read_time_ms"] >= target and store.timer_status()["not_enqueued"] == 0
    ), store.timer_status()
    store.wait_dispatched(5)


def advance_to(store: MessageStore, clock: ManualClock, ms: int) -> None:
    clock.advance(ms - clock.now_ms())
    settle(store, clock)


def test_timer_is_stored_in_the_timer_topic_and_delivered_at_its_time(tmp_path: Path) -> None:
    clock = ManualClock(T0)
    with MessageStore.open(tmp_path / "s", CFG, clock=clock) as store:
        due = T0 + 45_250
        r = store.put_message(
            Message(
                "Orders", b"pay", tags="TagA", keys=["o-1"], queue_id=2, deliver_at=due, properties={"a": "b"}
            )
        )
        assert r.ok and r.topic == TIMER_TOPIC and r.queue_id == 0
        stored = read_all(store, TIMER_TOPIC)
        assert len(stored) == 1
        props = stored[0].properties
        assert props["REAL_TOPIC"] == "Orders" and props["REAL_QID"] == "2"
        assert props["TIMER_DELIVER_MS"] == str(due) and props["TIMER_OUT_MS"] == str(T0 + 45_200)
        assert store.timer_status()["pending"] == 1
        advance_to(store, clock, due - 1)
        assert read_all(store, "Orders", 2) == []  # one ms early: not yet
        assert store.timer_status()["pending"] == 1
        advance_to(store, clock, due)
        assert read_all(store, "Orders", 2) == []  # its slot (45.2-45.3 s) is read at 45.3 s
        advance_to(store, clock, T0 + 45_300)
        got = read_all(store, "Orders", 2)
        assert len(got) == 1
        m = got[0]
        assert (m.body, m.tags, m.keys, m.uniq_key) == (b"pay", "TagA", ["o-1"], stored[0].uniq_key)
        assert (
            m.properties["a"] == "b" and "REAL_TOPIC" not in m.properties and "REAL_QID" not in m.properties
        )
        assert m.properties["TIMER_OUT_MS"] == str(T0 + 45_200)
        assert int(m.properties["TIMER_DEQUEUE_MS"]) >= due
        assert store.query_message("Orders", "o-1")[0].body == b"pay"  # indexed by its keys
        assert store.get_message("g", "Orders", 2, 0, 32, "TagA").status is GetStatus.FOUND
        assert store.timer_status()["pending"] == 0


@pytest.mark.parametrize(
    ("props", "due_after"),
    [
        ({"TIMER_DELAY_SEC": "3"}, 3000),
        ({"TIMER_DELAY_MS": "1250"}, 1250),
        ({"TIMER_DELIVER_MS": str(T0 + 2000)}, 2000),
        ({"TIMER_DELAY_SEC": "1", "TIMER_DELAY_MS": "5000", "TIMER_DELIVER_MS": str(T0 + 9000)}, 1000),
    ],
)
def test_each_property_and_their_precedence(tmp_path: Path, props: dict[str, str], due_after: int) -> None:
    clock = ManualClock(T0)
    with MessageStore.open(tmp_path / "s", CFG, clock=clock) as store:
        assert store.put_message(Message("T", b"x", queue_id=0, properties=props)).topic == TIMER_TOPIC
        advance_to(store, clock, T0 + due_after - 1)
        assert read_all(store, "T") == []
        advance_to(store, clock, T0 + due_after + 100)
        assert len(read_all(store, "T")) == 1


def test_past_or_present_time_is_delivered_at_once_and_a_delay_level_wins(tmp_path: Path) -> None:
    clock = ManualClock(T0)
    with MessageStore.open(tmp_path / "s", CFG, clock=clock) as store:
        r = store.put_message(Message("T", b"now", queue_id=0, deliver_at=T0))
        assert r.topic == "T"
        r = store.put_message(
            Message("T", b"lvl", queue_id=0, delay_level=1, properties={"TIMER_DELAY_SEC": "60"})
        )
        assert r.topic == "SCHEDULE_TOPIC_XXXX"
        sched = read_all(store, "SCHEDULE_TOPIC_XXXX", 0)
        assert "TIMER_DELAY_SEC" not in sched[0].properties


def test_deliver_at_datetime(tmp_path: Path) -> None:
    clock = ManualClock(T0)
    with MessageStore.open(tmp_path / "s", CFG, clock=clock) as store:
        when = datetime.fromtimestamp((T0 + 5000) / 1000, tz=timezone.utc)
        store.put_message(Message("T", b"x", queue_id=0, deliver_at=when))
        assert read_all(store, TIMER_TOPIC)[0].properties["TIMER_DELIVER_MS"] == str(T0 + 5000)
        with pytest.raises(InvalidMessageError, match="aware datetime"):
            store.put_message(Message("T", b"x", deliver_at=datetime(2030, 1, 1)))
        with pytest.raises(InvalidMessageError, match="give one of them"):
            store.put_message(Message("T", b"x", deliver_at=T0 + 1, properties={"TIMER_DELAY_MS": "5"}))


def test_limits(tmp_path: Path) -> None:
    clock = ManualClock(T0)
    cfg = CFG.replace(timer_max_delay_sec=60)
    with MessageStore.open(tmp_path / "s", cfg, clock=clock) as store:
        with pytest.raises(InvalidMessageError, match="max delay 60000ms") as err:
            store.put_message(Message("T", b"x", properties={"TIMER_DELAY_SEC": "61"}))
        assert err.value.status.name == "MESSAGE_ILLEGAL"
        assert store.put_message(Message("T", b"x", properties={"TIMER_DELAY_SEC": "60"})).ok
        with pytest.raises(InvalidMessageError, match="not a number"):
            store.put_message(Message("T", b"x", properties={"TIMER_DELIVER_MS": "soon"}))
        with pytest.raises(InvalidMessageError, match="reserved"):
            store.put_message(Message(TIMER_TOPIC, b"x"))
        with pytest.raises(InvalidMessageError, match="bigger than the current time"):
            store.put_message(cancel_message("T", "ABC", T0 - 1))
    off = CFG.replace(timer_wheel_enable=False)
    with (
        MessageStore.open(tmp_path / "off", off, clock=clock) as store,
        pytest.raises(InvalidMessageError, match="not enabled"),
    ):
        store.put_message(Message("T", b"x", properties={"TIMER_DELAY_SEC": "5"}))


def test_cancel(tmp_path: Path) -> None:
    clock = ManualClock(T0)
    with MessageStore.open(tmp_path / "s", CFG, clock=clock) as store:
        due = T0 + 10_000
        keep = store.put_message(Message("T", b"keep", queue_id=0, deliver_at=due))
        drop = store.put_message(Message("T", b"drop", queue_id=0, deliver_at=due))
        uniq = store.look_message_by_offset(drop.physical_offset).uniq_key  # type: ignore[union-attr]
        assert keep.ok and uniq
        assert store.put_message(cancel_message("T", uniq, due)).topic == TIMER_TOPIC
        settle(store, clock)
        advance_to(store, clock, due + 100)
        assert [m.body for m in read_all(store, "T")] == [b"keep"]
        assert store.timer_status()["pending"] == 0
        # found due only when enqueued (the service was behind): the cancel still applies
        store.put_message(Message("T", b"late-drop", queue_id=0, deliver_at=due + 5000, uniq_key="D" * 32))
        store.put_message(cancel_message("T", "D" * 32, due + 5000))
        advance_to(store, clock, due + 6000)
        assert [m.body for m in read_all(store, "T")] == [b"keep"]


def test_a_cancel_names_only_a_timer_of_its_own_topic(tmp_path: Path) -> None:
    clock = ManualClock(T0)
    with MessageStore.open(tmp_path / "s", CFG, clock=clock) as store:
        due = T0 + 10_000
        store.put_message(Message("Victim", b"v", queue_id=0, deliver_at=due, uniq_key="V" * 32))
        # whoever may write only to "Attacker" names Victim's timer: refused, naming the property
        forged = Message(
            "Attacker",
            b"0",
            properties={"TIMER_DEL_UNIQKEY": "Victim+" + "V" * 32},
            uniq_key="X" * 32,
            deliver_at=due,
        )
        with pytest.raises(InvalidMessageError, match="TIMER_DEL_UNIQKEY"):
            store.put_message(forged)
        # such a record already in the timer topic (written before the put refused it) is ignored,
        # in the wheel and when found due at enqueue alike
        for out_ms in (due - 1000, T0 - 1000):
            record = Message(
                TIMER_TOPIC,
                b"0",
                queue_id=0,
                uniq_key="X" * 32,
                properties={
                    "TIMER_DEL_UNIQKEY": "Victim+" + "V" * 32,
                    "TIMER_OUT_MS": str(out_ms),
                    "REAL_TOPIC": "Attacker",
                    "REAL_QID": "0",
                },
            )
            assert store.put_messages([record], internal=True)[0].ok
        settle(store, clock)
        advance_to(store, clock, due + 100)
        assert [x.body for x in read_all(store, "Victim")] == [b"v"]


def test_a_slot_with_a_timer_and_a_cancel_is_delivered_on_catch_up(tmp_path: Path) -> None:
    clock = ManualClock(T0)
    with MessageStore.open(tmp_path / "s", CFG, clock=clock) as store:
        due = T0 + 10_000
        store.put_message(Message("T", b"keep", queue_id=0, deliver_at=due, uniq_key="K" * 32))
        # a cancel of a timer that does not exist (or was delivered) lands in the same slot
        store.put_message(cancel_message("T", "N" * 32, due))
        settle(store, clock)
        assert store.timer_status()["pending"] == 1  # the cancel is no timer and takes none away
    clock.advance(600_000)  # closed long enough that the open catches up in one pass over the wheel
    with MessageStore.open(tmp_path / "s", CFG, clock=clock) as store:
        settle(store, clock)
        assert [x.body for x in read_all(store, "T")] == [b"keep"]
        assert store.timer_status()["pending"] == 0


def test_a_timer_enqueued_but_never_checkpointed_survives_a_crash(tmp_path: Path) -> None:
    clock = ManualClock(T0)
    with MessageStore.open(tmp_path / "s", CFG, clock=clock) as store:
        store.put_message(Message("T", b"a", queue_id=0, deliver_at=T0 + 5_000))
        settle(store, clock)
        assert store.timer_status()["in_wheel"] == 1
        shutil.copytree(tmp_path / "s", tmp_path / "crash")  # what kill -9 leaves (the page cache)
    (tmp_path / "crash/config/timercheck").unlink(missing_ok=True)  # before the first flush
    clock.advance(10_000)
    with MessageStore.open(tmp_path / "crash", CFG, clock=clock) as store:
        settle(store, clock)
        assert [x.body for x in read_all(store, "T")] == [b"a"]


def test_without_timer_files_delivered_timers_are_not_delivered_again(tmp_path: Path) -> None:
    clock = ManualClock(T0)
    s = tmp_path / "s"
    with MessageStore.open(s, CFG, clock=clock) as store:
        store.put_message(Message("T", b"a", queue_id=0, deliver_at=T0 + 5_000))
        store.put_message(Message("T", b"b", queue_id=0, deliver_at=T0 + 50_000))
        advance_to(store, clock, T0 + 6_000)
        assert [x.body for x in read_all(store, "T")] == [b"a"]
    # a slave's copy (commitlog and queues from its master, no timer files), promoted
    shutil.rmtree(s / "timerlog")
    (s / "timerwheel").unlink()
    (s / "config/timercheck").unlink()
    clock.advance(1000)
    with MessageStore.open(s, CFG, clock=clock) as store:
        settle(store, clock)
        assert [x.body for x in read_all(store, "T")] == [b"a"]
        advance_to(store, clock, T0 + 51_000)
        assert [x.body for x in read_all(store, "T")] == [b"a", b"b"]


def test_a_slave_makes_no_timer_files(tmp_path: Path) -> None:
    with MessageStore.open(tmp_path / "s", CFG.replace(broker_role=BrokerRole.SLAVE)):
        pass
    assert not (tmp_path / "s/timerwheel").exists() and not (tmp_path / "s/timerlog").exists()
    assert not (tmp_path / "s/config/timercheck").exists()


@pytest.mark.parametrize("limit", ["properties", "record"])
def test_a_timer_the_put_accepts_at_its_size_limit_is_delivered(tmp_path: Path, limit: str) -> None:
    clock = ManualClock(T0)
    cfg = CFG if limit == "properties" else CFG.replace(max_message_size=4096)
    with MessageStore.open(tmp_path / "s", cfg, clock=clock) as store:

        def put(pad: int) -> bool:  # the real topic's name is longer than the timer topic's
            props = {"pad": "p" * pad} if limit == "properties" else {}
            body = b"b" * (pad if limit == "record" else 1)
            msg = Message(
                "T" * 100, body, queue_id=0, deliver_at=T0 + 60_000, uniq_key="U" * 32, properties=props
            )
            try:
                return store.put_message(msg).ok
            except InvalidMessageError as exc:
                assert "delivery" in str(exc)  # the refusal says why
                return False

        lo, hi = 0, 33_000 if limit == "properties" else 4096
        while lo < hi:  # the largest the put accepts
            mid = (lo + hi + 1) // 2
            lo, hi = (mid, hi) if put(mid) else (lo, mid - 1)
        assert lo > 0
        advance_to(store, clock, T0 + 61_000)
        got = read_all(store, "T" * 100)
        assert store.timer_status()["pending"] == 0
        assert any(len(m.body) == lo or len(m.properties.get("pad", "")) == lo for m in got)


@pytest.mark.parametrize("due_when_enqueued", [False, True])
def test_a_partly_refused_delivery_delivers_each_timer_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, due_when_enqueued: bool
) -> None:
    clock = ManualClock(T0)
    with MessageStore.open(tmp_path / "s", CFG, clock=clock) as store:
        timers = store._timers  # the put it delivers with, refusing as a closing store would
        put, refused = timers._put, []

        def flaky(msgs: Any) -> Any:
            if len(msgs) > 1:  # the batch fails: the service puts them one by one
                raise InvalidMessageError("one of them is bad", PutStatus.MESSAGE_ILLEGAL)
            if msgs[0].body == b"2" and not refused:
                refused.append(msgs[0])
                return [PutMessageResult(PutStatus.SERVICE_NOT_AVAILABLE)]
            return put(msgs)

        monkeypatch.setattr(timers, "_put", flaky)
        for body in (b"1", b"2", b"3"):
            if due_when_enqueued:  # a record whose slot passed before the service read it
                props = {"TIMER_OUT_MS": str(T0 - 1000), "REAL_TOPIC": "T", "REAL_QID": "0"}
                msg = Message(TIMER_TOPIC, body, queue_id=0, properties=props)
                assert store.put_messages([msg], internal=True)[0].ok
            else:
                store.put_message(Message("T", body, queue_id=0, deliver_at=T0 + 5_000))
        advance_to(store, clock, T0 + 6_000)
        assert wait_until(lambda: len(read_all(store, "T")) >= 3)
        assert refused and sorted(m.body for m in read_all(store, "T")) == [b"1", b"2", b"3"]


def test_pending_is_counted_as_timers_come_and_go_not_by_scanning_the_wheel(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = ManualClock(T0)
    with MessageStore.open(tmp_path / "s", CFG, clock=clock) as store:
        assert store._timers.wheel is None  # no timer yet: no timer files
        for i, due in enumerate((T0 + 5_000, T0 + 5_000, T0 + 9_000)):
            store.put_message(Message("T", b"%d" % i, queue_id=0, deliver_at=due, uniq_key=f"{i:032d}"))
        store.put_message(cancel_message("T", f"{1:032d}", T0 + 5_000))
        settle(store, clock)
        wheel = store._timers.wheel  # made for the first timer (its recovery's one pass is over)
        assert wheel is not None
        monkeypatch.setattr(wheel, "pending", lambda *_: pytest.fail("status scanned the wheel"))
        assert store.timer_status()["pending"] == 3 and store.runtime_info()["timerPending"] == 3
        advance_to(store, clock, T0 + 6_000)
        assert store.timer_status()["pending"] == 1  # the one delivered and the cancelled one are out
        advance_to(store, clock, T0 + 10_000)
        assert store.timer_status()["pending"] == 0
        assert [m.body for m in read_all(store, "T")] == [b"0", b"2"]


def test_a_torn_unit_is_cut_and_its_slot_relinked_from_its_first_unit(tmp_path: Path) -> None:
    clock = ManualClock(T0)
    due = T0 + 50_000
    with MessageStore.open(tmp_path / "s", CFG, clock=clock) as store:
        store.put_message(Message("T", b"A", queue_id=0, deliver_at=due))
        for i in range(20):  # units of other slots: A is far before the flushed position
            store.put_message(Message("Other", b"o", queue_id=0, deliver_at=T0 + 60_000 + i * 1000))
        settle(store, clock)
        store._timers.flush()
        store.put_message(Message("T", b"B", queue_id=0, deliver_at=due))  # A's slot, after the flush
        settle(store, clock)
        shutil.copytree(tmp_path / "s", tmp_path / "crash")  # what kill -9 leaves
    segment = tmp_path / "crash/timerlog" / f"{0:020d}"
    data = bytearray(segment.read_bytes())
    data[21 * 52 + 16 : 22 * 52] = bytes(36)  # B's unit torn: its head written, not its tail
    segment.write_bytes(bytes(data))
    clock.advance(51_000)
    with MessageStore.open(tmp_path / "crash", CFG, clock=clock) as store:
        assert store.timer_status()["recovery_log_bytes_cut"] > 0
        settle(store, clock)
        assert sorted(m.body for m in read_all(store, "T")) == [b"A", b"B"]


def test_timers_beyond_the_window_roll_and_arrive(tmp_path: Path) -> None:
    clock = ManualClock(T0)
    cfg = CFG.replace(timer_roll_window_slots=100)  # a 10 s window at 100 ms
    with MessageStore.open(tmp_path / "s", cfg, clock=clock) as store:
        due = T0 + 35_050
        store.put_message(Message("T", b"far", queue_id=0, deliver_at=due))
        store.put_message(Message("T", b"far-cancelled", queue_id=0, deliver_at=due, uniq_key="C" * 32))
        store.put_message(cancel_message("T", "C" * 32, due))
        settle(store, clock)
        for step in range(T0 + 1000, due, 1000):
            advance_to(store, clock, step)
        assert read_all(store, "T") == []
        assert len(read_all(store, TIMER_TOPIC)) > 3  # rolled: put again into the timer topic
        advance_to(store, clock, due + 100)
        got = read_all(store, "T")
        assert [m.body for m in got] == [b"far"]
        assert int(got[0].properties["TIMER_ROLL_TIMES"]) >= 2


def test_restart_keeps_pending_timers_and_delivers_missed_ones(tmp_path: Path) -> None:
    clock = ManualClock(T0)
    with MessageStore.open(tmp_path / "s", CFG, clock=clock) as store:
        for i in range(50):
            store.put_message(Message("T", str(i).encode(), queue_id=0, deliver_at=T0 + 1000 + i * 100))
        advance_to(store, clock, T0 + 3000)
        assert len(read_all(store, "T")) == 21  # due at or before T0 + 3000
    clock.advance(3 * 86_400_000)  # closed for three days: longer than the wheel's span at 100 ms
    with MessageStore.open(tmp_path / "s", CFG, clock=clock) as store:
        settle(store, clock)
        assert sorted(int(m.body) for m in read_all(store, "T")) == list(range(50))
        assert store.timer_status()["pending"] == 0


_WRITER = """
import sys, time
from rocketstore import Message, MessageStore, StoreConfig
cfg = StoreConfig(commitlog_segment_size=1 << 20, consume_queue_entries=1000, index_hash_slots=64,
                  index_max_entries=4096, timer_log_segment_size=4096,
                  disk_max_used_space_ratio=100, disk_clean_forcibly_ratio=100, disk_warning_ratio=100)
store = MessageStore.open(sys.argv[1], cfg)
n = int(sys.argv[2])
start = int(time.time() * 1000)
for i in range(n):
    due = start + 300 + (i * 7) % 2500  # due 0.3-2.8 s ahead, out of order
    r = store.put_message(Message("K", b"%06d" % i, queue_id=i % 2, deliver_at=due))
    if r.ok:
        print("A", i, due, flush=True)
print("DONE", flush=True)
time.sleep(60)
"""


def test_sigkill_loses_no_timer_and_delivers_none_early(tmp_path: Path) -> None:
    """kill -9 of a process with 1,000 timers, some delivered, most pending: after reopening,
    every acknowledged timer is delivered, none before its time; only timers due shortly before
    the kill (delivered after the last timer flush) may come twice."""
    root = tmp_path / "s"
    proc = spawn_python(_WRITER, str(root), "1000")
    assert proc.stdout is not None
    acked: dict[int, int] = {}
    for line in proc.stdout:
        if line.startswith("A "):
            _, i, due = line.split()
            acked[int(i)] = int(due)
        if line.startswith("DONE"):
            break
    time.sleep(1.2)  # deliveries under way: a real process, real time
    proc.send_signal(signal.SIGKILL)
    killed_at = int(time.time() * 1000)
    proc.wait()
    assert len(acked) == 1000 and (root / "abort").exists()
    with MessageStore.open(root, CFG) as store:
        assert wait_until(lambda: store.timer_status()["pending"] == 0, timeout=30), store.timer_status()
        got = [m for q in (0, 1) for m in read_all(store, "K", q)]
    seen: dict[int, int] = {}
    for m in got:
        i = int(m.body)
        assert m.store_timestamp >= acked[i], f"timer {i} delivered {acked[i] - m.store_timestamp} ms early"
        seen[i] = seen.get(i, 0) + 1
    assert set(seen) == set(acked), f"lost: {sorted(set(acked) - set(seen))[:10]}"
    twice = [i for i, n in seen.items() if n > 1]
    assert all(n <= 2 for n in seen.values())
    # repeats only for timers due within a flush interval (plus scheduling slack) of the kill
    assert all(killed_at - 3000 <= acked[i] <= killed_at for i in twice), [
        acked[i] - killed_at for i in twice
    ]


def test_cli_put_deliver_at_status_print_verify_recover(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from rocketstore.cli import main
    from rocketstore.times import format_time, parse_time

    def run(*args: str) -> tuple[int, list[dict[str, Any]]]:
        code = main(list(args))
        out, err = capsys.readouterr()
        assert code == 0, err
        return code, [json.loads(line) for line in out.splitlines() if line.strip()]

    root = tmp_path / "s"
    due = int(time.time() * 1000) + 3_600_000
    run("put", str(root), "--create", "-t", "Later", "--deliver-at", format_time(due), "hello", "--json")
    assert run("status", str(root), "--json")[1][0]["timer_pending"] == 1
    rows = run("print", str(root), "--topic", TIMER_TOPIC, "--json")[1]
    assert len(rows) == 1 and rows[0]["real_topic"] == "Later" and rows[0]["body"] == "hello"
    assert parse_time(rows[0]["due_time"]) == slot_time(due, StoreConfig().timer_precision_ms)  # TIMER_OUT_MS
    # a rolled record is stored long after the put: its TIMER_DELAY_SEC says nothing of its time
    with MessageStore.open(root, delayed_delivery=False) as store:
        props = {"TIMER_DELAY_SEC": "60", "TIMER_OUT_MS": str(due + 7_200_000), "REAL_TOPIC": "Later"}
        props |= {"REAL_QID": "0", "TIMER_ROLL_TIMES": "1"}
        store.put_messages([Message(TIMER_TOPIC, b"rolled", queue_id=0, properties=props)], internal=True)
    rows = run("print", str(root), "--topic", TIMER_TOPIC, "--json")[1]
    assert parse_time(rows[1]["due_time"]) == due + 7_200_000
    assert run("verify", str(root), "--json")[1][0]["damage"] == []
    assert run("recover", str(root), "--json")[1][0]["timer_pending"] == 2  # and the rolled one
    assert main(["put", str(root), "-t", "Later", "--deliver-at", "tomorrow-ish", "x"]) != 0
    assert "--deliver-at" in capsys.readouterr().err


def test_verify_names_damaged_timer_files(tmp_path: Path) -> None:
    from rocketstore.verify import verify_store

    clock = ManualClock(T0)
    root = tmp_path / "s"
    with MessageStore.open(root, CFG, clock=clock) as store:
        for i in range(3):
            store.put_message(Message("T", b"x", queue_id=0, deliver_at=T0 + 60_000 + i))
        settle(store, clock)
    assert verify_store(root, CFG).clean
    seg = root / "timerlog" / "00000000000000000000"
    data = bytearray(seg.read_bytes())
    data[52 + 12 : 52 + 16] = (0x40).to_bytes(4, "big")  # the second unit's magic: not a unit's
    seg.write_bytes(bytes(data))
    (root / "config" / "timermetrics").write_text("{broken")
    kinds = {(d.kind, d.file) for d in verify_store(root, CFG).damage}
    assert ("timer_log_unit", "timerlog") in kinds and ("timer_file", "config/timermetrics") in kinds
    # reopening cuts the timer log at the damage (the last units written are checked again) and
    # enqueues the timers after it again from the timer topic: nothing lost
    (root / "config" / "timermetrics").unlink()
    with MessageStore.open(root, CFG, clock=clock) as store:
        assert store.timer_status()["recovery_log_bytes_cut"] > 0
        advance_to(store, clock, T0 + 61_000)
        assert len(read_all(store, "T")) == 3
        assert store.failure is None and store.put_message(Message("T", b"y", queue_id=0)).ok


@pytest.mark.skipif(not HAVE_ORACLE, reason=ORACLE_SKIP_REASON)
def test_rocketmq_4_9_loads_a_store_with_pending_timers(tmp_path: Path) -> None:
    root = tmp_path / "s"
    with MessageStore.open(root, CFG) as store:
        for i in range(5):
            assert store.put_message(
                Message("Later", b"t%d" % i, queue_id=1, deliver_at=int(time.time() * 1000) + 3_600_000)
            ).ok
        assert store.put_message(Message("Now", b"plain", queue_id=0)).ok
        # the timer files are made for the first timer, timercheck at the next flush
        assert wait_until(
            lambda: store.timer_status()["in_wheel"] == 5 and (root / "config" / "timercheck").exists()
        )
    assert (root / "timerwheel").exists() and (root / "config" / "timercheck").exists()
    text = oracle_read(
        root, tmp_path / "oracle.txt", hash_slots=CFG.index_hash_slots, index_num=CFG.index_max_entries
    )
    assert "queue topic=rmq_sys_wheel_timer queueId=0 minOffset=0 maxOffset=5" in text
    assert "queue topic=Now queueId=0 minOffset=0 maxOffset=1" in text
    timers = [
        line for line in text.splitlines() if "topic=rmq_sys_wheel_timer" in line and "msg offset=" in line
    ]
    assert len(timers) == 5 and all("REAL_TOPIC=Later" in line and "TIMER_OUT_MS=" in line for line in timers)


def test_timer_log_segments_go_when_the_commitlog_reclaimed_their_records(tmp_path: Path) -> None:
    start = int(time.time() * 1000) // 1000 * 1000  # file ages are real: so is this clock's start
    clock = ManualClock(start)
    cfg = CFG.replace(commitlog_segment_size=16384, file_reserved_time=0)
    with MessageStore.open(tmp_path / "s", cfg, clock=clock, disk_usage=lambda _: 0.0) as store:
        for _ in range(200):  # 78 units per 4 KiB timer log segment: 3 segments
            store.put_message(Message("T", b"x" * 100, queue_id=0, deliver_at=start + 1000))
        settle(store, clock)
        segments = sorted((tmp_path / "s" / "timerlog").iterdir())
        assert len(segments) == 3
        advance_to(store, clock, start + 1100)
        assert len(read_all(store, "T")) == 200
        for _ in range(300):  # newer records: the timers' segments can go
            store.put_message(Message("P", b"y" * 100, queue_id=0))
        clock.advance(3_600_000)
        store.reclaim()
        assert store.min_phy_offset() > 0
        clock.advance(31_000)
        settle(store, clock)
        assert wait_until(lambda: len(list((tmp_path / "s" / "timerlog").iterdir())) < 3)
        # the newest segment stays, and new timers go on after it
        store.put_message(Message("T", b"later", queue_id=0, deliver_at=clock.now_ms() + 500))
        advance_to(store, clock, clock.now_ms() + 600)
        assert read_all(store, "T")[-1].body == b"later"
