"""Byte-level tests of ``rocketstore.codec``: every on-disk layout, checked against the format spec
(STORE.md §2-§5), against independent reference encoders written here, and against segments that
RocketMQ 4.9.8 itself wrote.
"""

from __future__ import annotations

import json
import string
import struct
import threading
import zlib
from dataclasses import replace
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rocketstore.codec import checkpoint as cp_codec
from rocketstore.codec import commitlog_record as cl
from rocketstore.codec import consume_queue_entry as cq
from rocketstore.codec import index_layout as ix
from rocketstore.codec.host import format_host, parse_host
from rocketstore.codec.java_hash import index_key_hash, index_key_hashes, java_hash, tags_code
from rocketstore.codec.message_id import UniqKeyGenerator, decode_offset_msg_id, encode_offset_msg_id
from rocketstore.codec.properties import (
    NAME_VALUE_SEPARATOR,
    PROPERTY_SEPARATOR,
    decode_properties,
    encode_properties,
    validate_property,
)
from rocketstore.codec.text_column import TextColumn
from rocketstore.errors import CorruptDataError
from tests.conftest import FIXTURES

SAMPLE_COMMITLOG = FIXTURES / "store-sample" / "commitlog"

INT32 = st.integers(-(2**31), 2**31 - 1)
INT64 = st.integers(-(2**63), 2**63 - 1)
FAST = settings(max_examples=100, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])


# ---------------------------------------------------------------------------------------------
# 1. java_hash
# ---------------------------------------------------------------------------------------------


def reference_java_hash(s: str) -> int:
    """String.hashCode, the obvious way: over UTF-16 code units, mod 2**32, then signed."""
    raw = s.encode("utf-16-be", "surrogatepass")
    h = 0
    for i in range(0, len(raw), 2):
        h = (31 * h + int.from_bytes(raw[i : i + 2], "big")) % 2**32
    return h - 2**32 if h >= 2**31 else h


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Tag0", 2598902),
        ("", 0),
        ("Aa", 2112),
        ("BB", 2112),
        ("标签0", 26572473),
        ("\U0001f600", 1772899),  # surrogate pair 0xD83D 0xDE00
        ("\ud83d\ude00", 1772899),  # the same code units, written as a (Java-like) surrogate pair
        ("polygenelubricants", -2147483648),
    ],
)
def test_java_hash_known_values(text: str, expected: int) -> None:
    assert java_hash(text) == expected


def test_java_hash_non_bmp_uses_both_surrogates() -> None:
    assert java_hash("\U0001f600") == 31 * 0xD83D + 0xDE00
    assert java_hash("\U0001f600") != java_hash("\ud83d")


def test_index_key_hash_maps_integer_min_value_to_zero() -> None:
    assert index_key_hash("polygenelubricants") == 0
    assert index_key_hash("Tag0") == 2598902


def test_index_key_hash_is_absolute_value() -> None:
    neg = next(s for s in (f"key-{i}" * 7 for i in range(1000)) if java_hash(s) < 0)
    assert index_key_hash(neg) == -java_hash(neg) > 0


KEY_TEXT = st.text(
    st.characters(min_codepoint=1, max_codepoint=0x10FFFF, blacklist_categories=("Cs",)),
    min_size=1,
    max_size=12,
)


@FAST
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["T", "Topic_2", "%RETRY%g"]),
            st.none() | KEY_TEXT,
            st.none() | st.lists(KEY_TEXT.filter(lambda k: " " not in k), min_size=1, max_size=3),
        ),
        max_size=30,
    ),
    st.integers(0, 5),
)
def test_index_key_hashes_of_columns_match_one_key_at_a_time(
    rows: list[tuple[str, str | None, list[str] | None]], first: int
) -> None:
    """The compiled pass hashes each row's UNIQ_KEY, then each of its KEYS, as topic#key."""
    topics = sorted({t for t, _, _ in rows})
    expected = []
    for i, (topic, uniq, keys) in enumerate(rows):
        if i < first:
            continue
        for key in ([uniq] if uniq is not None else []) + (keys or []):
            expected.append((index_key_hash(f"{topic}#{key}"), i))
    hashes, at = index_key_hashes(
        [f"{t}#" for t in topics],
        np.array([topics.index(t) for t, _, _ in rows], dtype=np.int64),
        first,
        TextColumn.from_texts([u for _, u, _ in rows]),
        TextColumn.from_texts([" ".join(k) if k else None for _, _, k in rows]),
    )
    assert list(zip(hashes.tolist(), at.tolist())) == expected


def test_tags_code_none_and_empty_are_zero() -> None:
    assert tags_code(None) == 0
    assert tags_code("") == 0
    assert tags_code("Tag0") == 2598902
    assert tags_code("标签0") == 26572473
    assert tags_code("polygenelubricants") == -2147483648  # sign-extended, not masked


# Any code point, lone surrogates included (a Java String may hold them).
ANY_CHAR = st.characters(min_codepoint=0, max_codepoint=0x10FFFF, blacklist_categories=())
ANY_TEXT = st.text(ANY_CHAR, max_size=64) | st.text(max_size=64)


@FAST
@given(ANY_TEXT)
def test_java_hash_matches_reference(s: str) -> None:
    h = java_hash(s)
    assert h == reference_java_hash(s)
    assert -(2**31) <= h <= 2**31 - 1
    k = index_key_hash(s)
    assert 0 <= k <= 2**31 - 1
    assert tags_code(s) == (h if s else 0)


@settings(max_examples=40, deadline=None, database=None)
@given(st.text(ANY_CHAR, min_size=257, max_size=700) | st.text(string.printable, min_size=257, max_size=700))
def test_java_hash_long_strings_match_reference(s: str) -> None:
    assert java_hash(s) == reference_java_hash(s)
    assert -(2**31) <= java_hash(s) <= 2**31 - 1


@pytest.mark.parametrize("n", [255, 256, 257, 1000])
def test_java_hash_around_precomputed_boundary(n: int) -> None:
    for s in ("a" * n, "é" * n, "\U0001f600" * (n // 2 + 1), "x" * (n - 1) + "标"):
        assert java_hash(s) == reference_java_hash(s)


# ---------------------------------------------------------------------------------------------
# 2. properties
# ---------------------------------------------------------------------------------------------

PROP_TEXT = st.text(
    st.characters(blacklist_characters="\x01\x02", blacklist_categories=("Cs",)), min_size=1, max_size=20
)


@FAST
@given(st.dictionaries(PROP_TEXT, PROP_TEXT, max_size=8))
def test_properties_round_trip(props: dict[str, str]) -> None:
    for k, v in props.items():
        validate_property(k, v)
    text = encode_properties(props)
    assert not text.endswith(PROPERTY_SEPARATOR)
    assert decode_properties(text) == props
    assert list(decode_properties(text)) == list(props)  # order kept
    # Older RocketMQ versions keep a trailing \x02.
    assert decode_properties(text + PROPERTY_SEPARATOR) == props


def test_properties_encode_layout() -> None:
    assert encode_properties({"KEYS": "k1 k2", "TAGS": "t"}) == "KEYS\x01k1 k2\x02TAGS\x01t"
    assert encode_properties({}) == ""
    assert decode_properties("") == {}


def test_properties_encode_skips_none_values() -> None:
    assert encode_properties({"a": "1", "b": None, "c": "3"}) == "a\x011\x02c\x013"
    assert encode_properties({"b": None}) == ""


def test_properties_decode_skips_empty_names_and_values() -> None:
    text = "\x01v\x02a\x01\x02b\x012\x02noseparator\x02\x02c\x013"
    assert decode_properties(text) == {"b": "2", "c": "3"}


def test_properties_decode_partitions_on_first_separator() -> None:
    assert decode_properties("a\x01x\x01y\x02b\x01z") == {"a": "x\x01y", "b": "z"}


def test_properties_decode_trailing_separator() -> None:
    assert decode_properties("a\x011\x02b\x012\x02") == {"a": "1", "b": "2"}
    assert decode_properties("a\x011\x02b\x012") == {"a": "1", "b": "2"}


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("", "v"),
        ("n", ""),
        ("a\x01b", "v"),
        ("a\x02b", "v"),
        ("n", "v\x01"),
        ("n", "\x02v"),
        (NAME_VALUE_SEPARATOR, "v"),
    ],
)
def test_validate_property_rejects(name: str, value: str) -> None:
    with pytest.raises(ValueError):
        validate_property(name, value)


