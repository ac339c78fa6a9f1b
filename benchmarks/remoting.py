"""RocketMQ's own benchmark programs against RocketMQ 4.9.8's broker and against ``rocketstore serve``
(remoting protocol), on this machine in the same run.

For each flush mode (``--flush``), body size (``--sizes``) and repeat, each broker is started fresh on
an empty store with the same file geometry, its benchmark topic created with 8 queues, and five
phases run one after the other, each for ``--seconds`` rounded up to whole 10-s windows of the
programs' output and at least two of them:

* ``send``: ``benchmark Producer -w THREADS -s SIZE`` (sync single sends),
* ``send4``: ``benchmark Producer -w 4 -s SIZE`` (``--app-threads``: a synchronous application's few
  sending threads, where each send's round trip, not the broker's throughput, sets the rate),
* ``batch``: ``benchmark BatchProducer -b 16 -w THREADS -s SIZE``,
* ``consume``: ``benchmark Consumer`` with a ``BatchProducer`` feeding it at the same time (a
  consumer alone could drain the backlog within its first window, and its rate would be the
  backlog's size); the feeding producer's rate is given too, as the two share the broker,
* ``drain``: after a ``BatchProducer`` alone for as long again (more backlog), ``benchmark Consumer``
  alone, a new group from the queues' first offset, over everything the other phases stored: the
  broker's delivery rate with nothing else to do. A window in which the
  consumer found the backlog's end (its rate under half its best window's) ends the measurement;
  the figure then says ``≥`` (at least: the backlog ran out, not the broker).

The programs print one line every 10 s; the first window (JVM start, JIT, connection set-up) is left
out and the figures are the other windows': send TPS (messages/s; ``BatchProducer``'s "MPS"),
consume TPS, the mean of the windows' average RT and the largest max RT (ms; for the consumer, the
store-to-client latency), and the broker's CPU seconds per million messages over the same windows
(``/proc/PID/stat`` user + system, sampled as each line arrives; RocketMQ: its name server and
broker JVMs, rocketstore: the ``serve`` process; in the consume phase per message consumed, with
the feeding producer's work included), and for rocketstore the part of it its event-loop thread
spent (``/proc/PID/task/PID/stat``: framing, headers, handlers; the rest is the store's threads). A
second table splits rocketstore's CPU by thread (``serve --metrics``:
``rocketstore_thread_cpu_seconds_total{thread}``, read as each line arrives): the event loop, the
broker's executor, dispatch, flush and the rest. A third gives rocketstore's batching per phase from
the same metrics: sends per store append and pulls per store read (``rocketstore_broker_put_batches``,
``rocketstore_broker_pull_reads``, ``rocketstore_broker_remoting_requests``), and the event loop's
CPU per request and per round (appends and reads together).
Brokers alternate in order between repeats; the table gives
the median over ``--repeat`` runs and the range.

``--profile FILE`` adds one run of ``rocketstore serve`` under cProfile after the measured ones (the
first flush mode and size; its figures are left out of the table, cProfile slows the broker), writes
its profile to FILE and prints the top functions: where the broker's time goes (cProfile sees the
thread that runs the event loop: framing, headers, handlers; not the store's own threads).

The ``Consumer``'s group is new, and both brokers start a new group at the queues' first offset, so
it drains the backlog of the two producing phases while the ``BatchProducer`` adds to it: consume TPS
is the broker's delivery rate with work always waiting, and the store-to-client RT includes the time
a message waited in that backlog (it is not a delivery latency).

Needs ``ROCKETMQ_HOME`` (a RocketMQ 4.9.8 distribution with ``bin/benchmark``) and ``java``. Only
127.0.0.1 and free ports are used; every process started is stopped at the end.

Run: ``python benchmarks/remoting.py [--seconds 20] [--repeat 3] [--sizes 128 1024]
[--flush ASYNC_FLUSH SYNC_FLUSH] [--threads 32] [--app-threads 4] [--phases send4 batch ...]
[--profile /tmp/serve.prof]``. ``--phases`` runs some of the phases, in the order above (a cell's
figure alone, in a few minutes instead of the full run's hour and more; ``drain`` alone drains the
backlog its own producer leaves).
"""

