"""The compiled checks of ``pointers.PointerCheck``: what the records named by consume-queue
entries hold, and the keys dispatch indexes for each record of a segment. They read the records
through ``codec.commitlog_scan``'s field readers (``record_header``, ``record_layout``) and the
properties through ``codec.properties.property_span``; only records that ``scan_extent``
validated reach them, so every length they read is within bounds. Java's hash runs over the
UTF-8 bytes (``codec.java_hash``); a value that is not strict UTF-8 is left to Python.
"""

from __future__ import annotations

from typing import Final

import numpy as np
import numpy.typing as npt

from rocketstore.codec.commitlog_record import SYSFLAG_TX_MASK, TX_ROLLBACK
from rocketstore.codec.commitlog_scan import record_header, record_layout
from rocketstore.codec.java_hash import index_hash_of, java_hash_utf8, signed32
from rocketstore.codec.properties import property_span
from rocketstore.jit import kernel
from rocketstore.message import PROPERTY_KEYS, PROPERTY_TAGS, PROPERTY_UNIQ_KEY
from rocketstore.verify.refs import I64

# Verdicts of queue_verdicts, one per consume-queue entry: the first thing that does not match.
Q_OK: Final = 0
Q_SIZE: Final = 1
Q_TOPIC: Final = 2
Q_QUEUE_ID: Final = 3
Q_QUEUE_OFFSET: Final = 4
Q_TAGS: Final = 5
Q_DELIVERY: Final = 6
Q_DECODE: Final = 7  # tags that are not strict UTF-8: hashed in Python

_MASK32: Final = 0xFFFFFFFF
_HASH_SEPARATOR: Final = ord("#")  # index keys are hashed as "topic#key"
_TAGS_NAME: Final = np.frombuffer(PROPERTY_TAGS.encode(), dtype=np.uint8)
_KEYS_NAME: Final = np.frombuffer(PROPERTY_KEYS.encode(), dtype=np.uint8)
_UNIQ_NAME: Final = np.frombuffer(PROPERTY_UNIQ_KEY.encode(), dtype=np.uint8)


@kernel(cache=True, nogil=True)
def queue_verdicts(
    u8: npt.NDArray[np.uint8],
    pos: I64,
    size: I64,
    tags: I64,
    qo: I64,
    queue: I64,
    topic_bytes: npt.NDArray[np.uint8],
    topic_offsets: I64,
    queue_ids: I64,
    schedule: npt.NDArray[np.bool_],
) -> npt.NDArray[np.int8]:
    """A verdict (Q_*) per consume-queue entry naming the record at ``pos[i]``."""
    out = np.zeros(len(pos), dtype=np.int8)
    for i in range(len(pos)):
        p = pos[i]
        total_size, queue_id, queue_offset, _ = record_header(u8, p)
        if total_size != size[i]:
            out[i] = Q_SIZE
            continue
        topic_at, topic_len, props_at, props_len, store_ts = record_layout(u8, p)
        q = queue[i]
        a, b = topic_offsets[q], topic_offsets[q + 1]
        same = topic_len == b - a
        j = 0
        while same and j < topic_len:
            same = u8[topic_at + j] == topic_bytes[a + j]
            j += 1
        if not same:
            out[i] = Q_TOPIC
            continue
        if queue_id != queue_ids[q]:
            out[i] = Q_QUEUE_ID
            continue
        if queue_offset != qo[i]:
            out[i] = Q_QUEUE_OFFSET
            continue
        code = 0
        vs, ve = property_span(u8, props_at, props_at + props_len, _TAGS_NAME)
        if vs >= 0:
            h, ok = java_hash_utf8(u8, vs, ve, 0)
            if not ok:
                out[i] = Q_DECODE
                continue
            code = signed32(h)
        if schedule[q]:
            if not (tags[i] > store_ts or tags[i] == code):
                out[i] = Q_DELIVERY
        elif tags[i] != code:
            out[i] = Q_TAGS
    return out


@kernel(cache=True, nogil=True)
def _grow(a: I64, k: int) -> I64:
    if k < len(a):
        return a
    b = np.empty(2 * len(a), dtype=np.int64)
    b[:k] = a[:k]
    return b


@kernel(cache=True, nogil=True)
def record_key_hashes(
    u8: npt.NDArray[np.uint8], pos: I64
) -> tuple[I64, I64, npt.NDArray[np.bool_], npt.NDArray[np.bool_]]:
    """The keys dispatch indexes for each record at ``pos`` (UNIQ_KEY, each KEYS word), as
    (record number, keyHash) pairs; which records hold keys that are not strict UTF-8 (their
    pairs are left out: Python hashes them); which are ROLLBACK records (RocketMQ does not index
    them, rocketstore does)."""
    n = len(pos)
    rec = np.empty(2 * n + 16, dtype=np.int64)
    out = np.empty(2 * n + 16, dtype=np.int64)
    slow = np.zeros(n, dtype=np.bool_)
    rollback = np.zeros(n, dtype=np.bool_)
    k = 0
    for i in range(n):
        p = pos[i]
        rollback[i] = record_header(u8, p)[3] & SYSFLAG_TX_MASK == TX_ROLLBACK
        first = k
        topic_at, topic_len, props_at, props_len, _ = record_layout(u8, p)
        props_end = props_at + props_len
        prefix, ok = java_hash_utf8(u8, topic_at, topic_at + topic_len, 0)
        prefix = (prefix * 31 + _HASH_SEPARATOR) & _MASK32
        vs, ve = property_span(u8, props_at, props_end, _UNIQ_NAME)
        if vs >= 0 and ok:
            h, ok = java_hash_utf8(u8, vs, ve, prefix)
            rec, out = _grow(rec, k), _grow(out, k)
            rec[k], out[k] = i, index_hash_of(h)
            k += 1
        ks, ke = property_span(u8, props_at, props_end, _KEYS_NAME)
        j = ks
        while ok and 0 <= j < ke:
            t = j
            while t < ke and u8[t] != 0x20:
                t += 1
            if t > j:
                h, ok = java_hash_utf8(u8, j, t, prefix)
                rec, out = _grow(rec, k), _grow(out, k)
                rec[k], out[k] = i, index_hash_of(h)
                k += 1
            j = t + 1
        if not ok:
            slow[i] = True
            k = first
    return rec[:k].copy(), out[:k].copy(), slow, rollback
