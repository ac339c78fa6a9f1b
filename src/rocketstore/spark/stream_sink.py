"""Appending a streaming query's micro-batches to a store once each (``writeStream.format("rocketstore")``).

Spark's contract: after a restart it runs batch N again when N is missing from the checkpoint's
commit log, which it writes after the sink's ``commit``. So a batch the sink stored may be run
again; the sink makes that run a no-op. How:

1. Tasks append nothing. Each checks its rows (as the batch sink does) and stages them as an
   Arrow IPC file ``{store}/spark-sink/{query id}/{batch id}/part-{partition}-{attempt}.arrow``
   (written beside and renamed into place), and reports the file to the driver.
2. The driver's ``commit(batch id)`` opens the store (taking its lock) and reads the ledger
   ``{store}/config/spark-sinks.json``: ``{query id: {"batch": N, "state": "appending" | "done",
   "from": commitlog end}}``, replaced atomically (``storage.paths.atomic_write``).
   - N at or below a ``done`` batch of the query: already stored; nothing is appended.
   - N marked ``appending`` (the previous commit died during its append) and the commitlog still
     ends where that append began: nothing went in; it is appended now. If the commitlog grew,
     part of the batch may be stored: the commit fails with ``SinkLedgerError``
     rather than store rows twice or lose them; the message says where the batch began.
   - otherwise the ledger says ``appending`` from the commitlog's end, the staged files are
     appended in partition order (``writer.append_batches``), and the ledger says ``done``.
3. The staged files of the batch are removed.

The query id is Spark's (``sql.streaming.queryId``), which the checkpoint keeps across
restarts, so a new query on the same store does not skip anything, and the same query resumes.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from rocketstore.config import StoreConfig
from rocketstore.errors import RocketStoreError
from rocketstore.spark.writer import append_batches, check_rows
from rocketstore.storage.paths import StoreLayout, atomic_write
from rocketstore.store import MessageStore

__all__ = ["LEDGER", "SinkLedgerError", "StagedPart", "commit_batch", "stage_part"]

LEDGER = "spark-sinks.json"
STAGING = "spark-sink"


class SinkLedgerError(RocketStoreError):
    """A micro-batch cannot be stored exactly once: its earlier commit died while appending."""


@dataclass(frozen=True)
class StagedPart:
    path: str | None  # None: the task had no rows
    partition: int
    rows: int


def _staging(store: str, query_id: str, batch_id: int) -> Path:
    return Path(store) / STAGING / query_id / str(batch_id)


def stage_part(
    store: str,
    query_id: str,
    batch_id: int,
    partition: int,
    attempt: int,
    batches: list[pa.RecordBatch],
    config_file: str | None,
) -> StagedPart:
    """Check a task's rows and keep them for the driver's commit."""
    rows = sum(b.num_rows for b in batches)
    if not rows:
        return StagedPart(None, partition, 0)
    table = pa.Table.from_batches(batches)
    check_rows(table, StoreConfig.from_file(config_file) if config_file else StoreConfig())
    folder = _staging(store, query_id, batch_id)
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / f"part-{partition}-{attempt}.arrow"
    tmp = target.with_name(target.name + ".tmp")
    with pa.OSFile(str(tmp), "wb") as sink, pa.ipc.new_file(sink, table.schema) as out:
        out.write_table(table)
    os.replace(tmp, target)
    return StagedPart(str(target), partition, rows)


def _ledger(store: str) -> dict[str, Any]:
    path = StoreLayout(store).config / LEDGER
    return json.loads(path.read_text("utf-8")) if path.exists() else {}


def _record(store: str, query_id: str, entry: dict[str, Any]) -> None:
    ledger = _ledger(store)
    ledger[query_id] = entry
    layout = StoreLayout(store)
    layout.config.mkdir(parents=True, exist_ok=True)
    atomic_write(layout.config / LEDGER, json.dumps(ledger, sort_keys=True).encode())


def commit_batch(
    store: str,
    query_id: str,
    batch_id: int,
    parts: list[StagedPart],
    config_file: str | None,
    lock_timeout: float,
) -> int:
    """Append batch ``batch_id``'s staged rows unless the store has them; the rows appended."""
    staged = sorted((p for p in parts if p.path), key=lambda p: p.partition)
    try:
        entry: dict[str, Any] = _ledger(store).get(query_id) or {}
        if entry.get("state") == "done" and batch_id <= entry["batch"]:
            return 0
        tables = [pa.ipc.open_file(p.path).read_all() for p in staged if p.path]

        def before(opened: MessageStore) -> None:
            now = opened.max_phy_offset()
            died = entry.get("state") == "appending" and entry.get("batch") == batch_id
            if died and now != entry["from"]:
                raise SinkLedgerError(
                    f"micro-batch {batch_id} of streaming query {query_id}: an earlier commit died "
                    f"while appending it at commitlog offset {entry['from']} and the commitlog now "
                    f"ends at {now}; its rows may be partly stored. Check the records from "
                    f"{entry['from']}, then set this query's entry in {LEDGER} to done"
                )
            _record(store, query_id, {"batch": batch_id, "state": "appending", "from": now})

        batches = [b for t in tables for b in t.to_batches()]
        if batches:
            rows, _, _ = append_batches(store, batches, config_file, lock_timeout, before=before)
        else:
            rows = 0
        _record(store, query_id, {"batch": batch_id, "state": "done"})
        return rows
    finally:
        shutil.rmtree(_staging(store, query_id, batch_id), ignore_errors=True)