from __future__ import annotations

import argparse
import math
import os
import pstats
import re
import shutil
import statistics
import sys
import tempfile
import time
import urllib.request
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SRC = str(ROOT / "src")
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from tests.remoting.harness import (  # noqa: E402  (the Java harness: processes, ports, RocketMQ's servers)
    Process,
    RocketMQDist,
    accepts,
    free_port,
    start_rocketmq,
)

from broker import cpu_seconds  # noqa: E402  (this directory's)

TOPIC = "BenchTopic"  # "BenchmarkTest" is a system topic to mqadmin updateTopic
WINDOW = 10.0  # the benchmark programs print one line per 10 s
# the same file geometry for both brokers; the shared disk may be fuller than the default limits
GEOMETRY = (
    "mappedFileSizeCommitLog=134217728\nmappedFileSizeConsumeQueue=6000000\n"
    "maxHashSlotNum=5000000\nmaxIndexNum=20000000\ndiskMaxUsedSpaceRatio=95\n"
)
SERVE_ONLY = "disk_warning_ratio=100\ndisk_clean_forcibly_ratio=100\nbrokerName=broker-a\n"
STAT = re.compile(
    r"(Send TPS|Send MPS|Max RT\(ms\)|Average RT\(ms\)|Send Failed|Response Failed|TPS|FAIL|"
    r"AVG\(B2C\) RT\(ms\)|AVG\(S2C\) RT\(ms\)|MAX\(B2C\) RT\(ms\)|MAX\(S2C\) RT\(ms\)):\s*(-?[\d.]+)"
)


class BenchDist(RocketMQDist):
    """The distribution with the launchers' own heap defaults (the test harness shrinks them)."""

    def env(self) -> dict[str, str]:
        env = super().env()
        del env["RMQ_HEAP"]
        return env


@dataclass
class Broker:
    """A running broker under test: its name server address and the processes whose CPU is its."""

    kind: str
    namesrv: str
    broker: str
    pids: list[int]
    stop: Any
    loop_pid: int | None = None  # rocketstore serve: the thread running the event loop (its main)
    metrics: str | None = None  # rocketstore serve: its Prometheus address (CPU by thread)

    def cpu(self) -> float:
        return sum(cpu_seconds(pid) for pid in self.pids)

    def loop_cpu(self) -> float:
        """CPU seconds of the event-loop thread (nan for RocketMQ)."""
        if self.loop_pid is None:
            return math.nan
        return cpu_seconds(self.loop_pid, f"/proc/{self.loop_pid}/task/{self.loop_pid}/stat")

    def counters(self) -> dict[str, float]:
        """rocketstore serve's CPU seconds by thread group (THREAD_GROUPS) and its COUNTERS, from
        its metrics (empty for RocketMQ)."""
        if self.metrics is None:
            return {}
        text = urllib.request.urlopen(f"http://{self.metrics}/metrics", timeout=10).read().decode()
        out = dict.fromkeys(COUNTERS, 0.0)
        for name, value in THREAD_CPU.findall(text):
            group = thread_group(name)
            out[group] = out.get(group, 0.0) + float(value)
        for request, value in REQUESTS.findall(text):
            kind = "sends" if request in SEND_REQUESTS else "pulls" if request == "PULL_MESSAGE" else None
            if kind is not None:
                out[kind] += float(value)
        for name, key in (("put_batches", "appends"), ("pull_reads", "reads")):
            found = re.search(rf"^rocketstore_broker_{name}_total (\S+)$", text, re.M)
            out[key] = float(found.group(1)) if found else math.nan
        return out


THREAD_CPU = re.compile(r'^rocketstore_thread_cpu_seconds_total\{thread="([^"]*)"\} (\S+)$', re.M)
REQUESTS = re.compile(
    r'^rocketstore_broker_remoting_requests_total\{listener="remoting",request="([^"]*)",[^}]*\} (\S+)$', re.M
)
SEND_REQUESTS = ("SEND_MESSAGE", "SEND_MESSAGE_V2", "SEND_BATCH_MESSAGE")
# rocketstore serve's counts read with its CPU: sends and pulls answered, store appends of sends
# and store reads of pulls in bulk (a round each)
COUNTERS = ("sends", "pulls", "appends", "reads")
# rocketstore serve's threads, as the CPU table groups them
THREAD_GROUPS = ("loop", "store", "dispatch", "flush", "other")


