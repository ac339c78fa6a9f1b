"""``records_to_batch`` (one compiled pass writing Arrow's buffers) against a reference built
record by record from ``decode_record``: the same schema, values and nulls, on records with
every shape the fast path has to get right and the rare ones it hands to slower code."""

from __future__ import annotations

import datetime
import itertools
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from rocketstore.codec.commitlog_record import (
    SYSFLAG_BORNHOST_V6,
    SYSFLAG_STOREHOST_V6,
    TX_COMMIT,
    TX_PREPARED,
    TX_ROLLBACK,
    decode_record,
    encode_message,
)
from rocketstore.codec.host import format_host
from rocketstore.codec.message_id import encode_offset_msg_id
from rocketstore.codec.properties import decode_properties
from rocketstore.spark.columns import COLUMNS, BodyAs, arrow_schema, records_to_batch

V4_A = (bytes([10, 0, 0, 1]), 10911)
V4_B = (bytes([192, 168, 7, 200]), 40000)
V4_C = (bytes([127, 0, 0, 1]), -5)  # Java's port is a signed int
V6 = (bytes.fromhex("fe800000000000000000000000000001"), 10911)


def _props(*entries: tuple[bytes, bytes]) -> bytes:
    return b"\x02".join(k + b"\x01" + v for k, v in entries)


# (topic, properties, body, born host, store host, tx bits)
RECORDS: list[tuple[bytes, bytes, bytes, tuple[bytes, int], tuple[bytes, int], int]] = [
    (b"Orders", b"", b"no properties at all", V4_A, V4_A, 0),
    (b"Orders", _props((b"TAGS", b"created")), b"tags, no KEYS", V4_A, V4_A, 0),
    (
        b"Orders",
        _props((b"KEYS", b"  order-1   order-2 x  "), (b"TAGS", b"paid"), (b"UNIQ_KEY", b"0A" * 16)),
        b"keys between runs of spaces, leading and trailing",
        V4_A,
        V4_A,
        0,
    ),
    (b"Orders", _props((b"KEYS", b"   ")), b"KEYS of spaces only: an empty list", V4_A, V4_A, 0),
    (
        b"Orders",
        _props(
            (b"KEYS", b"one"),
        )
        + b"\x02",
        b"a trailing separator (older writers)",
        V4_A,
        V4_A,
        0,
    ),
    (
        b"Payments",
        b"EMPTY\x01\x02\x01novalue\x02noseparator\x02TAGS\x01t\x02a\x01b",
        b"entries with an empty value, an empty name, no separator: skipped",
        V4_A,
        V4_A,
        TX_PREPARED,
    ),
    (
        b"Payments",
        _props((b"TAGS", b"first"), (b"a", b"1"), (b"TAGS", b"second"), (b"a", b"2")),
        b"a name twice: the last value, at the first place",
        V4_A,
        V4_A,
        TX_ROLLBACK,
    ),
    (b"Payments", _props((b"v", b"x\x01y")), b"a value holding 0x01", V4_A, V4_A, TX_COMMIT),
    (
        "Bestellungen-ü".encode(),
        _props(("名前".encode(), "値".encode()), (b"KEYS", "ключ ключ2".encode()), (b"TAGS", "ä".encode())),
        "non-ASCII everywhere: ü".encode(),
        V4_A,
        V4_A,
        0,
    ),
    (b"", _props((b"TAGS", b"")), b"", V4_A, V4_A, 0),  # empty topic, body; TAGS skipped (empty)
    (
        b"bad\xfftopic",
        _props((b"KEYS", b"ok \xc3 \xff\xfe"), (b"TAGS", b"t\xe2\x82"), (b"n\xff", b"v\xc3\x28")),
        b"invalid UTF-8: \xff\xfe \xc3\x28",
        V4_A,
        V4_A,
        0,
    ),
    (
        b"Payments",
        _props((b"n\xff", b"first"), (b"m", b"1"), (b"n\xfe", b"second")),
        b"names that differ only in bytes that are not UTF-8: one decoded name, the last value",
        V4_A,
        V4_A,
        0,
    ),
    (b"Hosts", _props((b"TAGS", b"b")), b"another born host", V4_B, V4_A, 0),
    (b"Hosts", _props((b"TAGS", b"c")), b"another store host", V4_A, V4_C, 0),
    (b"Hosts", _props((b"TAGS", b"v6")), b"IPv6 born host", V6, V4_A, 0),
    (b"Hosts", _props((b"UNIQ_KEY", b"u6")), b"IPv6 store host", V4_B, V6, 0),
    (b"Hosts", _props((b"KEYS", b"both")), b"IPv6 both", V6, V6, TX_PREPARED),
    (  # bigger than every buffer's first guess of its size
        b"T" * 127,
        _props(
            *((b"name-%d" % j, b"value-%d" % j * 3) for j in range(300)),
            (b"KEYS", b" ".join(b"key-%d" % j for j in range(400))),
            (b"TAGS", b"tag" * 40),
            (b"UNIQ_KEY", b"U" * 300),
        ),
        bytes(range(256)) * 20,
        V4_A,
        V4_A,
        0,
    ),
]


