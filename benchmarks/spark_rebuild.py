"""``rocketstore spark rebuild`` (``rocketstore.spark.maintenance.rebuild``) on the store of
benchmarks/spark_scan.py: 2,000,000 messages by default, 3 topics x 8 queues, a key and a
UNIQ_KEY each (the store is built once and cached, as spark_scan.py does).

Each round rebuilds a fresh copy: the commitlog segments are hard links to the cached store's
(rebuild only reads them), everything else is copied, and ``consumequeue/`` and ``index/`` are
deleted first. Each round also reports the CPU seconds of every process of the run (this one,
Spark's JVM, the Python workers): on this shared machine wall time follows the others' load.
One SparkSession (``local[2]`` by default) serves every round; its start is not
timed. The first round is the warm-up (Python workers, compiled kernels) and is reported apart.
Target: at most 10 s for 2,000,000 messages on local[2].

    python benchmarks/spark_rebuild.py [--messages N] [--store DIR] [--master local[2]] [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from spark_scan import prepare_store, tree_cpu_seconds  # type: ignore[import-not-found]

TARGET_S = 10.0


def fresh_copy(root: Path, into: Path) -> Path:
    """``root`` without its consume queues and index, the commitlog hard-linked."""
    copy = into / "store"
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(root, copy, ignore=shutil.ignore_patterns("commitlog", "consumequeue", "index", "lock"))
    (copy / "commitlog").mkdir()
    for segment in (root / "commitlog").iterdir():
        os.link(segment, copy / "commitlog" / segment.name)
    return copy


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--messages", type=int, default=2_000_000)
    ap.add_argument("--store", type=Path, default=None, help="store to copy (default: spark_scan.py's cache)")
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--repeat", type=int, default=3, help="timed rounds after the warm-up")
    args = ap.parse_args()
    root, n = prepare_store(args.store.resolve() if args.store else None, args.messages)

    from rocketstore.spark import maintenance, session

    spark = session(args.master, "rocketstore-spark-rebuild", **{"spark.ui.showConsoleProgress": "false"})
    spark.sparkContext.setLogLevel("ERROR")
    work = Path(tempfile.mkdtemp(prefix="rocketstore-spark-rebuild-"))
    seconds, cpu = [], []
    try:
        for k in range(args.repeat + 1):
            copy = fresh_copy(root, work)
            start, cpu_start = time.perf_counter(), tree_cpu_seconds()
            summary = maintenance.rebuild(spark, str(copy))
            took, cpu_took = time.perf_counter() - start, tree_cpu_seconds() - cpu_start
            if summary["records"] != n or summary["queue_entries"] != n:
                raise SystemExit(f"rebuild read {summary['records']:,} records, expected {n:,}: {summary}")
            label = "warm-up" if k == 0 else f"#{k}"
            print(
                f"  rebuild {label}: {took:.2f} s  {n / took:>12,.0f} msgs/s  CPU {cpu_took:.1f} s  "
                f"load {os.getloadavg()[0]:.1f}  {summary}",
                flush=True,
            )
            if k:
                seconds.append(took)
                cpu.append(cpu_took)
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)
    best, median = min(seconds), statistics.median(seconds)
    verdict = "meets" if best <= TARGET_S * n / 2_000_000 else "misses"
    print(
        f"rebuild of {n:,} messages on {args.master}: {best:.2f} s best, {median:.2f} s median "
        f"({verdict} the target <= {TARGET_S:.0f} s for 2,000,000); "
        f"CPU {statistics.median(cpu):.1f} s median "
        f"(every process of the run: on {os.cpu_count()} otherwise idle cores, at least "
        f"{statistics.median(cpu) / (os.cpu_count() or 1):.1f} s)"
    )


if __name__ == "__main__":
    main()