def thread_group(name: str) -> str:
    if name == "MainThread":
        return "loop"  # frames, headers, judging, the sends' puts, in-memory pull reads, answers
    if name.startswith("broker-store"):
        return "store"  # the broker's executor: a SYNC_MASTER's waits, reads that may touch the disk
    if name == "rocketstore-dispatch":
        return "dispatch"  # consume queues and the index
    if name.startswith("rocketstore-flush"):
        return "flush"
    return "other"


@dataclass
class Window:
    """One line of a benchmark program: its figures and the broker's CPU seconds when it came."""

    stats: dict[str, float]
    cpu: float
    loop_cpu: float
    threads: dict[str, float]  # CPU seconds by THREAD_GROUPS, and COUNTERS (rocketstore)


@dataclass
class Program:
    """A benchmark program whose stats lines are collected with the broker's CPU at each."""

    process: Process
    broker: Broker
    windows: list[Window] = field(default_factory=list)

    def poll(self) -> None:
        while len(self.windows) < sum(1 for line in self.process.lines if "Current Time" in line):
            line = [x for x in self.process.lines if "Current Time" in x][len(self.windows)]
            stats = {k: float(v) for k, v in STAT.findall(line)}
            self.windows.append(
                Window(stats, self.broker.cpu(), self.broker.loop_cpu(), self.broker.counters())
            )


def run_programs(dist: BenchDist, broker: Broker, argvs: list[list[str]], windows: int) -> list[Program]:
    """Start the programs together; sample the broker's CPU as each line arrives; stop them all once
    the first one (the measured one) printed ``windows`` lines."""
    programs = [
        Program(
            Process([str(dist.home / "bin" / "benchmark"), *argv, "-n", broker.namesrv], dist.env()), broker
        )
        for argv in argvs
    ]
    try:
        measured = programs[0]
        deadline = time.monotonic() + windows * WINDOW + 300
        while len(measured.windows) < windows:
            if time.monotonic() > deadline or not measured.process.alive():
                raise RuntimeError(
                    f"benchmark {' '.join(argvs[0])} stalled:\n{measured.process.output[-3000:]}"
                )
            time.sleep(0.05)
            for p in programs:
                p.poll()
    finally:
        for p in programs:
            p.process.kill()
    return programs


def steady(windows: list[Window], rate: str) -> dict[str, float]:
    """The figures of every window but the first (warm-up)."""
    ws = windows[1:]
    messages = sum(w.stats.get(rate, 0.0) for w in ws) * WINDOW
    cpu = ws[-1].cpu - windows[0].cpu
    loop = ws[-1].loop_cpu - windows[0].loop_cpu
    per_m = 1e6 / messages if messages else math.nan
    by_thread = {
        f"threads_{group}": (ws[-1].threads.get(group, 0.0) - windows[0].threads.get(group, 0.0)) * per_m
        for group in THREAD_GROUPS
        if windows[0].threads
    }
    counts = {key: ws[-1].threads[key] - windows[0].threads[key] for key in COUNTERS if windows[0].threads}
    rounds = {}
    if counts:
        requests, batches = counts["sends"] + counts["pulls"], counts["appends"] + counts["reads"]
        rounds = {
            "rounds_sends_per_append": counts["sends"] / counts["appends"] if counts["appends"] else math.nan,
            "rounds_pulls_per_read": counts["pulls"] / counts["reads"] if counts["reads"] else math.nan,
            "rounds_loop_us_per_request": loop / requests * 1e6 if requests else math.nan,
            "rounds_loop_us_per_round": loop / batches * 1e6 if batches else math.nan,
        }
    return (
        {
            "tps": messages / (len(ws) * WINDOW),
            "cpu_per_m": cpu * per_m,
            "loop_per_m": loop * per_m,
        }
        | by_thread
        | rounds
    )


