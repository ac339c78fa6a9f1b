"""Commitlog records -> Arrow record batches with the data source's schema, no Python object per row.

One compiled pass reads every header field of the records (``codec.commitlog_scan.record_fields``),
another splits their properties (``codec.properties.property_spans``); strings and bodies are
gathered into Arrow's (offsets, data) layout by a third. What stays in Python is per batch,
plus one formatting per *distinct* host (hosts repeat) and per record only when a record
carries an IPv6 store host or text that is not valid UTF-8 (both rare).

The schema (``source.spark_schema``, ``arrow_schema`` here; the names are a public interface)::

    topic string, queue_id int, queue_offset long, physical_offset long, msg_id string,
    uniq_key string, keys array<string>, tags string, properties map<string,string>,
    body binary (string with bodyAs=string), body_crc int, flag int, sys_flag int,
    born_timestamp timestamp, born_host string, store_timestamp timestamp, store_host string,
    reconsume_times int, prepared_transaction_offset long

``keys`` is null when the record has no KEYS property; ``body`` is null when bodies were not
asked for.
"""

from __future__ import annotations

from functools import cache
from typing import Final, Literal

import numba
import numpy as np
import numpy.typing as npt
import pyarrow as pa

from rocketstore.codec.big_endian import read_i64
from rocketstore.codec.commitlog_record import SYSFLAG_BORNHOST_V6, SYSFLAG_STOREHOST_V6
from rocketstore.codec.commitlog_scan import Buffer, record_fields
from rocketstore.codec.host import format_host
from rocketstore.codec.message_id import encode_offset_msg_id
from rocketstore.codec.properties import property_spans

__all__ = [
    "COLUMNS",
    "HEADERS",
    "BodyAs",
    "arrow_schema",
    "empty_batch",
    "records_to_batch",
    "text_column",
    "with_headers",
]

BodyAs = Literal["binary", "string"]
I64 = npt.NDArray[np.int64]

COLUMNS: Final = (
    "topic",
    "queue_id",
    "queue_offset",
    "physical_offset",
    "msg_id",
    "uniq_key",
    "keys",
    "tags",
    "properties",
    "body",
    "body_crc",
    "flag",
    "sys_flag",
    "born_timestamp",
    "born_host",
    "store_timestamp",
    "store_host",
    "reconsume_times",
    "prepared_transaction_offset",
)
_KEYS_LIST = pa.list_(pa.field("element", pa.string()))
_PROPERTIES_MAP = pa.map_(pa.field("key", pa.string(), nullable=False), pa.field("value", pa.string()))
_TIMESTAMP = pa.timestamp("us", tz="UTC")
# Kafka's ``headers`` column (option includeHeaders): the properties as (key, binary value) pairs
HEADERS = pa.list_(
    pa.field("element", pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())]))
)
_WANTED = ("TAGS", "KEYS", "UNIQ_KEY")
_HEX_DIGITS = np.frombuffer(b"0123456789ABCDEF", dtype=np.uint8)


@cache
def arrow_schema(body_as: BodyAs = "binary") -> pa.Schema:
    """The Arrow form of the schema, exactly as PySpark expects it back from a Python source."""
    types = {
        "topic": pa.string(),
        "queue_id": pa.int32(),
        "queue_offset": pa.int64(),
        "physical_offset": pa.int64(),
        "msg_id": pa.string(),
        "uniq_key": pa.string(),
        "keys": _KEYS_LIST,
        "tags": pa.string(),
        "properties": _PROPERTIES_MAP,
        "body": pa.string() if body_as == "string" else pa.binary(),
        "body_crc": pa.int32(),
        "flag": pa.int32(),
        "sys_flag": pa.int32(),
        "born_timestamp": _TIMESTAMP,
        "born_host": pa.string(),
        "store_timestamp": _TIMESTAMP,
        "store_host": pa.string(),
        "reconsume_times": pa.int32(),
        "prepared_transaction_offset": pa.int64(),
    }
    return pa.schema([pa.field(name, types[name]) for name in COLUMNS])


