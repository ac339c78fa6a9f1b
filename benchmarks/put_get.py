"""Put/get throughput of one store, from one thread.

Workloads (100-byte bodies, one topic x 8 queues): single puts and batch puts, each without keys
(and without a generated UNIQ_KEY) and with KEYS + UNIQ_KEY indexed; the columnar ``put_batch``
of the same messages, in batches of B and of 4096; then get_message 32 at a
time over every queue, and read_batch (the columnar bulk read) 4096 at a time. Message objects
are built before the clock starts; the put figures include everything the store does under
put_* (validation, encoding, append), and "+dispatch" adds the wait until consume queues and
index have caught up.

    python benchmarks/put_get.py [--messages N] [--batch B] [--dir DIR]
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np

from rocketstore import Message, MessageStore, StoreConfig

QUEUES = 8
BODY = bytes(range(100))


def messages(n: int, with_keys: bool) -> list[Message]:
    if with_keys:
        return [
            Message(topic="BenchTopic", body=BODY, tags="TagA", keys=[f"key-{i}"], queue_id=i % QUEUES)
            for i in range(n)
        ]
    return [Message(topic="BenchTopic", body=BODY, tags="TagA", queue_id=i % QUEUES) for i in range(n)]


def run_put(root: Path, n: int, batch: int, with_keys: bool) -> tuple[float, float, int]:
    cfg = StoreConfig(generate_uniq_key=with_keys, commitlog_segment_size=256 << 20)
    msgs = messages(n, with_keys)
    with MessageStore.open(root, cfg) as store:
        start = time.perf_counter()
        if batch <= 1:
            put = store.put_message
            for m in msgs:
                put(m)
        else:
            put_many = store.put_messages
            for i in range(0, n, batch):
                put_many(msgs[i : i + batch])
        put_s = time.perf_counter() - start
        store.wait_dispatched()
        total_s = time.perf_counter() - start
        wrote = store.max_phy_offset()
    return put_s, total_s, wrote


def run_put_batch(root: Path, n: int, batch: int, with_keys: bool) -> tuple[float, float, int]:
    """``put_batch`` (the columnar put) of the same messages; the columns are built before the clock."""
    cfg = StoreConfig(generate_uniq_key=with_keys, commitlog_segment_size=256 << 20)
    bodies = [BODY] * n
    queue_ids = np.arange(n, dtype=np.int64) % QUEUES
    keys: list[str | None] | None = [f"key-{i}" for i in range(n)] if with_keys else None
    with MessageStore.open(root, cfg) as store:
        start = time.perf_counter()
        for i in range(0, n, batch):
            store.put_batch(
                "BenchTopic",
                bodies[i : i + batch],
                queue_ids=queue_ids[i : i + batch],
                tags="TagA",
                keys=keys[i : i + batch] if keys is not None else None,
            )
        put_s = time.perf_counter() - start
        store.wait_dispatched()
        total_s = time.perf_counter() - start
        wrote = store.max_phy_offset()
    return put_s, total_s, wrote


def run_get(root: Path, with_body: bool) -> tuple[float, int, int]:
    cfg = StoreConfig(commitlog_segment_size=256 << 20)
    count = nbytes = 0
    with MessageStore.open(root, cfg) as store:
        start = time.perf_counter()
        for qid in range(QUEUES):
            offset = 0
            while True:
                r = store.get_message("bench", "BenchTopic", qid, offset, 32)
                if not r.messages:
                    break
                count += len(r.messages)
                if with_body:
                    for m in r.messages:
                        nbytes += len(m.body)
                offset = r.next_begin_offset
        elapsed = time.perf_counter() - start
    return elapsed, count, nbytes


def run_read_batch(root: Path) -> tuple[float, int, int]:
    """Every queue through ``read_batch`` (columns, bodies copied into one buffer per batch)."""
    cfg = StoreConfig(commitlog_segment_size=256 << 20)
    count = nbytes = 0
    with MessageStore.open(root, cfg) as store:
        start = time.perf_counter()
        for qid in range(QUEUES):
            offset = 0
            while True:
                batch = store.read_batch("BenchTopic", qid, offset, 4096)
                if len(batch) == 0:
                    break
                count += len(batch)
                nbytes += len(batch.body)
                offset = batch.next_offset
        elapsed = time.perf_counter() - start
    return elapsed, count, nbytes


def warm_up(root: Path) -> None:
    """Load the compiled kernels (numba's on-disk cache) before any clock starts: the first call
    of each costs tens of milliseconds once per process, which is no part of a put."""
    for keys in (False, True):
        run_put(root / f"m{keys}", 512, 256, keys)
        run_put_batch(root / f"c{keys}", 512, 256, keys)
    run_get(root / "mTrue", True)
    run_read_batch(root / "mTrue")
    shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--messages", type=int, default=200_000)
    ap.add_argument("--batch", type=int, default=100)
    ap.add_argument("--dir", type=Path, default=None, help="where to create the stores (default: a temp dir)")
    args = ap.parse_args()
    n = args.messages
    base = Path(tempfile.mkdtemp(prefix="rocketstore-bench-", dir=args.dir))
    rows: list[tuple[str, str, str, str]] = []

    def row(name: str, count: int, seconds: float, nbytes: int, extra: str = "") -> None:
        rows.append((name, f"{count / seconds:>12,.0f}", f"{nbytes / seconds / 1e6:>8.1f}", extra))

    try:
        warm_up(base / "warm-up")
        cases: list[tuple[str, int, bool]] = [
            ("single put, no keys", 1, False),
            ("single put, KEYS+UNIQ_KEY", 1, True),
            (f"batch put ({args.batch}), no keys", args.batch, False),
            (f"batch put ({args.batch}), KEYS+UNIQ_KEY", args.batch, True),
        ]
        for i, (name, batch, keys) in enumerate(cases):
            root = base / f"s{i}"
            put_s, total_s, wrote = run_put(root, n, batch, keys)
            row(name, n, put_s, wrote, f"+dispatch {n / total_s:,.0f} msgs/s")
        for batch in (args.batch, 4096):
            for keys in (False, True):
                root = base / f"columns-{batch}-{keys}"
                put_s, total_s, wrote = run_put_batch(root, n, batch, keys)
                name = f"put_batch ({batch}), {'KEYS+UNIQ_KEY' if keys else 'no keys'}"
                row(name, n, put_s, wrote, f"+dispatch {n / total_s:,.0f} msgs/s")
                shutil.rmtree(root, ignore_errors=True)
        get_s, count, _ = run_get(base / "s2", False)
        row("get_message x32", count, get_s, count * len(BODY))
        get_s, count, nbytes = run_get(base / "s2", True)
        row("get_message x32 + body", count, get_s, nbytes)
        get_s, count, nbytes = run_read_batch(base / "s2")
        row("read_batch x4096 (columns + bodies)", count, get_s, nbytes)
    finally:
        shutil.rmtree(base, ignore_errors=True)

    print(
        f"rocketstore put/get, {n:,} messages of {len(BODY)} B, 1 topic x {QUEUES} queues, "
        "ASYNC_FLUSH, one thread"
    )
    print(f"{'workload':<36} {'msgs/s':>12} {'MB/s':>8}  notes")
    for name, rate, mbs, extra in rows:
        print(f"{name:<36} {rate} {mbs}  {extra}")


if __name__ == "__main__":
    main()