def mean_of(windows: list[Window], stat: str) -> float:
    """The mean of a figure over the windows that print it (a window with no send prints no RT)."""
    values = [w.stats[stat] for w in windows if stat in w.stats]
    return statistics.fmean(values) if values else math.nan


def max_of(windows: list[Window], stat: str) -> float:
    values = [w.stats[stat] for w in windows if stat in w.stats]
    return max(values) if values else math.nan


def by_thread(phase: str, figures: dict[str, float]) -> dict[str, float]:
    """A phase's CPU by thread group and its rounds (``steady``'s threads_* and rounds_*) as the
    row's ``PHASE_threads_*`` and ``PHASE_rounds_*``."""
    return {f"{phase}_{k}": v for k, v in figures.items() if k.startswith(("threads_", "rounds_"))}


PHASES = ("send", "send4", "batch", "consume", "drain")


def measure(
    dist: BenchDist,
    broker: Broker,
    size: int,
    threads: int,
    app_threads: int,
    windows: int,
    phases: Collection[str] = PHASES,
) -> dict[str, float]:
    common = ["-t", TOPIC, "-s", str(size), "-w", str(threads)]
    row: dict[str, float] = {}
    for phase, phase_threads in (("send", threads), ("send4", app_threads)):
        if phase not in phases:
            continue
        argv = ["Producer", "-t", TOPIC, "-s", str(size), "-w", str(phase_threads)]
        [send] = run_programs(dist, broker, [argv], windows)
        s = steady(send.windows, "Send TPS")
        row |= {
            f"{phase}_tps": s["tps"],
            f"{phase}_avg_rt": mean_of(send.windows[1:], "Average RT(ms)"),
            f"{phase}_max_rt": max_of(send.windows[1:], "Max RT(ms)"),
            f"{phase}_cpu": s["cpu_per_m"],
            f"{phase}_loop": s["loop_per_m"],
            f"{phase}_failed": sum(
                w.stats.get("Send Failed", 0.0) + w.stats.get("Response Failed", 0.0) for w in send.windows
            ),
        } | by_thread(phase, s)
    if "batch" in phases:
        row |= _batch(dist, broker, common, windows)
    if "consume" in phases:
        row |= _consume(dist, broker, common, windows)
    if "drain" in phases:
        row |= _drain(dist, broker, common, windows)
    return row


def _batch(dist: BenchDist, broker: Broker, common: list[str], windows: int) -> dict[str, float]:
    [batch] = run_programs(dist, broker, [["BatchProducer", *common, "-b", "16"]], windows)
    b = steady(batch.windows, "Send MPS")
    return {
        "batch_tps": b["tps"],
        "batch_avg_rt": mean_of(batch.windows[1:], "Average RT(ms)"),
        "batch_max_rt": max_of(batch.windows[1:], "Max RT(ms)"),
        "batch_cpu": b["cpu_per_m"],
        "batch_loop": b["loop_per_m"],
    } | by_thread("batch", b)


def _consume(dist: BenchDist, broker: Broker, common: list[str], windows: int) -> dict[str, float]:
    consumer, feed = run_programs(
        dist, broker, [["Consumer", "-t", TOPIC], ["BatchProducer", *common, "-b", "16"]], windows
    )
    c = steady(consumer.windows, "TPS")
    # the feeding producer's windows that ended within the consumer's measured ones
    fed = [w.stats.get("Send MPS", 0.0) for w in feed.windows[1 : len(consumer.windows)]]
    return {
        "consume_tps": c["tps"],
        "consume_feed_tps": statistics.fmean(fed) if fed else math.nan,
        "consume_avg_rt": mean_of(consumer.windows[1:], "AVG(S2C) RT(ms)"),
        "consume_max_rt": max_of(consumer.windows[1:], "MAX(S2C) RT(ms)"),
        "consume_cpu": c["cpu_per_m"],
        "consume_loop": c["loop_per_m"],
    } | by_thread("consume", c)


