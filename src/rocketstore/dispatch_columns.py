"""Dispatch information of many records at once, read in columns (replica ingest, recovery's
re-dispatch, the Spark rebuild).

``dispatch_batch`` derives what the consume queues and the index need from the bytes of many
records as one ``DispatchBatch``, with RocketMQ's rules: the properties split as
``decode_properties`` splits them (the last of a name wins, empty names and values are
skipped); tagsCode is Java's hash of TAGS (0 without), or, for a SCHEDULE_TOPIC_XXXX record
with a DELAY property, its delivery time; KEYS and UNIQ_KEY as text. One compiled pass checks
every record (``record_is_well_formed``) and reads its header, topic and wanted properties,
numbering the distinct topics and hashing the tags; Python work is per batch, per distinct
topic, per delayed record, and per record only for text that is not strict UTF-8 (read with
U+FFFD for the bad bytes, as ``decode_record`` reads it). The byte-for-byte tests of replicas
against their master's queues and index keep the rules the store's own.
"""

from __future__ import annotations

from typing import Final

import numpy as np
import numpy.typing as npt

from rocketstore.codec.commitlog_scan import Buffer, record_header, record_is_well_formed, record_layout
from rocketstore.codec.crc import crc32_function
from rocketstore.codec.java_hash import java_hash_utf8, signed32, tags_code
from rocketstore.codec.properties import last_values, same_bytes
from rocketstore.codec.text_column import TextColumn
from rocketstore.dispatch_request import DispatchBatch
from rocketstore.jit import kernel
from rocketstore.message import (
    PROPERTY_DELAY,
    PROPERTY_KEYS,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_KEY,
    SCHEDULE_TOPIC,
    schedule_tags_code,
)

__all__ = ["dispatch_batch"]

I64 = npt.NDArray[np.int64]
_WANTED: Final = (PROPERTY_TAGS, PROPERTY_KEYS, PROPERTY_UNIQ_KEY, PROPERTY_DELAY)
_TAGS, _KEYS, _UNIQ, _DELAY = range(4)
_NAMES: Final = np.frombuffer("".join(_WANTED).encode(), dtype=np.uint8)
_NAME_OFFSETS: Final = np.cumsum([0, *(len(w) for w in _WANTED)]).astype(np.int64)
# rows of the table _columns returns
_QUEUE_ID, _QUEUE_OFFSET, _SYS_FLAG, _STORE_TS, _TOTAL, _TOPIC, _TAGS_CODE = range(7)
_VALUE_AT = 7  # then the value start of each wanted name (-1: absent), then its length


@kernel(cache=True, nogil=True)
def _columns(
    u8: npt.NDArray[np.uint8],
    positions: I64,
    sizes: I64,
    names: npt.NDArray[np.uint8],
    name_offsets: I64,
    crc_fn: npt.NDArray[np.int64],
) -> tuple[I64, npt.NDArray[np.bool_], npt.NDArray[np.bool_], I64, I64, int]:
    """(a row per field (_QUEUE_ID ...), which records are well formed, which have tags that
    are not strict UTF-8 (their code is left to Python), the start and length of each distinct
    topic (its first record's), how many distinct topics)."""
    n = len(positions)
    n_wanted = len(name_offsets) - 1
    out = np.zeros((7 + 2 * n_wanted, n), dtype=np.int64)
    value_at = out[7 : 7 + n_wanted]  # views: the value spans of each wanted name
    value_len = out[7 + n_wanted :]
    valid = np.zeros(n, dtype=np.bool_)
    slow_tags = np.zeros(n, dtype=np.bool_)
    topic_at = np.empty(n, dtype=np.int64)
    topic_len = np.empty(n, dtype=np.int64)
    distinct = 0
    last = -1  # the topic of the previous record: runs of one topic are the rule
    for i in range(n):
        p = positions[i]
        if not record_is_well_formed(u8, p, sizes[i], crc_fn):
            continue
        valid[i] = True
        total, queue_id, queue_offset, sys_flag = record_header(u8, p)
        t_at, t_len, props_at, props_len, store_ts = record_layout(u8, p)
        out[0, i] = queue_id
        out[1, i] = queue_offset
        out[2, i] = sys_flag
        out[3, i] = store_ts
        out[4, i] = total
        if last >= 0 and topic_len[last] == t_len and same_bytes(u8, topic_at[last], t_at, t_len):
            topic = last
        else:
            topic = -1
            for d in range(distinct):
                if topic_len[d] == t_len and same_bytes(u8, topic_at[d], t_at, t_len):
                    topic = d
                    break
            if topic < 0:
                topic = distinct
                topic_at[distinct] = t_at
                topic_len[distinct] = t_len
                distinct += 1
        last = topic
        out[5, i] = topic
        for j in range(n_wanted):
            out[7 + j, i] = -1
        last_values(u8, props_at, props_at + props_len, names, name_offsets, value_at, value_len, i)
        tags_at = out[7, i]
        if tags_at >= 0:
            h, ok = java_hash_utf8(u8, tags_at, tags_at + out[7 + n_wanted, i], 0)
            if ok:
                out[6, i] = signed32(h)
            else:
                slow_tags[i] = True
    return out, valid, slow_tags, topic_at[:distinct].copy(), topic_len[:distinct].copy(), distinct


