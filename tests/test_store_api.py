"""Behaviour of the MessageStore facade (STORE.md §2.2, §4, §5, §10): what puts return, what reads see,
what lands on disk. Small geometry throughout so segments, consume-queue files and index files roll."""

from __future__ import annotations

import itertools
import struct
import threading
import time
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from rocketstore import (
    CorruptDataError,
    GetStatus,
    InvalidArgumentError,
    InvalidMessageError,
    ManualClock,
    Message,
    MessageExt,
    MessageStore,
    PutStatus,
    StoreClosedError,
    StoreConfig,
    StoreLockedError,
    StoreReadOnlyError,
)

SEG = 65536
CFG = StoreConfig(
    commitlog_segment_size=SEG, consume_queue_entries=40, index_hash_slots=64, index_max_entries=256
)
T0 = 1_700_000_000_000
BLANK_MAGIC = 0xCBD43194
SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
TX_PREPARED, TX_COMMIT, TX_ROLLBACK = 0x4, 0x8, 0xC
BORN_V6, STORE_V6 = 0x10, 0x20
HEX_UPPER = set("0123456789ABCDEF")


def java_hash(s: str) -> int:
    """Java's String.hashCode, written independently of the package (ASCII strings only here)."""
    h = 0
    for ch in s:
        h = (31 * h + ord(ch)) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def open_store(path: Path, cfg: StoreConfig = CFG, clock: ManualClock | None = None) -> MessageStore:
    return MessageStore.open(path, cfg, clock=clock)


def drain(store: MessageStore) -> None:
    assert store.wait_dispatched(5.0)


def read_queue(store: MessageStore, topic: str, qid: int, tags: str | None = None) -> list[MessageExt]:
    """Every message of a queue via repeated get_message calls."""
    out: list[MessageExt] = []
    offset = 0
    for _ in range(10_000):
        res = store.get_message("g", topic, qid, offset, 32, tags)
        if res.status not in (GetStatus.FOUND, GetStatus.NO_MATCHED_MESSAGE):
            break
        assert res.next_begin_offset > offset
        out.extend(res.messages)
        offset = res.next_begin_offset
    return out


def store_entries(path: Path) -> set[str]:
    """Paths under a store root but commitlog segments (the next is pre-created in the background)."""
    return {str(p.relative_to(path)) for p in path.rglob("*") if p.parent.name != "commitlog"}


# --- 1. round trip ----------------------------------------------------------------------------------------


def assert_same_message(m: MessageExt, expected: dict[str, Any]) -> None:
    for name, value in expected.items():
        assert getattr(m, name) == value, name


def test_round_trip_every_field(tmp_path: Path) -> None:
    clock = ManualClock(T0 + 123)
    user_props = {"color": "blue", "n": "42", "ünï": "çödé"}
    msgs = [
        Message(
            topic="RoundTrip",
            body=b"\x00payload\xff",
            tags="TagA",
            keys=["k1", "k2"],
            properties=user_props,
            queue_id=3,
            flag=-7,
            born_timestamp=T0 - 5000,
            born_host="10.1.2.3:5555",
        ),
        Message(
            topic="RoundTrip",
            body=b"v6 born",
            tags="TagB",
            keys=["k3"],
            queue_id=3,
            flag=0x12345678,
            born_timestamp=T0 - 1,
            born_host="[fe80:0:0:0:1:2:3:4]:40005",
        ),
    ]
    with open_store(tmp_path, clock=clock) as store:
        results = []
        for m in msgs:
            results.append(store.put_message(m))
            clock.advance(7)
        drain(store)
        got = store.get_message("g", "RoundTrip", 3, 0)
        assert got.status is GetStatus.FOUND
        assert len(got.messages) == 2

        for i, (m, r) in enumerate(zip(msgs, results)):
            assert r.status is PutStatus.PUT_OK
            assert r.queue_offset == i
            assert r.store_timestamp == T0 + 123 + 7 * i
            uniq = got.messages[i].uniq_key
            assert uniq is not None and len(uniq) == 32 and set(uniq) <= HEX_UPPER
            msg_id = r.msg_id
            assert msg_id is not None and len(msg_id) == 32
            # store host 127.0.0.1:10911, then the physical offset
            assert msg_id == f"7F00000100002A9F{r.physical_offset:016X}"
            expected: dict[str, Any] = {
                "topic": "RoundTrip",
                "queue_id": 3,
                "queue_offset": i,
                "physical_offset": r.physical_offset,
                "store_size": r.wrote_bytes,
                "msg_id": msg_id,
                "flag": m.flag,
                "body_crc": zlib.crc32(m.body) & 0x7FFFFFFF,
                "reconsume_times": 0,
                "prepared_transaction_offset": 0,
                "born_timestamp": m.born_timestamp,
                "born_host": m.born_host,
                "store_timestamp": r.store_timestamp,
                "store_host": "127.0.0.1:10911",
                "body": m.body,
                "properties": {
                    **(m.properties or {}),
                    "KEYS": " ".join(m.keys),
                    "TAGS": m.tags,
                    "UNIQ_KEY": uniq,
                },
                "keys": list(m.keys),
                "tags": m.tags,
                "uniq_key": uniq,
                "tags_code": java_hash(m.tags or ""),
                "sys_flag": BORN_V6 if i == 1 else 0,
            }
            by_offset = store.look_message_by_offset(r.physical_offset)
            by_id = store.view_message_by_id(msg_id)
            assert by_offset is not None and by_id is not None
            for found in (got.messages[i], by_offset, by_id):
                assert_same_message(found, expected)
        assert results[1].physical_offset == results[0].physical_offset + results[0].wrote_bytes
        assert got.messages[0].uniq_key != got.messages[1].uniq_key


def test_round_trip_defaults_and_empty_body(tmp_path: Path) -> None:
    clock = ManualClock(T0)
    with open_store(tmp_path, clock=clock) as store:
        r = store.put_message(Message(topic="Defaults", body=b""))
        drain(store)
        m = store.look_message_by_offset(r.physical_offset)
        assert m is not None
        assert m.body == b""
        assert m.born_timestamp == m.store_timestamp == T0
        assert m.born_host == m.store_host == "127.0.0.1:10911"
        assert m.tags is None and m.keys == [] and m.tags_code == 0
        assert set(m.properties) == {"UNIQ_KEY"}


def test_ipv6_store_host_msg_id(tmp_path: Path) -> None:
    cfg = CFG.replace(store_host="[0:0:0:0:0:0:0:1]:10911")
    with open_store(tmp_path, cfg) as store:
        store.put_message(Message(topic="V6", body=b"first", queue_id=0))
        r = store.put_message(Message(topic="V6", body=b"second", born_host="10.0.0.9:1234", queue_id=0))
        both = store.put_message(
            Message(topic="V6", body=b"third", born_host="[fe80:0:0:0:1:2:3:4]:40005", queue_id=0)
        )
        drain(store)
        assert r.msg_id is not None
        assert len(r.msg_id) == 56
        assert r.msg_id == "0" * 30 + "01" + "00002A9F" + f"{r.physical_offset:016X}"
        m = store.view_message_by_id(r.msg_id)
        assert m is not None
        assert m.body == b"second"
        assert m.msg_id == r.msg_id
        assert m.sys_flag & STORE_V6
        assert not m.sys_flag & BORN_V6
        assert m.store_host == "[0:0:0:0:0:0:0:1]:10911"
        assert m.born_host == "10.0.0.9:1234"
        got = store.get_message("g", "V6", 0, 1)
        assert [x.body for x in got.messages] == [b"second", b"third"]
        m3 = got.messages[1]
        assert m3.sys_flag & (STORE_V6 | BORN_V6) == STORE_V6 | BORN_V6
        assert m3.born_host == "[fe80:0:0:0:1:2:3:4]:40005"
        assert m3.msg_id == both.msg_id
        assert m3.physical_offset == both.physical_offset == r.physical_offset + r.wrote_bytes