def _drain(dist: BenchDist, broker: Broker, common: list[str], windows: int) -> dict[str, float]:
    # more backlog first, so that the drain measures delivery and not the backlog's size
    run_programs(dist, broker, [["BatchProducer", *common, "-b", "16"]], windows)
    [drain] = run_programs(dist, broker, [["Consumer", "-t", TOPIC]], windows)
    windows_before_end = drain.windows[:2]  # the warm-up window and the first measured one
    for w in drain.windows[2:]:
        if w.stats.get("TPS", 0.0) < 0.5 * max(x.stats.get("TPS", 0.0) for x in windows_before_end[1:]):
            break
        windows_before_end.append(w)
    d = steady(windows_before_end, "TPS")
    return {
        "drain_tps": d["tps"],
        "drain_cpu": d["cpu_per_m"],
        "drain_loop": d["loop_per_m"],
        # 1: the backlog ran out within the measured windows (the rate is a floor)
        "drain_ran_out": float(len(windows_before_end) < len(drain.windows)),
    } | by_thread("drain", d)


def create_topic(dist: BenchDist, broker: Broker) -> None:
    out = dist.mqadmin(
        "updateTopic", "-n", broker.namesrv, "-b", broker.broker, "-t", TOPIC, "-r", "8", "-w", "8"
    )
    if out.returncode != 0 or "success" not in out.stdout:
        raise RuntimeError(f"mqadmin updateTopic failed:\n{out.stdout}\n{out.stderr}")


def start_rocketmq_broker(dist: BenchDist, work: Path, flush: str) -> Broker:
    servers = start_rocketmq(dist, work, settings=GEOMETRY + f"flushDiskType={flush}\n")
    return Broker(
        "RocketMQ 4.9.8",
        servers.namesrv,
        servers.broker,
        [p.proc.pid for p in servers.processes],
        servers.stop,
    )


def start_rocketstore(work: Path, flush: str, profile: str | None) -> Broker:
    work.mkdir(parents=True)
    conf = work / "broker.conf"
    conf.write_text(GEOMETRY + SERVE_ONLY + f"flushDiskType={flush}\n")
    namesrv, broker = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
    metrics = f"127.0.0.1:{free_port()}"
    argv = [sys.executable, *(["-m", "cProfile", "-o", profile] if profile else [])]
    argv += ["-m", "rocketstore.cli", "serve", str(work / "store"), "--create", "--config", str(conf)]
    argv += ["--namesrv", namesrv, "--remoting", broker, "--listen", "off", "--metrics", metrics]
    p = Process(argv, {**os.environ, "PYTHONPATH": SRC})
    try:
        p.wait_for(lambda _p: accepts(namesrv) and accepts(broker), "rocketstore serve accepting connections")
    except BaseException:
        p.kill()
        raise
    return Broker(
        "rocketstore serve", namesrv, broker, [p.proc.pid], p.stop, loop_pid=p.proc.pid, metrics=metrics
    )


def fmt(values: list[float], digits: int = 0) -> str:
    """Median and range of ``values``."""
    values = [v for v in values if not math.isnan(v)]
    if not values:
        return "-"
    med = statistics.median(values)
    if len(values) == 1:
        return f"{med:,.{digits}f}"
    return f"{med:,.{digits}f} ({min(values):,.{digits}f}-{max(values):,.{digits}f})"


COLUMNS = [
    ("send TPS", "send_tps", 0),
    ("send avg RT ms", "send_avg_rt", 2),
    ("send max RT ms", "send_max_rt", 0),
    ("send CPU s/M", "send_cpu", 1),
    ("send loop CPU s/M", "send_loop", 1),
    ("send4 TPS", "send4_tps", 0),
    ("send4 avg RT ms", "send4_avg_rt", 2),
    ("send4 CPU s/M", "send4_cpu", 1),
    ("batch TPS", "batch_tps", 0),
    ("batch avg RT ms", "batch_avg_rt", 2),
    ("batch max RT ms", "batch_max_rt", 0),
    ("batch CPU s/M", "batch_cpu", 1),
    ("batch loop CPU s/M", "batch_loop", 1),
    ("consume TPS", "consume_tps", 0),
    ("consume feed MPS", "consume_feed_tps", 0),
    ("consume avg S2C RT ms", "consume_avg_rt", 2),
    ("consume max S2C RT ms", "consume_max_rt", 0),
    ("consume CPU s/M", "consume_cpu", 1),
    ("consume loop CPU s/M", "consume_loop", 1),
    ("drain TPS", "drain_tps", 0),
    ("drain CPU s/M", "drain_cpu", 1),
    ("drain loop CPU s/M", "drain_loop", 1),
]