def _decoded(raw: bytes) -> str:
    return raw.decode("utf-8", "replace")


def dispatch_batch(
    buf: Buffer, positions: I64, sizes: I64, seg_start: int, levels: tuple[int, ...]
) -> tuple[DispatchBatch, I64]:
    """The dispatch information of the records at ``positions`` (``sizes[i]`` bytes each) of the
    segment ``buf`` at log offset ``seg_start`` (``levels``: the delay levels, for delivery
    times), and the positions of those that are not well-formed MESSAGE records (left out)."""
    u8 = np.frombuffer(buf, dtype=np.uint8)
    try:
        table, valid, slow_tags, topic_at, topic_len, distinct = _columns(
            u8,
            positions.astype(np.int64, copy=False),
            sizes.astype(np.int64, copy=False),
            _NAMES,
            _NAME_OFFSETS,
            crc32_function(),
        )
        bad = positions[~valid]
        if len(bad):
            positions, table, slow_tags = positions[valid], table[:, valid], slow_tags[valid]
        wanted = len(_WANTED)
        value_at, value_len = table[_VALUE_AT : _VALUE_AT + wanted], table[_VALUE_AT + wanted :]
        names = [_decoded(bytes(u8[a : a + n])) for a, n in zip(topic_at[:distinct], topic_len[:distinct])]
        topic_ids = table[_TOPIC]
        topics = list(dict.fromkeys(names))
        if len(topics) < len(names):  # byte strings that differ only in bad UTF-8 read the same
            topic_ids = np.array([topics.index(t) for t in names], dtype=np.int64)[topic_ids]
        tags_codes = table[_TAGS_CODE]
        for row in np.flatnonzero(slow_tags).tolist():
            a, n = int(value_at[_TAGS, row]), int(value_len[_TAGS, row])
            tags_codes[row] = tags_code(_decoded(bytes(u8[a : a + n])))
        store_ts = table[_STORE_TS]
        if SCHEDULE_TOPIC in topics:
            delayed = np.flatnonzero((topic_ids == topics.index(SCHEDULE_TOPIC)) & (value_at[_DELAY] >= 0))
            for row in delayed.tolist():
                a, n = int(value_at[_DELAY, row]), int(value_len[_DELAY, row])
                delay = _decoded(bytes(u8[a : a + n]))
                tags_codes[row] = schedule_tags_code(delay, int(store_ts[row]), levels)
        batch = DispatchBatch(
            physical_offsets=seg_start + positions,  # where the record is, whatever its header says
            sizes=table[_TOTAL],
            topics=topics,
            topic_ids=topic_ids,
            queue_ids=table[_QUEUE_ID],
            queue_offsets=table[_QUEUE_OFFSET],
            tags_codes=tags_codes,
            store_timestamps=store_ts,
            sys_flags=table[_SYS_FLAG],
            keys=TextColumn.from_spans(u8, value_at[_KEYS], value_len[_KEYS]),
            uniq_keys=TextColumn.from_spans(u8, value_at[_UNIQ], value_len[_UNIQ]),
        )
    finally:
        del u8  # an mmap cannot close while a numpy view of it lives
    return batch, bad
