"""Dispatch information of many records at once, read in columns (replica ingest, recovery's
re-dispatch, the Spark rebuild).

``dispatch_batch`` is ``dispatch_request_from_record`` of many well-formed records as one
``DispatchBatch``: one compiled pass reads the header fields (``record_fields``), another splits
the properties (``property_spans``); what stays in Python is per batch, per distinct topic and
tag, and per delayed record. The byte-for-byte tests of replicas and rebuilds against the store's
own dispatch keep the two the same.
"""

from __future__ import annotations

from typing import Final

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from rocketstore.codec.commitlog_scan import Buffer, record_fields
from rocketstore.codec.java_hash import tags_code
from rocketstore.codec.properties import PropertySpans, property_spans
from rocketstore.codec.text_column import TextColumn
from rocketstore.dispatch_request import DispatchBatch
from rocketstore.message import PROPERTY_DELAY, SCHEDULE_TOPIC, schedule_tags_code
from rocketstore.spark.columns import text_column

__all__ = ["dispatch_batch"]

I64 = npt.NDArray[np.int64]
_WANTED_PROPERTIES: Final = ("TAGS", "KEYS", "UNIQ_KEY", PROPERTY_DELAY)


def dispatch_batch(buf: Buffer, positions: I64, seg_start: int, levels: tuple[int, ...]) -> DispatchBatch:
    """The dispatch information of the well-formed MESSAGE records at ``positions`` of the
    segment ``buf`` (at log offset ``seg_start``): tagsCode hashed once per distinct tag (a
    SCHEDULE_TOPIC_XXXX record with a delay level gets its delivery time from ``levels``), KEYS
    and UNIQ_KEY as text columns; text that is not UTF-8 is read with U+FFFD for the bad bytes,
    as ``decode_record`` reads it."""
    f = record_fields(buf, positions)
    props = property_spans(buf, f["properties_at"], f["properties_len"], _WANTED_PROPERTIES)
    topic_codes = text_column(buf, f["topic_at"], f["topic_len"]).dictionary_encode()
    topics: list[str] = topic_codes.dictionary.to_pylist()
    topic_ids = _indices(topic_codes)
    ts = f["store_timestamp"]
    tag_entry, key_entry, uniq_entry, delay_entry = props.wanted
    tag_codes = np.zeros(len(positions), dtype=np.int64)
    tagged = np.flatnonzero(tag_entry >= 0)
    if len(tagged):
        tags = text_column(buf, props.value_at[tag_entry[tagged]], props.value_len[tag_entry[tagged]])
        distinct = tags.dictionary_encode()
        codes = np.array([tags_code(t) for t in distinct.dictionary.to_pylist()], dtype=np.int64)
        tag_codes[tagged] = codes[_indices(distinct)]
    if SCHEDULE_TOPIC in topics:
        delayed = np.flatnonzero((topic_ids == topics.index(SCHEDULE_TOPIC)) & (delay_entry >= 0))
        if len(delayed):
            entries = delay_entry[delayed]
            delays = text_column(buf, props.value_at[entries], props.value_len[entries]).to_pylist()
            for row, delay, stamp in zip(delayed.tolist(), delays, ts[delayed].tolist()):
                tag_codes[row] = schedule_tags_code(delay, stamp, levels)
    return DispatchBatch(
        physical_offsets=seg_start + positions,  # where the record is, whatever its header says
        sizes=f["total_size"],
        topics=topics,
        topic_ids=topic_ids,
        queue_ids=f["queue_id"],
        queue_offsets=f["queue_offset"],
        tags_codes=tag_codes,
        store_timestamps=ts,
        sys_flags=f["sys_flag"],
        keys=_texts(buf, props, key_entry),
        uniq_keys=_texts(buf, props, uniq_entry),
    )


def _indices(encoded: pa.DictionaryArray) -> I64:
    """The indices of a dictionary-encoded column without nulls (read from its buffer:
    ``to_numpy`` would import pandas, a second's start-up in a replica's dispatcher)."""
    indices = encoded.indices
    raw = np.frombuffer(indices.buffers()[1], dtype=indices.type.to_pandas_dtype())
    return raw[indices.offset : indices.offset + len(indices)].astype(np.int64)


def _texts(buf: Buffer, props: PropertySpans, entry: I64) -> TextColumn:
    """The value of property entry ``entry[i]`` of each record as a text column (absent: -1)."""
    present = entry >= 0
    at = np.where(present, props.value_at[np.maximum(entry, 0)], 0) if len(props.value_at) else entry * 0
    length = (
        np.where(present, props.value_len[np.maximum(entry, 0)], 0) if len(props.value_len) else entry * 0
    )
    text = text_column(buf, at, length)
    _, offsets, data = text.buffers()
    starts = np.frombuffer(offsets, dtype=np.int32)[text.offset : text.offset + len(text) + 1].astype(
        np.int64
    )
    base = int(starts[0])
    return TextColumn(data.to_pybytes()[base : int(starts[-1])] if data is not None else b"", starts - base)
