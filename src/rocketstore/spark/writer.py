"""Appending Arrow batches (a Spark task's rows) to a store.

A task first reads and checks all of its rows, so a bad row or a failing upstream stage writes
nothing; then it opens the store, which takes the store's lock (the tasks of one job take turns;
each waits up to ``lock_timeout`` seconds for the others), appends, and closes the store, which
flushes and dispatches what it wrote. Records are appended whole: a task that fails while
appending (disk full, I/O error) leaves whole records, never a torn one, and says how many
rows went in.

Columns: ``topic`` and ``body`` (binary or string) are required; ``keys`` (array of strings,
or one string of space-separated keys), ``tags``, ``properties`` (map of strings),
``queue_id`` (null: the store picks), ``delay_level`` and ``born_timestamp`` are optional.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa

from rocketstore.codec.properties import validate_property
from rocketstore.config import StoreConfig
from rocketstore.errors import RocketStoreError, StoreLockedError
from rocketstore.geometry import detect_geometry, looks_like_store
from rocketstore.message import RESERVED_PROPERTIES, Message
from rocketstore.prepare import MAX_QUEUE_ID, validate_topic
from rocketstore.storage.paths import StoreLayout
from rocketstore.store import MessageStore
from rocketstore.store_lock import StoreLock

__all__ = ["WRITABLE_COLUMNS", "append_batches", "check_writable", "messages_from_table"]

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
    """One Message per row, checked the way the store checks a put (topic, body size, queue id,
    property names), so a bad row stops the task before it writes anything. Raises ValueError
    naming the row."""
    cols: dict[str, list[Any]] = {name: table.column(name).to_pylist() for name in table.column_names}
    n = table.num_rows
    none = [None] * n
    topics, bodies = cols["topic"], cols["body"]
    keys, tags, props = cols.get("keys", none), cols.get("tags", none), cols.get("properties", none)
    queue_ids, delays, born = (
        cols.get("queue_id", none),
        cols.get("delay_level", none),
        cols.get("born_timestamp", none),
    )
    checked_topics: set[str] = set()
    out = []
    for i in range(n):
        try:
            topic = _required(topics[i], "topic")
            if topic not in checked_topics:
                checked_topics.add(validate_topic(topic))
            body = _body(_required(bodies[i], "body"))
            if len(body) > config.max_message_size:
                raise ValueError(
                    f"body of {len(body)} bytes exceeds max_message_size {config.max_message_size}"
                )
            qid = queue_ids[i]
            if qid is not None and not 0 <= qid <= MAX_QUEUE_ID:
                raise ValueError(f"queue_id {qid} is outside 0..{MAX_QUEUE_ID}")
            delay = delays[i] or 0
            if not 0 <= delay <= config.max_delay_level:
                raise ValueError(f"delay_level {delay} is outside 0..{config.max_delay_level}")
            properties = dict(props[i]) if props[i] else None
            for name, value in (properties or {}).items():
                validate_property(name, value)
                if name in RESERVED_PROPERTIES:
                    raise ValueError(f"property {name!r} is set by the store; use the column instead")
            out.append(
                Message(
                    topic=topic,
                    body=body,
                    tags=tags[i],
                    keys=_keys(keys[i]),
                    properties=properties,
                    queue_id=qid,
                    delay_level=delay,
                    born_timestamp=_millis(born[i]),
                )
            )
        except (TypeError, ValueError) as exc:
            raise ValueError(f"row {i}: {exc}") from None
    return out


def _required(value: Any, name: str) -> Any:
    if value is None:
        raise ValueError(f"{name} is null")
    return value


def _body(value: bytes | str) -> bytes:
    return value.encode("utf-8") if isinstance(value, str) else bytes(value)


def _keys(value: str | list[str] | None) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        return tuple(k for k in value.split(" ") if k)
    return tuple(k for k in value if k)


def _millis(value: dt.datetime | int | None) -> int | None:
    if value is None or isinstance(value, int):
        return value
    if value.tzinfo is None:
        value = value.replace(tzinfo=dt.timezone.utc)
    return round(value.timestamp() * 1000)


def _config(path: str, config_file: str | None) -> StoreConfig:
    base = StoreConfig.from_file(config_file) if config_file else StoreConfig()
    return detect_geometry(path, base) if looks_like_store(Path(path)) else base


def _open(path: str, config_file: str | None, lock_timeout: float) -> MessageStore:
    """Open the store once this task's turn comes. The geometry is read while holding the lock:
    a store another task is writing cannot be measured reliably."""
    lock = StoreLock(StoreLayout(path).lock)
    deadline = time.monotonic() + lock_timeout
    while True:
        try:
            if Path(path).is_dir():
                lock.acquire()
                try:
                    config = _config(path, config_file)
                finally:
                    lock.release()
            else:
                config = _config(path, config_file)
            return MessageStore.open(path, config)
        except StoreLockedError:
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.05)


def append_batches(
    path: str, batches: Iterable[pa.RecordBatch], config_file: str | None, lock_timeout: float
) -> tuple[int, int, int]:
    """Append every row; (rows, first physical offset, end physical offset)."""
    batches = list(batches)
    if not batches:
        return 0, -1, -1
    # rows are checked against the configured limits; the store's own geometry is read later
    messages = messages_from_table(
        pa.Table.from_batches(batches), StoreConfig.from_file(config_file) if config_file else StoreConfig()
    )
    del batches
    written = 0
    first = end = -1
    store = _open(path, config_file, lock_timeout)
    try:
        for k in range(0, len(messages), _CHUNK):
            results = store.put_messages(messages[k : k + _CHUNK])
            for i, result in enumerate(results):
                if not result.ok:
                    raise RocketStoreError(
                        f"row {k + i} was not appended to {path}: {result.status.name} "
                        f"({written} rows of this task were appended before it)"
                    )
                if first < 0:
                    first = result.physical_offset
                end = result.physical_offset + result.wrote_bytes
                written += 1
    finally:
        store.close()
    return written, first, end