def test_validate_property_rejects_non_strings() -> None:
    with pytest.raises(ValueError):
        validate_property("n", 5)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        validate_property(None, "v")  # type: ignore[arg-type]


def test_validate_property_accepts_ordinary() -> None:
    validate_property("KEYS", "a b c")
    validate_property("标签", "值 \x03")


# ---------------------------------------------------------------------------------------------
# 3. host
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "addr", "port"),
    [
        ("127.0.0.1:10911", bytes([127, 0, 0, 1]), 10911),
        ("192.168.0.1:40000", bytes([192, 168, 0, 1]), 40000),
        ("0.0.0.0:0", bytes(4), 0),
        ("255.255.255.255:65535", b"\xff" * 4, 65535),
        ("[fe80:0:0:0:1:2:3:4]:40005", bytes.fromhex("fe800000000000000001000200030004"), 40005),
        ("[0:0:0:0:0:0:0:1]:10911", bytes(15) + b"\x01", 10911),
        ("[ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff]:1", b"\xff" * 16, 1),
    ],
)
def test_host_round_trip(text: str, addr: bytes, port: int) -> None:
    assert parse_host(text) == (addr, port)
    assert format_host(addr, port) == text


def test_parse_host_short_ipv6() -> None:
    addr, port = parse_host("[::1]:5")
    assert len(addr) == 16
    assert addr == bytes(15) + b"\x01"
    assert port == 5
    assert format_host(addr, port) == "[0:0:0:0:0:0:0:1]:5"


@settings(max_examples=60, deadline=None, database=None)
@given(st.binary(min_size=4, max_size=4) | st.binary(min_size=16, max_size=16), st.integers(0, 65535))
def test_host_round_trip_random(addr: bytes, port: int) -> None:
    text = format_host(addr, port)
    assert parse_host(text) == (addr, port)
    if len(addr) == 16:
        assert text.startswith("[") and "::" not in text


@pytest.mark.parametrize(
    "text",
    [
        "nohost",
        "1.2.3.4:99999",
        "[::1]5",
        "x.y:1",
        "1.2.3.4:",
        "1.2.3.4:-1",
        ":80",
        "[::1]:",
        "[::1:80",
        "1.2.3:80",
        "256.1.1.1:80",
        "1.2.3.4:8a",
    ],
)
def test_parse_host_rejects(text: str) -> None:
    with pytest.raises(ValueError):
        parse_host(text)


def test_format_host_rejects_bad_address_length() -> None:
    with pytest.raises(ValueError):
        format_host(b"\x01\x02\x03", 1)


# ---------------------------------------------------------------------------------------------
# 4. message ids
# ---------------------------------------------------------------------------------------------


def test_offset_msg_id_ipv4_known_value() -> None:
    msg_id = encode_offset_msg_id(b"\x7f\x00\x00\x01", 10911, 17041)
    assert msg_id == "7F00000100002A9F0000000000004291"
    assert decode_offset_msg_id(msg_id) == (b"\x7f\x00\x00\x01", 10911, 17041)


def test_offset_msg_id_decode_accepts_lower_case() -> None:
    assert decode_offset_msg_id("7f00000100002a9f0000000000004291") == (b"\x7f\x00\x00\x01", 10911, 17041)


@settings(max_examples=60, deadline=None, database=None)
@given(
    st.binary(min_size=4, max_size=4) | st.binary(min_size=16, max_size=16),
    st.integers(0, 65535),
    st.integers(0, 2**63 - 1),
)
def test_offset_msg_id_round_trip(addr: bytes, port: int, offset: int) -> None:
    msg_id = encode_offset_msg_id(addr, port, offset)
    assert len(msg_id) == (32 if len(addr) == 4 else 56)
    assert msg_id == msg_id.upper()
    assert all(c in "0123456789ABCDEF" for c in msg_id)
    assert decode_offset_msg_id(msg_id) == (addr, port, offset)


def test_offset_msg_id_ipv6() -> None:
    addr = bytes.fromhex("fe800000000000000001000200030004")
    msg_id = encode_offset_msg_id(addr, 40005, 123456789)
    assert len(msg_id) == 56
    assert msg_id == "FE800000000000000001000200030004" + "00009C45" + "00000000075BCD15"
    assert decode_offset_msg_id(msg_id) == (addr, 40005, 123456789)


@pytest.mark.parametrize(
    "msg_id",
    [
        "",
        "7F00000100002A9F000000000000429",  # 31
        "7F00000100002A9F00000000000042910",  # 33
        "7F00000100002A9F00000000000042" + "G1",  # non-hex
        "7F00000100002A9F0000000000004Z91",
        "Z" * 56,
        "7F00000100002A9F00000000000042é1",
    ],
)
def test_offset_msg_id_decode_rejects(msg_id: str) -> None:
    with pytest.raises(CorruptDataError):
        decode_offset_msg_id(msg_id)


@pytest.mark.parametrize(
    "msg_id",
    [
        " " * 32,  # all whitespace: bytes.fromhex gives b""
        "7F00 00002A9F 0000000000004291  ",  # 32 chars, 28 hex digits: a 2-byte "address"
        "7F000001 00002A9F 00000000000042",  # 32 chars, 30 hex digits
        "7F00000100002A9F0000000000004291" + " " * 24,  # 56 chars holding an IPv4 id
        " " * 56,
    ],
)
def test_offset_msg_id_decode_rejects_whitespace(msg_id: str) -> None:
    assert len(msg_id) in (32, 56)
    with pytest.raises(CorruptDataError):
        decode_offset_msg_id(msg_id)


def test_offset_msg_id_decode_rejects_negative_offset() -> None:
    with pytest.raises(CorruptDataError):
        decode_offset_msg_id("7F00000100002A9F" + "FFFFFFFFFFFFFFFF")


def test_uniq_key_format() -> None:
    gen = UniqKeyGenerator()
    for key in [gen.next(), *gen.take_column(3).to_list()]:
        assert len(key) == 32
        assert all(c in "0123456789ABCDEF" for c in key)
    a, b = gen.next(), gen.next()
    assert a[:20] == b[:20]  # ip | pid | random prefix is fixed per generator
    assert int(b[20:], 16) == int(a[20:], 16) + 1


def test_uniq_key_take_column_reserves_consecutive_ids() -> None:
    gen = UniqKeyGenerator()
    ids = gen.take_column(5).to_list()
    after = gen.next()
    seq = [int(i[20:], 16) for i in [*ids, after] if i is not None]
    assert seq == list(range(seq[0], seq[0] + 6))
    assert ids[0] is not None and ids[0][:20] == after[:20]
    assert len(gen.take_column(0)) == 0