def with_headers(batch: pa.RecordBatch) -> pa.RecordBatch:
    """``batch`` with a last column ``headers``: its properties map's entries as Kafka's
    ``array<struct<key:string,value:binary>>`` (the map's own buffers, no copy of the text)."""
    props = batch.column(COLUMNS.index("properties"))
    pairs = pa.StructArray.from_arrays(
        [props.keys, props.items.view(pa.binary())], fields=list(HEADERS.value_type)
    )
    headers = pa.ListArray.from_arrays(props.offsets, pairs, type=HEADERS)
    return pa.RecordBatch.from_arrays(
        [*batch.columns, headers], schema=batch.schema.append(pa.field("headers", HEADERS))
    )


def empty_batch(body_as: BodyAs = "binary") -> pa.RecordBatch:
    schema = arrow_schema(body_as)
    return pa.RecordBatch.from_arrays([pa.array([], type=f.type) for f in schema], schema=schema)


def records_to_batch(
    buf: Buffer,
    starts: I64,
    *,
    include_body: bool = True,
    body_as: BodyAs = "binary",
    queue_offsets: I64 | None = None,
) -> pa.RecordBatch:
    """The well-formed MESSAGE records at ``starts`` of segment ``buf`` as one record batch.
    ``queue_offsets`` replaces the records' own QUEUEOFFSET (a read through a consume queue
    reports the entry's offset)."""
    n = len(starts)
    if n == 0:
        return empty_batch(body_as)
    f = record_fields(buf, starts)
    u8 = np.frombuffer(buf, dtype=np.uint8)
    try:
        props = property_spans(buf, f["properties_at"], f["properties_len"], _WANTED)
        keys_at, keys_len = props.value_at, props.value_len
        topic = _strings(u8, f["topic_at"], f["topic_len"])
        names = _strings(u8, props.name_at, props.name_len)
        values = _strings(u8, props.value_at, props.value_len)
        properties = pa.MapArray.from_arrays(pa.array(props.entry_offsets.astype(np.int32)), names, values)
        tags = _pick(values, props.wanted[0])
        uniq_key = _pick(values, props.wanted[2])
        keys = _split_keys(u8, keys_at, keys_len, props.wanted[1])
        sys_flag = f["sys_flag"]
        born_host = _hosts(u8, f["born_host_at"], (sys_flag & SYSFLAG_BORNHOST_V6) != 0)
        store_v6 = (sys_flag & SYSFLAG_STOREHOST_V6) != 0
        store_host = _hosts(u8, f["store_host_at"], store_v6)
        msg_id = _msg_ids(u8, f["store_host_at"], store_v6, f["physical_offset"])
        if not include_body:
            body = pa.nulls(n, type=pa.string() if body_as == "string" else pa.binary())
        elif body_as == "string":
            body = _strings(u8, f["body_at"], f["body_len"])
        else:
            data, offsets = _gather_spans(u8, f["body_at"], f["body_len"])
            body = pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(offsets), pa.py_buffer(data)])
    finally:
        del u8
    arrays = [
        topic,
        pa.array(f["queue_id"].astype(np.int32)),
        pa.array(f["queue_offset"] if queue_offsets is None else queue_offsets.astype(np.int64)),
        pa.array(f["physical_offset"]),
        msg_id,
        uniq_key,
        keys,
        tags,
        properties,
        body,
        pa.array(f["body_crc"].astype(np.int32)),
        pa.array(f["flag"].astype(np.int32)),
        pa.array(sys_flag.astype(np.int32)),
        pa.array(f["born_timestamp"] * 1000, type=_TIMESTAMP),
        born_host,
        pa.array(f["store_timestamp"] * 1000, type=_TIMESTAMP),
        store_host,
        pa.array(f["reconsume_times"].astype(np.int32)),
        pa.array(f["prepared_transaction_offset"]),
    ]
    return pa.RecordBatch.from_arrays(arrays, schema=arrow_schema(body_as))