def test_uniq_key_generation_options(tmp_path: Path) -> None:
    with open_store(tmp_path / "a") as store:
        given = store.put_message(Message(topic="U", body=b"x", uniq_key="MY-OWN-ID"))
        drain(store)
        m = store.look_message_by_offset(given.physical_offset)
        assert m is not None and m.uniq_key == "MY-OWN-ID"
        assert m.properties["UNIQ_KEY"] == "MY-OWN-ID"
    with open_store(tmp_path / "b", CFG.replace(generate_uniq_key=False)) as store:
        r = store.put_message(Message(topic="U", body=b"x"))
        kept = store.put_message(Message(topic="U", body=b"y", uniq_key="GIVEN"))
        drain(store)
        m = store.look_message_by_offset(r.physical_offset)
        assert m is not None
        assert m.uniq_key is None
        assert "UNIQ_KEY" not in m.properties
        m2 = store.look_message_by_offset(kept.physical_offset)
        assert m2 is not None and m2.uniq_key == "GIVEN"


def test_lookup_of_missing_offsets_returns_none(tmp_path: Path) -> None:
    with open_store(tmp_path) as store:
        r = store.put_message(Message(topic="L", body=b"abc"))
        drain(store)
        assert store.look_message_by_offset(r.physical_offset + 4) is None  # inside a record
        assert store.look_message_by_offset(store.max_phy_offset()) is None
        assert store.look_message_by_offset(10 * SEG) is None
        assert store.view_message_by_id(f"7F00000100002A9F{10 * SEG:016X}") is None
        for bad in ("", "XYZ", "7F00000100002A9F00000000000000000"):
            with pytest.raises(CorruptDataError):
                store.view_message_by_id(bad)


# --- 2. get_message statuses --------------------------------------------------------------------------


def put_n(store: MessageStore, topic: str, n: int, qid: int = 0, body_size: int = 16, **kw: Any) -> list[Any]:
    return store.put_messages(
        [Message(topic=topic, body=bytes([i % 251]) * body_size, queue_id=qid, **kw) for i in range(n)]
    )


def test_get_status_semantics(tmp_path: Path) -> None:
    with open_store(tmp_path) as store:
        put_n(store, "G", 5)
        drain(store)

        res = store.get_message("g", "Nope", 0, 3)
        assert (res.status, res.next_begin_offset, res.messages) == (GetStatus.NO_MATCHED_LOGIC_QUEUE, 0, [])
        res = store.get_message("g", "G", 1, 0)
        assert res.status is GetStatus.NO_MATCHED_LOGIC_QUEUE

        res = store.get_message("g", "G", 0, 5)
        assert (res.status, res.next_begin_offset, res.min_offset, res.max_offset) == (
            GetStatus.OFFSET_OVERFLOW_ONE,
            5,
            0,
            5,
        )
        assert res.messages == []

        res = store.get_message("g", "G", 0, 9)
        assert (res.status, res.next_begin_offset, res.min_offset, res.max_offset) == (
            GetStatus.OFFSET_OVERFLOW_BADLY,
            0,
            0,
            5,
        )

        res = store.get_message("g", "G", 0, -1)
        assert (res.status, res.next_begin_offset, res.messages) == (GetStatus.OFFSET_TOO_SMALL, 0, [])

        res = store.get_message("g", "G", 0, 1, max_msgs=3)
        assert res.status is GetStatus.FOUND
        assert res.next_begin_offset == 4
        assert [m.queue_offset for m in res.messages] == [1, 2, 3]
        assert (res.min_offset, res.max_offset) == (0, 5)

        res = store.get_message("g", "G", 0, 2)
        assert res.next_begin_offset == 5
        assert [m.queue_offset for m in res.messages] == [2, 3, 4]


def test_get_caps_at_32_and_stops_at_consume_queue_segment_end(tmp_path: Path) -> None:
    with open_store(tmp_path) as store:
        put_n(store, "Cap", 90)
        drain(store)
        res = store.get_message("g", "Cap", 0, 0, max_msgs=100)
        assert res.status is GetStatus.FOUND
        assert len(res.messages) == 32
        assert res.next_begin_offset == 32

        res = store.get_message("g", "Cap", 0, 35, max_msgs=32)
        assert [m.queue_offset for m in res.messages] == [35, 36, 37, 38, 39]
        assert res.next_begin_offset == 40
        res = store.get_message("g", "Cap", 0, 40, max_msgs=32)
        assert [m.queue_offset for m in res.messages] == list(range(40, 72))
        assert res.next_begin_offset == 72
        res = store.get_message("g", "Cap", 0, 72, max_msgs=32)
        assert [m.queue_offset for m in res.messages] == list(range(72, 80))
        assert res.next_begin_offset == 80
        assert [m.queue_offset for m in read_queue(store, "Cap", 0)] == list(range(90))
        # the consume queue really is in 40-entry (800-byte) files
        files = sorted((tmp_path / "consumequeue" / "Cap" / "0").iterdir())
        assert [f.name for f in files][:3] == [f"{n:020d}" for n in (0, 800, 1600)]
        assert all(f.stat().st_size == 800 for f in files)


def test_tag_filter_stops_at_consume_queue_segment_end(tmp_path: Path) -> None:
    with open_store(tmp_path) as store:
        store.put_messages(
            [
                Message(topic="FS", body=b"x", tags="TagA" if i in (2, 38, 45) else "TagB", queue_id=0)
                for i in range(50)
            ]
        )
        drain(store)
        res = store.get_message("g", "FS", 0, 39, 32, "TagA")
        assert (res.status, res.messages, res.next_begin_offset) == (GetStatus.NO_MATCHED_MESSAGE, [], 40)
        res = store.get_message("g", "FS", 0, 3, 32, "TagA")
        assert [m.queue_offset for m in res.messages] == [38]
        assert res.next_begin_offset == 40
        res = store.get_message("g", "FS", 0, 40, 32, "TagA")
        assert [m.queue_offset for m in res.messages] == [45]
        assert res.next_begin_offset == 50
        assert [m.queue_offset for m in read_queue(store, "FS", 0, "TagA")] == [2, 38, 45]


