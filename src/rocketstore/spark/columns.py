"""Commitlog records -> Arrow record batches with the data source's schema, no Python object per row.

One compiled pass over a batch's records (``_build``) writes Arrow's buffers directly: each
record's header fields (``codec.commitlog_scan.read_record_fields``) go to their columns in
their final types (int32, int64, timestamps in microseconds), its properties are split
(``codec.properties.split_properties``), and its topic, property names and values, TAGS,
UNIQ_KEY, keys (KEYS split on spaces), body and offsetMsgId are copied or written to the end of
their columns while the record is in the CPU's caches. Python then wraps the buffers
(``pa.Array.from_buffers``, no copy). What stays in Python is per batch, plus one formatting
per *distinct* IPv4 host (hosts repeat), and per record only when a batch holds an IPv6 host
or text that is not valid UTF-8 (both rare: those columns are then built by slower code).

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
from typing import Any, Final, Literal, NamedTuple

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from rocketstore.codec.big_endian import read_i64
from rocketstore.codec.byte_copy import copy_bytes
from rocketstore.codec.commitlog_record import SYSFLAG_BORNHOST_V6, SYSFLAG_STOREHOST_V6
from rocketstore.codec.commitlog_scan import Buffer, read_record_fields, record_fields
from rocketstore.codec.host import format_host
from rocketstore.codec.message_id import encode_offset_msg_id
from rocketstore.codec.properties import split_properties
from rocketstore.jit import kernel

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
# the properties with a column of their own, in the order of _Layout.wanted and .nulls
_WANTED_NAMES = np.frombuffer(b"TAGSKEYSUNIQ_KEY", dtype=np.uint8)
_WANTED_OFFSETS = np.array([0, 4, 8, 16], dtype=np.int64)
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
    starts = starts.astype(np.int64, copy=False)
    u8 = np.frombuffer(buf, dtype=np.uint8)
    try:
        out = _Built(*_build(u8, starts, _WANTED_NAMES, _WANTED_OFFSETS, include_body, _HEX_DIGITS))
        if out.too_big:
            raise ValueError(_TOO_BIG)
        born_v6, store_v6 = bool(out.v6[0].any()), bool(out.v6[1].any())
        if born_v6 or store_v6:  # rare: formatted from each record's bytes
            f = record_fields(buf, starts)
            born_host = _hosts(u8, f["born_host_at"], out.v6[0]) if born_v6 else _ipv4_hosts(out.host_keys[0])
            store_host = (
                _hosts(u8, f["store_host_at"], out.v6[1]) if store_v6 else _ipv4_hosts(out.host_keys[1])
            )
            msg_id = (
                _msg_ids(u8, f["store_host_at"], out.v6[1], f["physical_offset"])
                if store_v6
                else _fixed_text(out.msg_ids, 32)
            )
        else:
            born_host = _ipv4_hosts(out.host_keys[0])
            store_host = _ipv4_hosts(out.host_keys[1])
            msg_id = _fixed_text(out.msg_ids, 32)
    finally:
        del u8
    i32, i64, nulls = out.i32, out.i64, out.nulls.tolist()
    names, replaced = _text_replaced(out.name_offsets, out.names)
    if replaced:  # rare: names that differ only in bytes that are not UTF-8 decode alike
        properties = _decoded_properties(out.entry_offsets, names, _text(out.value_offsets, out.values))
    else:
        entries = pa.StructArray.from_arrays(
            [names, _text(out.value_offsets, out.values)],
            fields=[_PROPERTIES_MAP.key_field, _PROPERTIES_MAP.item_field],
        )
        properties = pa.Array.from_buffers(
            _PROPERTIES_MAP, n, [None, pa.py_buffer(out.entry_offsets)], null_count=0, children=[entries]
        )
    keys = pa.Array.from_buffers(
        _KEYS_LIST,
        n,
        [pa.py_buffer(out.keys_valid) if nulls[1] else None, pa.py_buffer(out.keys_list)],
        null_count=nulls[1],
        children=[_text(out.key_offsets, out.keys)],
    )
    body_type = pa.string() if body_as == "string" else pa.binary()
    if not include_body:
        body = pa.nulls(n, type=body_type)
    elif body_as == "string":
        body = _text(out.body_offsets, out.bodies)
    else:
        body = pa.Array.from_buffers(
            body_type, n, [None, pa.py_buffer(out.body_offsets), pa.py_buffer(out.bodies)], null_count=0
        )
    arrays = [
        _text(out.topic_offsets, out.topics),
        _fixed(pa.int32(), i32[0]),
        _fixed(pa.int64(), i64[0] if queue_offsets is None else queue_offsets.astype(np.int64)),
        _fixed(pa.int64(), i64[1]),
        msg_id,
        _text(out.uniq_offsets, out.uniq, out.uniq_valid, nulls[2]),
        keys,
        _text(out.tag_offsets, out.tags, out.tags_valid, nulls[0]),
        properties,
        body,
        _fixed(pa.int32(), i32[1]),
        _fixed(pa.int32(), i32[2]),
        _fixed(pa.int32(), i32[3]),
        _fixed(_TIMESTAMP, i64[2]),
        born_host,
        _fixed(_TIMESTAMP, i64[3]),
        store_host,
        _fixed(pa.int32(), i32[4]),
        _fixed(pa.int64(), i64[4]),
    ]
    return pa.RecordBatch.from_arrays(arrays, schema=arrow_schema(body_as))


class _Built(NamedTuple):
    """A batch's columns as Arrow buffers (``_build``); ``*_valid`` are validity bitmaps."""

    too_big: bool  # a column would hold 2 GiB or more: nothing else is filled in
    i32: npt.NDArray[np.int32]  # queue_id, body_crc, flag, sys_flag, reconsume_times
    i64: I64  # queue_offset, physical_offset, born and store timestamps (us), prepared offset
    host_keys: I64  # born and store host: the 8 bytes of an IPv4 host as one integer
    v6: npt.NDArray[np.bool_]  # born and store host are IPv6
    nulls: I64  # records without TAGS, KEYS, UNIQ_KEY
    topics: npt.NDArray[np.uint8]
    topic_offsets: npt.NDArray[np.int32]
    entry_offsets: npt.NDArray[np.int32]  # each record's first property
    names: npt.NDArray[np.uint8]
    name_offsets: npt.NDArray[np.int32]
    values: npt.NDArray[np.uint8]
    value_offsets: npt.NDArray[np.int32]
    tags: npt.NDArray[np.uint8]
    tag_offsets: npt.NDArray[np.int32]
    tags_valid: npt.NDArray[np.uint8]
    uniq: npt.NDArray[np.uint8]
    uniq_offsets: npt.NDArray[np.int32]
    uniq_valid: npt.NDArray[np.uint8]
    keys_list: npt.NDArray[np.int32]  # each record's first key
    keys_valid: npt.NDArray[np.uint8]
    keys: npt.NDArray[np.uint8]
    key_offsets: npt.NDArray[np.int32]
    bodies: npt.NDArray[np.uint8]
    body_offsets: npt.NDArray[np.int32]
    msg_ids: npt.NDArray[np.uint8]  # 32 hex digits a record (IPv4 store hosts)