@numba.njit(cache=True, nogil=True)
def _gather_kernel(
    u8: npt.NDArray[np.uint8], at: I64, length: I64
) -> tuple[npt.NDArray[np.uint8], npt.NDArray[np.int32]]:
    n = len(at)
    offsets = np.empty(n + 1, dtype=np.int32)
    total = 0
    for i in range(n):
        offsets[i] = total
        total += length[i]
    offsets[n] = total
    out = np.empty(total, dtype=np.uint8)
    for i in range(n):
        out[offsets[i] : offsets[i] + length[i]] = u8[at[i] : at[i] + length[i]]
    return out, offsets


def _gather_spans(
    u8: npt.NDArray[np.uint8], at: I64, length: I64
) -> tuple[npt.NDArray[np.uint8], npt.NDArray[np.int32]]:
    if int(length.sum()) >= 2**31:
        raise ValueError(
            "an Arrow batch holds under 2 GiB of strings or bodies; read fewer records at a time"
        )
    return _gather_kernel(u8, at, length)


def _strings(u8: npt.NDArray[np.uint8], at: I64, length: I64) -> pa.Array:
    """The UTF-8 text at each span; like Java (and ``decode_record``), bytes that are not valid
    UTF-8 become U+FFFD."""
    data, offsets = _gather_spans(u8, at, length)
    arr = pa.Array.from_buffers(pa.string(), len(at), [None, pa.py_buffer(offsets), pa.py_buffer(data)])
    if not len(data) or data.max() < 0x80:
        return arr  # ASCII is valid UTF-8
    try:
        arr.validate(full=True)
    except pa.ArrowInvalid:
        raw = data.tobytes()
        arr = pa.array(
            [raw[offsets[i] : offsets[i + 1]].decode("utf-8", "replace") for i in range(len(at))],
            type=pa.string(),
        )
    return arr


def text_column(buf: Buffer, at: I64, length: I64) -> pa.Array:
    """The UTF-8 text at each span of ``buf`` as a string column (topics, for filtering)."""
    u8 = np.frombuffer(buf, dtype=np.uint8)
    try:
        return _strings(u8, at, length)
    finally:
        del u8


def _pick(values: pa.Array, entry: I64) -> pa.Array:
    """values[entry[i]], null where entry[i] is -1."""
    return values.take(pa.array(entry, mask=entry < 0))


@numba.njit(cache=True, nogil=True)
def _split_keys_kernel(
    u8: npt.NDArray[np.uint8], at: I64, length: I64, entry: I64
) -> tuple[npt.NDArray[np.int32], I64, I64]:
    """KEYS split on spaces, empty keys dropped (``MessageExt.keys``): list offsets per record and
    each key's span."""
    n = len(entry)
    cap = 0
    for i in range(n):
        if entry[i] >= 0:
            cap += length[entry[i]] // 2 + 1
    offsets = np.empty(n + 1, dtype=np.int32)
    k_at = np.empty(cap, dtype=np.int64)
    k_len = np.empty(cap, dtype=np.int64)
    k = 0
    for i in range(n):
        offsets[i] = k
        e = entry[i]
        if e < 0:
            continue
        p = at[e]
        end = p + length[e]
        while p < end:
            q = p
            while q < end and u8[q] != 32:
                q += 1
            if q > p:
                k_at[k] = p
                k_len[k] = q - p
                k += 1
            p = q + 1
    offsets[n] = k
    return offsets, k_at[:k].copy(), k_len[:k].copy()


def _split_keys(u8: npt.NDArray[np.uint8], at: I64, length: I64, entry: I64) -> pa.Array:
    offsets, k_at, k_len = _split_keys_kernel(u8, at, length, entry)
    keys = _strings(u8, k_at, k_len)
    mask = pa.array(entry < 0)
    return pa.ListArray.from_arrays(pa.array(offsets), keys, type=_KEYS_LIST, mask=mask)


