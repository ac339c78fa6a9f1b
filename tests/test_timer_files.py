"""The timer files' bytes (TIMER.md §5): timerlog units and blanks, wheel slots, timercheck,
timermetrics — each as RocketMQ 5 lays it out."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from rocketstore.errors import CorruptDataError
from rocketstore.timer.request import slot_time
from rocketstore.timer.timercheck import TimerCheckpoint, TimerProgress, decode_timercheck, encode_timercheck
from rocketstore.timer.timerlog import (
    BLANK_MAGIC,
    MAGIC_DEFAULT,
    MAGIC_DELETE,
    MAGIC_ROLL,
    UNIT_SIZE,
    TimerLog,
    TimerUnit,
    decode_unit,
    encode_unit,
)
from rocketstore.timer.timermetrics import TimerMetrics, decode_timermetrics, encode_timermetrics
from rocketstore.timer.timerwheel import SLOTS_TOTAL, TimerWheel


def test_timerlog_unit_bytes() -> None:
    unit = TimerUnit(prev_pos=-1, magic=MAGIC_DEFAULT | MAGIC_ROLL, write_ms=1_700_000_000_000,
                     delay=2500, offset_py=4096, size_py=300, topic_hash=-123)  # fmt: skip
    raw = encode_unit(unit)
    assert len(raw) == UNIT_SIZE == 52
    assert raw == struct.pack(">iqiqiqiiq", 52, -1, 3, 1_700_000_000_000, 2500, 4096, 300, -123, 0)
    assert decode_unit(raw) == unit
    assert unit.slot_ms == 1_700_000_002_500
    with pytest.raises(CorruptDataError):
        decode_unit(struct.pack(">iqiqiqiiq", 52, -1, 0x10, 0, 0, 0, 0, 0, 0))  # (magic | 0xF) != 0xF
    with pytest.raises(CorruptDataError):
        decode_unit(struct.pack(">iqiqiqiiq", 51, -1, 1, 0, 0, 0, 0, 0, 0))


def test_blank_magic_is_rocketmqs() -> None:
    assert struct.unpack(">i", struct.pack(">I", 0xCBD43194))[0] == BLANK_MAGIC
    assert (0xBBCCDDEE ^ (1880681586 + 8)) == 0xCBD43194


def test_timerlog_appends_rolls_with_a_blank_and_scans(tmp_path: Path) -> None:
    size = 4096
    tl = TimerLog(tmp_path / "timerlog", size)
    tl.load(0o700)
    per_segment = (size - 16) // UNIT_SIZE  # 78: the last unit must leave room for a 16-byte blank
    positions = [
        tl.append(TimerUnit(i - 1, MAGIC_DEFAULT, 1000, 100, i, 10, 0)) for i in range(per_segment + 2)
    ]
    assert positions[per_segment - 1] == (per_segment - 1) * UNIT_SIZE
    assert positions[per_segment] == size  # the next unit opens the second segment
    assert sorted(p.name for p in (tmp_path / "timerlog").iterdir()) == [
        "00000000000000000000",
        "00000000000000004096",
    ]
    raw = (tmp_path / "timerlog" / "00000000000000000000").read_bytes()
    tail = per_segment * UNIT_SIZE
    assert struct.unpack_from(">iqi", raw, tail) == (size - tail, 0, BLANK_MAGIC)
    tl.flush()
    assert tl.unit_at(positions[3]).offset_py == 3
    tl.close()
    # reopened: the scan crosses the blank and stops at the first zero bytes
    again = TimerLog(tmp_path / "timerlog", size)
    again.load(0o700)
    found, end = again.scan(0)
    assert end == size + 2 * UNIT_SIZE
    assert [len(units) for _, units in found] == [per_segment, 2]
    assert found[1][1]["offset_py"].tolist() == [per_segment, per_segment + 1]
    # a torn unit ends the valid log there
    path = tmp_path / "timerlog" / "00000000000000004096"
    data = bytearray(path.read_bytes())
    data[UNIT_SIZE : UNIT_SIZE + 4] = struct.pack(">i", 7)
    path.write_bytes(bytes(data))
    assert again.scan(0)[1] == size + UNIT_SIZE
    again.close()


def test_wheel_file_and_slots(tmp_path: Path) -> None:
    wheel = TimerWheel(tmp_path / "timerwheel", 100)
    assert (tmp_path / "timerwheel").stat().st_size == SLOTS_TOTAL * 2 * 32 == 38_707_200
    t = 1_700_000_000_300
    assert wheel.slot(t).empty
    wheel.put_slot(t, 52, 104, 2, 0)
    slot = wheel.slot(t)
    assert (slot.time_ms, slot.first_pos, slot.last_pos, slot.num) == (t, 52, 104, 2)
    wheel.flush()
    index = (t // 100) % (SLOTS_TOTAL * 2)
    raw = (tmp_path / "timerwheel").read_bytes()[index * 32 : index * 32 + 32]
    assert raw == struct.pack(">qqqii", t // 100, 52, 104, 2, 0)  # time in precision units
    # the same index one lap later is another time: it reads as empty
    assert wheel.slot(t + SLOTS_TOTAL * 2 * 100).empty
    assert wheel.due_times(t - 1000, t + 1000) == [t]
    assert wheel.due_times(t + 100, t + 1000) == []
    assert wheel.pending(t) == 2
    assert wheel.clear_pointing_past(104) == 1 and wheel.slot(t).empty
    wheel.close()


def test_wheel_of_another_length_is_refused(tmp_path: Path) -> None:
    (tmp_path / "timerwheel").write_bytes(bytes(64))
    with pytest.raises(CorruptDataError, match="timer wheel length 64"):
        TimerWheel(tmp_path / "timerwheel", 1000)


def test_timercheck_bytes(tmp_path: Path) -> None:
    p = TimerProgress(1_700_000_000_100, 5200, 42, 42, 0, 1_700_000_000_123, 9)
    raw = encode_timercheck(p)
    assert len(raw) == 4096 and raw[56:] == bytes(4040)
    assert raw[:56] == struct.pack(">7q", 1_700_000_000_100, 5200, 42, 42, 0, 1_700_000_000_123, 9)
    assert decode_timercheck(raw) == p
    cp = TimerCheckpoint(tmp_path / "timercheck")
    cp.flush(p)
    assert TimerCheckpoint(tmp_path / "timercheck").load().last_timer_queue_offset == 42
    assert TimerCheckpoint(tmp_path / "timercheck").load().counter == 1  # counter moves per flush
    with pytest.raises(CorruptDataError):
        decode_timercheck(b"short")


def test_timermetrics_json(tmp_path: Path) -> None:
    doc = json.loads(encode_timermetrics({"Orders": (3, 17)}, 5, 99))
    assert doc == {
        "dataVersion": {"counter": 5, "stateVersion": 0, "timestamp": 99},
        "timingCount": {"Orders": {"count": 3, "timeStamp": 17}},
    }
    m = TimerMetrics(tmp_path / "timermetrics")
    m.add("Orders", 1, 10)
    m.add("Orders", 1, 11)
    m.add("Bills", 1, 12)
    m.add("Bills", -1, 13)
    m.persist(20)
    again = TimerMetrics(tmp_path / "timermetrics")
    again.load()
    assert again.counts == {"Orders": (2, 11), "Bills": (0, 13)} and again.total() == 2
    with pytest.raises(CorruptDataError):
        decode_timermetrics("{not json")


def test_slot_time_rounds_down_to_the_slot_before() -> None:
    assert slot_time(1_700_000_007_300, 1000) == 1_700_000_007_000
    assert slot_time(1_700_000_008_000, 1000) == 1_700_000_007_000  # a slot start: one earlier
    assert slot_time(1_700_000_008_050, 100) == 1_700_000_008_000


def test_delete_magic_is_four() -> None:
    assert (MAGIC_DEFAULT, MAGIC_ROLL, MAGIC_DELETE) == (1, 2, 4)


def test_spark_counts_the_timer_topic_as_a_system_topic() -> None:
    from rocketstore.spark.options import is_system_topic

    assert is_system_topic("rmq_sys_wheel_timer") and not is_system_topic("Orders")
    # the store's own topics in any case, as the store refuses them (system_topics.reserved_by_store)
    assert is_system_topic("rmq_sys_ROCKETSTORE_POP_LOG") and is_system_topic("schedule_topic_xxxx")
