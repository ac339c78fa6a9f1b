"""rocketstore against other embeddable stores, on one workload, in one run.

Workload, the same for every system: N messages with a fixed body (100 B and 1 KiB by default)
spread round-robin over 8 queues (message i goes to queue i % 8 at offset i // 8); write them
all, then read every queue back from offset 0, 32 messages per request, touching each body
(``len``). Everything a writer needs (Message objects, keys, rows) is built before the clock
starts. Every read-back is checked: count and total body bytes must match what was written.

Systems and configurations:

* rocketstore ASYNC_FLUSH, keys off / on: ``put_messages`` in batches of 256 from one thread.
  "keys on" gives each message ``keys=[f"key-{i}"]`` and turns ``generate_uniq_key`` on (KEYS
  and UNIQ_KEY indexed). The write time includes ``wait_dispatched()`` (consume queues and
  index caught up).
* rocketstore ASYNC_FLUSH and SYNC_FLUSH with ``put_batch`` (the columnar batch put: a list of
  bodies, queue ids as a numpy array, tags and keys as columns), batches of 256, the same
  messages byte for byte as the ``put_messages`` rows.
* rocketstore SYNC_FLUSH, keys off / on: 16 producer threads each calling ``put_message``; a
  put returns once its message is on disk, so the flush is a group commit across producers.
  Also SYNC_FLUSH with ``put_messages`` batches of 256 from one thread, the shape the batched
  peers below are measured in.
* SQLite (stdlib ``sqlite3``), WAL, synchronous NORMAL / FULL: table (queue_id, queue_offset,
  body) with PRIMARY KEY (queue_id, queue_offset), one transaction of 256 rows per
  ``executemany``; read: ``SELECT ... WHERE queue_id = ? AND queue_offset >= ? LIMIT 32``.
* LMDB (``lmdb``), sync on / off, writemap off, metasync on: key ``struct.pack(">IQ", queue,
  offset)``, one write transaction per 256-message ``putmulti``; read: one read transaction
  per page, ``set_range`` then 32 items.
* Redis Streams (``redis`` client + a ``redis-server`` binary): the script starts its own
  server on 127.0.0.1 on a free port with ``--save '' --appendonly yes --appendfsync
  everysec|always`` in a temp dir, one stream per queue, XADD pipelined 256 per round trip,
  read back with ``XRANGE ... COUNT 32`` pages; the server is stopped at the end. Note the
  server runs in its own process, i.e. on the second core.
* persist-queue (``persist-queue``): one ``SQLiteQueue`` per queue, one ``put`` per message
  (each put is its own committed, fsynced SQLite transaction; batching is not offered) and
  ``get`` one at a time, ``task_done`` per queue. Its file-based ``Queue`` measured no faster
  here (it rewrites and renames its info file on every put) and fsyncs only at chunk ends,
  so the SQLite flavour is the honest pick.

Rows whose durability unit is a single message (rocketstore SYNC_FLUSH with producer
threads, persist-queue) run ``--sync-messages`` messages instead of ``--messages``; N is
printed per row. The ratio column is write msgs/s over rocketstore ASYNC_FLUSH keys off at
the same body size. MB/s counts body bytes only.

A peer whose Python module or binary is missing is skipped with a line saying what to
install; nothing is installed from here. The table is printed and written to
``<out>/compare.md``; with matplotlib, also a bar chart ``<out>/compare.png``.

    python benchmarks/compare.py [--messages N] [--sync-messages N] [--sizes 100,1024]
                                 [--out DIR] [--only name,...] [--dir TMPDIR]

``--only`` takes system names (rocketstore, sqlite, lmdb, redis, persist-queue) or case names
(see ``--list``).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import importlib
import itertools
import os
import platform
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from rocketstore import FlushDiskType, Message, MessageStore, StoreConfig
from rocketstore import __version__ as rocketstore_version

QUEUES = 8
BATCH = 256
PAGE = 32
SYNC_THREADS = 16
TOPIC = "CompareTopic"
DEFAULT_OUT = Path(__file__).resolve().parent / "results"


@dataclass(frozen=True)
class Measured:
    write_s: float
    read_s: float
    read_count: int
    read_bytes: int


Runner = Callable[[Path, int, bytes], Measured]


@dataclass(frozen=True)
class Case:
    name: str  # for --only
    family: str  # the peer it needs; also accepted by --only
    system: str
    config: str
    durability: str
    per_message: bool  # durability unit is one message: runs --sync-messages
    run: Runner


@dataclass(frozen=True)
class Row:
    case: Case
    body_size: int
    n: int
    measured: Measured

    @property
    def write_rate(self) -> float:
        return self.n / self.measured.write_s

    @property
    def write_mbs(self) -> float:
        return self.n * self.body_size / self.measured.write_s / 1e6

    @property
    def read_rate(self) -> float:
        return self.measured.read_count / self.measured.read_s


def body_of(size: int) -> bytes:
    return bytes(i % 251 for i in range(size))


def optional_module(name: str) -> Any:
    """The module, or None when it is not installed (typed Any: peers are optional)."""
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


# --- rocketstore ---------------------------------------------------------------------------------


def rocketstore_messages(n: int, body: bytes, keys: bool) -> list[Message]:
    if keys:
        return [
            Message(topic=TOPIC, body=body, tags="TagA", keys=[f"key-{i}"], queue_id=i % QUEUES)
            for i in range(n)
        ]
    return [Message(topic=TOPIC, body=body, tags="TagA", queue_id=i % QUEUES) for i in range(n)]


def rocketstore_read(store: MessageStore) -> tuple[int, int]:
    count = nbytes = 0
    for qid in range(QUEUES):
        offset = 0
        while True:
            r = store.get_message("compare", TOPIC, qid, offset, PAGE)
            if not r.messages:
                break
            for m in r.messages:
                nbytes += len(m.body)
            count += len(r.messages)
            offset = r.next_begin_offset
    return count, nbytes


def put_threaded(store: MessageStore, msgs: list[Message], threads: int) -> None:
    errors: list[str] = []

    def producer(part: list[Message]) -> None:
        put = store.put_message
        for m in part:
            r = put(m)
            if not r.ok:
                errors.append(str(r.status))
                return

    workers = [threading.Thread(target=producer, args=(msgs[t::threads],)) for t in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    if errors:
        raise RuntimeError(f"put failed: {errors[0]} ({len(errors)} producer(s))")


def put_batched(store: MessageStore, msgs: list[Message]) -> None:
    put_many = store.put_messages
    for i in range(0, len(msgs), BATCH):
        for r in put_many(msgs[i : i + BATCH]):
            if not r.ok:
                raise RuntimeError(f"put failed: {r.status}")


def put_columns(store: MessageStore, n: int, body: bytes, keys: bool) -> Callable[[], None]:
    """``put_batch`` in batches of BATCH; the columns are built here, before the clock starts."""
    bodies = [body] * n
    queue_ids = np.arange(n, dtype=np.int64) % QUEUES
    key_texts: list[str | None] | None = [f"key-{i}" for i in range(n)] if keys else None

    def put() -> None:
        for i in range(0, n, BATCH):
            r = store.put_batch(
                TOPIC,
                bodies[i : i + BATCH],
                queue_ids=queue_ids[i : i + BATCH],
                tags="TagA",
                keys=key_texts[i : i + BATCH] if key_texts is not None else None,
            )
            if not r.ok:
                raise RuntimeError(f"put failed: {r.status}")

    return put


def warm_up(root: Path) -> None:
    """Load the compiled kernels (numba's on-disk cache) before any clock starts: the first
    call of each costs a few hundred milliseconds once per process, which is no part of a put."""
    for keys in (False, True):
        with MessageStore.open(root / str(keys), StoreConfig(generate_uniq_key=keys)) as store:
            store.put_messages(rocketstore_messages(BATCH, b"warm", keys))
            put_columns(store, BATCH, b"warm", keys)()
            store.put_message(Message(topic=TOPIC, body=b"warm", keys=["k"] if keys else ()))
            store.wait_dispatched()
            rocketstore_read(store)
    shutil.rmtree(root, ignore_errors=True)


def rocketstore_runner(flush: FlushDiskType, keys: bool, threads: int, columns: bool = False) -> Runner:
    """threads == 0: batches of BATCH from this thread (``put_batch`` with ``columns``, else
    ``put_messages``); otherwise that many put_message producers."""

    def run(root: Path, n: int, body: bytes) -> Measured:
        cfg = StoreConfig(flush_disk_type=flush, generate_uniq_key=keys, commitlog_segment_size=256 << 20)
        msgs = rocketstore_messages(n, body, keys) if not columns else []
        with MessageStore.open(root, cfg) as store:
            put = put_columns(store, n, body, keys) if columns else None
            start = time.perf_counter()
            if put is not None:
                put()
            elif threads:
                put_threaded(store, msgs, threads)
            else:
                put_batched(store, msgs)
            if not store.wait_dispatched(timeout=600):
                raise RuntimeError(f"dispatch did not catch up: {store.failure}")
            write_s = time.perf_counter() - start
            del msgs
            start = time.perf_counter()
            count, nbytes = rocketstore_read(store)
            read_s = time.perf_counter() - start
        return Measured(write_s, read_s, count, nbytes)

    return run


# --- SQLite --------------------------------------------------------------------------------------

SQLITE_CREATE = (
    "CREATE TABLE msg (queue_id INTEGER NOT NULL, queue_offset INTEGER NOT NULL, body BLOB NOT NULL, "
    "PRIMARY KEY (queue_id, queue_offset))"
)
SQLITE_INSERT = "INSERT INTO msg (queue_id, queue_offset, body) VALUES (?, ?, ?)"
SQLITE_SELECT = (
    "SELECT queue_offset, body FROM msg WHERE queue_id = ? AND queue_offset >= ? "
    "ORDER BY queue_offset LIMIT ?"
)


def sqlite_runner(synchronous: str) -> Runner:
    def run(root: Path, n: int, body: bytes) -> Measured:
        import sqlite3

        root.mkdir(parents=True)
        rows = [(i % QUEUES, i // QUEUES, body) for i in range(n)]
        conn = sqlite3.connect(root / "bench.db", isolation_level=None)
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute(f"PRAGMA synchronous={synchronous}")
            conn.execute(SQLITE_CREATE)
            start = time.perf_counter()
            for i in range(0, n, BATCH):
                conn.execute("BEGIN")
                conn.executemany(SQLITE_INSERT, rows[i : i + BATCH])
                conn.execute("COMMIT")
            write_s = time.perf_counter() - start
            del rows
            count = nbytes = 0
            start = time.perf_counter()
            for qid in range(QUEUES):
                offset = 0
                while True:
                    page = conn.execute(SQLITE_SELECT, (qid, offset, PAGE)).fetchall()
                    if not page:
                        break
                    for _, b in page:
                        nbytes += len(b)
                    count += len(page)
                    offset = page[-1][0] + 1
            read_s = time.perf_counter() - start
        finally:
            conn.close()
        return Measured(write_s, read_s, count, nbytes)

    return run


# --- LMDB ----------------------------------------------------------------------------------------

LMDB_KEY = struct.Struct(">IQ")


def lmdb_runner(sync: bool) -> Runner:
    def run(root: Path, n: int, body: bytes) -> Measured:
        lmdb = optional_module("lmdb")
        items = [(LMDB_KEY.pack(i % QUEUES, i // QUEUES), body) for i in range(n)]
        env = lmdb.open(str(root), map_size=64 << 30, sync=sync, metasync=True, writemap=False, max_dbs=0)
        try:
            start = time.perf_counter()
            for i in range(0, n, BATCH):
                with env.begin(write=True) as txn:
                    txn.cursor().putmulti(items[i : i + BATCH])
            write_s = time.perf_counter() - start
            del items
            count = nbytes = 0
            start = time.perf_counter()
            for qid in range(QUEUES):
                prefix = struct.pack(">I", qid)
                offset = 0
                while True:
                    got = 0
                    with env.begin() as txn:
                        cursor = txn.cursor()
                        if cursor.set_range(LMDB_KEY.pack(qid, offset)):
                            for key, value in itertools.islice(cursor, PAGE):
                                if key[:4] != prefix:
                                    break
                                nbytes += len(value)
                                got += 1
                    if not got:
                        break
                    count += got
                    offset += got
            read_s = time.perf_counter() - start
        finally:
            env.close()
        return Measured(write_s, read_s, count, nbytes)

    return run


# --- Redis Streams -------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@contextlib.contextmanager
def redis_server(root: Path, appendfsync: str) -> Iterator[Any]:
    """A private redis-server on 127.0.0.1 with its AOF in ``root``; yields a client."""
    redis = optional_module("redis")
    binary = shutil.which("redis-server")
    if binary is None:
        raise RuntimeError("redis-server not found")
    root.mkdir(parents=True)
    port = free_port()
    log = root / "redis.log"
    cmd = [
        binary,
        "--bind", "127.0.0.1",
        "--port", str(port),
        "--dir", str(root),
        "--save", "",
        "--appendonly", "yes",
        "--appendfsync", appendfsync,
        "--logfile", str(log),
    ]  # fmt: skip
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    client = redis.Redis(host="127.0.0.1", port=port)
    try:
        deadline = time.monotonic() + 15
        while True:
            try:
                client.ping()
                break
            except redis.ConnectionError:
                if proc.poll() is not None:
                    err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
                    tail = log.read_text(errors="replace")[-500:] if log.exists() else ""
                    raise RuntimeError(f"redis-server exited with {proc.returncode}: {err}{tail}") from None
                if time.monotonic() > deadline:
                    raise RuntimeError("redis-server did not answer within 15 s") from None
                time.sleep(0.05)
        yield client
    finally:
        client.close()
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stderr is not None:
            proc.stderr.close()


def redis_runner(appendfsync: str) -> Runner:
    def run(root: Path, n: int, body: bytes) -> Measured:
        streams = [f"q{qid}" for qid in range(QUEUES)]
        fields = {b"b": body}
        with redis_server(root, appendfsync) as client:
            start = time.perf_counter()
            for i in range(0, n, BATCH):
                pipe = client.pipeline(transaction=False)
                for j in range(i, min(i + BATCH, n)):
                    pipe.xadd(streams[j % QUEUES], fields)
                pipe.execute()
            write_s = time.perf_counter() - start
            count = nbytes = 0
            start = time.perf_counter()
            for stream in streams:
                low: bytes = b"-"
                while True:
                    page = client.xrange(stream, low, b"+", count=PAGE)
                    if not page:
                        break
                    for _, entry in page:
                        nbytes += len(entry[b"b"])
                    count += len(page)
                    low = b"(" + page[-1][0]
            read_s = time.perf_counter() - start
        return Measured(write_s, read_s, count, nbytes)

    return run


# --- persist-queue -------------------------------------------------------------------------------


def persist_queue_run(root: Path, n: int, body: bytes) -> Measured:
    persistqueue = optional_module("persistqueue")
    queues = [persistqueue.SQLiteQueue(str(root / f"q{qid}"), auto_commit=False) for qid in range(QUEUES)]
    try:
        start = time.perf_counter()
        for i in range(n):
            queues[i % QUEUES].put(body)
        write_s = time.perf_counter() - start
        count = nbytes = 0
        start = time.perf_counter()
        for q in queues:
            while True:
                try:
                    item = q.get(block=False)
                except persistqueue.Empty:
                    break
                nbytes += len(item)
                count += 1
            q.task_done()
        read_s = time.perf_counter() - start
    finally:
        for q in queues:
            q.close()
    return Measured(write_s, read_s, count, nbytes)


# --- the cases -----------------------------------------------------------------------------------


def cases() -> list[Case]:
    a, s = FlushDiskType.ASYNC_FLUSH, FlushDiskType.SYNC_FLUSH
    keys = "KEYS+UNIQ_KEY"
    rs = "rocketstore"
    batch = f"put_messages x{BATCH}"
    columns = f"put_batch x{BATCH}"
    threads = f"{SYNC_THREADS} threads x put_message"
    page_cache = "page cache before ack (process-crash safe); fsync every 500 ms"
    group = "fsync before ack, group commit across producers"
    per_txn = f"fsync per {BATCH}-msg transaction"
    return [
        Case("rocketstore-async", rs, rs, f"ASYNC_FLUSH, keys off, {batch}", page_cache, False,
             rocketstore_runner(a, False, 0)),
        Case("rocketstore-async-keys", rs, rs, f"ASYNC_FLUSH, {keys}, {batch}", page_cache, False,
             rocketstore_runner(a, True, 0)),
        Case("rocketstore-async-columns", rs, rs, f"ASYNC_FLUSH, keys off, {columns}", page_cache, False,
             rocketstore_runner(a, False, 0, columns=True)),
        Case("rocketstore-async-keys-columns", rs, rs, f"ASYNC_FLUSH, {keys}, {columns}", page_cache, False,
             rocketstore_runner(a, True, 0, columns=True)),
        Case("rocketstore-sync", rs, rs, f"SYNC_FLUSH, keys off, {threads}", group, True,
             rocketstore_runner(s, False, SYNC_THREADS)),
        Case("rocketstore-sync-keys", rs, rs, f"SYNC_FLUSH, {keys}, {threads}", group, True,
             rocketstore_runner(s, True, SYNC_THREADS)),
        Case("rocketstore-sync-batch", rs, rs, f"SYNC_FLUSH, keys off, {batch}",
             f"fsync before ack, per {BATCH}-msg batch", False, rocketstore_runner(s, False, 0)),
        Case("rocketstore-sync-columns", rs, rs, f"SYNC_FLUSH, keys off, {columns}",
             f"fsync before ack, per {BATCH}-msg batch", False,
             rocketstore_runner(s, False, 0, columns=True)),
        Case("sqlite-normal", "sqlite", "SQLite", f"WAL, synchronous=NORMAL, {BATCH} rows/txn",
             "page cache at commit (process-crash safe); fsync at WAL checkpoints", False,
             sqlite_runner("NORMAL")),
        Case("sqlite-full", "sqlite", "SQLite", f"WAL, synchronous=FULL, {BATCH} rows/txn", per_txn, False,
             sqlite_runner("FULL")),
        Case("lmdb-nosync", "lmdb", "LMDB", f"sync=False, writemap=False, putmulti {BATCH}/txn",
             "OS page cache only (process-crash safe)", False, lmdb_runner(False)),
        Case("lmdb-sync", "lmdb", "LMDB", f"sync=True, writemap=False, putmulti {BATCH}/txn", per_txn, False,
             lmdb_runner(True)),
        Case("redis-everysec", "redis", "Redis Streams", f"AOF everysec, XADD pipelined x{BATCH}",
             "AOF write() before reply (process-crash safe); fsync every second", False,
             redis_runner("everysec")),
        Case("redis-always", "redis", "Redis Streams", f"AOF always, XADD pipelined x{BATCH}",
             "AOF fsync before reply, per event-loop pass (group commit)", False, redis_runner("always")),
        Case("persist-queue", "persist-queue", "persist-queue", "SQLiteQueue per queue, put per message",
             "fsync per message (SQLite WAL, synchronous=FULL, commit per put)", True, persist_queue_run),
    ]  # fmt: skip


def skip_reasons() -> dict[str, str]:
    """Peers that cannot run here, with the line that says what to install."""
    reasons: dict[str, str] = {}
    if optional_module("sqlite3") is None:
        reasons["sqlite"] = "Python was built without sqlite3"
    if optional_module("lmdb") is None:
        reasons["lmdb"] = "not installed (pip install lmdb)"
    if optional_module("redis") is None:
        reasons["redis"] = "not installed (pip install redis)"
    elif shutil.which("redis-server") is None:
        reasons["redis"] = "redis-server binary not found (apt-get install redis-server)"
    if optional_module("persistqueue") is None:
        reasons["persist-queue"] = "not installed (pip install persist-queue)"
    return reasons


def versions(families: set[str]) -> list[str]:
    out = [f"rocketstore {rocketstore_version}"]
    if "sqlite" in families:
        out.append(f"SQLite {optional_module('sqlite3').sqlite_version}")
    if "lmdb" in families:
        lmdb = optional_module("lmdb")
        out.append(f"LMDB {'.'.join(map(str, lmdb.version()))} (py-lmdb {lmdb.__version__})")
    if "redis" in families:
        binary = shutil.which("redis-server") or "redis-server"
        text = subprocess.run([binary, "--version"], capture_output=True, text=True, check=False).stdout
        server = next((w[2:] for w in text.split() if w.startswith("v=")), "?")
        out.append(f"redis-server {server} (redis-py {optional_module('redis').__version__})")
    if "persist-queue" in families:
        out.append(f"persist-queue {optional_module('persistqueue').__version__}")
    return out


# --- output --------------------------------------------------------------------------------------

HEADER = (
    "system",
    "configuration",
    "body",
    "N",
    "write msgs/s",
    "write MB/s",
    "read msgs/s",
    "ratio",
    "durability",
)
NUMERIC = frozenset(range(2, 8))  # right-aligned columns


def table_cells(rows: list[Row]) -> list[tuple[str, ...]]:
    base: dict[int, float] = {r.body_size: r.write_rate for r in rows if r.case.name == "rocketstore-async"}
    cells: list[tuple[str, ...]] = []
    for r in rows:
        ref = base.get(r.body_size)
        cells.append(
            (
                r.case.system,
                r.case.config,
                f"{r.body_size} B",
                f"{r.n:,}",
                f"{r.write_rate:,.0f}",
                f"{r.write_mbs:,.1f}",
                f"{r.read_rate:,.0f}",
                f"{r.write_rate / ref:.2f}" if ref else "n/a",
                r.case.durability,
            )
        )
    return cells


def print_table(rows: list[Row]) -> None:
    cells = [HEADER, *table_cells(rows)]
    widths = [max(len(c[i]) for c in cells) for i in range(len(HEADER))]
    for c in cells:
        parts = [v.rjust(widths[i]) if i in NUMERIC else v.ljust(widths[i]) for i, v in enumerate(c)]
        print("  ".join(parts).rstrip())


def markdown(rows: list[Row], intro: list[str], png: str | None) -> str:
    lines = ["# rocketstore compared with embeddable peers", "", *intro, ""]
    lines.append("| " + " | ".join(HEADER) + " |")
    lines.append("|" + "|".join("---:" if i in NUMERIC else "---" for i in range(len(HEADER))) + "|")
    for c in table_cells(rows):
        lines.append("| " + " | ".join(v.replace("|", "\\|") for v in c) + " |")
    if png:
        lines += ["", f"![write and read msgs/s]({png})"]
    return "\n".join(lines) + "\n"


def write_png(rows: list[Row], path: Path) -> bool:
    mpl = optional_module("matplotlib")
    if mpl is None:
        print("skip png: matplotlib not installed (pip install matplotlib)")
        return False
    mpl.use("Agg")
    plt = importlib.import_module("matplotlib.pyplot")
    sizes = sorted({r.body_size for r in rows})
    per_size = [[r for r in rows if r.body_size == size] for size in sizes]
    height = max(len(p) for p in per_size)
    fig, axes = plt.subplots(
        len(sizes), 1, figsize=(11, 1.2 + 0.42 * height * len(sizes)), squeeze=False, sharex=True
    )
    for ax, size, group in zip(axes[:, 0], sizes, per_size):
        labels = [f"{r.case.system}: {r.case.config}" for r in group]
        ys = list(range(len(group)))
        colors = ["tab:orange" if r.case.family == "rocketstore" else "tab:blue" for r in group]
        ax.barh([y - 0.2 for y in ys], [r.write_rate for r in group], height=0.4, color=colors, label="write")
        ax.barh(
            [y + 0.2 for y in ys], [r.read_rate for r in group], height=0.4, color=colors, alpha=0.45,
            label="read",
        )  # fmt: skip
        for y, r in zip(ys, group):
            ax.text(r.write_rate, y - 0.2, f" {r.write_rate:,.0f}", va="center", fontsize=7)
        ax.set_yticks(ys)
        ax.set_yticklabels(labels, fontsize=7)
        ax.invert_yaxis()
        ax.set_xscale("log")
        ax.set_title(f"{size} B bodies, {QUEUES} queues (solid: write, light: read back)", fontsize=9)
        ax.grid(axis="x", alpha=0.3)
    axes[-1, 0].set_xlabel("messages per second (log scale)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


# --- main ----------------------------------------------------------------------------------------


def parse_sizes(text: str) -> list[int]:
    try:
        sizes = [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a list of integers: {text!r}") from None
    if not sizes or min(sizes) <= 0:
        raise argparse.ArgumentTypeError("sizes must be positive")
    return sizes


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--messages", type=int, default=500_000, help="N for batched / page-cache rows")
    ap.add_argument(
        "--sync-messages", type=int, default=20_000, help="N for rows that make every message durable alone"
    )
    ap.add_argument("--sizes", type=parse_sizes, default=[100, 1024], help="body sizes in bytes (100,1024)")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT, help="where compare.md and compare.png go")
    ap.add_argument("--only", default="", help="comma-separated systems or case names")
    ap.add_argument("--dir", type=Path, default=None, help="where to create the stores (default: a temp dir)")
    ap.add_argument("--list", action="store_true", help="list the case names and exit")
    args = ap.parse_args()

    all_cases = cases()
    if args.list:
        for c in all_cases:
            print(f"{c.name:<24} {c.system}: {c.config}")
        return
    wanted = {w.strip() for w in args.only.split(",") if w.strip()}
    known = {c.name for c in all_cases} | {c.family for c in all_cases}
    if wanted - known:
        ap.error(f"--only: unknown {', '.join(sorted(wanted - known))}; known: {', '.join(sorted(known))}")
    selected = [c for c in all_cases if not wanted or c.name in wanted or c.family in wanted]

    reasons = skip_reasons()
    for family in dict.fromkeys(c.family for c in selected):
        if family in reasons:
            print(f"skip {family}: {reasons[family]}")
    runnable = [c for c in selected if c.family not in reasons]
    if not runnable:
        sys.exit("nothing to run")

    base = Path(tempfile.mkdtemp(prefix="rocketstore-compare-", dir=args.dir))
    if any(c.family == "rocketstore" for c in runnable):
        warm_up(base / "warm-up")
    rows: list[Row] = []
    failures: list[str] = []
    started = time.perf_counter()
    try:
        for size in args.sizes:
            body = body_of(size)
            for case in runnable:
                n = args.sync_messages if case.per_message else args.messages
                root = base / f"{case.name}-{size}"
                try:
                    m = case.run(root, n, body)
                    if m.read_count != n or m.read_bytes != n * size:
                        raise RuntimeError(
                            f"read back {m.read_count:,} messages / {m.read_bytes:,} B of {n:,}"
                        )
                except Exception as exc:
                    failures.append(f"{case.name} ({size} B): {exc}")
                    print(f"FAILED {case.name} ({size} B): {exc!r}", flush=True)
                    continue
                finally:
                    shutil.rmtree(root, ignore_errors=True)
                row = Row(case, size, n, m)
                rows.append(row)
                print(
                    f"{case.name:<24} {size:>5} B  N={n:<8,} write {row.write_rate:>11,.0f} msgs/s"
                    f"  read {row.read_rate:>11,.0f} msgs/s",
                    flush=True,
                )
    finally:
        shutil.rmtree(base, ignore_errors=True)
    elapsed = time.perf_counter() - started

    print()
    print_table(rows)
    families = {c.family for c in runnable}
    intro = [
        f"Run {datetime.datetime.now().isoformat(timespec='seconds')} by `benchmarks/compare.py` in "
        f"{elapsed:.0f} s on {platform.system()} {platform.machine()}, {os.cpu_count()} CPUs, "
        f"Python {platform.python_version()}; {', '.join(versions(families))}.",
        "",
        f"Workload: N messages with one fixed body, round-robin over {QUEUES} queues, written, then every "
        f"queue read back from offset 0 in pages of {PAGE} (persist-queue: one `get` at a time) touching "
        f"each body. Batched writers use batches of {BATCH}; rocketstore SYNC_FLUSH producer rows use "
        f"{SYNC_THREADS} threads calling `put_message`. rocketstore write time includes "
        "`wait_dispatched()`. MB/s counts body bytes. ratio = write msgs/s / rocketstore ASYNC_FLUSH "
        "keys off at the same body size. Redis runs in its own server process (a second core).",
    ]
    skipped = [f"{f}: {reasons[f]}" for f in dict.fromkeys(c.family for c in selected) if f in reasons]
    if skipped:
        intro += ["", "Skipped: " + "; ".join(skipped) + "."]
    if failures:
        intro += ["", "Failed: " + "; ".join(failures) + "."]
    args.out.mkdir(parents=True, exist_ok=True)
    png = args.out / "compare.png"
    wrote_png = bool(rows) and write_png(rows, png)
    md = args.out / "compare.md"
    md.write_text(markdown(rows, intro, png.name if wrote_png else None))
    print(f"\nwrote {md}" + (f" and {png}" if wrote_png else ""))
    if failures:
        sys.exit(1)


if __name__ == "__main__":
    main()