_LIMIT: Final = 2**31  # Arrow's string and binary offsets are int32
_TOO_BIG: Final = "an Arrow batch holds under 2 GiB of strings or bodies; read fewer records at a time"


@kernel(cache=True, nogil=True)
def _grown(a: npt.NDArray[Any], used: int, need: int) -> npt.NDArray[Any]:
    """A copy of the first ``used`` items of ``a`` with room for ``need`` (at least twice the
    size: growing costs a copy of each item about once)."""
    out = np.empty(max(need, 2 * len(a)), dtype=a.dtype)
    out[:used] = a[:used]
    return out


@kernel(cache=True, nogil=True, inline="always")
def _append(
    data: npt.NDArray[np.uint8], used: int, u8: npt.NDArray[np.uint8], at: int, n: int
) -> tuple[npt.NDArray[np.uint8], int]:
    """``u8[at:at + n]`` after the ``used`` bytes of ``data``, grown first when it lacks room:
    the buffer (the same or its grown copy) and how much of it is used now."""
    if used + n > len(data):
        data = _grown(data, used, used + n)
    return data, copy_bytes(data, used, u8, at, n)


@kernel(cache=True, nogil=True, inline="always")
def _next_key(u8: npt.NDArray[np.uint8], p: int, end: int) -> tuple[int, int]:
    """The next key of a KEYS value from ``p`` (keys are split on spaces, ``MessageExt.keys``):
    (its start, its end), equal when only spaces are left."""
    while p < end and u8[p] == 32:
        p += 1
    q = p
    while q < end and u8[q] != 32:
        q += 1
    return p, q