def test_uniq_key_unique_across_threads() -> None:
    gen = UniqKeyGenerator()
    per_thread = 25_000
    results: list[list[str]] = [[] for _ in range(4)]
    barrier = threading.Barrier(4)

    def work(i: int) -> None:
        out = results[i]
        barrier.wait()
        while len(out) < per_thread:
            if len(out) % 3 == 0:
                out.extend(
                    k for k in gen.take_column(min(97, per_thread - len(out))).to_list() if k is not None
                )
            else:
                out.append(gen.next())

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    all_ids = [k for r in results for k in r]
    assert len(all_ids) == 100_000
    assert len(set(all_ids)) == 100_000
    assert all(len(k) == 32 for k in all_ids)


# ---------------------------------------------------------------------------------------------
# 5. commitlog record
# ---------------------------------------------------------------------------------------------


def reference_record(
    *,
    body: bytes,
    topic: bytes,
    properties: bytes,
    queue_id: int = 0,
    flag: int = 0,
    sys_flag: int = 0,
    born_timestamp: int = 0,
    born_addr: bytes = b"\x7f\x00\x00\x01",
    born_port: int = 1,
    store_addr: bytes = b"\x7f\x00\x00\x01",
    store_port: int = 10911,
    store_timestamp: int = 0,
    queue_offset: int = 0,
    physical_offset: int = 0,
    reconsume_times: int = 0,
    prepared_transaction_offset: int = 0,
    crc: int | None = None,
    v2: bool = False,
) -> bytes:
    """A MESSAGE record packed field by field straight from STORE.md §2.1 (and the 5.x variant)."""
    after_size = b"".join(
        [
            struct.pack(">i", cl.MESSAGE_MAGIC_V2 if v2 else cl.MESSAGE_MAGIC_V1),
            struct.pack(">i", zlib.crc32(body) & 0x7FFFFFFF if crc is None else crc),
            struct.pack(">i", queue_id),
            struct.pack(">i", flag),
            struct.pack(">q", queue_offset),
            struct.pack(">q", physical_offset),
            struct.pack(">i", sys_flag),
            struct.pack(">q", born_timestamp),
            born_addr,
            struct.pack(">i", born_port),
            struct.pack(">q", store_timestamp),
            store_addr,
            struct.pack(">i", store_port),
            struct.pack(">i", reconsume_times),
            struct.pack(">q", prepared_transaction_offset),
            struct.pack(">i", len(body)),
            body,
            struct.pack(">h", len(topic)) if v2 else struct.pack(">b", len(topic)),
            topic,
            struct.pack(">h", len(properties)),
            properties,
        ]
    )
    return struct.pack(">i", 4 + len(after_size)) + after_size


def sample_fields(**over: Any) -> dict[str, Any]:
    fields: dict[str, Any] = dict(
        body=b"hello, rocketmq \x00\xff body",
        topic=b"TopicA",
        properties=b"KEYS\x01k1 k2\x02TAGS\x01Tag0",
        queue_id=3,
        flag=7,
        sys_flag=0,
        born_timestamp=1700000000000,
        born_addr=bytes([192, 168, 0, 1]),
        born_port=40000,
        store_addr=bytes([127, 0, 0, 1]),
        store_port=10911,
        store_timestamp=1795324328194,
        queue_offset=12,
        physical_offset=65536 + 674,
        reconsume_times=2,
        prepared_transaction_offset=99,
    )
    fields.update(over)
    return fields


def sample_record(**over: Any) -> bytes:
    return cl.encode_message(**sample_fields(**over))


V6_A = bytes.fromhex("fe800000000000000001000200030004")
V6_B = bytes(15) + b"\x01"

TRUNCATION_CASES = {
    "v4": sample_fields(),
    "v6": sample_fields(sys_flag=0x30, born_addr=V6_A, store_addr=V6_B),
    "empty": sample_fields(body=b"", properties=b"", topic=b"T"),
}


def check_decoded(
    rec: cl.DecodedRecord, fields: dict[str, Any], pos: int, raw: bytes, v2: bool = False
) -> None:
    body: bytes = fields["body"]
    assert rec.position == pos
    assert rec.total_size == len(raw)
    assert rec.total_size == cl.record_length(
        fields["sys_flag"], len(body), len(fields["topic"]), len(fields["properties"]), v2
    )
    assert rec.magic == (cl.MESSAGE_MAGIC_V2 if v2 else cl.MESSAGE_MAGIC_V1)
    assert rec.body_crc == zlib.crc32(body) & 0x7FFFFFFF == cl.body_crc(body)
    assert rec.queue_id == fields["queue_id"]
    assert rec.flag == fields["flag"]
    assert rec.queue_offset == fields["queue_offset"]
    assert rec.physical_offset == fields["physical_offset"]
    assert rec.sys_flag == fields["sys_flag"]
    assert rec.born_timestamp == fields["born_timestamp"]
    assert rec.born_addr == fields["born_addr"]
    assert rec.born_port == fields["born_port"]
    assert rec.store_timestamp == fields["store_timestamp"]
    assert rec.store_addr == fields["store_addr"]
    assert rec.store_port == fields["store_port"]
    assert rec.reconsume_times == fields["reconsume_times"]
    assert rec.prepared_transaction_offset == fields["prepared_transaction_offset"]
    assert rec.body_len == len(body)
    assert raw[rec.body_start - pos : rec.body_start - pos + rec.body_len] == body
    assert rec.topic == fields["topic"].decode()
    assert rec.properties == fields["properties"].decode()


def test_record_constants() -> None:
    assert struct.unpack(">i", bytes.fromhex("DAA320A7"))[0] == cl.MESSAGE_MAGIC_V1
    assert cl.MESSAGE_MAGIC_V2 == struct.unpack(">i", bytes.fromhex("DAA320AB"))[0] == -626843477
    assert struct.unpack(">i", bytes.fromhex("CBD43194"))[0] == cl.BLANK_MAGIC
    assert cl.END_FILE_MIN_BLANK_LENGTH == 8
    assert (cl.SYSFLAG_BORNHOST_V6, cl.SYSFLAG_STOREHOST_V6) == (0x10, 0x20)
    assert (cl.TX_NOT, cl.TX_PREPARED, cl.TX_COMMIT, cl.TX_ROLLBACK, cl.SYSFLAG_TX_MASK) == (0, 4, 8, 12, 12)


def test_encode_message_layout_matches_spec() -> None:
    fields = sample_fields()
    raw = cl.encode_message(**fields)
    assert raw == reference_record(**fields)
    assert struct.unpack_from(">i", raw, 0)[0] == len(raw)
    assert raw[4:8] == bytes.fromhex("DAA320A7")
    # TOTALSIZE per the §2.1 formula
    expected = (
        4
        + 4
        + 4
        + 4
        + 4
        + 8
        + 8
        + 4
        + 8
        + 8
        + 8
        + 8
        + 4
        + 8
        + 4
        + len(fields["body"])
        + 1
        + len(fields["topic"])
        + 2
        + len(fields["properties"])
    )
    assert len(raw) == expected


def test_encode_message_explicit_crc_is_stored() -> None:
    raw = sample_record(crc=12345)
    assert struct.unpack_from(">i", raw, 8)[0] == 12345
    assert cl.decode_record(raw, 0).body_crc == 12345


def test_encode_message_rejects_long_topic() -> None:
    cl.encode_message(**sample_fields(topic=b"t" * 127))
    with pytest.raises(struct.error):
        cl.encode_message(**sample_fields(topic=b"t" * 128))


