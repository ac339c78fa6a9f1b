"""Where a small Spark job's fixed cost goes: the session coming up (the driver JVM), planning a
read of the ``rocketstore`` source (Python planner workers), the first and a second count, the
first and a second ``export`` (the second run of each shows what is left once the JVM is warm and
the Python workers are running). After each step: wall time, and the CPU time so far of the
driver JVM and of the Python worker processes under it (from /proc, Linux only).

    python benchmarks/spark_startup.py STORE [--master local[2]] [--conf K=V ...] [--no-small-job-conf]

By default the session gets ``rocketstore.spark.small_job_conf`` (what ``rocketstore spark`` and
the demo use: for a small store, a driver JVM without C2 and with the serial collector);
``--no-small-job-conf`` leaves Spark's defaults, for comparison.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from pathlib import Path

from rocketstore.spark import jobs, session, small_job_conf

_HZ = os.sysconf("SC_CLK_TCK")


def _stat(pid: int) -> tuple[int, list[int]]:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[1]), [int(x) for x in fields[11:15]]  # ppid; utime stime cutime cstime


def cpu(jvm: int) -> tuple[float, float]:
    """CPU seconds of the JVM itself, and of every process under it (alive, or reaped)."""
    children: dict[int, list[tuple[int, list[int]]]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                ppid, times = _stat(int(entry))
            except OSError:
                continue
            children.setdefault(ppid, []).append((int(entry), times))
    _, own = _stat(jvm)
    below = own[2] + own[3]
    todo = [jvm]
    while todo:
        for pid, times in children.get(todo.pop(), []):
            below += sum(times)
            todo.append(pid)
    return (own[0] + own[1]) / _HZ, below / _HZ


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("store", type=Path)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--conf", action="append", default=[], help="K=V, a Spark setting (repeatable)")
    parser.add_argument("--no-small-job-conf", action="store_true")
    args = parser.parse_args()
    conf = {} if args.no_small_job_conf else small_job_conf(args.store, args.master)
    conf.update(kv.split("=", 1) for kv in args.conf)
    print(f"settings: {conf or 'Spark defaults'}; load average {os.getloadavg()[0]:.1f}")
    started = time.perf_counter()
    spark = session(args.master, "rocketstore-startup", **conf)
    spark.sparkContext.setLogLevel("ERROR")
    jvm = spark.sparkContext._gateway.proc.pid  # type: ignore[union-attr]

    def step(name: str, since: float) -> None:
        own, below = cpu(jvm)
        print(
            f"{name:<20} {time.perf_counter() - since:7.2f} s wall; CPU so far: "
            f"JVM {own:6.1f} s, Python workers {below:6.1f} s",
            flush=True,
        )

    step("session up", started)
    t = time.perf_counter()
    df = spark.read.format("rocketstore").load(str(args.store))
    step("read planned", t)
    for name in ("count", "count again"):
        t = time.perf_counter()
        rows = df.count()
        step(f"{name} ({rows})", t)
    with tempfile.TemporaryDirectory(prefix="rocketstore-spark-startup-") as tmp:
        for name in ("export", "export again"):
            out = Path(tmp) / name.replace(" ", "-")
            t = time.perf_counter()
            jobs.export(spark, str(args.store), str(out))
            step(name, t)
            shutil.rmtree(out)
    spark.stop()
    print(f"{'total':<20} {time.perf_counter() - started:7.2f} s wall")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
