"""Message fields of the wrong type, through every put API: an InvalidMessageError naming the field,
and nothing written; never a TypeError or AttributeError from inside the store.

Bodies are bytes-like by their size in bytes: a memoryview whose items are wider than a byte
(``memoryview(array('I', ...))``) or that is not contiguous is stored as its ``nbytes`` bytes
(cast, or copied), so the record's length fields agree with its bytes and a reopen keeps it.
"""

from __future__ import annotations

import array
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rocketstore import (
    InvalidMessageError,
    ManualClock,
    Message,
    MessageStore,
    StoreConfig,
)
from rocketstore.codec.host import parse_host
from rocketstore.message import PROPERTY_REAL_TOPIC, SCHEDULE_TOPIC
from rocketstore.verify import verify_store

TOPIC = "Typed"
NOW = 1_700_000_000_000
# small files: the default index file alone is hundreds of MB, and each test opens a store
CONFIG = StoreConfig(
    commitlog_segment_size=1 << 20, consume_queue_entries=1024, index_hash_slots=64, index_max_entries=4096
)


class _Opaque:
    """An object of no type the store knows."""


# field -> (bad values, the words the error must contain to name the field)
BAD_FIELDS: dict[str, tuple[list[Any], str]] = {
    "topic": ([["T"], b"T", None, 5, {"a": 1}, {"T"}, "", "no spaces"], r"topic"),
    "body": (["text", None, 5, [1, 2], array.array("I", [1, 2]), np.zeros(4, np.uint8), _Opaque()], r"body"),
    "tags": ([["a"], 5, b"x", {"a"}, ("a",), {"a": 1}, 1.5, _Opaque()], r"tags"),
    "keys": ([5, [5], b"k", [b"k"], {"k": 1}, {"k"}, [None], _Opaque(), 1.5, [["k"]], 0], r"key"),
    "properties": (
        [["a"], {"a": 1}, {1: "a"}, "abc", 5, {"a": None}, {"a": b"x"}, [("a", "b")], {"a": ["b"]}, ""],
        r"propert",
    ),
    "queue_id": (["0", 1.5, [0], -1, True, 1 << 70], r"queue_id"),
    "flag": (["0", 1.5, None, [0], 1 << 40], r"\bflag\b"),
    "delay_level": (["1", 1.5, [1], None, -1, 0.0], r"delay_level"),
    "uniq_key": ([5, b"u", ["u"], ""], r"uniq_key|UNIQ_KEY"),
    "born_timestamp": (["1", 1.5, [1], 1 << 63, False], r"born_timestamp"),
    "born_host": ([5, b"1.2.3.4:5", ["x"], "nohost", "1.2.3.4:70000"], r"born_host"),
    "sys_flag": (["0", 1.5, None, 0x40, 0x800], r"sys_flag"),
}
BAD_CASES = [
    pytest.param(field, value, id=f"{field}={type(value).__name__}:{value!r:.20}")
    for field, (values, _) in BAD_FIELDS.items()
    for value in values
]


@pytest.fixture
def store(tmp_path: Path) -> Iterator[MessageStore]:
    with MessageStore.open(tmp_path / "store", CONFIG, clock=ManualClock(NOW)) as s:
        assert s.put_message(Message(TOPIC, b"first", queue_id=0)).ok
        yield s


def _fields(**changes: Any) -> dict[str, Any]:
    fields: dict[str, Any] = {"topic": TOPIC, "body": b"body", "queue_id": 0}
    fields.update(changes)
    return fields


def _nothing_written(store: MessageStore, put: Callable[[], object], words: str) -> None:
    before = (store.max_phy_offset(), store.max_offset_in_queue(TOPIC, 0))
    with pytest.raises(InvalidMessageError) as info:
        put()
    assert re.search(words, str(info.value)), str(info.value)
    assert (store.max_phy_offset(), store.max_offset_in_queue(TOPIC, 0)) == before


@pytest.mark.parametrize(("field", "value"), BAD_CASES)
def test_put_message_names_a_field_of_the_wrong_type(store: MessageStore, field: str, value: Any) -> None:
    msg = Message(**_fields(**{field: value}))
    _nothing_written(store, lambda: store.put_message(msg), BAD_FIELDS[field][1])


@pytest.mark.parametrize("value", [*BAD_FIELDS["properties"][0], _Opaque(), {"__SHARDINGKEY": 5}])
def test_a_message_the_store_places_has_its_properties_checked_first(store: MessageStore, value: Any) -> None:
    """queue_id=None on a known topic takes the single-put path that reads the sharding key: wrong
    properties are named there too, never an AttributeError from reading them."""
    assert store.put_message(Message(**_fields())).ok  # the topic is known: the single-put path
    msg = Message(**_fields(properties=value, queue_id=None))
    _nothing_written(store, lambda: store.put_message(msg), r"propert|__SHARDINGKEY")


