"""Put latency while reclamation deletes segments, against the same puts with nothing deleted.

A store is filled with ``--segments`` commitlog segments (64 MiB each by default), then one
thread puts 100 B messages for ``--seconds`` twice: once alone (baseline) and once while a
manual reclamation (the disk probe reports 88 % used, so every segment but the newest goes)
deletes them, 100 ms apart as RocketMQ spaces them. Printed: p50 / p99 / p99.9 / max put
latency of each run and the ratio between them.

    python benchmarks/reclaim.py [--segments N] [--segment-mb MB] [--seconds S] [--dir DIR]
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

from rocketstore import Message, MessageStore, StoreConfig

BODY = bytes(range(100))


def fill(store: MessageStore, segments: int, segment_size: int) -> None:
    batch = [Message("Fill", bytes(4000), queue_id=i % 8) for i in range(256)]
    while store.max_phy_offset() < segments * segment_size:
        store.put_messages(batch)
    store.wait_dispatched()


def put_latencies(store: MessageStore, seconds: float) -> np.ndarray:
    msg = Message("Latency", BODY, queue_id=0)
    out: list[float] = []
    end = time.perf_counter() + seconds
    while (now := time.perf_counter()) < end:
        r = store.put_message(msg)
        out.append(time.perf_counter() - now)
        if not r.ok:
            raise RuntimeError(f"put failed: {r.status}")
    return np.asarray(out) * 1e6


def summary(name: str, lat: np.ndarray) -> tuple[str, list[float]]:
    figures = [float(np.percentile(lat, p)) for p in (50, 99, 99.9)] + [float(lat.max())]
    return name, figures


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--segments", type=int, default=9)
    ap.add_argument("--segment-mb", type=int, default=64)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--dir", type=Path, default=None)
    args = ap.parse_args()
    base = Path(tempfile.mkdtemp(prefix="rocketstore-reclaim-", dir=args.dir))
    used = [0.5]
    cfg = StoreConfig(
        commitlog_segment_size=args.segment_mb << 20,
        generate_uniq_key=False,
        clean_resource_interval=3_600_000,
    )
    try:
        with MessageStore.open(base / "s", cfg, disk_usage=lambda _: used[0]) as store:
            fill(store, args.segments, cfg.commitlog_segment_size)
            rows = [summary("puts alone", put_latencies(store, args.seconds))]
            used[0] = 0.88
            deleted: list[int] = []
            cleaner = threading.Thread(
                target=lambda: deleted.append(store.reclaim().commitlog_segments_deleted)
            )
            cleaner.start()
            rows.append(summary("puts during reclamation", put_latencies(store, args.seconds)))
            cleaner.join()
    finally:
        shutil.rmtree(base, ignore_errors=True)
    print(
        f"put latency (us), 100 B bodies; reclamation deleted {deleted[0]} segments of {args.segment_mb} MiB"
    )
    print(f"{'':<26}{'p50':>10}{'p99':>10}{'p99.9':>10}{'max':>10}")
    for name, figs in rows:
        print(f"{name:<26}" + "".join(f"{f:>10.1f}" for f in figs))
    ratios = [b / a for a, b in zip(rows[0][1], rows[1][1])]
    print(f"{'ratio (during / alone)':<26}" + "".join(f"{r:>10.2f}" for r in ratios))


if __name__ == "__main__":
    main()