TOPIC = st.text(string.ascii_letters + string.digits + "_-", min_size=1, max_size=127).map(str.encode)
PROPS = st.text(max_size=300).map(lambda s: s.encode("utf-8"))


@st.composite
def record_fields(draw: st.DrawFn) -> dict[str, Any]:
    born_v6 = draw(st.booleans())
    store_v6 = draw(st.booleans())
    sys_flag = draw(INT32) & ~0x30
    sys_flag |= (0x10 if born_v6 else 0) | (0x20 if store_v6 else 0)
    return dict(
        body=draw(st.binary(max_size=2000)),
        topic=draw(TOPIC),
        properties=draw(PROPS),
        queue_id=draw(INT32),
        flag=draw(INT32),
        sys_flag=sys_flag,
        born_timestamp=draw(INT64),
        born_addr=draw(st.binary(min_size=16 if born_v6 else 4, max_size=16 if born_v6 else 4)),
        born_port=draw(INT32),
        store_addr=draw(st.binary(min_size=16 if store_v6 else 4, max_size=16 if store_v6 else 4)),
        store_port=draw(INT32),
        store_timestamp=draw(INT64),
        queue_offset=draw(INT64),
        physical_offset=draw(INT64),
        reconsume_times=draw(INT32),
        prepared_transaction_offset=draw(INT64),
    )


@FAST
@given(record_fields(), st.binary(max_size=30), st.binary(max_size=30))
def test_record_round_trip(fields: dict[str, Any], before: bytes, after: bytes) -> None:
    raw = cl.encode_message(**fields)
    assert raw == reference_record(**fields)
    rec = cl.decode_record(raw, 0, check_crc=True)
    check_decoded(rec, fields, 0, raw)
    # Inside a larger buffer, at a non-zero position, through a memoryview and a bytearray.
    buf = before + raw + after
    for view in (buf, bytearray(buf), memoryview(buf)):
        rec2 = cl.decode_record(view, len(before), check_crc=True)
        check_decoded(rec2, fields, len(before), raw)
    # ``end`` exactly at the end of the record is enough.
    assert cl.decode_record(buf, len(before), len(before) + len(raw)) == rec2


@FAST
@given(record_fields())
def test_v2_record_decodes_to_same_fields(fields: dict[str, Any]) -> None:
    v1 = cl.encode_message(**fields)
    v2 = reference_record(**fields, v2=True)
    assert len(v2) == len(v1) + 1
    rec = cl.decode_record(v2, 0, check_crc=True)
    check_decoded(rec, fields, 0, v2, v2=True)
    rec1 = cl.decode_record(v1, 0)
    assert replace(rec, magic=rec1.magic, total_size=rec1.total_size) == rec1


def test_v2_record_topic_length_over_127() -> None:
    topic = b"T" * 300
    raw = reference_record(body=b"b", topic=topic, properties=b"", v2=True)
    rec = cl.decode_record(raw, 0)
    assert rec.topic == "T" * 300
    assert rec.total_size == len(raw) == cl.record_length(0, 1, 300, 0, v2=True)


@pytest.mark.parametrize("sys_flag", [0, 0x10, 0x20, 0x30, 0x10 | 0x8, 0x2])
def test_store_timestamp_position(sys_flag: int) -> None:
    born = V6_A if sys_flag & 0x10 else b"\x01\x02\x03\x04"
    store = V6_B if sys_flag & 0x20 else b"\x05\x06\x07\x08"
    raw = sample_record(
        sys_flag=sys_flag, born_addr=born, store_addr=store, store_timestamp=0x0102030405060708
    )
    pos = cl.store_timestamp_position(sys_flag)
    assert pos == (48 + 20 if sys_flag & 0x10 else 48 + 8)
    assert raw[pos : pos + 8] == bytes.fromhex("0102030405060708")


@FAST
@given(record_fields(), INT64, INT64, INT64, st.integers(0, 50))
def test_patch_positions(fields: dict[str, Any], qo: int, po: int, ts: int, pad: int) -> None:
    raw = cl.encode_message(**fields)
    buf = bytearray(pad) + bytearray(raw) + bytearray(5)
    cl.patch_positions(buf, pad, cl.store_timestamp_position(fields["sys_flag"]), qo, po, ts)
    rec = cl.decode_record(buf, pad, check_crc=True)
    assert (rec.queue_offset, rec.physical_offset, rec.store_timestamp) == (qo, po, ts)
    expected = dict(fields, queue_offset=qo, physical_offset=po, store_timestamp=ts)
    assert bytes(buf[pad : pad + len(raw)]) == cl.encode_message(**expected)
    assert buf[:pad] == bytearray(pad) and buf[pad + len(raw) :] == bytearray(5)


def test_patch_positions_through_memoryview() -> None:
    raw = bytearray(sample_record(sys_flag=0x30, born_addr=V6_A, store_addr=V6_B))
    cl.patch_positions(memoryview(raw), 0, cl.store_timestamp_position(0x30), 5, 6, 7)
    rec = cl.decode_record(raw, 0)
    assert (rec.queue_offset, rec.physical_offset, rec.store_timestamp) == (5, 6, 7)
    assert rec.store_addr == V6_B and rec.born_addr == V6_A


@FAST
@given(record_fields())
def test_record_template_matches_encode_message(fields: dict[str, Any]) -> None:
    tpl = cl.RecordTemplate(
        fields["topic"], fields["born_addr"], fields["born_port"], fields["store_addr"], fields["store_port"]
    )
    raw, sys_flag = tpl.encode(
        fields["body"],
        fields["properties"],
        fields["queue_id"],
        fields["flag"],
        fields["sys_flag"] & ~0x30,
        fields["born_timestamp"],
    )
    assert sys_flag == fields["sys_flag"]  # the host bits come from the template's addresses
    expected = dict(
        fields,
        queue_offset=0,
        physical_offset=0,
        store_timestamp=0,
        reconsume_times=0,
        prepared_transaction_offset=0,
    )
    assert raw == cl.encode_message(**expected)
    assert tpl.timestamp_position == cl.store_timestamp_position(sys_flag)


@pytest.mark.parametrize("topic", [b"", b"t" * 128])
def test_record_template_rejects_bad_topic_length(topic: bytes) -> None:
    with pytest.raises(struct.error):
        cl.RecordTemplate(topic, b"\x01\x02\x03\x04", 1, b"\x01\x02\x03\x04", 2)


@FAST
@given(record_fields(), st.integers(0, 30))
def test_body_span(fields: dict[str, Any], pad: int) -> None:
    raw = cl.encode_message(**fields)
    buf = bytes(pad) + raw
    start, length = cl.body_span(buf, pad)
    assert buf[start : start + length] == fields["body"]
    rec = cl.decode_record(buf, pad)
    assert (start, length) == (rec.body_start, rec.body_len)


@pytest.mark.parametrize("case", sorted(TRUNCATION_CASES))
def test_body_span_truncations_raise_corrupt(case: str) -> None:
    raw = cl.encode_message(**TRUNCATION_CASES[case])
    rec = cl.decode_record(raw, 0)
    for k in range(len(raw)):
        try:
            start, length = cl.body_span(raw[:k], 0)
        except CorruptDataError:
            continue
        # body_span only promises the body itself is inside the buffer.
        assert (start, length) == (rec.body_start, rec.body_len)
        assert start + length <= k


@settings(max_examples=200, deadline=None, database=None)
@given(st.binary(max_size=400), st.integers(-5, 50))
def test_body_span_on_garbage_raises_only_corrupt(garbage: bytes, pos: int) -> None:
    try:
        start, length = cl.body_span(garbage, pos)
    except CorruptDataError:
        return
    assert 0 <= pos <= start and length >= 0 and start + length <= len(garbage)


