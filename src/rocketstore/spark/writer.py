"""Appending Arrow batches (a Spark task's rows) to a store.

A task first reads and checks all of its rows, so a bad row or a failing upstream stage writes
nothing; then it opens the store, which takes the store's lock (the tasks of one job take turns;
each waits up to ``lock_timeout`` seconds for the others), appends, and closes the store, which
flushes and dispatches what it wrote. Records are appended whole: a task that fails while
appending (disk full, I/O error) leaves whole records, never a torn one, and says how many
rows went in.

Rows with no properties and no delay (born times and queue ids given for all rows or none) go
through ``MessageStore.put_batch``, one topic at a time, with no Message object per row; others
are turned into Messages for ``put_messages``. Both store the same records.

Columns: ``topic`` and ``body`` (binary or string) are required; ``keys`` (array of strings,
or one string of space-separated keys), ``tags``, ``properties`` (map of strings),
``queue_id`` (null: the store picks), ``delay_level`` and ``born_timestamp`` are optional.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, NoReturn

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from rocketstore.codec.properties import validate_property
from rocketstore.config import StoreConfig
from rocketstore.errors import RocketStoreError, StoreLockedError
from rocketstore.geometry import detect_geometry
from rocketstore.limits import MAX_QUEUE_ID
from rocketstore.message import RESERVED_PROPERTIES, Message, split_keys
from rocketstore.prepare import validate_topic
from rocketstore.storage.paths import StoreLayout, looks_like_store
from rocketstore.store import MessageStore
from rocketstore.store_lock import StoreLock

__all__ = ["WRITABLE_COLUMNS", "append_batches", "check_rows", "check_writable", "messages_from_table"]

REQUIRED = ("topic", "body")
WRITABLE_COLUMNS = (*REQUIRED, "keys", "tags", "properties", "queue_id", "delay_level", "born_timestamp")
_CHUNK = 8192  # messages per put_messages call


def check_writable(path: str, columns: Sequence[str]) -> list[str]:
    """Refuse, before any task runs, a frame the sink cannot write or a store another process
    holds. Returns the columns that will be written."""
    missing = [c for c in REQUIRED if c not in columns]
    if missing:
        raise ValueError(
            f"the rocketstore sink needs columns {', '.join(missing)} (it got {', '.join(columns)})"
        )
    unknown = [c for c in columns if c not in WRITABLE_COLUMNS]
    if unknown:
        raise ValueError(
            f"the rocketstore sink does not know columns {', '.join(unknown)}; "
            f"it writes {', '.join(WRITABLE_COLUMNS)}"
        )
    layout = StoreLayout(path)
    if layout.lock.exists():
        probe = StoreLock(layout.lock)
        probe.acquire()  # raises StoreLockedError naming the process that holds the store
        probe.release()
    return list(columns)


def messages_from_table(table: pa.Table, config: StoreConfig) -> list[Message]:
    """One Message per row, checked by ``check_rows`` first. Raises ValueError naming the
    first bad row."""
    check_rows(table, config)
    n = table.num_rows
    none = [None] * n
    props = table.column("properties").to_pylist() if "properties" in table.column_names else none
    bodies = _bodies(table)
    keys = [_keys(v) for v in table.column("keys").to_pylist()] if "keys" in table.column_names else none
    born = (
        [_millis(v) for v in table.column("born_timestamp").to_pylist()]
        if "born_timestamp" in table.column_names
        else none
    )

    def column(name: str) -> list[Any]:
        return table.column(name).to_pylist() if name in table.column_names else none

    delays = [d or 0 for d in column("delay_level")]
    return [
        Message(t, b, tg, k or (), dict(p) if p else None, q, 0, d, None, bt)
        for t, b, tg, k, p, q, d, bt in zip(
            table.column("topic").to_pylist(),
            bodies,
            column("tags"),
            keys,
            props,
            column("queue_id"),
            delays,
            born,
        )
    ]


def check_rows(table: pa.Table, config: StoreConfig) -> None:
    """Check every row the way the store checks a put (topic, body size, queue id, delay level,
    property names), so a bad row stops the task before it writes anything. The checks run per
    column. Raises ValueError naming the first bad row."""
    n = table.num_rows
    for name in REQUIRED:
        nulls = table.column(name).is_null()
        if pc.any(nulls).as_py():
            _fail(_first(nulls), f"{name} is null")
    topics = table.column("topic")
    for topic in pc.unique(topics).to_pylist():
        try:
            validate_topic(topic)
        except ValueError as exc:
            _fail(_first(pc.equal(topics, topic)), str(exc))
    body = table.column("body")
    sizes = pc.binary_length(body)
    too_big = pc.greater(sizes, config.max_message_size)
    if pc.any(too_big).as_py():
        row = _first(too_big)
        _fail(row, f"body of {sizes[row].as_py()} bytes exceeds max_message_size {config.max_message_size}")
    _check_range(table, "queue_id", 0, MAX_QUEUE_ID)
    _check_range(table, "delay_level", 0, config.max_delay_level)
    none = [None] * n
    props = table.column("properties").to_pylist() if "properties" in table.column_names else none
    for row, entries in enumerate(props):
        for name, value in entries or ():
            try:
                validate_property(name, value)
            except ValueError as exc:
                _fail(row, str(exc))
            if name in RESERVED_PROPERTIES:
                _fail(row, f"property {name!r} is set by the store; use the column instead")
    if "keys" in table.column_names:
        for row, value in enumerate(table.column("keys").to_pylist()):
            for key in value if isinstance(value, list) else ():
                if key and (" " in key or "\x01" in key or "\x02" in key):
                    _fail(row, f"key {key!r}: keys in an array hold no spaces, \\x01 or \\x02")
            if isinstance(value, str) and ("\x01" in value or "\x02" in value):
                _fail(row, f"keys {value!r} hold \\x01 or \\x02")


def _bodies(table: pa.Table) -> list[bytes]:
    return [v.encode("utf-8") if isinstance(v, str) else v for v in table.column("body").to_pylist()]


def _columnar(table: pa.Table) -> bool:
    """Whether every row can go through ``MessageStore.put_batch``: no properties, no delay, and
    born times and queue ids given for every row or for none."""
    names = table.column_names
    if "properties" in names and pc.any(pc.greater(_entry_counts(table.column("properties")), 0)).as_py():
        return False
    if "delay_level" in names and pc.any(pc.greater(table.column("delay_level"), 0)).as_py():
        return False
    for name in ("born_timestamp", "queue_id"):
        if name in names and 0 < table.column(name).null_count < table.num_rows:
            return False
    return True


def _entry_counts(column: pa.ChunkedArray) -> pa.ChunkedArray:
    """Entries per row (null for a null row) of a properties column: a map, as Spark sends it, or
    a list of key/value structs. Arrow has no length kernel for maps, so a map is first read as
    the list of key/value structs it is stored as (no copy)."""
    if pa.types.is_map(column.type):
        map_type = column.type
        column = column.cast(pa.list_(pa.struct([map_type.key_field, map_type.item_field])))
    return pc.list_value_length(column)


def _first(mask: pa.ChunkedArray) -> int:
    return int(pc.index(mask, True).as_py())


def _fail(row: int, problem: str) -> NoReturn:
    raise ValueError(f"row {row}: {problem}")


def _check_range(table: pa.Table, name: str, low: int, high: int) -> None:
    if name not in table.column_names:
        return
    col = table.column(name)
    outside = pc.or_kleene(pc.less(col, low), pc.greater(col, high))
    if pc.any(outside).as_py():
        row = _first(pc.fill_null(outside, False))
        _fail(row, f"{name} {col[row].as_py()} is outside {low}..{high}")


def _keys(value: str | list[str] | None) -> list[str] | None:
    if value is None:
        return None
    if isinstance(value, str):
        return split_keys(value)
    return [k for k in value if k]


def _millis(value: dt.datetime | int | None) -> int | None:
    if value is None or isinstance(value, int):
        return value
    if value.tzinfo is None:
        value = value.astimezone()  # PySpark hands timestamps over as local time (rocketstore.times)
    return round(value.timestamp() * 1000)


def _open(path: str, base: StoreConfig, lock_timeout: float) -> MessageStore:
    """Open the store once this task's turn comes. An existing store's geometry is read while
    holding the lock: a store another task is writing cannot be measured reliably."""
    lock = StoreLock(StoreLayout(path).lock)
    deadline = time.monotonic() + lock_timeout
    while True:
        try:
            config = base
            if looks_like_store(Path(path)):
                lock.acquire()
                try:
                    config = detect_geometry(path, base)
                finally:
                    lock.release()
            return MessageStore.open(path, config)
        except StoreLockedError:
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.05)


def append_batches(
    path: str,
    batches: Iterable[pa.RecordBatch],
    config_file: str | None,
    lock_timeout: float,
    before: Callable[[MessageStore], None] | None = None,
) -> tuple[int, int, int]:
    """Append every row; (rows, first physical offset, end physical offset). ``before`` is
    called with the opened store (its lock held) before anything is appended."""
    batches = list(batches)
    if not batches:
        return 0, -1, -1
    # rows are checked against the configured limits; the store's own geometry is read later
    base = StoreConfig.from_file(config_file) if config_file else StoreConfig()
    table = pa.Table.from_batches(batches)
    del batches
    if _columnar(table):
        check_rows(table, base)
        put = _column_putter(table)
    else:
        put = _message_putter(messages_from_table(table, base))
    topics = table.column("topic")
    # one topic per put lets the store encode the whole batch in one compiled pass; each
    # topic's rows (and so each queue's) keep the order they came in
    runs = [
        (topic, np.flatnonzero(pc.equal(topics, topic).to_numpy(zero_copy_only=False)).tolist())
        for topic in pc.unique(topics).to_pylist()
    ]
    del table, topics
    written = 0
    first = end = -1
    store = _open(path, base, lock_timeout)
    try:
        if before is not None:
            before(store)
        for topic, run in runs:
            for k in range(0, len(run), _CHUNK):
                rows = run[k : k + _CHUNK]
                start, stop, failed = put(store, topic, rows)
                if failed is not None:
                    at, status = failed
                    raise RocketStoreError(
                        f"row {rows[at]} was not appended to {path}: {status} "
                        f"({written + at} rows of this task were appended before it)"
                    )
                if first < 0:
                    first = start
                end = stop
                written += len(rows)
    finally:
        store.close()
    return written, first, end


# Appends the given rows of one topic: (first physical offset, end physical offset, and for a
# put that was refused, the place of the first row not appended among them and the status).
_Putter = Callable[[MessageStore, str, list[int]], tuple[int, int, tuple[int, str] | None]]


def _message_putter(messages: list[Message]) -> _Putter:
    def put(store: MessageStore, topic: str, rows: list[int]) -> tuple[int, int, tuple[int, str] | None]:
        results = store.put_messages([messages[i] for i in rows])
        failed = next((j for j, r in enumerate(results) if not r.ok), None)
        if failed is not None:
            return -1, -1, (failed, results[failed].status.name)
        return results[0].physical_offset, results[-1].physical_offset + results[-1].wrote_bytes, None

    return put


def _column_putter(table: pa.Table) -> _Putter:
    """Rows through ``put_batch``, with no Message object per row."""
    names = table.column_names
    bodies = _bodies(table)
    none: list[Any] = [None] * table.num_rows
    tags = table.column("tags").to_pylist() if "tags" in names else none
    keys = [_keys_text(v) for v in table.column("keys").to_pylist()] if "keys" in names else none
    queue_ids = _int_column(table, "queue_id")
    born = (
        np.array([_millis(v) for v in table.column("born_timestamp").to_pylist()], dtype=np.int64)
        if "born_timestamp" in names and table.column("born_timestamp").null_count == 0
        else None
    )

    def put(store: MessageStore, topic: str, rows: list[int]) -> tuple[int, int, tuple[int, str] | None]:
        r = store.put_batch(
            topic,
            [bodies[i] for i in rows],
            queue_ids=queue_ids[rows] if queue_ids is not None else None,
            tags=[tags[i] for i in rows],
            keys=[keys[i] for i in rows],
            born_timestamp=born[rows] if born is not None else None,
        )
        if not r.ok:
            return -1, -1, (0, r.status.name)  # a batch is stored whole or not at all
        return int(r.physical_offsets[0]), int(r.physical_offsets[-1] + r.sizes[-1]), None

    return put


def _int_column(table: pa.Table, name: str) -> npt.NDArray[np.int64] | None:
    if name not in table.column_names or table.column(name).null_count:
        return None
    return np.asarray(table.column(name).to_numpy(zero_copy_only=False), dtype=np.int64)


def _keys_text(value: str | list[str] | None) -> str | None:
    """A row's keys as the KEYS property holds them (``_keys``, joined by spaces)."""
    keys = _keys(value)
    return " ".join(keys) if keys else None