@numba.njit(cache=True, nogil=True)
def _ipv4_host_keys(u8: npt.NDArray[np.uint8], at: I64) -> I64:
    """Address and port of each IPv4 host as one integer (the 8 bytes, big-endian)."""
    out = np.empty(len(at), dtype=np.int64)
    for i in range(len(at)):
        out[i] = read_i64(u8, at[i])
    return out


def _ipv4_text(key: int) -> str:
    """The host whose 8 bytes (address, port as Java's signed int) read as ``key``."""
    port = key & 0xFFFFFFFF
    return format_host((key >> 32 & 0xFFFFFFFF).to_bytes(4, "big"), port - (port >> 31 << 32))


def _repeated(text: str, n: int) -> pa.Array:
    """``text`` n times, as a string column built in one copy."""
    data = text.encode()
    offsets = np.arange(0, len(data) * (n + 1), len(data), dtype=np.int32)
    return pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(offsets), pa.py_buffer(data * n)])


def _hosts(u8: npt.NDArray[np.uint8], at: I64, v6: npt.NDArray[np.bool_]) -> pa.Array:
    """Each host in Java's text form, formatted once per distinct host."""
    if not v6.any():
        keys = _ipv4_host_keys(u8, at)
        if (keys == keys[0]).all():  # one broker, or one producer host: the usual case
            return _repeated(_ipv4_text(int(keys[0])), len(keys))
        unique, inverse = np.unique(keys, return_inverse=True)
        texts = [_ipv4_text(int(k)) for k in unique]
        return pa.array(texts, type=pa.string()).take(pa.array(inverse.ravel().astype(np.int64)))
    rows = np.zeros((len(at), 21), dtype=np.uint8)
    rows[:, 20] = v6
    for width, sel in ((8, ~v6), (20, v6)):
        idx = np.flatnonzero(sel)
        if len(idx):
            rows[idx, :width] = u8[at[idx, None] + np.arange(width)]
    unique, inverse = np.unique(rows.view(np.dtype((np.void, 21))).ravel(), return_inverse=True)
    texts = []
    for raw in unique:
        b = bytes(raw)
        addr_len = 16 if b[20] else 4
        texts.append(
            format_host(b[:addr_len], int.from_bytes(b[addr_len : addr_len + 4], "big", signed=True))
        )
    return pa.array(texts, type=pa.string()).take(pa.array(inverse.ravel().astype(np.int64)))


def _msg_ids(u8: npt.NDArray[np.uint8], store_at: I64, v6: npt.NDArray[np.bool_], physical: I64) -> pa.Array:
    """offsetMsgId: store host and physical offset in upper-case hex."""
    n = len(store_at)
    if v6.any():
        return pa.array(
            [
                encode_offset_msg_id(
                    bytes(u8[a : a + (16 if s6 else 4)]),
                    int.from_bytes(
                        bytes(u8[a + (16 if s6 else 4) : a + (20 if s6 else 8)]), "big", signed=True
                    ),
                    int(p),
                )
                for a, s6, p in zip(store_at.tolist(), v6.tolist(), physical.tolist())
            ],
            type=pa.string(),
        )
    hexed = _ipv4_msg_ids(u8, store_at, physical, _HEX_DIGITS)
    offsets = np.arange(0, 32 * n + 1, 32, dtype=np.int32)
    return pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(offsets), pa.py_buffer(hexed)])


@numba.njit(cache=True, nogil=True)
def _ipv4_msg_ids(
    u8: npt.NDArray[np.uint8], store_at: I64, physical: I64, digits: npt.NDArray[np.uint8]
) -> npt.NDArray[np.uint8]:
    """32 upper-case hex digits a record: store address and port (8 bytes), physical offset."""
    out = np.empty(32 * len(store_at), dtype=np.uint8)
    for i in range(len(store_at)):
        o = 32 * i
        for k in range(8):
            b = u8[store_at[i] + k]
            out[o + 2 * k] = digits[b >> 4]
            out[o + 2 * k + 1] = digits[b & 15]
        p = physical[i]
        for k in range(16):
            out[o + 31 - k] = digits[p & 15]
            p >>= 4
    return out