def test_record_length_values() -> None:
    assert cl.record_length(0, 0, 0, 0) == 91
    assert cl.record_length(0x10, 0, 0, 0) == 103
    assert cl.record_length(0x30, 0, 0, 0) == 115
    assert cl.record_length(0, 10, 6, 20, v2=True) == 91 + 36 + 1


@pytest.mark.parametrize("case", sorted(TRUNCATION_CASES))
def test_every_truncation_raises_corrupt(case: str) -> None:
    raw = cl.encode_message(**TRUNCATION_CASES[case])
    assert cl.decode_record(raw, 0).total_size == len(raw)
    for k in range(len(raw)):
        with pytest.raises(CorruptDataError) as info:
            cl.decode_record(raw[:k], 0)
        assert info.value.offset == 0
        with pytest.raises(CorruptDataError):
            cl.decode_record(raw, 0, k)
        with pytest.raises(CorruptDataError):
            cl.decode_record(b"pad" + raw[:k], 3)


def test_every_truncation_of_v2_record_raises_corrupt() -> None:
    raw = reference_record(**sample_fields(), v2=True)
    for k in range(len(raw)):
        with pytest.raises(CorruptDataError):
            cl.decode_record(raw[:k], 0)


FLIP_BASE = cl.encode_message(**sample_fields(body=bytes(range(40))))
FLIP_BASE_V6 = cl.encode_message(**sample_fields(body=b"xyz", sys_flag=0x10, born_addr=V6_A))


@settings(max_examples=300, deadline=None, database=None)
@given(
    st.sampled_from([FLIP_BASE, FLIP_BASE_V6]),
    st.lists(st.tuples(st.integers(0, len(FLIP_BASE) - 1), st.integers(0, 255)), min_size=1, max_size=6),
    st.booleans(),
)
def test_random_byte_flips_decode_or_raise_corrupt(
    base: bytes, flips: list[tuple[int, int]], crc: bool
) -> None:
    buf = bytearray(base)
    for i, v in flips:
        buf[i % len(buf)] = v
    try:
        rec = cl.decode_record(buf, 0, check_crc=crc)
    except CorruptDataError:
        return
    assert 0 < rec.total_size <= len(buf)
    assert rec.body_start + rec.body_len <= rec.total_size


@settings(max_examples=200, deadline=None, database=None)
@given(st.sampled_from([FLIP_BASE, FLIP_BASE_V6]), st.integers(0, 70), INT32)
def test_random_int_fields_decode_or_raise_corrupt(base: bytes, at: int, value: int) -> None:
    """Overwrite any 4-byte field of the head (lengths, magic, sysflag) with any int."""
    buf = bytearray(base)
    struct.pack_into(">i", buf, at, value)
    try:
        rec = cl.decode_record(buf, 0)
    except CorruptDataError:
        return
    assert 91 <= rec.total_size <= len(buf)
    assert rec.body_start + rec.body_len < rec.total_size


def test_check_crc_detects_flipped_body_byte() -> None:
    fields = sample_fields()
    raw = bytearray(cl.encode_message(**fields))
    rec = cl.decode_record(raw, 0, check_crc=True)
    raw[rec.body_start + 3] ^= 0x40
    decoded = cl.decode_record(raw, 0)  # no CRC check: still decodes
    assert decoded.body_crc == rec.body_crc
    with pytest.raises(CorruptDataError, match="CRC") as info:
        cl.decode_record(raw, 0, check_crc=True)
    assert info.value.offset == 0


def test_check_crc_detects_wrong_stored_crc() -> None:
    raw = sample_record(crc=(zlib.crc32(sample_fields()["body"]) & 0x7FFFFFFF) ^ 1)
    cl.decode_record(raw, 0)
    with pytest.raises(CorruptDataError, match="CRC"):
        cl.decode_record(raw, 0, check_crc=True)


@pytest.mark.parametrize("total", [2**31 - 1, 2**30, -1, -(2**31), 0, 8, 90])
def test_absurd_total_size_raises(total: int) -> None:
    raw = bytearray(sample_record())
    struct.pack_into(">i", raw, 0, total)
    with pytest.raises(CorruptDataError):
        cl.decode_record(raw, 0)
    with pytest.raises(CorruptDataError):
        cl.decode_record(raw + bytearray(4096), 0)


@pytest.mark.parametrize("delta", [-1, 1, 2])
def test_total_size_disagreeing_with_parts_raises(delta: int) -> None:
    raw = bytearray(sample_record()) + bytearray(16)
    struct.pack_into(">i", raw, 0, len(raw) - 16 + delta)
    with pytest.raises(CorruptDataError):
        cl.decode_record(raw, 0)


@pytest.mark.parametrize(
    ("field_pos_from_body_end", "fmt", "value"),
    [(0, ">B", 200), (0, ">B", 0)],
)
def test_bad_topic_length_raises(field_pos_from_body_end: int, fmt: str, value: int) -> None:
    raw = bytearray(sample_record())
    rec = cl.decode_record(raw, 0)
    struct.pack_into(fmt, raw, rec.body_start + rec.body_len + field_pos_from_body_end, value)
    with pytest.raises(CorruptDataError):
        cl.decode_record(raw, 0)


@pytest.mark.parametrize("body_len", [-1, -(2**31), 2**31 - 1, 10**6])
def test_bad_body_length_raises(body_len: int) -> None:
    raw = bytearray(sample_record())
    struct.pack_into(">i", raw, 68 + 8 + 8, body_len)
    with pytest.raises(CorruptDataError):
        cl.decode_record(raw, 0)


@pytest.mark.parametrize("props_len", [-1, -32768, 32767, 10**4])
def test_bad_properties_length_raises(props_len: int) -> None:
    fields = sample_fields()
    raw = bytearray(cl.encode_message(**fields))
    at = len(raw) - len(fields["properties"]) - 2
    struct.pack_into(">h", raw, at, props_len)
    with pytest.raises(CorruptDataError):
        cl.decode_record(raw + bytearray(40000), 0)


def test_host_v6_bit_set_on_v4_record_raises() -> None:
    raw = bytearray(sample_record())
    struct.pack_into(">i", raw, 36, 0x10)  # claims a 20-byte born host; the lengths no longer add up
    with pytest.raises(CorruptDataError):
        cl.decode_record(raw, 0)


@pytest.mark.parametrize("magic", [0, 0x12345678, -1, cl.MESSAGE_MAGIC_V1 + 1])
def test_unknown_magic_raises(magic: int) -> None:
    raw = bytearray(sample_record())
    struct.pack_into(">i", raw, 4, magic)
    with pytest.raises(CorruptDataError, match="magic"):
        cl.decode_record(raw, 0)


def test_decode_record_on_blank_raises() -> None:
    blank = cl.encode_blank(200) + bytes(192)
    assert blank[:8] == struct.pack(">i", 200) + bytes.fromhex("CBD43194")
    with pytest.raises(CorruptDataError):
        cl.decode_record(blank, 0)
    with pytest.raises(CorruptDataError):
        cl.decode_record(cl.encode_blank(8), 0)


def test_bad_utf8_topic_or_properties_is_decoded_leniently_like_java() -> None:
    # Java's new String(bytes, UTF_8) replaces invalid bytes; RocketMQ keeps such records.
    assert cl.decode_record(sample_record(topic=b"\xff\xfe"), 0).topic == "\ufffd\ufffd"
    assert cl.decode_record(sample_record(properties=b"a\x01\xc3"), 0).properties == "a\x01\ufffd"