def _segment() -> tuple[bytes, np.ndarray]:
    seg = bytearray(b"\0" * 16)  # records need not start at 0
    starts = []
    for i, (topic, props, body, born, store, tx) in enumerate(RECORDS):
        sys_flag = tx | (SYSFLAG_BORNHOST_V6 if len(born[0]) == 16 else 0)
        sys_flag |= SYSFLAG_STOREHOST_V6 if len(store[0]) == 16 else 0
        starts.append(len(seg))
        seg += encode_message(
            body=body,
            topic=topic,
            properties=props,
            queue_id=i % 3,
            flag=-i,
            sys_flag=sys_flag,
            born_timestamp=1_700_000_000_000 + i,
            born_addr=born[0],
            born_port=born[1],
            store_addr=store[0],
            store_port=store[1],
            store_timestamp=1_700_000_000_500 - i,
            queue_offset=1000 + i,
            physical_offset=(1 << 40) + len(seg),
            reconsume_times=i,
            prepared_transaction_offset=-i if tx else 0,
        )
        seg += b"\xaa" * (i % 5)  # and need not be back to back
    return bytes(seg), np.array(starts, dtype=np.int64)


SEGMENT, STARTS = _segment()


def _ts(ms: int) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC)


def _reference(starts: np.ndarray, body_as: BodyAs, include_body: bool) -> pa.RecordBatch:
    rows: list[dict[str, Any]] = []
    for pos in starts.tolist():
        r = decode_record(SEGMENT, pos)
        props = decode_properties(r.properties)
        body = SEGMENT[r.body_start : r.body_start + r.body_len]
        rows.append(
            {
                "topic": r.topic,
                "queue_id": r.queue_id,
                "queue_offset": r.queue_offset,
                "physical_offset": r.physical_offset,
                "msg_id": encode_offset_msg_id(r.store_addr, r.store_port, r.physical_offset),
                "uniq_key": props.get("UNIQ_KEY"),
                "keys": [k for k in props["KEYS"].split(" ") if k] if "KEYS" in props else None,
                "tags": props.get("TAGS"),
                "properties": list(props.items()),
                "body": (body.decode("utf-8", "replace") if body_as == "string" else body)
                if include_body
                else None,
                "body_crc": r.body_crc,
                "flag": r.flag,
                "sys_flag": r.sys_flag,
                "born_timestamp": _ts(r.born_timestamp),
                "born_host": format_host(r.born_addr, r.born_port),
                "store_timestamp": _ts(r.store_timestamp),
                "store_host": format_host(r.store_addr, r.store_port),
                "reconsume_times": r.reconsume_times,
                "prepared_transaction_offset": r.prepared_transaction_offset,
            }
        )
    return pa.RecordBatch.from_pylist(rows, schema=arrow_schema(body_as))


# the fast path (one IPv4 host, ASCII), several hosts, non-ASCII and invalid text, IPv6 hosts
SUBSETS = {
    "ascii, one host": [0, 1, 2, 3, 4, 5, 6, 7, 9],
    "several IPv4 hosts": [0, 11, 12, 2, 11],
    "non-ASCII": [8, 0, 8],
    "invalid UTF-8": [10, 1, 8],
    "IPv6 born host": [13, 0, 2],
    "IPv6 store host": [14, 0, 12],
    "every record": list(range(len(RECORDS))),
    "one record": [15],
    "one big record": [16],
    "big records": [16, 0, 16, 8],
}


@pytest.mark.parametrize("subset", SUBSETS)
@pytest.mark.parametrize(("body_as", "include_body"), [("binary", True), ("string", True), ("binary", False)])
def test_the_batch_is_the_decoded_records(subset: str, body_as: BodyAs, include_body: bool) -> None:
    starts = STARTS[SUBSETS[subset]]
    got = records_to_batch(SEGMENT, starts, body_as=body_as, include_body=include_body)
    got.validate(full=True)
    want = _reference(starts, body_as, include_body)
    assert got.schema == want.schema == arrow_schema(body_as)
    for name in COLUMNS:
        assert got.column(name).to_pylist() == want.column(name).to_pylist(), name
    assert got.equals(want)


def test_queue_offsets_replace_the_records_own() -> None:
    qo = np.arange(len(STARTS), dtype=np.int64) * 7
    got = records_to_batch(SEGMENT, STARTS, queue_offsets=qo)
    assert got.column("queue_offset").to_pylist() == qo.tolist()


def test_every_batch_size_and_cut() -> None:
    """Batches of any length starting anywhere (the validity bitmaps' bytes and the growing
    buffers' edges)."""
    for a, b in itertools.combinations(range(len(STARTS) + 1), 2):
        starts = STARTS[a:b]
        assert records_to_batch(SEGMENT, starts).equals(_reference(starts, "binary", True)), (a, b)


def test_many_records_grow_every_buffer() -> None:
    starts = np.tile(STARTS, 700)  # 11,200 records: past every first guess of a buffer's size
    got = records_to_batch(SEGMENT, starts, body_as="string")
    got.validate(full=True)
    assert got.equals(pa.concat_batches([_reference(STARTS, "string", True)] * 700))
