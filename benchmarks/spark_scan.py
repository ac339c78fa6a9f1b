"""Full scans of a store with the ``rocketstore`` Spark source, against Parquet of the same rows.

Workload: a store of N messages (2,000,000 by default) with 100-byte bodies (slices of one random
pool, so Parquet cannot compress them away), 3 topics x 8 queues, 4 tags, one key per message
(two for every fifth) and a generated UNIQ_KEY, written with ``put_messages`` in batches of 512
and dispatched. The store is built once and reused: by default it is cached under
``/tmp/rocketstore-spark-scan/<N>`` (a cache that does not hold exactly N dispatched messages is
rebuilt); ``--store DIR`` scans DIR as it is, building N messages into it only when it is empty.

Then, in one SparkSession (``rocketstore.spark.session``, ``local[2]`` by default):

* rocketstore scan, ``source=commitlog`` (the default) and ``source=queues``;
* ``df.write.parquet`` of the rocketstore rows, once (the baseline for the export job);
* Parquet scan of what that wrote (``spark.read.parquet``);
* ``rocketstore.spark.jobs.export(spark, store, out)``, once, when that module can be imported.

A scan is timed as ``df.write.format("noop").mode("overwrite").save()``: every row of every
column is produced and handed to a sink that drops it, so the figure is the scan and nothing
else (no shuffle, no aggregate, nothing collected to the driver). Before a scan is timed, its
rows are counted once, untimed: this checks the row count and warms the Python workers and
the compiled column builders (Parquet's count reads footers only, so it also gets one untimed
scan). The scans are then timed ``--repeat`` rounds, round-robin (a change in the machine's
load falls on all of them alike); best and median are reported. For scale,
``read_commitlog_range`` is also timed in this process without Spark (one thread, the same
ranges Spark would read).

The table is printed and written as Markdown to ``--markdown``. Targets: rocketstore scan at
least 0.9 x the Parquet scan, and the export at least 0.8 x the speed of ``df.write.parquet``.

    python benchmarks/spark_scan.py [--messages N] [--store DIR] [--master local[2]]
                                    [--repeat 3] [--markdown benchmarks/results/spark_scan.md]
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import importlib
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from rocketstore import Message, MessageStore, StoreConfig

TOPICS = ("Orders", "Payments", "Shipments")
QUEUES = 8
TAGS = ("created", "paid", "shipped", "cancelled")
BODY_SIZE = 100
BATCH = 512
SEGMENT = 256 << 20  # commitlog segment size: a 2M-message store spans a few segments
CACHE = Path(tempfile.gettempdir()) / "rocketstore-spark-scan"
DEFAULT_MARKDOWN = Path(__file__).resolve().parent / "results" / "spark_scan.md"
SCAN_TARGET = 0.9
EXPORT_TARGET = 0.8


# --- the store ------------------------------------------------------------------------------
def body_pool() -> bytes:
    return np.random.default_rng(20261122).integers(0, 256, size=1 << 20, dtype=np.uint8).tobytes()


def message_batch(first: int, count: int, pool: bytes) -> list[Message]:
    span = len(pool) - BODY_SIZE
    out = []
    for i in range(first, first + count):
        at = (i * 7919) % span
        keys = (f"order-{i}", f"customer-{i % 1000}") if i % 5 == 0 else (f"order-{i}",)
        out.append(
            Message(
                topic=TOPICS[i % len(TOPICS)],
                body=pool[at : at + BODY_SIZE],
                tags=TAGS[i % len(TAGS)],
                keys=keys,
                queue_id=(i // len(TOPICS)) % QUEUES,
            )
        )
    return out


def dispatched_messages(root: Path) -> int:
    """Messages the consume queues of the store at ``root`` hold (files only, no lock)."""
    from rocketstore.spark.scan import StoreFiles, queue_extent

    if not (root / "commitlog").is_dir():
        return 0
    files = StoreFiles.at(root)
    total = 0
    for topic, qid in files.queues():
        lo, hi = queue_extent(files, topic, qid)
        total += hi - lo
    return total


def build_store(root: Path, n: int) -> None:
    print(f"building a store of {n:,} messages in {root} ...", flush=True)
    pool = body_pool()
    start = time.perf_counter()
    step = max(BATCH, n // 10 // BATCH * BATCH)
    with MessageStore.open(root, StoreConfig(commitlog_segment_size=SEGMENT)) as store:
        put = store.put_messages
        for i in range(0, n, BATCH):
            put(message_batch(i, min(BATCH, n - i), pool))
            done = min(n, i + BATCH)
            if done % step == 0 or done == n:
                elapsed = time.perf_counter() - start
                print(f"  {done:>12,} put  {elapsed:7.1f} s  {done / elapsed:>10,.0f} msgs/s", flush=True)
        store.wait_dispatched()
    print(f"  built and dispatched in {time.perf_counter() - start:.1f} s", flush=True)


def prepare_store(store: Path | None, n: int) -> tuple[Path, int]:
    """The store to scan and the number of messages it holds."""
    if store is not None:
        have = dispatched_messages(store)
        if have:
            print(f"reusing {store}: {have:,} messages")
            return store, have
        build_store(store, n)
        return store, dispatched_messages(store)
    root = CACHE / str(n)
    have = dispatched_messages(root)
    if have == n:
        print(f"reusing cached store {root}: {have:,} messages")
        return root, have
    if root.exists():
        print(f"cached store {root} holds {have:,} messages, not {n:,}: rebuilding")
        shutil.rmtree(root)
    build_store(root, n)
    return root, dispatched_messages(root)


def dir_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def commitlog_bytes(root: Path) -> int:
    """Bytes of records in the commitlog (segment files are allocated whole, so not their size)."""
    from rocketstore.spark.scan import ScanBounds, StoreFiles, plan_commitlog

    return sum(r.end - r.begin for r in plan_commitlog(StoreFiles.at(root), ScanBounds(), 1))


# --- measuring ------------------------------------------------------------------------------
def tree_cpu_seconds() -> float:
    """CPU seconds used so far by this process and everything it started (Spark's JVM, its
    Python workers, and those that exited, through their parents' children times). On a shared
    machine wall time depends on the others' load; the CPU a run takes much less so."""
    tick = os.sysconf("SC_CLK_TCK")
    parents: dict[int, int] = {}
    used: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:  # exited while we looked
            continue
        parents[int(entry.name)] = int(fields[1])
        used[int(entry.name)] = sum(int(f) for f in fields[11:15])  # utime, stime, cutime, cstime
    mine = {os.getpid()}
    grew = True
    while grew:
        grew = False
        for pid, parent in parents.items():
            if parent in mine and pid not in mine:
                mine.add(pid)
                grew = True
    return sum(used[pid] for pid in mine) / tick


@dataclass
class Timed:
    name: str
    rows: int
    seconds: list[float]
    cpu: list[float] = dataclasses.field(default_factory=list)  # CPU seconds of every process, per run

    @property
    def best(self) -> float:
        return min(self.seconds)

    @property
    def median(self) -> float:
        return statistics.median(self.seconds)

    @property
    def median_cpu(self) -> float | None:
        return statistics.median(self.cpu) if self.cpu else None

    def rate(self, seconds: float) -> float:
        return self.rows / seconds


def repeat(name: str, rows: int, times: int, run: Callable[[], object]) -> Timed:
    seconds = []
    for k in range(times):
        start = time.perf_counter()
        run()
        seconds.append(time.perf_counter() - start)
        print(f"  {name} #{k + 1}: {seconds[-1]:.2f} s  {rows / seconds[-1]:>12,.0f} rows/s", flush=True)
    return Timed(name, rows, seconds)


def noop_scan(df: Any) -> Callable[[], None]:
    return lambda: df.write.format("noop").mode("overwrite").save()


def rounds(scans: dict[str, Any], rows: int, times: int) -> list[Timed]:
    """Each scan timed ``times`` times, round-robin: on a shared machine, a change in load then
    falls on every scan alike, which keeps the ratios fair."""
    seconds: dict[str, list[float]] = {name: [] for name in scans}
    cpu: dict[str, list[float]] = {name: [] for name in scans}
    for k in range(times):
        for name, df in scans.items():
            start, cpu_start = time.perf_counter(), tree_cpu_seconds()
            noop_scan(df)()
            seconds[name].append(time.perf_counter() - start)
            cpu[name].append(tree_cpu_seconds() - cpu_start)
            print(
                f"  {name} #{k + 1}: {seconds[name][-1]:.2f} s  {rows / seconds[name][-1]:>12,.0f} rows/s  "
                f"CPU {cpu[name][-1]:.1f} s  load {os.getloadavg()[0]:.1f}",
                flush=True,
            )
    return [Timed(name, rows, seconds[name], cpu[name]) for name in scans]


def checked_count(name: str, df: Any, expected: int) -> None:
    start = time.perf_counter()
    got = df.count()
    print(f"  {name}: {got:,} rows counted (warm-up, {time.perf_counter() - start:.1f} s)", flush=True)
    if got != expected:
        raise SystemExit(f"{name}: {got:,} rows, expected {expected:,}")


def plain_python_scan(root: Path, min_partitions: int) -> int:
    """``read_commitlog_range`` over the ranges Spark would read, in this thread, without Spark:
    the rows read."""
    from rocketstore.spark.scan import (
        ScanBounds,
        ScanOptions,
        StoreFiles,
        plan_commitlog,
        read_commitlog_range,
    )

    files = StoreFiles.at(root)
    options = ScanOptions()
    rows = 0
    for part in plan_commitlog(files, ScanBounds(), min_partitions):
        for batch in read_commitlog_range(part, options):
            rows += batch.num_rows
    return rows


def export_job() -> Callable[..., Any] | None:
    try:
        jobs = importlib.import_module("rocketstore.spark.jobs")
    except ImportError as exc:
        print(f"skip export: rocketstore.spark.jobs cannot be imported ({exc})")
        return None
    export = getattr(jobs, "export", None)
    if export is None:
        print("skip export: rocketstore.spark.jobs has no export")
    return export


# --- the report -----------------------------------------------------------------------------
HEADER = ("measurement", "rows", "best s", "median s", "best rows/s", "median rows/s", "median CPU s")


def table_cells(timed: list[Timed]) -> list[tuple[str, ...]]:
    return [
        (
            t.name,
            f"{t.rows:,}",
            f"{t.best:.2f}",
            f"{t.median:.2f}",
            f"{t.rate(t.best):,.0f}",
            f"{t.rate(t.median):,.0f}",
            "" if t.median_cpu is None else f"{t.median_cpu:.1f}",
        )
        for t in timed
    ]


def ratio_lines(ratios: list[tuple[str, float | None, float | None, float]]) -> list[str]:
    """The verdict goes by the median: on a shared machine a best run is luck."""
    out = []
    for name, best, median, target in ratios:
        if median is None:
            out.append(f"{name}: not measured (target >= {target})")
            continue
        verdict = "meets" if median >= target else "misses"
        head = "" if best is None else f"{best:.2f} best, "
        out.append(f"{name}: {head}{median:.2f} median ({verdict} the target >= {target})")
    return out


def print_table(timed: list[Timed], ratios: list[str]) -> None:
    cells = [HEADER, *table_cells(timed)]
    widths = [max(len(c[i]) for c in cells) for i in range(len(HEADER))]
    for c in cells:
        print("  ".join(v.ljust(w) if i == 0 else v.rjust(w) for i, (v, w) in enumerate(zip(c, widths))))
    print()
    for line in ratios:
        print(line)


def markdown(timed: list[Timed], ratios: list[str], intro: list[str]) -> str:
    lines = ["# rocketstore Spark scan against Parquet", "", *intro, ""]
    lines.append("| " + " | ".join(HEADER) + " |")
    lines.append("|---|" + "---:|" * (len(HEADER) - 1))
    for c in table_cells(timed):
        lines.append("| " + " | ".join(v.replace("|", "\\|") for v in c) + " |")
    lines.append("")
    lines.extend(f"- {line}" for line in ratios)
    return "\n".join(lines) + "\n"


# --- main -----------------------------------------------------------------------------------
CEILING = "pre-built batches (Spark's own cost for a Python source of this schema)"


def canned_source(root: Path, rows: int, partitions: int) -> type:
    """A Python data source that hands Spark the same pre-built record batch (the store's first
    records, ``BATCH_ROWS`` of them, built once per task) until ``rows`` rows are out: what a scan
    costs in Spark alone, with no reading or decoding at all. The rocketstore scan can get no
    faster than this through PySpark's Python data source API."""
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    from rocketstore.spark.scan import BATCH_ROWS, ScanBounds, ScanOptions, StoreFiles, plan_commitlog
    from rocketstore.spark.source import spark_schema

    store = str(root)

    class CannedReader(DataSourceReader):
        def partitions(self) -> list[InputPartition]:
            share = -(-rows // partitions)
            return [InputPartition(min(share, rows - k * share)) for k in range(partitions)]

        def read(self, partition: InputPartition) -> Any:
            from rocketstore.spark.scan import read_commitlog_range

            first = plan_commitlog(StoreFiles.at(store), ScanBounds(), 1)[0]
            batch = next(read_commitlog_range(first, ScanOptions()))
            assert batch.num_rows == BATCH_ROWS
            left = partition.value
            while left > 0:
                out = batch if left >= batch.num_rows else batch.slice(0, left)
                left -= out.num_rows
                yield out

    class Canned(DataSource):
        @classmethod
        def name(cls) -> str:
            return "rocketstore_canned"

        def schema(self) -> Any:
            return spark_schema()

        def reader(self, schema: Any) -> DataSourceReader:
            return CannedReader()

    return Canned


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--messages", type=int, default=2_000_000, help="messages in a store this script builds")
    ap.add_argument("--store", type=Path, default=None, help=f"store to scan (default: a cache in {CACHE})")
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--repeat", type=int, default=3, help="timed runs of each scan")
    ap.add_argument("--driver-memory", default="2g")
    ap.add_argument("--markdown", type=Path, default=DEFAULT_MARKDOWN)
    ap.add_argument("--dir", type=Path, default=None, help="where to write Parquet (default: a temp dir)")
    args = ap.parse_args()
    if args.messages <= 0 or args.repeat <= 0:
        ap.error("--messages and --repeat must be positive")

    root, n = prepare_store(args.store.resolve() if args.store else None, args.messages)
    root = root.resolve()
    store_mb = commitlog_bytes(root) / 1e6
    work = Path(tempfile.mkdtemp(prefix="rocketstore-spark-scan-", dir=args.dir))
    timed: list[Timed] = []
    try:
        from pyspark import __version__ as spark_version

        from rocketstore.spark import session

        print(f"starting Spark {spark_version} ({args.master}) ...", flush=True)
        spark = session(
            args.master,
            "rocketstore-spark-scan",
            **{"spark.driver.memory": args.driver_memory, "spark.ui.showConsoleProgress": "false"},
        )
        spark.sparkContext.setLogLevel("ERROR")
        try:
            scans: dict[str, Any] = {}
            for source in ("commitlog", "queues"):
                name = f"rocketstore scan (source={source})"
                df = spark.read.format("rocketstore").option("source", source).load(str(root))
                checked_count(name, df, n)  # a full scan through the same reader: the warm-up
                scans[name] = df

            from rocketstore.spark.scan import ScanBounds, StoreFiles, plan_commitlog

            tasks = len(plan_commitlog(StoreFiles.at(root), ScanBounds(), 2 * (os.cpu_count() or 1)))
            spark.dataSource.register(canned_source(root, n, tasks))
            canned = spark.read.format("rocketstore_canned").load()
            checked_count(CEILING, canned, n)
            scans[CEILING] = canned

            parquet = work / "parquet"
            df = spark.read.format("rocketstore").load(str(root))
            write = repeat(
                "df.write.parquet (rocketstore -> Parquet)",
                n,
                1,
                lambda: df.write.mode("overwrite").parquet(str(parquet)),
            )
            parquet_mb = dir_bytes(parquet) / 1e6
            pq = spark.read.parquet(str(parquet))
            checked_count("Parquet scan", pq, n)  # reads the footers only: warm up with a scan too
            noop_scan(pq)()
            scans["Parquet scan"] = pq
            timed.extend(rounds(scans, n, args.repeat))
            timed.append(write)

            export = export_job()
            exported: Timed | None = None
            if export is not None:
                out = work / "export"
                try:
                    exported = repeat(
                        "rocketstore.spark.jobs.export", n, 1, lambda: export(spark, str(root), str(out))
                    )
                    timed.append(exported)
                except Exception as exc:  # another engineer's job: report it, keep the table
                    print(f"export failed: {type(exc).__name__}: {exc}")
        finally:
            spark.stop()

        partitions = 2 * (os.cpu_count() or 1)
        plain_rows = plain_python_scan(root, partitions)  # warm-up (and the compiled builders' cache)
        if plain_rows != n:
            raise SystemExit(f"plain read_commitlog_range: {plain_rows:,} rows, expected {n:,}")
        timed.append(
            repeat(
                "read_commitlog_range alone (no Spark, 1 thread)",
                n,
                args.repeat,
                lambda: plain_python_scan(root, partitions),
            )
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)

    by_name = {t.name: t for t in timed}
    rs, pq_scan = by_name["rocketstore scan (source=commitlog)"], by_name["Parquet scan"]
    ratios = ratio_lines(
        [
            (
                "rocketstore scan (commitlog) / Parquet scan, rows/s",
                pq_scan.best / rs.best,
                pq_scan.median / rs.median,
                SCAN_TARGET,
            ),
            (
                "rocketstore scan (commitlog) / Parquet scan, by CPU seconds (rows per CPU second)",
                None,
                pq_scan.median_cpu / rs.median_cpu if pq_scan.median_cpu and rs.median_cpu else None,
                SCAN_TARGET,
            ),
            (
                "pre-built batches / Parquet scan, rows/s (the most a Python source can reach)",
                pq_scan.best / by_name[CEILING].best,
                pq_scan.median / by_name[CEILING].median,
                SCAN_TARGET,
            ),
            (
                "export / df.write.parquet, rows/s",
                write.best / exported.best if exported else None,
                write.median / exported.median if exported else None,
                EXPORT_TARGET,
            ),
        ]
    )
    intro = [
        f"{n:,} messages of {BODY_SIZE} B ({len(TOPICS)} topics x {QUEUES} queues, tags, keys, UNIQ_KEY; "
        f"commitlog {store_mb:,.0f} MB, Parquet {parquet_mb:,.0f} MB), Spark {spark_version} {args.master}, "
        f"driver memory {args.driver_memory}; Python {platform.python_version()}, "
        f"{os.cpu_count()} cores, {platform.machine()}, {datetime.date.today().isoformat()}.",
        "",
        'A scan is `df.write.format("noop").mode("overwrite").save()` (every column of every row '
        f"produced, then dropped), {args.repeat} rounds, round-robin, after an untimed warm-up; "
        "writes run once. rows/s is messages over wall time.",
    ]
    print()
    print(intro[0])
    print_table(timed, ratios)
    args.markdown.parent.mkdir(parents=True, exist_ok=True)
    args.markdown.write_text(markdown(timed, ratios, intro))
    print(f"\nwritten to {args.markdown}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