ROUND_COLUMNS = [
    ("sends per append", "sends_per_append", 1),
    ("pulls per read", "pulls_per_read", 1),
    ("loop µs per request", "loop_us_per_request", 0),
    ("loop µs per round", "loop_us_per_round", 0),
]


def table(results: dict[tuple[str, int, str], list[dict[str, float]]], args: argparse.Namespace) -> str:
    columns = [c for c in COLUMNS if c[1].split("_")[0] in args.phases]
    lines = [
        f"RocketMQ's benchmark programs (`Producer`, `BatchProducer -b 16`, `Consumer` fed by a "
        f"`BatchProducer`, `Consumer` alone draining the backlog), {args.threads} producer threads "
        f"(send4: {args.app_threads}), "
        f"{args.repeat} run(s) of "
        f"{args.windows - 1} measured 10-s window(s) per phase; median (range). CPU: the broker's "
        f"CPU seconds per million messages (loop: rocketstore's event-loop thread alone). "
        f"Machine: {os.cpu_count()} CPUs, load average "
        f"{os.getloadavg()[0]:.1f} at the end.",
        "",
        "| flush | body | broker | " + " | ".join(c[0] for c in columns) + " |",
        "|---|---|---|" + "---|" * len(columns),
    ]
    for (flush, size, kind), rows in results.items():
        cells = [fmt([r.get(key, math.nan) for r in rows], digits) for _, key, digits in columns]
        if "drain" in args.phases and any(r.get("drain_ran_out") for r in rows):
            drain = [c[1] for c in columns].index("drain_tps")
            cells[drain] = "≥ " + cells[drain]
        lines.append(f"| {flush} | {size} B | {kind} | " + " | ".join(cells) + " |")
    threads = {
        k: rows
        for k, rows in results.items()
        if any(f"{phase}_threads_loop" in r for r in rows for phase in args.phases)
    }
    if threads:
        lines += [
            "",
            "rocketstore serve's CPU by thread, s per million messages, median: loop (the event "
            "loop: frames, headers, judging, the sends' puts, reads of records in memory, answers), store "
            "(the broker's executor: a SYNC_MASTER's waits for its slave, reads that may touch the disk), "
            "dispatch (consume "
            "queues, index), flush, "
            "other (the rest: SYNC_FLUSH's group commit, schedule, timer, clean, stats, arrival ...).",
            "",
            "| flush | body | phase | " + " | ".join(THREAD_GROUPS) + " |",
            "|---|---|---|" + "---:|" * len(THREAD_GROUPS),
        ]
        for (flush, size, _), rows in threads.items():
            for phase in args.phases:
                cells = [
                    fmt([r.get(f"{phase}_threads_{g}", math.nan) for r in rows], 1) for g in THREAD_GROUPS
                ]
                lines.append(f"| {flush} | {size} B | {phase} | " + " | ".join(cells) + " |")
    rounds = {
        k: rows
        for k, rows in results.items()
        if any(f"{phase}_rounds_sends_per_append" in rows[0] for phase in args.phases)
    }
    if rounds:  # (rocketstore's rows)
        lines += [
            "",
            "rocketstore serve's rounds, median: sends per store append and pulls per store read "
            "(each a round of the requests waiting together), and the event loop's CPU µs per "
            "request (sends and pulls) and per round (appends and reads).",
            "",
            "| flush | body | phase | " + " | ".join(c[0] for c in ROUND_COLUMNS) + " |",
            "|---|---|---|" + "---:|" * len(ROUND_COLUMNS),
        ]
        for (flush, size, _), rows in rounds.items():
            for phase in args.phases:
                cells = [
                    fmt([r.get(f"{phase}_rounds_{key}", math.nan) for r in rows], digits)
                    for _, key, digits in ROUND_COLUMNS
                ]
                lines.append(f"| {flush} | {size} B | {phase} | " + " | ".join(cells) + " |")
    failed = {
        k: sum(r.get("send_failed", 0.0) + r.get("send4_failed", 0.0) for r in rows)
        for k, rows in results.items()
    }
    if any(failed.values()):
        lines += [
            "",
            "Failed single sends (all windows): " + ", ".join(f"{k}: {v:.0f}" for k, v in failed.items()),
        ]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--seconds", type=float, default=20.0, help="per phase (whole 10-s windows, at least 2)"
    )
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--sizes", type=int, nargs="+", default=[128, 1024])
    parser.add_argument(
        "--flush", nargs="+", default=["ASYNC_FLUSH", "SYNC_FLUSH"], choices=["ASYNC_FLUSH", "SYNC_FLUSH"]
    )
    parser.add_argument("--threads", type=int, default=32, help="producer threads (-w)")
    parser.add_argument("--app-threads", type=int, default=4, help="producer threads of the send4 phase (-w)")
    parser.add_argument(
        "--phases", nargs="+", default=list(PHASES), choices=PHASES, help="the phases to run, in their order"
    )
    parser.add_argument(
        "--brokers", nargs="+", default=["rocketmq", "rocketstore"], choices=["rocketmq", "rocketstore"]
    )
    parser.add_argument(
        "--profile", help="profile one extra run of rocketstore serve with cProfile into FILE"
    )
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "remoting.md")
    args = parser.parse_args()
    args.windows = 1 + max(1, math.ceil(args.seconds / WINDOW))
    home = os.environ.get("ROCKETMQ_HOME")
    if not home or not (Path(home) / "bin" / "benchmark").exists():
        sys.exit("set ROCKETMQ_HOME to a RocketMQ 4.9.8 distribution (with bin/benchmark)")
    with tempfile.TemporaryDirectory(prefix="bench-remoting-") as tmp:
        root = Path(tmp)
        dist = BenchDist(Path(home).resolve(), root / "logs")
        results: dict[tuple[str, int, str], list[dict[str, float]]] = {}
        run = 0
        for repeat in range(args.repeat):
            for flush in args.flush:
                for size in args.sizes:
                    order = args.brokers if repeat % 2 == 0 else args.brokers[::-1]
                    for which in order:
                        run += 1
                        work = root / f"run{run}"
                        if which == "rocketmq":
                            broker = start_rocketmq_broker(dist, work, flush)
                        else:
                            broker = start_rocketstore(work, flush, None)
                        try:
                            create_topic(dist, broker)
                            row = measure(
                                dist, broker, size, args.threads, args.app_threads, args.windows, args.phases
                            )
                        finally:
                            broker.stop()
                            shutil.rmtree(work, ignore_errors=True)  # gigabytes a run: not kept
                        results.setdefault((flush, size, broker.kind), []).append(row)
                        print(
                            f"# {broker.kind} {flush} {size} B: "
                            + ", ".join(f"{k}={v:.1f}" for k, v in row.items()),
                            file=sys.stderr,
                            flush=True,
                        )
        report = table(dict(sorted(results.items())), args)
        if args.profile:
            broker = start_rocketstore(root / "profiled", args.flush[0], args.profile)
            try:
                create_topic(dist, broker)
                measure(
                    dist, broker, args.sizes[0], args.threads, args.app_threads, args.windows, args.phases
                )
            finally:
                broker.stop()
    print(report)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(report)
    if args.profile:
        print(
            f"Top functions of rocketstore serve under cProfile ({args.flush[0]}, {args.sizes[0]} B), "
            "by own time:"
        )
        pstats.Stats(args.profile).sort_stats("tottime").print_stats(25)
        print("By cumulative time:")
        pstats.Stats(args.profile).sort_stats("cumulative").print_stats(25)


if __name__ == "__main__":
    main()