@kernel(cache=True, nogil=True, inline="always")
def _put_msg_id(
    out: npt.NDArray[np.uint8],
    o: int,
    u8: npt.NDArray[np.uint8],
    store_at: int,
    physical: int,
    digits: npt.NDArray[np.uint8],
) -> None:
    """The offsetMsgId of a record with an IPv4 store host: 32 upper-case hex digits of the
    store address and port (8 bytes) and the physical offset."""
    for k in range(8):
        b = u8[store_at + k]
        out[o + 2 * k] = digits[b >> 4]
        out[o + 2 * k + 1] = digits[b & 15]
    for k in range(16):
        out[o + 31 - k] = digits[physical & 15]
        physical >>= 4


@kernel(cache=True, nogil=True)
def _build(
    u8: npt.NDArray[np.uint8],
    starts: I64,
    wanted_names: npt.NDArray[np.uint8],
    wanted_offsets: I64,
    with_body: bool,
    digits: npt.NDArray[np.uint8],
) -> _Built:
    """Every column of the records at ``starts`` in one pass over them: each record's header
    fields (``codec.commitlog_scan.read_record_fields``) go to their columns in their final
    types, its properties are split (``codec.properties.split_properties``) and its strings and
    body copied to the end of their columns' data while the record is in the CPU's caches. The
    data buffers grow as they fill (their sizes are not known before the pass)."""
    n = len(starts)
    i32 = np.empty((5, n), dtype=np.int32)
    i64 = np.empty((5, n), dtype=np.int64)
    host_keys = np.zeros((2, n), dtype=np.int64)
    v6 = np.zeros((2, n), dtype=np.bool_)
    nulls = np.zeros(3, dtype=np.int64)
    found = np.empty((len(wanted_offsets) - 1, 1), dtype=np.int64)  # the wanted names' entries
    topic_offsets = np.empty(n + 1, dtype=np.int32)
    entry_offsets = np.empty(n + 1, dtype=np.int32)
    tag_offsets = np.empty(n + 1, dtype=np.int32)
    uniq_offsets = np.empty(n + 1, dtype=np.int32)
    keys_list = np.empty(n + 1, dtype=np.int32)
    body_offsets = np.zeros(n + 1, dtype=np.int32)
    tags_valid = np.zeros((n + 7) // 8, dtype=np.uint8)
    uniq_valid = np.zeros((n + 7) // 8, dtype=np.uint8)
    keys_valid = np.zeros((n + 7) // 8, dtype=np.uint8)
    msg_ids = np.empty(32 * n, dtype=np.uint8)
    k_at = np.empty(64, dtype=np.int64)  # where one record's property names and values lie
    k_len = np.empty(64, dtype=np.int64)
    v_at = np.empty(64, dtype=np.int64)
    v_len = np.empty(64, dtype=np.int64)
    name_offsets = np.empty(4 * n + 1, dtype=np.int32)
    value_offsets = np.empty(4 * n + 1, dtype=np.int32)
    key_offsets = np.empty(2 * n + 1, dtype=np.int32)
    topics = np.empty(16 * n, dtype=np.uint8)
    names = np.empty(32 * n, dtype=np.uint8)
    values = np.empty(64 * n, dtype=np.uint8)
    tags = np.empty(8 * n, dtype=np.uint8)
    uniq = np.empty(32 * n, dtype=np.uint8)
    keys = np.empty(16 * n, dtype=np.uint8)
    bodies = np.empty(128 * n if with_body else 0, dtype=np.uint8)
    # bytes used of each data buffer; entries and keys so far
    t_o = n_o = v_o = g_o = u_o = k_o = b_o = 0
    e = nk = 0
    too_big = False
    for i in range(n):
        (
            _,
            body_crc,
            queue_id,
            flag,
            queue_offset,
            physical_offset,
            sys_flag,
            born_ts,
            born_at,
            store_ts,
            store_at,
            reconsume,
            prepared,
            body_at,
            body_len,
            topic_at,
            topic_len,
            props_at,
            props_len,
        ) = read_record_fields(u8, starts[i])
        i32[0, i] = queue_id
        i32[1, i] = body_crc
        i32[2, i] = flag
        i32[3, i] = sys_flag
        i32[4, i] = reconsume
        i64[0, i] = queue_offset
        i64[1, i] = physical_offset
        i64[2, i] = born_ts * 1000
        i64[3, i] = store_ts * 1000
        i64[4, i] = prepared
        if sys_flag & SYSFLAG_BORNHOST_V6:
            v6[0, i] = True
        else:
            host_keys[0, i] = read_i64(u8, born_at)
        if sys_flag & SYSFLAG_STOREHOST_V6:
            v6[1, i] = True  # its msg id is made in Python
        else:
            host_keys[1, i] = read_i64(u8, store_at)
            _put_msg_id(msg_ids, 32 * i, u8, store_at, physical_offset, digits)
        topic_offsets[i] = t_o
        topics, t_o = _append(topics, t_o, u8, topic_at, topic_len)
        if with_body:
            body_offsets[i] = b_o
            bodies, b_o = _append(bodies, b_o, u8, body_at, body_len)
        room = props_len // 3 + 1  # split_properties' bound
        if room > len(k_at):  # the spans of one record's entries: the scratch starts afresh
            k_at = np.empty(2 * room, dtype=np.int64)
            k_len = np.empty(2 * room, dtype=np.int64)
            v_at = np.empty(2 * room, dtype=np.int64)
            v_len = np.empty(2 * room, dtype=np.int64)
        if e + room + 1 > len(name_offsets):
            name_offsets = _grown(name_offsets, e, e + room + 1)
            value_offsets = _grown(value_offsets, e, e + room + 1)
        if n_o + props_len > len(names):
            names = _grown(names, n_o, n_o + props_len)
        if v_o + props_len > len(values):
            values = _grown(values, v_o, v_o + props_len)
        entry_offsets[i] = e
        found[:, 0] = -1
        count = split_properties(
            u8,
            props_at,
            props_at + props_len,
            k_at,
            k_len,
            v_at,
            v_len,
            0,
            wanted_names,
            wanted_offsets,
            found,
            0,
        )
        for q in range(count):
            name_offsets[e] = n_o
            n_o = copy_bytes(names, n_o, u8, k_at[q], k_len[q])
            value_offsets[e] = v_o
            v_o = copy_bytes(values, v_o, u8, v_at[q], v_len[q])
            e += 1
        bit = np.uint8(1 << (i & 7))
        tag_offsets[i] = g_o
        w = found[0, 0]
        if w < 0:
            nulls[0] += 1
        else:
            tags_valid[i >> 3] |= bit
            tags, g_o = _append(tags, g_o, u8, v_at[w], v_len[w])
        keys_list[i] = nk
        w = found[1, 0]
        if w < 0:
            nulls[1] += 1
        else:
            keys_valid[i >> 3] |= bit
            if k_o + v_len[w] > len(keys):
                keys = _grown(keys, k_o, k_o + v_len[w])
            if nk + v_len[w] // 2 + 2 > len(key_offsets):
                key_offsets = _grown(key_offsets, nk, nk + v_len[w] // 2 + 2)
            p = v_at[w]
            end = p + v_len[w]
            while p < end:
                p, q = _next_key(u8, p, end)
                if q > p:
                    key_offsets[nk] = k_o
                    k_o = copy_bytes(keys, k_o, u8, p, q - p)
                    nk += 1
                p = q
        uniq_offsets[i] = u_o
        w = found[2, 0]
        if w < 0:
            nulls[2] += 1
        else:
            uniq_valid[i >> 3] |= bit
            uniq, u_o = _append(uniq, u_o, u8, v_at[w], v_len[w])
        if max(t_o, n_o, v_o, g_o, u_o, k_o, b_o) >= _LIMIT:  # past by one record at most
            too_big = True
            break
    topic_offsets[n] = t_o
    entry_offsets[n] = e
    name_offsets[e] = n_o
    value_offsets[e] = v_o
    tag_offsets[n] = g_o
    uniq_offsets[n] = u_o
    keys_list[n] = nk
    key_offsets[nk] = k_o
    body_offsets[n] = b_o
    return _Built(
        too_big,
        i32,
        i64,
        host_keys,
        v6,
        nulls,
        topics[:t_o],
        topic_offsets,
        entry_offsets,
        names[:n_o],
        name_offsets[: e + 1],
        values[:v_o],
        value_offsets[: e + 1],
        tags[:g_o],
        tag_offsets,
        tags_valid,
        uniq[:u_o],
        uniq_offsets,
        uniq_valid,
        keys_list,
        keys_valid,
        keys[:k_o],
        key_offsets[: nk + 1],
        bodies[:b_o],
        body_offsets,
        msg_ids,
    )


@kernel(cache=True, nogil=True)
def _gather(
    u8: npt.NDArray[np.uint8], at: I64, length: I64, total: int
) -> tuple[npt.NDArray[np.uint8], npt.NDArray[np.int32]]:
    """The spans back to back (``total`` bytes), and their offsets."""
    data = np.empty(total, dtype=np.uint8)
    offsets = np.empty(len(at) + 1, dtype=np.int32)
    o = 0
    for i in range(len(at)):
        offsets[i] = o
        o = copy_bytes(data, o, u8, at[i], length[i])
    offsets[len(at)] = o
    return data, offsets


def _fixed(type_: pa.DataType, values: npt.NDArray[Any]) -> pa.Array:
    """A fixed-width column on ``values``' memory (already in the type's width)."""
    return pa.Array.from_buffers(type_, len(values), [None, pa.py_buffer(values)], null_count=0)


def _fixed_text(data: npt.NDArray[np.uint8], width: int) -> pa.Array:
    """Texts of ``width`` bytes each, back to back in ``data``."""
    n = len(data) // width
    offsets = np.arange(0, width * n + 1, width, dtype=np.int32)
    return pa.Array.from_buffers(
        pa.string(), n, [None, pa.py_buffer(offsets), pa.py_buffer(data)], null_count=0
    )


def _text(
    offsets: npt.NDArray[np.int32],
    data: npt.NDArray[np.uint8],
    valid: npt.NDArray[np.uint8] | None = None,
    nulls: int = 0,
) -> pa.Array:
    """The string column of Arrow's buffers (``valid``: the validity bitmap when ``nulls`` > 0);
    like Java (and ``decode_record``), bytes that are not valid UTF-8 become U+FFFD."""
    return _text_replaced(offsets, data, valid, nulls)[0]


def _text_replaced(
    offsets: npt.NDArray[np.int32],
    data: npt.NDArray[np.uint8],
    valid: npt.NDArray[np.uint8] | None = None,
    nulls: int = 0,
) -> tuple[pa.Array, bool]:
    """``_text``, and whether some bytes were not UTF-8 (and became U+FFFD)."""
    n = len(offsets) - 1
    bitmap = pa.py_buffer(valid) if nulls and valid is not None else None
    arr = pa.Array.from_buffers(
        pa.string(), n, [bitmap, pa.py_buffer(offsets), pa.py_buffer(data)], null_count=int(nulls)
    )
    if not len(data) or data.max() < 0x80:
        return arr, False  # ASCII is valid UTF-8
    try:
        arr.validate(full=True)
    except pa.ArrowInvalid:
        raw = data.tobytes()
        bounds = offsets.tolist()
        texts = [raw[bounds[i] : bounds[i + 1]].decode("utf-8", "replace") for i in range(n)]
        mask = None if bitmap is None else arr.is_null()
        return pa.array(texts, type=pa.string(), mask=mask), True
    return arr, False


def _decoded_properties(entry_offsets: npt.NDArray[np.int32], names: pa.Array, values: pa.Array) -> pa.Array:
    """The properties map with each record's entries merged by decoded name, as
    ``decode_properties`` reads the decoded text: a name's first place, its last value."""
    bounds = entry_offsets.tolist()
    name_list, value_list = names.to_pylist(), values.to_pylist()
    merged = [
        dict(zip(name_list[bounds[i] : bounds[i + 1]], value_list[bounds[i] : bounds[i + 1]]))
        for i in range(len(bounds) - 1)
    ]
    return pa.array([list(m.items()) for m in merged], type=_PROPERTIES_MAP)


def text_column(buf: Buffer, at: I64, length: I64) -> pa.Array:
    """The UTF-8 text at each span of ``buf`` as a string column (topics, for filtering)."""
    total = int(length.sum())
    if total >= _LIMIT:
        raise ValueError(_TOO_BIG)
    u8 = np.frombuffer(buf, dtype=np.uint8)
    try:
        data, offsets = _gather(u8, at, length, total)
    finally:
        del u8
    return _text(offsets, data)


def _ipv4_text(key: int) -> str:
    """The host whose 8 bytes (address, port as Java's signed int) read as ``key``."""
    port = key & 0xFFFFFFFF
    return format_host((key >> 32 & 0xFFFFFFFF).to_bytes(4, "big"), port - (port >> 31 << 32))


def _repeated(text: str, n: int) -> pa.Array:
    """``text`` n times, as a string column built in one copy."""
    data = text.encode()
    offsets = np.arange(0, len(data) * (n + 1), len(data), dtype=np.int32)
    return pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(offsets), pa.py_buffer(data * n)])


def _ipv4_hosts(keys: I64) -> pa.Array:
    """Each IPv4 host (its 8 bytes as one integer) in Java's text form, formatted once per
    distinct host."""
    if (keys == keys[0]).all():  # one broker, or one producer host: the usual case
        return _repeated(_ipv4_text(int(keys[0])), len(keys))
    unique, inverse = np.unique(keys, return_inverse=True)
    texts = [_ipv4_text(int(k)) for k in unique]
    return pa.array(texts, type=pa.string()).take(pa.array(inverse.ravel().astype(np.int64)))


def _hosts(u8: npt.NDArray[np.uint8], at: I64, v6: npt.NDArray[np.bool_]) -> pa.Array:
    """Each host, IPv4 or IPv6, in Java's text form, formatted once per distinct host."""
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
    """offsetMsgId (store host and physical offset in upper-case hex) of records some of which
    have an IPv6 store host."""
    return pa.array(
        [
            encode_offset_msg_id(
                bytes(u8[a : a + (16 if s6 else 4)]),
                int.from_bytes(bytes(u8[a + (16 if s6 else 4) : a + (20 if s6 else 8)]), "big", signed=True),
                int(p),
            )
            for a, s6, p in zip(store_at.tolist(), v6.tolist(), physical.tolist())
        ],
        type=pa.string(),
    )