@pytest.mark.parametrize("pos", [-1, -100, 10**9])
def test_decode_record_bad_position_raises(pos: int) -> None:
    with pytest.raises(CorruptDataError):
        cl.decode_record(sample_record(), pos)


def test_corrupt_error_carries_position() -> None:
    raw = bytes(50) + bytes(sample_record(crc=1))
    with pytest.raises(CorruptDataError) as info:
        cl.decode_record(raw, 50, check_crc=True)
    assert info.value.offset == 50
    assert info.value.path is None


# --- SegmentScan ------------------------------------------------------------------------------


def make_records(n: int) -> tuple[list[dict[str, Any]], list[bytes]]:
    fields = [
        sample_fields(
            body=bytes([i % 256]) * (i * 7 % 300),
            topic=f"Topic{i % 3}".encode(),
            queue_id=i % 4,
            queue_offset=i,
            sys_flag=(0x10 if i % 3 == 1 else 0) | (0x20 if i % 4 == 2 else 0),
            born_addr=V6_A if i % 3 == 1 else b"\x0a\x00\x00\x01",
            store_addr=V6_B if i % 4 == 2 else b"\x7f\x00\x00\x01",
            properties=encode_properties({"TAGS": f"Tag{i}"}).encode(),
        )
        for i in range(n)
    ]
    return fields, [cl.encode_message(**f) for f in fields]


@pytest.mark.parametrize("n", [0, 1, 5])
def test_scan_until_blank(n: int) -> None:
    fields, records = make_records(n)
    segment = 4096
    data = b"".join(records)
    rest = segment - len(data)
    buf = data + cl.encode_blank(rest) + b"\xee" * (rest - 8)
    assert len(buf) == segment
    scan = cl.SegmentScan(buf, check_crc=True)
    got = list(scan)
    assert len(got) == n
    pos = 0
    for rec, f, raw in zip(got, fields, records, strict=True):
        check_decoded(rec, f, pos, raw)
        pos += len(raw)
    assert scan.stop == "blank"
    assert scan.blank_size == rest
    assert scan.position == len(data)
    assert scan.error is None


def test_scan_until_zeros() -> None:
    _, records = make_records(4)
    data = b"".join(records)
    buf = bytearray(data + bytes(1000))
    scan = cl.SegmentScan(buf)
    got = list(scan)
    assert [r.queue_offset for r in got] == [0, 1, 2, 3]
    assert scan.stop == "end_of_data"
    assert scan.position == len(data)
    assert scan.error is None


@pytest.mark.parametrize("tail", [0, 1, 7])
def test_scan_until_too_few_bytes(tail: int) -> None:
    _, records = make_records(3)
    data = b"".join(records)
    scan = cl.SegmentScan(data + b"\xaa" * tail)
    assert len(list(scan)) == 3
    assert scan.stop == "end_of_data"
    assert scan.position == len(data)


def test_scan_respects_start_and_end() -> None:
    _, records = make_records(5)
    data = b"".join(records) + bytes(100)
    start = len(records[0]) + len(records[1])
    end = start + len(records[2]) + len(records[3])
    scan = cl.SegmentScan(memoryview(data), start, end)
    got = list(scan)
    assert [r.queue_offset for r in got] == [2, 3]
    assert [r.position for r in got] == [start, start + len(records[2])]
    assert scan.stop == "end_of_data"
    assert scan.position == end
    # An ``end`` that cuts a record short: the cut record is corrupt, never returned.
    scan = cl.SegmentScan(data, start, end - 1)
    assert [r.queue_offset for r in scan] == [2]
    assert scan.stop == "corrupt"
    assert scan.position == start + len(records[2])


@pytest.mark.parametrize("how", ["magic", "crc", "total_size", "truncated_size"])
def test_scan_stops_at_corrupt_record(how: str) -> None:
    _, records = make_records(6)
    good = records[:3]
    bad = bytearray(records[3])
    if how == "magic":
        struct.pack_into(">i", bad, 4, 0x01020304)
    elif how == "crc":
        bad[-1 - len(b"TAGS\x01Tag3") - 2 - 6 - 1 - 1] ^= 0xFF  # a body byte
    elif how == "total_size":
        struct.pack_into(">i", bad, 0, len(bad) + 1)
    else:
        struct.pack_into(">i", bad, 0, 12)
    buf = b"".join(good) + bytes(bad) + b"".join(records[4:]) + cl.encode_blank(64) + bytes(56)
    scan = cl.SegmentScan(buf, check_crc=True)
    got = list(scan)
    assert [r.queue_offset for r in got] == [0, 1, 2]
    assert scan.stop == "corrupt"
    assert isinstance(scan.error, CorruptDataError)
    corrupt_at = sum(map(len, good))
    assert scan.error.offset == corrupt_at
    assert scan.position == corrupt_at
    if how == "crc":
        assert "CRC" in str(scan.error)


def test_scan_position_follows_each_yielded_record() -> None:
    """A reader that stops early (breaks out of the loop) still knows where valid data ends."""
    _, records = make_records(4)
    scan = cl.SegmentScan(b"".join(records) + bytes(64))
    for rec in scan:
        assert scan.position == rec.position + rec.total_size
        if rec.queue_offset == 1:
            break
    assert scan.position == len(records[0]) + len(records[1])


@pytest.mark.parametrize(
    ("head", "stop"),
    [
        ((0, 0), "end_of_data"),  # zero-filled, never written
        ((0, cl.MESSAGE_MAGIC_V1), "corrupt"),
        ((0, 0x1234), "corrupt"),
        ((500, 0), "corrupt"),
    ],
)
def test_scan_distinguishes_zeros_from_damage(head: tuple[int, int], stop: str) -> None:
    _, records = make_records(2)
    data = b"".join(records)
    scan = cl.SegmentScan(data + struct.pack(">ii", *head) + bytes(600))
    assert len(list(scan)) == 2
    assert scan.stop == stop
    assert scan.position == len(data)


def test_scan_of_empty_buffer() -> None:
    scan = cl.SegmentScan(b"")
    assert list(scan) == []
    assert scan.stop == "end_of_data"
    assert scan.position == 0


@settings(max_examples=200, deadline=None, database=None)
@given(st.binary(max_size=3000), st.booleans(), st.integers(0, 40))
def test_scan_over_garbage_terminates(garbage: bytes, crc: bool, start: int) -> None:
    scan = cl.SegmentScan(garbage, start, check_crc=crc)
    bound = len(garbage) // 91 + 1
    for n, rec in enumerate(scan, 1):
        assert n <= bound, "scan yields more records than could fit"
        assert rec.total_size >= 91
    assert scan.stop in ("blank", "end_of_data", "corrupt")
    assert (scan.error is not None) == (scan.stop == "corrupt")


@settings(max_examples=150, deadline=None, database=None)
@given(st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)), max_size=8), st.booleans())
def test_scan_over_damaged_records_terminates(flips: list[tuple[int, int]], crc: bool) -> None:
    _, records = make_records(6)
    buf = bytearray(b"".join(records) + cl.encode_blank(100) + bytes(92))
    for i, v in flips:
        buf[i % len(buf)] = v
    scan = cl.SegmentScan(bytes(buf), check_crc=crc)
    got = list(scan)
    assert len(got) <= 6
    assert scan.stop in ("blank", "end_of_data", "corrupt")
    pos = 0
    for rec in got:
        assert rec.position == pos
        pos += rec.total_size
    assert scan.position == pos


# ---------------------------------------------------------------------------------------------
# 6. consume-queue entry
# ---------------------------------------------------------------------------------------------