@pytest.mark.parametrize(("field", "value"), BAD_CASES)
@pytest.mark.parametrize("size", [2, 20], ids=["per-message", "columnar"])
def test_put_messages_names_a_field_of_the_wrong_type(
    store: MessageStore, field: str, value: Any, size: int
) -> None:
    # 20 messages of one topic take the columnar path; the bad one is not the first
    msgs = [Message(**_fields(queue_id=i % 4)) for i in range(size)]
    msgs[size // 2] = Message(**_fields(**{field: value}))
    _nothing_written(store, lambda: store.put_messages(msgs), BAD_FIELDS[field][1])


@pytest.mark.parametrize("msgs", [5, None, b"xy", "ab", [b"x"], [Message(TOPIC, b"x"), {"topic": TOPIC}]])
def test_put_messages_refuses_what_is_not_a_sequence_of_messages(store: MessageStore, msgs: Any) -> None:
    if not msgs:
        assert store.put_messages(msgs) == []  # nothing to store is not an error
        return
    _nothing_written(store, lambda: store.put_messages(msgs), r"message")


PUT_BATCH_BAD: list[tuple[str, Any, str]] = [
    *(("topic", v, r"topic") for v in (["T"], b"T", None, 5, {"T"})),
    *(("bodies", v, r"bodies") for v in (None, 5, "abc", b"abc", {b"x": 1}, {b"x"}, iter([b"x"]))),
    *(("bodies", [b"ok", v], r"body") for v in ("s", None, 5, array.array("I", [1]), [1])),
    *(("tags", v, r"tags") for v in (5, [5, None], [["a"], None], b"x", [b"x", None], {"a"}, 1.5)),
    ("tags", [memoryview(bytearray(b"t")), None], r"tags"),  # a writable view cannot be hashed
    *(("keys", v, r"keys") for v in (5, [5, None], [b"k", None], "k", [["k"], None], {"k": 1}, b"k")),
    ("keys", [memoryview(bytearray(b"k")), None], r"keys"),
    *(("queue_ids", v, r"queue_ids") for v in ("0", [None, None], 1.5, [0])),
    *(("flag", v, r"flag") for v in ("0", 1.5, None, 1 << 70)),
    *(("born_timestamp", v, r"born_timestamp") for v in ("1", [None, None], 1.5)),
]


@pytest.mark.parametrize(
    ("column", "value", "words"),
    [pytest.param(c, v, w, id=f"{c}={type(v).__name__}:{v!r:.20}") for c, v, w in PUT_BATCH_BAD],
)
def test_put_batch_names_a_column_of_the_wrong_type(
    store: MessageStore, column: str, value: Any, words: str
) -> None:
    args: dict[str, Any] = {"topic": TOPIC, "bodies": [b"a", b"b"], "queue_ids": 0}
    args[column] = value
    topic, bodies = args.pop("topic"), args.pop("bodies")
    _nothing_written(store, lambda: store.put_batch(topic, bodies, **args), words)


# --- memoryview bodies: stored as their nbytes bytes ------------------------------------------
def _wide_bodies() -> list[memoryview]:
    grid = np.arange(24, dtype=np.int16).reshape(4, 6)
    return [
        memoryview(array.array("I", range(10))),  # 4-byte items: 10 items, 40 bytes
        memoryview(array.array("d", [1.5, -2.25])),
        memoryview(grid),  # 2-D
        memoryview(grid[:, ::2]),  # not contiguous: copied
        memoryview(bytes(range(20)))[::3],  # 1-byte items, strided
        memoryview(array.array("q", [])),  # empty
    ]


def _expected(body: memoryview) -> bytes:
    return body.tobytes()


@pytest.mark.parametrize("api", ["put_message", "put_messages", "put_messages_columnar", "put_batch"])
def test_memoryview_body_is_stored_as_its_bytes(tmp_path: Path, api: str) -> None:
    root = tmp_path / "store"
    bodies = _wide_bodies()
    with MessageStore.open(root, CONFIG, clock=ManualClock(NOW)) as store:
        if api == "put_message":
            offsets = [store.put_message(Message(TOPIC, b, queue_id=0)).physical_offset for b in bodies]
        elif api == "put_batch":
            offsets = store.put_batch(TOPIC, bodies, queue_ids=0).physical_offsets.tolist()
        else:
            copies = 1 if api == "put_messages" else 4  # 24 messages take the columnar path
            results = store.put_messages([Message(TOPIC, b, queue_id=0) for b in bodies * copies])
            offsets = [r.physical_offset for r in results[: len(bodies)]]
        after = store.put_message(Message(TOPIC, b"after", queue_id=0))
        for body, offset in zip(bodies, offsets):
            stored = store.look_message_by_offset(offset)
            assert stored is not None and stored.body == _expected(body)
            assert stored.record.body_len == body.nbytes
        assert store.wait_dispatched(10)
    # the next recovery keeps every record, the one put after the views included
    with MessageStore.open(root, CONFIG, clock=ManualClock(NOW)) as store:
        again = store.look_message_by_offset(after.physical_offset)
        assert again is not None and again.body == b"after"
        assert store.max_phy_offset() == after.physical_offset + after.wrote_bytes
    assert verify_store(root, CONFIG).clean


def test_released_memoryview_is_refused(store: MessageStore) -> None:
    view = memoryview(b"gone")
    view.release()
    _nothing_written(store, lambda: store.put_message(Message(TOPIC, view, queue_id=0)), r"body")


# --- any object in any field: InvalidMessageError or a message that reads back equal ----------
_ANY = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(min_value=0, max_value=20),
    st.floats(allow_nan=False),
    st.text(max_size=12),
    st.text(alphabet="abcXYZ_-%|019", min_size=1, max_size=12),
    st.binary(max_size=12),
    st.lists(st.text(max_size=5), max_size=3),
    st.tuples(st.text(alphabet="abc", min_size=1, max_size=4)),
    st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=5), st.text(max_size=5), max_size=3),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
    st.frozensets(st.text(max_size=3), max_size=2),
    st.sets(st.integers(), max_size=2),
    st.builds(_Opaque),
    st.binary(max_size=16).map(lambda b: memoryview(array.array("H", b[: len(b) // 2 * 2]))),
    st.sampled_from(["127.0.0.1:10911", "[::1]:80", "10.0.0.1:0", TOPIC]),
)
FIELDS = sorted(BAD_FIELDS)


def _check_read_back(store: MessageStore, msg: Message, offset: int) -> None:
    stored = store.look_message_by_offset(offset)
    assert stored is not None
    body = msg.body
    assert stored.body == (body.tobytes() if isinstance(body, memoryview) else bytes(body))
    delayed = msg.delay_level > 0 and msg.sys_flag & 0xC in (0, 0x8)
    assert stored.topic == (SCHEDULE_TOPIC if delayed else msg.topic)
    if delayed:
        assert stored.properties[PROPERTY_REAL_TOPIC] == msg.topic
    assert stored.tags == msg.tags
    keys = msg.keys
    assert stored.keys == ([keys] if isinstance(keys, str) and keys else list(keys or ()))
    assert stored.flag == msg.flag
    if msg.born_timestamp is not None:
        assert stored.born_timestamp == msg.born_timestamp
    if msg.born_host is not None:
        assert parse_host(stored.born_host) == parse_host(msg.born_host)
    if msg.uniq_key is not None:
        assert stored.uniq_key == msg.uniq_key
    for name, value in (msg.properties or {}).items():
        assert stored.properties[name] == value


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(changes=st.dictionaries(st.sampled_from(FIELDS), _ANY, max_size=3), columnar=st.booleans())
def test_any_object_in_any_field_is_refused_or_stored_exactly(
    store: MessageStore, changes: dict[str, Any], columnar: bool
) -> None:
    msg = Message(**_fields(**changes))
    before = store.max_phy_offset()
    try:
        if columnar:
            results = store.put_messages([msg] * 17)
        else:
            results = [store.put_message(msg)]
    except InvalidMessageError:
        assert store.max_phy_offset() == before
        return
    assert all(r.ok for r in results)
    _check_read_back(store, msg, results[0].physical_offset)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    changes=st.dictionaries(
        st.sampled_from(["topic", "bodies", "tags", "keys", "queue_ids", "flag", "born_timestamp"]),
        st.one_of(_ANY, st.lists(_ANY, min_size=2, max_size=2)),
        max_size=3,
    )
)
def test_any_object_in_any_put_batch_column_is_refused_or_stored_exactly(
    store: MessageStore, changes: dict[str, Any]
) -> None:
    args: dict[str, Any] = {"topic": TOPIC, "bodies": [b"a", b"b"], "queue_ids": 0, **changes}
    topic, bodies = args.pop("topic"), args.pop("bodies")
    before = store.max_phy_offset()
    try:
        result = store.put_batch(topic, bodies, **args)
    except InvalidMessageError:
        assert store.max_phy_offset() == before
        return
    assert result.ok
    tags = args.get("tags")
    keys = args.get("keys")
    for i, offset in enumerate(result.physical_offsets.tolist()):
        stored = store.look_message_by_offset(offset)
        assert stored is not None
        body = bodies[i]
        assert stored.body == (body.tobytes() if isinstance(body, memoryview) else bytes(body))
        assert stored.topic == topic
        assert stored.tags == (tags if tags is None or isinstance(tags, str) else tags[i])
        assert stored.keys == (keys[i].split(" ") if keys is not None and keys[i] else [])
        assert stored.flag == args.get("flag", 0)
