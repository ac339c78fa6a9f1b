"""Durability costs: SYNC_FLUSH with 1 and 16 producer threads, ASYNC_FLUSH with and without the
transient store pool, and the time to recover a 1 GiB commitlog at open (normal and abnormal,
CRC checked).

    python benchmarks/flush.py [--sync-messages N] [--async-messages N] [--recovery-body BYTES] [--dir DIR]

Every figure is printed with the durability it was bought with.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import threading
import time
from pathlib import Path

from rocketstore import Message, MessageStore, StoreConfig

BODY = bytes(range(100))
GIB = 1 << 30


def sync_put(root: Path, threads: int, per_thread: int) -> float:
    cfg = StoreConfig(flush_disk_type="SYNC_FLUSH", generate_uniq_key=False)
    with MessageStore.open(root, cfg) as store:

        def producer(tid: int) -> None:
            for i in range(per_thread):
                r = store.put_message(Message(topic="Sync", body=BODY, queue_id=(tid + i) % 8))
                if not r.ok:
                    raise RuntimeError(f"put failed: {r.status}")

        workers = [threading.Thread(target=producer, args=(t,)) for t in range(threads)]
        start = time.perf_counter()
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        return threads * per_thread / (time.perf_counter() - start)


def async_put(root: Path, n: int, pool: bool, batch: int) -> float:
    cfg = StoreConfig(
        generate_uniq_key=False,
        commitlog_segment_size=256 << 20,
        transient_store_pool_enable=pool,
        transient_store_pool_size=3,
    )
    msgs = [Message(topic="Async", body=BODY, queue_id=i % 8) for i in range(n)]
    with MessageStore.open(root, cfg) as store:
        start = time.perf_counter()
        if batch > 1:
            for i in range(0, n, batch):
                store.put_messages(msgs[i : i + batch])
        else:
            for m in msgs:
                store.put_message(m)
        return n / (time.perf_counter() - start)


def fill(root: Path, body_size: int) -> tuple[int, float]:
    """A store whose commitlog holds 1 GiB (one full 1 GiB segment); returns (messages, seconds)."""
    body = bytes(i % 251 for i in range(body_size))
    cfg = StoreConfig(generate_uniq_key=False)
    count = 0
    start = time.perf_counter()
    with MessageStore.open(root, cfg) as store:
        batch = [Message(topic="Recover", body=body, tags="t", queue_id=i % 8) for i in range(500)]
        while store.max_phy_offset() < GIB - 2 * (body_size + 200) * len(batch):
            store.put_messages(batch)
            count += len(batch)
            store.wait_dispatched()
    return count, time.perf_counter() - start


def timed_open(root: Path, abnormal: bool) -> tuple[float, int]:
    if abnormal:
        (root / "abort").touch()
    start = time.perf_counter()
    store = MessageStore.open(root, StoreConfig(generate_uniq_key=False, check_crc_on_recover=True))
    elapsed = time.perf_counter() - start
    report = store.recovery
    assert report is not None and report.abnormal == abnormal
    store.close()
    return elapsed, report.records_scanned


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sync-messages", type=int, default=32_000, help="total per SYNC_FLUSH run")
    ap.add_argument("--async-messages", type=int, default=200_000)
    ap.add_argument("--recovery-body", type=int, default=1024, help="body size of the 1 GiB recovery store")
    ap.add_argument("--dir", type=Path, default=None)
    args = ap.parse_args()
    base = Path(tempfile.mkdtemp(prefix="rocketstore-flush-", dir=args.dir))
    rows: list[tuple[str, str, str]] = []
    try:
        for threads in (1, 16):
            per = max(1, args.sync_messages // threads // (8 if threads == 1 else 1))
            rate = sync_put(base / f"sync{threads}", threads, per)
            rows.append(
                (
                    f"SYNC_FLUSH put, {threads} thread(s)",
                    f"{rate:,.0f} msgs/s",
                    "acknowledged = on disk (fdatasync, group commit)",
                )
            )
        for pool in (False, True):
            for batch in (1, 100):
                rate = async_put(base / f"async{int(pool)}{batch}", args.async_messages, pool, batch)
                what = "single put" if batch == 1 else f"batch put ({batch})"
                durability = (
                    "acknowledged = in this process's buffer: a process crash loses up to one commit interval"
                    if pool
                    else "acknowledged = in the page cache: survives a process crash"
                )
                rows.append(
                    (f"ASYNC_FLUSH{' + pool' if pool else ''}, {what}", f"{rate:,.0f} msgs/s", durability)
                )
        count, _ = fill(base / "recover", args.recovery_body)
        for abnormal in (False, True):
            seconds, scanned = timed_open(base / "recover", abnormal)
            rows.append(
                (
                    f"{'abnormal' if abnormal else 'normal'} recovery of 1 GiB, CRC on",
                    f"{seconds:.2f} s",
                    f"{scanned:,} records scanned ({count:,} x {args.recovery_body} B bodies)",
                )
            )
    finally:
        shutil.rmtree(base, ignore_errors=True)
    print("rocketstore durability benchmark (100 B bodies unless noted; 1 topic x 8 queues)")
    for name, figure, note in rows:
        print(f"{name:<44} {figure:>16}  {note}")


if __name__ == "__main__":
    main()