def test_cq_entry_layout() -> None:
    raw = cq.encode_entry(0x0102030405060708, 0x0A0B0C0D, -2)
    assert raw == bytes.fromhex("01020304050607080A0B0C0DFFFFFFFFFFFFFFFE")
    assert len(raw) == cq.CQ_ENTRY_SIZE == 20
    assert cq.decode_entry(raw) == (0x0102030405060708, 0x0A0B0C0D, -2)


@FAST
@given(INT64, INT32, INT64, st.integers(0, 40))
def test_cq_entry_round_trip(offset: int, size: int, tags: int, pad: int) -> None:
    raw = cq.encode_entry(offset, size, tags)
    assert cq.decode_entry(raw) == (offset, size, tags)
    assert cq.decode_entry(bytes(pad) + raw, pad) == (offset, size, tags)
    assert cq.decode_entry(memoryview(bytearray(bytes(pad) + raw)), pad) == (offset, size, tags)


@FAST
@given(st.lists(st.tuples(INT64, INT32, INT64), max_size=30))
def test_cq_encode_entries_matches_encode_entry(entries: list[tuple[int, int, int]]) -> None:
    offsets = [e[0] for e in entries]
    sizes = [e[1] for e in entries]
    tags = [e[2] for e in entries]
    block = cq.encode_entries(offsets, sizes, tags)
    assert block == b"".join(cq.encode_entry(*e) for e in entries)
    arr = cq.decode_entries(block)
    assert arr.dtype.names == ("offset", "size", "tags_code")
    assert len(arr) == len(entries)
    assert [int(x) for x in arr["offset"]] == offsets
    assert [int(x) for x in arr["size"]] == sizes
    assert [int(x) for x in arr["tags_code"]] == tags


def test_cq_encode_entries_accepts_numpy_arrays() -> None:
    offs = np.array([0, 674, 1127], dtype=np.int64)
    sizes = np.array([674, 453, 541], dtype=np.int32)
    tags = np.array([2598902, 2598903, 2598904], dtype=np.int64)
    block = cq.encode_entries(offs, sizes, tags)
    assert block == cq.encode_entry(0, 674, 2598902) + cq.encode_entry(674, 453, 2598903) + cq.encode_entry(
        1127, 541, 2598904
    )


def test_cq_decode_entries_ignores_partial_tail() -> None:
    block = cq.encode_entry(1, 2, 3) + cq.encode_entry(4, 5, 6) + b"\x01" * 19
    arr = cq.decode_entries(block)
    assert len(arr) == 2
    assert (int(arr[1]["offset"]), int(arr[1]["size"]), int(arr[1]["tags_code"])) == (4, 5, 6)
    assert len(cq.decode_entries(b"")) == 0
    assert len(cq.decode_entries(bytearray(b"\x00" * 19))) == 0


@pytest.mark.parametrize(
    ("entries", "expected"),
    [
        ([], 0),
        ([(0, 10, 0), (10, 20, 5)], 2),
        ([(0, 10, 0), (0, 0, 0), (20, 20, 0)], 1),  # zero-filled space ends the queue
        ([(0, 10, 0), (10, 10, 0), (-1, 10, 0), (30, 10, 0)], 2),  # negative offset
        ([(5, -1, 0), (10, 10, 0)], 0),  # negative size
        ([(0, 2**31 - 1, 0), (100, 10, 7)], 2),  # pre-blank entries count as valid
    ],
)
def test_cq_valid_prefix_length(entries: list[tuple[int, int, int]], expected: int) -> None:
    block = b"".join(cq.encode_entry(*e) for e in entries)
    assert cq.valid_prefix_length(cq.decode_entries(block)) == expected


def test_cq_valid_prefix_length_on_zero_filled_segment() -> None:
    block = cq.encode_entry(0, 100, 1) + cq.encode_entry(100, 100, 2) + bytes(20 * 38)
    assert cq.valid_prefix_length(cq.decode_entries(block)) == 2


def test_cq_pre_blank_entry() -> None:
    assert cq.encode_entry(0, 2**31 - 1, 0) == cq.PRE_BLANK_ENTRY
    assert bytes(8) + b"\x7f\xff\xff\xff" + bytes(8) == cq.PRE_BLANK_ENTRY


@pytest.mark.parametrize(
    ("buf", "pos"), [(b"", 0), (bytes(19), 0), (bytes(20), 1), (bytes(40), 21), (bytes(40), -1)]
)
def test_cq_decode_entry_short_buffer_raises(buf: bytes, pos: int) -> None:
    with pytest.raises(CorruptDataError):
        cq.decode_entry(buf, pos)


# ---------------------------------------------------------------------------------------------
# 7. index file layout
# ---------------------------------------------------------------------------------------------


@FAST
@given(INT64, INT64, INT64, INT64, INT32, INT32)
def test_index_header_round_trip(a: int, b: int, c: int, d: int, slots: int, count: int) -> None:
    h = ix.IndexHeader(a, b, c, d, slots, count)
    raw = ix.encode_header(h)
    assert len(raw) == ix.HEADER_SIZE == 40
    assert raw == struct.pack(">qqqqii", a, b, c, d, slots, count)
    assert ix.decode_header(raw) == h
    assert ix.decode_header(raw + b"\xff" * 10) == h


def test_index_header_defaults_and_short_buffer() -> None:
    h = ix.IndexHeader()
    assert h.index_count == 1 and h.hash_slot_count == 0
    assert ix.encode_header(h) == bytes(36) + b"\x00\x00\x00\x01"
    with pytest.raises(CorruptDataError):
        ix.decode_header(bytes(39))


def test_index_geometry() -> None:
    assert ix.file_size(64, 256) == 5416
    assert ix.file_size(5_000_000, 20_000_000) == 40 + 4 * 5_000_000 + 20 * 20_000_000
    assert ix.slot_position(0) == 40
    assert ix.slot_position(63) == 40 + 63 * 4
    assert ix.entry_position(64, 0) == 40 + 256
    assert ix.entry_position(64, 1) == 40 + 256 + 20
    assert ix.entry_position(64, 255) + ix.ENTRY_SIZE == ix.file_size(64, 256)
    assert (ix.SLOT_SIZE, ix.ENTRY_SIZE) == (4, 20)


@FAST
@given(st.integers(0, 2**31 - 1), INT64, INT32, INT32, st.integers(0, 255), st.integers(0, 63), INT32)
def test_index_entry_and_slot_round_trip(
    key_hash: int, phy: int, diff: int, prev: int, number: int, slot: int, slot_value: int
) -> None:
    raw = ix.encode_entry(key_hash, phy, diff, prev)
    assert raw == struct.pack(">iqii", key_hash, phy, diff, prev)
    buf = bytearray(ix.file_size(64, 256))
    at = ix.entry_position(64, number)
    buf[at : at + ix.ENTRY_SIZE] = raw
    assert ix.decode_entry(buf, 64, number) == (key_hash, phy, diff, prev)
    assert ix.encode_slot(slot_value) == struct.pack(">i", slot_value)
    s_at = ix.slot_position(slot)
    buf[s_at : s_at + 4] = ix.encode_slot(slot_value)
    assert ix.decode_slot(buf, slot) == slot_value
    ix.SLOT.pack_into(buf, ix.slot_position(slot), 17)
    assert ix.decode_slot(memoryview(buf), slot) == 17


# ---------------------------------------------------------------------------------------------
# 8. checkpoint
# ---------------------------------------------------------------------------------------------