def test_get_respects_configured_count_and_byte_caps(tmp_path: Path) -> None:
    with open_store(tmp_path / "count", CFG.replace(max_transfer_count_on_message_in_memory=5)) as store:
        put_n(store, "C", 12)
        drain(store)
        res = store.get_message("g", "C", 0, 0, max_msgs=32)
        assert len(res.messages) == 5
        assert res.next_begin_offset == 5
        # an in-process reader (the consumer) lifts the caps: max_msgs alone bounds the read
        res = store.get_message("g", "C", 0, 0, max_msgs=10, transfer_limits=False)
        assert [m.queue_offset for m in res.messages] == list(range(10))
        assert res.next_begin_offset == 10

    size = 0
    with open_store(tmp_path / "probe") as store:
        size = put_n(store, "B", 1, body_size=200)[0].wrote_bytes
    cfg = CFG.replace(max_transfer_bytes_on_message_in_memory=3 * size + size // 2)
    with open_store(tmp_path / "bytes", cfg) as store:
        results = put_n(store, "B", 10, body_size=200)
        assert {r.wrote_bytes for r in results} == {size}
        drain(store)
        res = store.get_message("g", "B", 0, 0, max_msgs=32)
        assert len(res.messages) == 3
        assert res.next_begin_offset == 3
        assert len(store.get_message("g", "B", 0, 0, max_msgs=32, transfer_limits=False).messages) == 10
    cfg = CFG.replace(max_transfer_bytes_on_message_in_memory=3 * size)
    with open_store(tmp_path / "exact", cfg) as store:
        put_n(store, "B", 10, body_size=200)
        drain(store)
        assert len(store.get_message("g", "B", 0, 0).messages) == 3
    # one message is always returned, even when it alone is over the cap
    cfg = CFG.replace(max_transfer_bytes_on_message_in_memory=size // 2)
    with open_store(tmp_path / "tiny", cfg) as store:
        put_n(store, "B", 4, body_size=200)
        drain(store)
        res = store.get_message("g", "B", 0, 1)
        assert res.status is GetStatus.FOUND
        assert [m.queue_offset for m in res.messages] == [1]
        assert res.next_begin_offset == 2


# --- 3. tag filter ------------------------------------------------------------------------------------


def test_tag_filter(tmp_path: Path) -> None:
    tags = ["TagA", "TagB", "TagA", "TagB", "TagA", None, "TagB", "TagA", "TagB", "TagC"]
    with open_store(tmp_path) as store:
        store.put_messages(
            [Message(topic="F", body=str(i).encode(), tags=t, queue_id=0) for i, t in enumerate(tags)]
        )
        drain(store)

        def offsets(flt: Any, start: int = 0, max_msgs: int = 32) -> tuple[GetStatus, list[int], int]:
            r = store.get_message("g", "F", 0, start, max_msgs, flt)
            return r.status, [m.queue_offset for m in r.messages], r.next_begin_offset

        a = [i for i, t in enumerate(tags) if t == "TagA"]
        ab = [i for i, t in enumerate(tags) if t in ("TagA", "TagB")]
        assert offsets("TagA") == (GetStatus.FOUND, a, 10)
        assert offsets("TagA || TagB") == (GetStatus.FOUND, ab, 10)
        assert offsets(["TagA", "TagB"]) == (GetStatus.FOUND, ab, 10)
        assert offsets("*") == (GetStatus.FOUND, list(range(10)), 10)
        assert offsets(None) == (GetStatus.FOUND, list(range(10)), 10)
        # skipped entries still advance next_begin_offset
        assert offsets("TagC") == (GetStatus.FOUND, [9], 10)
        assert offsets("TagA", start=1, max_msgs=2) == (GetStatus.FOUND, [2, 4], 5)
        assert offsets("TagB", start=0, max_msgs=1) == (GetStatus.FOUND, [1], 2)
        assert offsets("TagZ") == (GetStatus.NO_MATCHED_MESSAGE, [], 10)
        assert offsets("TagC", start=9) == (GetStatus.FOUND, [9], 10)
        for m in store.get_message("g", "F", 0, 0, 32, "TagA").messages:
            assert m.tags == "TagA"
            assert m.tags_code == java_hash("TagA")


def test_tag_filter_compares_real_tag_on_hash_collision(tmp_path: Path) -> None:
    assert java_hash("Aa") == java_hash("BB")
    with open_store(tmp_path) as store:
        store.put_messages(
            [
                Message(topic="H", body=b"bb0", tags="BB", queue_id=0),
                Message(topic="H", body=b"aa", tags="Aa", queue_id=0),
                Message(topic="H", body=b"bb1", tags="BB", queue_id=0),
            ]
        )
        store.put_messages([Message(topic="H2", body=b"bb", tags="BB", queue_id=0)])
        drain(store)
        res = store.get_message("g", "H", 0, 0, 32, "Aa")
        assert res.status is GetStatus.FOUND
        assert [m.body for m in res.messages] == [b"aa"]
        assert res.next_begin_offset == 3
        res = store.get_message("g", "H", 0, 0, 32, "BB")
        assert [m.body for m in res.messages] == [b"bb0", b"bb1"]
        res = store.get_message("g", "H2", 0, 0, 32, "Aa")
        assert res.status is GetStatus.NO_MATCHED_MESSAGE
        assert res.messages == []
        assert res.next_begin_offset == 1


# --- 4. key queries -------------------------------------------------------------------------------------


def test_query_multiple_keys_and_many_matches(tmp_path: Path) -> None:
    with open_store(tmp_path) as store:
        multi = store.put_message(Message(topic="Q", body=b"multi", keys=["alpha", "beta", "gamma"]))
        results = store.put_messages(
            [Message(topic="Q", body=f"same{i}".encode(), keys=["same"]) for i in range(100)]
        )
        drain(store)
        for k in ("alpha", "beta", "gamma"):
            found = store.query_message("Q", k)
            assert [m.physical_offset for m in found] == [multi.physical_offset]
        found = store.query_message("Q", "same")
        assert len(found) == 100
        expected = sorted((r.physical_offset for r in results), reverse=True)
        assert [m.physical_offset for m in found] == expected
        assert [m.body for m in found] == [f"same{i}".encode() for i in reversed(range(100))]
        capped = store.query_message("Q", "same", max_num=7)
        assert [m.physical_offset for m in capped] == expected[:7]
        it = store.iter_query_message("Q", "same")
        assert next(it).physical_offset == expected[0]
        assert store.query_message("Q", "missing") == []


def test_query_returns_a_message_once(tmp_path: Path) -> None:
    with open_store(tmp_path) as store:
        r = store.put_message(
            Message(topic="Once", body=b"1", keys=["dup", "dup", "same-as-uniq"], uniq_key="same-as-uniq")
        )
        drain(store)
        assert [m.physical_offset for m in store.query_message("Once", "dup")] == [r.physical_offset]
        assert [m.physical_offset for m in store.query_message("Once", "same-as-uniq")] == [r.physical_offset]


def test_query_time_window(tmp_path: Path) -> None:
    clock = ManualClock(T0 + 250)
    t = T0 + 250
    with open_store(tmp_path, clock=clock) as store:
        for name in ("A", "B", "C"):
            store.put_message(Message(topic="W", body=name.encode(), keys=["win"]))
            clock.advance(5000)
        drain(store)

        def bodies(begin: int, end: int | None) -> list[bytes]:
            return [m.body for m in store.query_message("W", "win", begin=begin, end=end)]

        assert bodies(0, None) == [b"C", b"B", b"A"]
        assert bodies(t, t + 10_000) == [b"C", b"B", b"A"]
        assert bodies(t + 1, t + 9_999) == [b"B"]
        assert bodies(t + 5_000, None) == [b"C", b"B"]
        assert bodies(t + 5_001, None) == [b"C"]
        assert bodies(0, t + 4_999) == [b"A"]
        assert bodies(t + 10_001, None) == []
        assert bodies(0, t - 1) == []


def test_query_checks_real_topic_and_key(tmp_path: Path) -> None:
    assert java_hash("Q#Aa") == java_hash("Q#BB")
    with open_store(tmp_path) as store:
        mine = store.put_message(Message(topic="Mine", body=b"mine", keys=["shared"]))
        store.put_message(Message(topic="Other", body=b"other", keys=["shared"]))
        store.put_message(Message(topic="Mine", body=b"longer", keys=["shared-not", "xshared"]))
        store.put_message(Message(topic="Q", body=b"bb", keys=["BB"]))
        aa = store.put_message(Message(topic="Q", body=b"aa", keys=["Aa"]))
        drain(store)
        assert [m.physical_offset for m in store.query_message("Mine", "shared")] == [mine.physical_offset]
        assert [m.body for m in store.query_message("Other", "shared")] == [b"other"]
        assert store.query_message("Mine", "share") == []
        assert store.query_message("Nobody", "shared") == []
        assert [m.physical_offset for m in store.query_message("Q", "Aa")] == [aa.physical_offset]
        assert [m.body for m in store.query_message("Q", "BB")] == [b"bb"]


def test_query_by_uniq_key(tmp_path: Path) -> None:
    with open_store(tmp_path) as store:
        r = store.put_message(Message(topic="Uq", body=b"u1"))
        store.put_message(Message(topic="Uq", body=b"u2"))
        store.put_message(Message(topic="Uq", body=b"given", uniq_key="ABCDEF0123"))
        drain(store)
        m = store.look_message_by_offset(r.physical_offset)
        assert m is not None and m.uniq_key is not None
        found = store.query_by_uniq_key("Uq", m.uniq_key)
        assert found is not None
        assert (found.physical_offset, found.body) == (r.physical_offset, b"u1")
        assert [x.body for x in store.query_message("Uq", m.uniq_key)] == [b"u1"]
        given = store.query_by_uniq_key("Uq", "ABCDEF0123")
        assert given is not None and given.body == b"given"
        assert store.query_by_uniq_key("Other", m.uniq_key) is None
        assert store.query_by_uniq_key("Uq", "0" * 32) is None


def test_query_across_index_file_rolls(tmp_path: Path) -> None:
    clock = ManualClock(T0)
    with open_store(tmp_path, clock=clock) as store:
        results = []
        for i in range(300):  # 600 index entries (key + UNIQ_KEY) in files of 255
            results.append(store.put_message(Message(topic="Roll", body=f"b{i}".encode(), keys=[f"key{i}"])))
            clock.advance(3)
        drain(store)
        assert len(store.index_headers()) >= 3
        assert len([p for p in (tmp_path / "index").iterdir()]) >= 3
        for i in (0, 1, 127, 128, 200, 299):
            found = store.query_message("Roll", f"key{i}")
            assert [(m.physical_offset, m.body) for m in found] == [
                (results[i].physical_offset, f"b{i}".encode())
            ]
            assert found[0].uniq_key is not None
            u = store.query_by_uniq_key("Roll", found[0].uniq_key)
            assert u is not None and u.physical_offset == results[i].physical_offset


def test_query_time_window_across_index_files(tmp_path: Path) -> None:
    clock = ManualClock(T0)
    with open_store(tmp_path, clock=clock) as store:
        results = []
        for i in range(200):  # 600 entries (UNIQ_KEY, own key, "all"): three index files
            results.append(store.put_message(Message(topic="Win", body=b"w", keys=[f"own{i}", "all"])))
            clock.advance(1000)
        drain(store)
        assert len(store.index_headers()) >= 3
        offsets = [r.physical_offset for r in results]
        found = store.query_message("Win", "all")
        assert [m.physical_offset for m in found] == offsets[::-1]
        found = store.query_message("Win", "all", begin=T0 + 50_000, end=T0 + 149_000)
        assert [m.physical_offset for m in found] == offsets[149:49:-1]
        found = store.query_message("Win", "all", max_num=5, begin=T0 + 50_000, end=T0 + 149_000)
        assert [m.physical_offset for m in found] == offsets[149:144:-1]
        found = store.query_message("Win", "all", begin=T0 + 150_500)
        assert [m.physical_offset for m in found] == offsets[199:150:-1]


# --- 5. time lookups ------------------------------------------------------------------------------------


def test_offset_in_queue_by_time(tmp_path: Path) -> None:
    clock = ManualClock(T0)
    with open_store(tmp_path, clock=clock) as store:
        stamps = []
        for step in (0, 1000, 1000, 0, 1000, 1000, 1000):  # t0, +1s, +2s, +2s, +3s, +4s, +5s
            clock.advance(step)
            stamps.append(store.put_message(Message(topic="Time", body=b"x", queue_id=0)).store_timestamp)
        drain(store)
        assert stamps == [T0, T0 + 1000, T0 + 2000, T0 + 2000, T0 + 3000, T0 + 4000, T0 + 5000]
        by_time = store.offset_in_queue_by_time
        assert by_time("Time", 0, T0) == 0
        assert by_time("Time", 0, T0 + 1) == 1
        assert by_time("Time", 0, T0 + 1000) == 1
        assert by_time("Time", 0, T0 + 1999) == 2
        assert by_time("Time", 0, T0 + 2000) == 2
        assert by_time("Time", 0, T0 + 2001) == 4
        assert by_time("Time", 0, T0 + 5000) == 6
        assert by_time("Time", 0, T0 + 5001) == 7 == store.max_offset_in_queue("Time", 0)
        assert by_time("Time", 0, T0 + 10**9) == 7
        assert by_time("Time", 0, T0 - 10**6) == 0 == store.min_offset_in_queue("Time", 0)
        assert by_time("Time", 0, 0) == 0


def test_earliest_message_time(tmp_path: Path) -> None:
    clock = ManualClock(T0)
    with open_store(tmp_path, clock=clock) as store:
        assert store.earliest_message_time() == -1
        assert store.min_phy_offset() == -1
        store.put_message(Message(topic="First", body=b"1"))
        clock.advance(1500)
        store.put_message(Message(topic="Second", body=b"2", queue_id=4))
        clock.advance(1500)
        store.put_message(Message(topic="Second", body=b"3", queue_id=4))
        store.put_message(Message(topic="First", body=b"4", queue_id=1))
        drain(store)
        assert store.earliest_message_time() == T0
        assert store.earliest_message_time("First", 0) == T0
        assert store.earliest_message_time("Second", 4) == T0 + 1500
        assert store.earliest_message_time("First", 1) == T0 + 3000
        assert store.earliest_message_time("Second", 0) == -1
        assert store.earliest_message_time("Nope", 0) == -1
        assert store.min_phy_offset() == 0


# --- 6. delayed messages --------------------------------------------------------------------------------


def test_delay_level_goes_to_schedule_topic(tmp_path: Path) -> None:
    clock = ManualClock(T0)
    with open_store(tmp_path, clock=clock) as store:
        r = store.put_message(
            Message(topic="Real", body=b"later", tags="TagD", keys=["dk"], queue_id=1, delay_level=3)
        )
        clock.advance(10)
        r2 = store.put_message(Message(topic="Real", body=b"much later", queue_id=0, delay_level=99))
        drain(store)
        assert r.status is PutStatus.PUT_OK
        assert (r.topic, r.queue_id, r.queue_offset) == (SCHEDULE_TOPIC, 2, 0)
        assert (r2.topic, r2.queue_id, r2.queue_offset) == (SCHEDULE_TOPIC, 17, 0)

        res = store.get_message("g", SCHEDULE_TOPIC, 2, 0)
        assert res.status is GetStatus.FOUND
        [m] = res.messages
        assert (m.topic, m.queue_id, m.body) == (SCHEDULE_TOPIC, 2, b"later")
        assert m.properties["REAL_TOPIC"] == "Real"
        assert m.properties["REAL_QID"] == "1"
        assert m.properties["DELAY"] == "3"
        assert m.tags == "TagD"
        assert m.store_timestamp == T0
        assert m.tags_code == m.store_timestamp + 10_000

        [m2] = store.get_message("g", SCHEDULE_TOPIC, 17, 0).messages
        assert m2.properties["DELAY"] == "18"
        assert (m2.properties["REAL_TOPIC"], m2.properties["REAL_QID"]) == ("Real", "0")
        assert m2.tags_code == T0 + 10 + 2 * 3600 * 1000

        for qid in (0, 1):
            assert store.max_offset_in_queue("Real", qid) == 0
            assert store.get_message("g", "Real", qid, 0).status is GetStatus.NO_MATCHED_LOGIC_QUEUE
        assert store.topics() == {SCHEDULE_TOPIC: [2, 17]}


# --- 7. transactions ------------------------------------------------------------------------------------


def test_transaction_flags(tmp_path: Path) -> None:
    with open_store(tmp_path) as store:
        flags = [0, TX_PREPARED, TX_COMMIT, TX_ROLLBACK, 0, TX_PREPARED]
        results = [
            store.put_message(
                Message(topic="Tx", body=f"m{i}".encode(), keys=[f"tx{i}"], sys_flag=f, queue_id=0)
            )
            for i, f in enumerate(flags)
        ]
        drain(store)
        assert [r.queue_offset for r in results] == [0, 0, 1, 0, 2, 0]
        for r, f in zip(results, flags):
            m = store.look_message_by_offset(r.physical_offset)
            assert m is not None
            assert m.sys_flag & 0xC == f
            if f in (TX_PREPARED, TX_ROLLBACK):
                assert m.queue_offset == 0
        assert store.max_offset_in_queue("Tx", 0) == 3
        res = store.get_message("g", "Tx", 0, 0)
        assert [m.body for m in res.messages] == [b"m0", b"m2", b"m4"]
        assert res.next_begin_offset == 3
        for i in (1, 3, 5):  # PREPARED and ROLLBACK are still indexed
            assert [m.body for m in store.query_message("Tx", f"tx{i}")] == [f"m{i}".encode()]
        r = store.put_message(Message(topic="Tx", body=b"next", queue_id=0))
        assert r.queue_offset == 3


def test_only_prepared_creates_no_queue(tmp_path: Path) -> None:
    with open_store(tmp_path) as store:
        store.put_message(Message(topic="TxOnly", body=b"p", sys_flag=TX_PREPARED))
        drain(store)
        assert store.get_message("g", "TxOnly", 0, 0).status is GetStatus.NO_MATCHED_LOGIC_QUEUE
        assert store.max_offset_in_queue("TxOnly", 0) == 0
        assert "TxOnly" not in store.topics()


# --- 8. validation --------------------------------------------------------------------------------------

BAD_MESSAGES: list[tuple[str, Callable[[], Message], PutStatus]] = [
    ("empty topic", lambda: Message(topic="", body=b"x"), PutStatus.MESSAGE_ILLEGAL),
    ("slash", lambda: Message(topic="a/b", body=b"x"), PutStatus.MESSAGE_ILLEGAL),
    ("dotdot", lambda: Message(topic="..", body=b"x"), PutStatus.MESSAGE_ILLEGAL),
    ("escape", lambda: Message(topic="../../escape", body=b"x"), PutStatus.MESSAGE_ILLEGAL),
    ("dot", lambda: Message(topic="a.b", body=b"x"), PutStatus.MESSAGE_ILLEGAL),
    ("leading space", lambda: Message(topic=" x", body=b"x"), PutStatus.MESSAGE_ILLEGAL),
    ("128 chars", lambda: Message(topic="x" * 128, body=b"x"), PutStatus.MESSAGE_ILLEGAL),
    ("non-ascii", lambda: Message(topic="tópico", body=b"x"), PutStatus.MESSAGE_ILLEGAL),
    ("schedule topic", lambda: Message(topic=SCHEDULE_TOPIC, body=b"x"), PutStatus.MESSAGE_ILLEGAL),
    ("system topic", lambda: Message(topic="RMQ_SYS_TRACE", body=b"x"), PutStatus.MESSAGE_ILLEGAL),
    ("str body", lambda: Message(topic="Good", body="text"), PutStatus.MESSAGE_ILLEGAL),  # type: ignore[arg-type]
    ("body over max", lambda: Message(topic="Good", body=b"x" * 1001), PutStatus.MESSAGE_ILLEGAL),
    ("record over segment", lambda: Message(topic="Good", body=b"x" * SEG), PutStatus.MESSAGE_SIZE_EXCEEDED),
    (
        "properties too big",
        lambda: Message(topic="Good", body=b"x", properties={"p": "v" * 33_000}),
        PutStatus.PROPERTIES_SIZE_EXCEEDED,
    ),
    ("key with space", lambda: Message(topic="Good", body=b"x", keys=["a b"]), PutStatus.MESSAGE_ILLEGAL),
    (
        "reserved property",
        lambda: Message(topic="Good", body=b"x", properties={"KEYS": "k"}),
        PutStatus.MESSAGE_ILLEGAL,
    ),
    (
        "separator in value",
        lambda: Message(topic="Good", body=b"x", properties={"p": "a\x01b"}),
        PutStatus.MESSAGE_ILLEGAL,
    ),
    ("negative queue id", lambda: Message(topic="Good", body=b"x", queue_id=-1), PutStatus.MESSAGE_ILLEGAL),
    (
        "str queue id",
        lambda: Message(topic="Good", body=b"x", queue_id="0"),  # type: ignore[arg-type]
        PutStatus.MESSAGE_ILLEGAL,
    ),
]


@pytest.mark.parametrize(
    ("make", "status"), [(m, s) for _, m, s in BAD_MESSAGES], ids=[name for name, _, _ in BAD_MESSAGES]
)
def test_invalid_message_is_rejected_and_writes_nothing(
    tmp_path: Path, make: Callable[[], Message], status: PutStatus
) -> None:
    root = tmp_path / "store"
    cfg_small = CFG.replace(max_message_size=1000)
    msg = make()
    # the record-over-segment case needs a max_message_size that lets the body through
    cfg = CFG if len(msg.body) == SEG else cfg_small
    with open_store(root, cfg) as store:
        store.put_message(Message(topic="Good", body=b"ok", queue_id=0))
        drain(store)
        before_offset = store.max_phy_offset()
        before_files = store_entries(root)
        with pytest.raises(InvalidMessageError) as info:
            store.put_message(msg)
        assert info.value.status is status
        with pytest.raises(InvalidMessageError) as info:
            store.put_messages([msg])
        assert info.value.status is status
        drain(store)
        assert store.max_phy_offset() == before_offset
        assert store.max_offset_in_queue("Good", 0) == 1
        assert store.topics() == {"Good": [0]}
        assert {p.name for p in (root / "consumequeue").iterdir()} == {"Good"}
        assert store_entries(root) == before_files
        assert [p.name for p in tmp_path.iterdir()] == ["store"]
        segment = (root / "commitlog" / f"{0:020d}").read_bytes()
        assert segment[before_offset:] == bytes(SEG - before_offset)
        r = store.put_message(Message(topic="Good", body=b"after", queue_id=0))
        assert (r.physical_offset, r.queue_offset) == (before_offset, 1)


def test_topic_and_size_boundaries_accepted(tmp_path: Path) -> None:
    cfg = CFG.replace(max_message_size=1000, generate_uniq_key=False)
    with open_store(tmp_path / "a", cfg) as store:
        for topic in ("x" * 127, "a-b_c%d|e", "RMQ_SYS", "9"):
            assert store.put_message(Message(topic=topic, body=b"x")).status is PutStatus.PUT_OK
        r = store.put_message(Message(topic="T", body=b"x" * 900))
        assert r.status is PutStatus.PUT_OK
    with open_store(tmp_path / "b", CFG.replace(generate_uniq_key=False)) as store:
        # properties string "p\x01" + value: 32767 bytes is the largest allowed
        ok = store.put_message(Message(topic="P", body=b"", properties={"p": "v" * 32_765}))
        assert ok.status is PutStatus.PUT_OK
        drain(store)
        m = store.look_message_by_offset(ok.physical_offset)
        assert m is not None and m.properties == {"p": "v" * 32_765}
        with pytest.raises(InvalidMessageError) as info:
            store.put_message(Message(topic="P", body=b"", properties={"p": "v" * 32_766}))
        assert info.value.status is PutStatus.PROPERTIES_SIZE_EXCEEDED


def test_record_larger_than_max_message_size_is_size_exceeded(tmp_path: Path) -> None:
    with open_store(tmp_path, CFG.replace(max_message_size=1000)) as store:
        with pytest.raises(InvalidMessageError) as info:
            store.put_message(Message(topic="S", body=b"x" * 990))  # body fits, record does not
        assert info.value.status is PutStatus.MESSAGE_SIZE_EXCEEDED
        assert store.max_phy_offset() == 0


def test_invalid_message_in_batch_writes_none_of_it(tmp_path: Path) -> None:
    with open_store(tmp_path) as store:
        store.put_message(Message(topic="Batch", body=b"first", queue_id=0))
        drain(store)
        before = store.max_phy_offset()
        batch = [
            Message(topic="Batch", body=b"a", queue_id=0),
            Message(topic="Batch", body=b"b", queue_id=0),
            Message(topic="Batch", body=b"c", keys=["bad key"], queue_id=0),
            Message(topic="Batch", body=b"d", queue_id=0),
        ]
        with pytest.raises(InvalidMessageError) as info:
            store.put_messages(batch)
        assert info.value.status is PutStatus.MESSAGE_ILLEGAL
        drain(store)
        assert store.max_phy_offset() == before
        assert store.max_offset_in_queue("Batch", 0) == 1
        assert [m.body for m in read_queue(store, "Batch", 0)] == [b"first"]
        results = store.put_messages(batch[:2])
        assert [r.queue_offset for r in results] == [1, 2]
        assert results[0].physical_offset == before


def test_batch_assigns_dense_offsets_per_queue(tmp_path: Path) -> None:
    with open_store(tmp_path) as store:
        store.put_message(Message(topic="Mix", body=b"pre", queue_id=1))
        batch = [
            Message(topic="Mix", body=b"a0", queue_id=0),
            Message(topic="Mix", body=b"b1", queue_id=1),
            Message(topic="Mix", body=b"tx", queue_id=1, sys_flag=TX_PREPARED),
            Message(topic="Other", body=b"o0", queue_id=0),
            Message(topic="Mix", body=b"a1", queue_id=0),
            Message(topic="Mix", body=b"delayed", queue_id=0, delay_level=1),
            Message(topic="Mix", body=b"b2", queue_id=1),
        ]
        results = store.put_messages(batch)
        assert [r.status for r in results] == [PutStatus.PUT_OK] * len(batch)
        assert [(r.topic, r.queue_id, r.queue_offset) for r in results] == [
            ("Mix", 0, 0),
            ("Mix", 1, 1),
            ("Mix", 1, 0),
            ("Other", 0, 0),
            ("Mix", 0, 1),
            (SCHEDULE_TOPIC, 0, 0),
            ("Mix", 1, 2),
        ]
        for prev, nxt in itertools.pairwise(results):
            assert nxt.physical_offset == prev.physical_offset + prev.wrote_bytes
        drain(store)
        assert [m.body for m in read_queue(store, "Mix", 0)] == [b"a0", b"a1"]
        assert [m.body for m in read_queue(store, "Mix", 1)] == [b"pre", b"b1", b"b2"]
        assert [m.body for m in read_queue(store, "Other", 0)] == [b"o0"]
        assert [m.body for m in read_queue(store, SCHEDULE_TOPIC, 0)] == [b"delayed"]
        assert store.put_messages([]) == []


def test_concurrent_puts_get_dense_offsets(tmp_path: Path) -> None:
    with open_store(tmp_path) as store:
        results: list[Any] = []
        lock = threading.Lock()

        def worker(w: int) -> None:
            for i in range(50):
                r = (
                    store.put_message(Message(topic="Conc", body=f"{w}-{i}".encode(), queue_id=0))
                    if i % 2
                    else store.put_messages([Message(topic="Conc", body=f"{w}-{i}".encode(), queue_id=0)])[0]
                )
                with lock:
                    results.append(r)

        threads = [threading.Thread(target=worker, args=(w,)) for w in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        drain(store)
        assert sorted(r.queue_offset for r in results) == list(range(200))
        got = read_queue(store, "Conc", 0)
        assert [m.queue_offset for m in got] == list(range(200))
        assert sorted(m.physical_offset for m in got) == [m.physical_offset for m in got]
        assert sorted(m.body for m in got) == sorted(f"{w}-{i}".encode() for w in range(4) for i in range(50))
        stamps = [m.store_timestamp for m in got]
        assert stamps == sorted(stamps)


# --- 9. segment rolls -----------------------------------------------------------------------------------


def check_segments(root: Path, results: list[Any]) -> None:
    files = sorted((root / "commitlog").iterdir())
    assert len(files) >= 4
    for i, f in enumerate(files):
        assert f.name == f"{i * SEG:020d}"
        assert f.stat().st_size == SEG
    by_segment: dict[int, list[Any]] = {}
    for r in results:
        start = r.physical_offset
        end = start + r.wrote_bytes
        assert start // SEG == (end - 1) // SEG, "record spans segments"
        assert end % SEG == 0 or SEG - end % SEG >= 8
        by_segment.setdefault(start // SEG, []).append(r)
    last_seg = max(by_segment)
    assert last_seg >= 3
    for seg, rs in by_segment.items():
        if seg == last_seg:
            continue
        rs.sort(key=lambda r: r.physical_offset)
        end = rs[-1].physical_offset + rs[-1].wrote_bytes - seg * SEG
        data = files[seg].read_bytes()
        size, magic = struct.unpack_from(">iI", data, end)
        assert size == SEG - end
        assert magic == BLANK_MAGIC
        # the next segment starts with a record (the first of the next segment)
        assert by_segment[seg + 1][0].physical_offset == (seg + 1) * SEG


def test_segment_rolls_single_puts(tmp_path: Path) -> None:
    with open_store(tmp_path) as store:
        results = []
        for i in range(230):
            body = bytes([i % 256]) * (700 + (i * 37) % 600)
            results.append(store.put_message(Message(topic="Seg", body=body, queue_id=i % 3, keys=[f"s{i}"])))
        drain(store)
        assert store.max_phy_offset() > 3 * SEG
        for i, r in enumerate(results):
            m = store.look_message_by_offset(r.physical_offset)
            assert m is not None
            assert m.body == bytes([i % 256]) * (700 + (i * 37) % 600)
        for q in range(3):
            got = read_queue(store, "Seg", q)
            assert [m.physical_offset for m in got] == [r.physical_offset for r in results[q::3]]
        assert [m.physical_offset for m in store.query_message("Seg", "s5")] == [results[5].physical_offset]
    check_segments(tmp_path, results)


def test_segment_rolls_batch_puts(tmp_path: Path) -> None:
    with open_store(tmp_path) as store:
        results = []
        expected: list[bytes] = []
        for b in range(25):
            batch = [
                Message(topic="SegB", body=bytes([b, j]) * (400 + 13 * j), queue_id=0) for j in range(10)
            ]
            expected.extend(m.body for m in batch)
            results.extend(store.put_messages(batch))
        drain(store)
        assert [r.queue_offset for r in results] == list(range(250))
        assert [m.body for m in read_queue(store, "SegB", 0)] == expected
        for r, body in zip(results, expected):
            m = store.look_message_by_offset(r.physical_offset)
            assert m is not None and m.body == body and m.physical_offset == r.physical_offset
    check_segments(tmp_path, results)


# --- 10. closed store -----------------------------------------------------------------------------------

CLOSED_CALLS: list[tuple[str, Callable[[MessageStore], object]]] = [
    ("put_message", lambda s: s.put_message(Message(topic="C", body=b"x", queue_id=0))),
    ("put_messages", lambda s: s.put_messages([Message(topic="C", body=b"x", queue_id=0)])),
    ("get_message", lambda s: s.get_message("g", "C", 0, 0)),
    ("query_message", lambda s: s.query_message("C", "k")),
    ("iter_query_message", lambda s: list(s.iter_query_message("C", "k"))),
    ("query_by_uniq_key", lambda s: s.query_by_uniq_key("C", "u")),
    ("look_message_by_offset", lambda s: s.look_message_by_offset(0)),
    ("view_message_by_id", lambda s: s.view_message_by_id("7F00000100002A9F0000000000000000")),
    ("offset_in_queue_by_time", lambda s: s.offset_in_queue_by_time("C", 0, 0)),
    ("earliest_message_time", lambda s: s.earliest_message_time()),
    ("wait_dispatched", lambda s: s.wait_dispatched(0.1)),
    ("wait_for_message", lambda s: s.wait_for_message("C", 0, 5, 0.1)),
    ("min_offset_in_queue", lambda s: s.min_offset_in_queue("C", 0)),
    ("max_offset_in_queue", lambda s: s.max_offset_in_queue("C", 0)),
    ("min_phy_offset", lambda s: s.min_phy_offset()),
    ("max_phy_offset", lambda s: s.max_phy_offset()),
    ("topics", lambda s: s.topics()),
]


@pytest.mark.parametrize("call", [c for _, c in CLOSED_CALLS], ids=[n for n, _ in CLOSED_CALLS])
def test_closed_store_raises(tmp_path: Path, call: Callable[[MessageStore], object]) -> None:
    store = open_store(tmp_path)
    store.put_message(Message(topic="C", body=b"x", keys=["k"]))
    drain(store)
    store.close()
    with pytest.raises(StoreClosedError):
        call(store)
    store.close()  # closing twice is fine
    with pytest.raises(StoreClosedError):
        call(store)


def test_close_twice_and_context_manager_after_close(tmp_path: Path) -> None:
    with open_store(tmp_path) as store:
        store.put_message(Message(topic="C", body=b"x"))
        store.close()
        store.close()
        assert not (tmp_path / "abort").exists()
    # a closed store released its lock: the directory opens again
    with open_store(tmp_path) as again:
        assert again.max_offset_in_queue("C", 0) == 1


# --- 11. reopen -----------------------------------------------------------------------------------------


def test_reopen_reads_everything_and_continues(tmp_path: Path) -> None:
    clock = ManualClock(T0)
    bodies = {q: [] for q in range(2)}  # type: dict[int, list[bytes]]
    with open_store(tmp_path, clock=clock) as store:
        assert (tmp_path / "abort").exists()
        results = []
        for i in range(120):
            body = f"msg{i}-".encode() * 100
            q = i % 2
            bodies[q].append(body)
            results.append(
                store.put_message(
                    Message(
                        topic="Re", body=body, queue_id=q, keys=[f"re{i}", "common"], tags="T" + str(i % 3)
                    )
                )
            )
            clock.advance(11)
        drain(store)
        max_phy = store.max_phy_offset()
        assert max_phy > SEG  # more than one segment
        assert len(store.index_headers()) >= 2  # more than one index file
    assert not (tmp_path / "abort").exists()
    assert (tmp_path / "checkpoint").stat().st_size == 4096

    clock.advance(1000)
    with open_store(tmp_path, clock=clock) as store:
        assert (tmp_path / "abort").exists()
        assert store.max_phy_offset() == max_phy
        assert store.topics() == {"Re": [0, 1]}
        for q in range(2):
            assert store.max_offset_in_queue("Re", q) == 60
            assert [m.body for m in read_queue(store, "Re", q)] == bodies[q]
        assert [m.queue_offset for m in read_queue(store, "Re", 0, "T1")] == [
            i // 2 for i in range(0, 120, 2) if i % 3 == 1
        ]
        assert [m.physical_offset for m in store.query_message("Re", "common")] == [
            r.physical_offset for r in reversed(results)
        ]
        for i in (0, 59, 119):
            found = store.query_message("Re", f"re{i}")
            assert [m.physical_offset for m in found] == [results[i].physical_offset]
        r = results[7]
        m = store.view_message_by_id(r.msg_id or "")
        assert m is not None and m.body == bodies[1][3]

        new = store.put_message(Message(topic="Re", body=b"new", queue_id=1, keys=["fresh", "re3"]))
        assert new.queue_offset == 60
        assert new.physical_offset == max_phy
        drain(store)
        assert [m.body for m in store.get_message("g", "Re", 1, 60).messages] == [b"new"]
        assert [m.body for m in store.query_message("Re", "fresh")] == [b"new"]
        assert [m.physical_offset for m in store.query_message("Re", "re3")] == [
            new.physical_offset,
            results[3].physical_offset,
        ]
    assert not (tmp_path / "abort").exists()

    with open_store(tmp_path, clock=clock) as store:
        assert store.max_offset_in_queue("Re", 1) == 61
        assert store.put_message(Message(topic="Re", body=b"x", queue_id=0)).queue_offset == 60
        assert store.put_message(Message(topic="Re", body=b"y", queue_id=1)).queue_offset == 61
        assert store.put_message(Message(topic="ReNew", body=b"z", queue_id=0)).queue_offset == 0


def test_second_open_is_refused_and_readonly_open_reads(tmp_path: Path) -> None:
    with open_store(tmp_path) as store:
        store.put_message(Message(topic="RO", body=b"one", keys=["rk"]))
        drain(store)
        with pytest.raises(StoreLockedError):
            MessageStore.open(tmp_path, CFG)
    with MessageStore.open(tmp_path, CFG, readonly=True) as ro:
        assert not (tmp_path / "abort").exists()
        assert [m.body for m in ro.get_message("g", "RO", 0, 0).messages] == [b"one"]
        assert [m.body for m in ro.query_message("RO", "rk")] == [b"one"]
        with pytest.raises(StoreReadOnlyError, match="read-only"):
            ro.put_message(Message(topic="RO", body=b"two"))
        assert ro.max_offset_in_queue("RO", 0) == 1
    with open_store(tmp_path) as store:
        assert store.put_message(Message(topic="RO", body=b"two")).queue_offset == 1


# --- 12. wait_for_message -------------------------------------------------------------------------------


def test_wait_for_message_wakes_on_put(tmp_path: Path) -> None:
    with open_store(tmp_path) as store:
        store.put_message(Message(topic="Wait", body=b"0", queue_id=0))
        drain(store)
        assert store.wait_for_message("Wait", 0, 0, 0.01)  # already there

        def producer() -> None:
            time.sleep(0.2)
            store.put_message(Message(topic="Wait", body=b"1", queue_id=0))

        thread = threading.Thread(target=producer)
        started = time.monotonic()
        thread.start()
        try:
            assert store.wait_for_message("Wait", 0, 1, 10.0)
            elapsed = time.monotonic() - started
        finally:
            thread.join()
        assert elapsed < 5.0
        res = store.get_message("g", "Wait", 0, 1)
        assert [m.body for m in res.messages] == [b"1"]


def test_wait_for_message_times_out(tmp_path: Path) -> None:
    with open_store(tmp_path) as store:
        store.put_message(Message(topic="Wait", body=b"0"))
        drain(store)
        started = time.monotonic()
        assert store.wait_for_message("Wait", 0, 1, 0.3) is False
        assert store.wait_for_message("Nobody", 0, 0, 0.1) is False
        elapsed = time.monotonic() - started
        assert 0.35 <= elapsed < 3.0


def test_get_message_pages_across_segments_match_the_records(tmp_path: Path) -> None:
    """The plain read checks a page of records in one pass: every field must still be the
    record's, pages crossing a segment end included."""
    cfg = CFG.replace(commitlog_segment_size=8192)
    with open_store(tmp_path, cfg) as store:
        bodies = [bytes([i % 251]) * (40 + i % 90) for i in range(300)]
        store.put_messages([Message("Paged", b, tags=f"t{i % 3}", queue_id=0) for i, b in enumerate(bodies)])
        drain(store)
        assert len(list((tmp_path / "commitlog").iterdir())) > 3
        got: list[MessageExt] = []
        offset = 0
        while True:
            r = store.get_message("g", "Paged", 0, offset, 32)
            if not r.messages:
                assert r.status is GetStatus.OFFSET_OVERFLOW_ONE
                break
            assert r.next_begin_offset == offset + len(r.messages)
            got.extend(r.messages)
            offset = r.next_begin_offset
        assert [m.body for m in got] == bodies
        assert [bytes(m.body_view) for m in got] == bodies
        assert [m.queue_offset for m in got] == list(range(300))
        assert [m.tags for m in got] == [f"t{i % 3}" for i in range(300)]
        for m in got:
            assert store.look_message_by_offset(m.physical_offset).body == m.body  # type: ignore[union-attr]


def test_a_batch_of_irregular_messages_naming_no_queue_goes_round_robin(tmp_path: Path) -> None:
    """Messages the columnar encoder does not take (here: user properties) and that name no
    queue still get the topic's round-robin queues."""
    with open_store(tmp_path) as store:
        results = store.put_messages(
            [Message("Spread", bytes([i]), queue_id=None, properties={"a": "b"}) for i in range(20)]
        )
        assert all(r.ok for r in results)
        queues = StoreConfig().default_topic_queue_nums
        assert [r.queue_id for r in results] == [i % queues for i in range(20)]
        drain(store)
        got = store.look_message_by_offset(results[5].physical_offset)
        assert got is not None and got.queue_id == 5 % queues and got.properties["a"] == "b"


# --- wrong argument types ----------------------------------------------------------------------------

WRONG_TYPES: list[tuple[str, Callable[[MessageStore], object]]] = [
    ("queue_id", lambda s: s.get_message("g", "T", "0", 0)),  # type: ignore[arg-type]
    ("offset", lambda s: s.get_message("g", "T", 0, 0.0)),  # type: ignore[arg-type]
    ("max_msgs", lambda s: s.get_message("g", "T", 0, 0, "32")),  # type: ignore[arg-type]
    ("topic", lambda s: s.get_message("g", b"T", 0, 0)),  # type: ignore[arg-type]
    ("queue_id", lambda s: s.read_batch("T", True, 0)),
    ("max_count", lambda s: s.read_batch("T", 0, 0, None)),  # type: ignore[arg-type]
    ("queue_id", lambda s: s.min_offset_in_queue("T", "0")),  # type: ignore[arg-type]
    ("queue_id", lambda s: s.max_offset_in_queue("T", 0.0)),  # type: ignore[arg-type]
    ("timestamp", lambda s: s.offset_in_queue_by_time("T", 0, "2026-01-01")),  # type: ignore[arg-type]
    ("queue_id", lambda s: s.earliest_message_time("T", "0")),  # type: ignore[arg-type]
    ("queue_id", lambda s: s.query_offset("g", "T", "0")),  # type: ignore[arg-type]
    ("offset", lambda s: s.commit_offset("g", "T", 0, "5")),  # type: ignore[arg-type]
    ("group", lambda s: s.commit_offset(None, "T", 0, 5)),  # type: ignore[arg-type]
    ("physical_offset", lambda s: s.look_message_by_offset("0")),  # type: ignore[arg-type]
    ("max_num", lambda s: s.query_message("T", "k", "1")),  # type: ignore[arg-type]
    ("begin", lambda s: s.query_message("T", "k", 1, "0")),  # type: ignore[arg-type]
    ("offset", lambda s: s.wait_for_message("T", 0, "0", 0.01)),  # type: ignore[arg-type]
    ("queues", lambda s: s.create_topic("T", "4")),  # type: ignore[arg-type]
]


@pytest.mark.parametrize(("name", "call"), WRONG_TYPES)
def test_an_argument_of_the_wrong_type_raises_naming_it(
    tmp_path: Path, name: str, call: Callable[[MessageStore], object]
) -> None:
    with open_store(tmp_path) as store:
        store.put_message(Message(topic="T", body=b"x", keys=["k"], queue_id=0))
        drain(store)
        with pytest.raises(InvalidArgumentError, match=f"^{name} must be ") as info:
            call(store)
        assert isinstance(info.value, TypeError)
        assert store.query_offset("g", "T", 0) == -1  # nothing was committed


def test_numpy_ints_are_ints(tmp_path: Path) -> None:
    with open_store(tmp_path) as store:
        store.put_message(Message(topic="T", body=b"x", queue_id=1))
        drain(store)
        q, off = np.int64(1), np.int32(0)
        assert [m.body for m in store.get_message("g", "T", q, off, np.int64(4)).messages] == [b"x"]  # type: ignore[arg-type]
        assert store.max_offset_in_queue("T", q) == 1  # type: ignore[arg-type]
        store.commit_offset("g", "T", q, np.int64(1))  # type: ignore[arg-type]
        assert store.query_offset("g", "T", 1) == 1
        assert type(store.consumer_offsets()[("T", "g")][1]) is int


def test_messages_read_before_a_close_stay_readable_after_it(tmp_path: Path) -> None:
    # a consumer holds messages decoded lazily from the segment's mapping while a follower or the
    # store closes the segment (a new writer, the map cache, close): the mapping must outlive them
    store = MessageStore.open(tmp_path / "s", CFG)
    store.put_messages([Message("T", b"b%d" % i, queue_id=0, keys=[f"k{i}"]) for i in range(10)])
    store.wait_dispatched()
    batch = store.get_message("g", "T", 0, 0, 10).messages
    single = store.get_message("g", "T", 0, 3, 1).messages
    store.close()
    assert [m.body for m in batch] == [b"b%d" % i for i in range(10)]
    assert [(m.queue_offset, m.keys) for m in single] == [(3, ["k3"])]