@FAST
@given(INT64, INT64, INT64)
def test_checkpoint_round_trip(p: int, lg: int, i: int) -> None:
    cp = cp_codec.Checkpoint(p, lg, i)
    raw = cp_codec.encode_checkpoint(cp)
    assert len(raw) == cp_codec.CHECKPOINT_FILE_SIZE == 4096
    assert raw[:24] == struct.pack(">qqq", p, lg, i)
    assert raw[24:] == bytes(4096 - 24)
    assert cp_codec.decode_checkpoint(raw) == cp
    assert cp_codec.decode_checkpoint(raw[:24]) == cp


def test_checkpoint_short_buffer_raises() -> None:
    for n in (0, 8, 23):
        with pytest.raises(CorruptDataError):
            cp_codec.decode_checkpoint(bytes(n))


def test_checkpoint_fixture() -> None:
    path = FIXTURES / "store-sample" / "checkpoint"
    raw = path.read_bytes()
    cp = cp_codec.decode_checkpoint(raw)
    assert len(raw) == 4096
    assert cp_codec.encode_checkpoint(cp) == raw
    listing = FIXTURES / "store-sample.expected.jsonl"
    rows = [
        json.loads(line)
        for line in listing.read_text(encoding="utf-8").splitlines()
        if '"kind": "checkpoint"' in line
    ]
    assert len(rows) == 1
    assert cp.physic_msg_timestamp == rows[0]["physicMsgTimestamp"]
    assert cp.logics_msg_timestamp == rows[0]["logicsMsgTimestamp"]
    assert cp.index_msg_timestamp == rows[0]["indexMsgTimestamp"]


# ---------------------------------------------------------------------------------------------
# 9. real RocketMQ 4.9.8 bytes
# ---------------------------------------------------------------------------------------------


def fixture_segment(name: str) -> bytes:
    path = SAMPLE_COMMITLOG / name
    return path.read_bytes()


def reencode(buf: bytes, rec: cl.DecodedRecord) -> bytes:
    return cl.encode_message(
        body=buf[rec.body_start : rec.body_start + rec.body_len],
        topic=rec.topic.encode("utf-8"),
        properties=rec.properties.encode("utf-8"),
        queue_id=rec.queue_id,
        flag=rec.flag,
        sys_flag=rec.sys_flag,
        born_timestamp=rec.born_timestamp,
        born_addr=rec.born_addr,
        born_port=rec.born_port,
        store_addr=rec.store_addr,
        store_port=rec.store_port,
        store_timestamp=rec.store_timestamp,
        queue_offset=rec.queue_offset,
        physical_offset=rec.physical_offset,
        reconsume_times=rec.reconsume_times,
        prepared_transaction_offset=rec.prepared_transaction_offset,
        crc=None,
    )


def test_fixture_first_segment_scan() -> None:
    buf = fixture_segment("00000000000000000000")
    assert len(buf) == 65536
    scan = cl.SegmentScan(buf, check_crc=True)
    records = list(scan)
    assert len(records) == 129
    assert scan.stop == "blank"
    assert scan.position == 65111
    assert scan.blank_size == 425
    assert scan.position + scan.blank_size == len(buf)
    assert scan.error is None
    first = records[0]
    assert first.topic == "TopicA"
    assert first.total_size == 674
    assert first.store_timestamp == 1795324328194
    assert first.born_addr.hex() == "c0a80001"
    assert first.born_port == 40000
    assert first.magic == cl.MESSAGE_MAGIC_V1
    assert format_host(first.born_addr, first.born_port) == "192.168.0.1:40000"
    props = decode_properties(first.properties)
    assert props["TAGS"] == "Tag0"
    assert tags_code(props["TAGS"]) == 2598902
    assert props["KEYS"] == "key-0 grp-0"


@pytest.mark.parametrize(
    "name",
    [
        "00000000000000000000",
        "00000000000000065536",
        "00000000000000131072",
        "00000000000000196608",
        "00000000000000262144",
    ],
)
def test_fixture_reencodes_byte_for_byte(name: str) -> None:
    buf = fixture_segment(name)
    scan = cl.SegmentScan(buf, check_crc=True)
    records = list(scan)
    assert records
    assert scan.stop in ("blank", "end_of_data")
    for rec in records:
        original = buf[rec.position : rec.position + rec.total_size]
        assert reencode(buf, rec) == original, f"record at {rec.position} differs"
        assert rec.body_crc == cl.body_crc(buf[rec.body_start : rec.body_start + rec.body_len])
        assert rec.physical_offset == int(name) + rec.position
        if rec.sys_flag & cl.SYSFLAG_BORNHOST_V6:
            assert len(rec.born_addr) == 16
        if rec.sys_flag & cl.SYSFLAG_STOREHOST_V6:
            assert len(rec.store_addr) == 16


def test_fixture_matches_rocketmq_listing() -> None:
    listing = FIXTURES / "store-sample.expected.jsonl"
    rows = [json.loads(line) for line in listing.read_text(encoding="utf-8").splitlines() if line.strip()]
    clrecs = [r for r in rows if r["kind"] == "clrec"]
    scan_ends = {r["file"]: r for r in rows if r["kind"] == "scan_end"}
    decoded: list[cl.DecodedRecord] = []
    saw_v6 = saw_non_ascii_tag = False
    for seg in sorted(SAMPLE_COMMITLOG.iterdir()):
        base = int(seg.name)
        buf = seg.read_bytes()
        scan = cl.SegmentScan(buf, check_crc=True)
        recs = list(scan)
        end = scan_ends[base]
        assert len(recs) == end["records"]
        assert scan.position == end["filePos"]
        if end.get("magic") == "0xcbd43194":
            assert scan.stop == "blank"
            assert scan.blank_size == end["declaredTotalSize"]
        else:
            assert scan.stop == "end_of_data"
        decoded.extend(recs)
    assert len(decoded) == len(clrecs) == 600
    for rec, row in zip(decoded, clrecs, strict=True):
        assert rec.physical_offset == row["offset"]
        assert rec.total_size == row["size"]
        assert rec.topic == row["topic"]
        assert rec.queue_id == row["queueId"]
        assert rec.queue_offset == row["queueOffset"]
        assert rec.sys_flag == row["sysFlag"]
        assert rec.store_timestamp == row["storeTs"]
        props = decode_properties(rec.properties)
        # RocketMQ's dispatch request: keys "" when a record has no properties at all, else null if absent.
        assert (props.get("KEYS", "null") if rec.properties else "") == row["keys"]
        assert props.get("UNIQ_KEY", "null") == row["uniqKey"]
        if rec.topic != "SCHEDULE_TOPIC_XXXX":
            assert tags_code(props.get("TAGS")) == row["tagsCode"]
            saw_non_ascii_tag |= not props.get("TAGS", "").isascii()
        saw_v6 |= bool(rec.sys_flag & 0x30)
    assert saw_v6 and saw_non_ascii_tag


def test_property_spans_answers_every_wanted_name_even_one_wanted_twice() -> None:
    from rocketstore.codec.properties import property_spans

    raw = b"KEYS\x01k1\x02TAGS\x01a\x02TAGS\x01b"
    one = np.array([0], dtype=np.int64)
    spans = property_spans(raw, one, np.array([len(raw)], dtype=np.int64), ["TAGS", "KEYS", "TAGS", "WAIT"])
    values = [
        raw[int(spans.value_at[e]) : int(spans.value_at[e] + spans.value_len[e])] if e >= 0 else None
        for e in spans.wanted[:, 0].tolist()
    ]
    assert values == [b"b", b"k1", b"b", None]  # the last TAGS wins, for both askers
