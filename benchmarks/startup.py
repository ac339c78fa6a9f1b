"""How long a process takes before it does anything: commands, ``import rocketstore``, opening a
follower (read-only store) and a consumer on a small store. Each case runs as a whole new process
(``--runs`` times, after one warm-up run that also leaves numba's cache and the .pyc files
written); the table gives median wall time, median CPU time (user + system, less noisy on a
shared machine) and the time spent importing (``-X importtime``, summed over top-level imports,
one more run).

    python benchmarks/startup.py [--runs N] [--store DIR] [--baseline SRC ...]

``--baseline SRC`` runs every case a second time with ``SRC`` (another checkout's ``src``, e.g.
``git archive e7e577d src | tar -x -C /tmp/base``) first on the path, in the same run, for a
before/after comparison. Without ``--store`` a store of 1,000 messages is written to a temporary
directory first.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE_SRC = Path(__file__).resolve().parent.parent / "src"

WRITE_STORE = """
import sys
from rocketstore import Message, MessageStore, StoreConfig
cfg = StoreConfig(commitlog_segment_size=64 << 20, consume_queue_entries=30_000,
                  index_hash_slots=65_536, index_max_entries=262_144)
with MessageStore.open(sys.argv[1], cfg) as store:
    store.put_messages([Message("Orders", b"order %d" % i, keys=["k%d" % i]) for i in range(1000)])
    store.wait_dispatched()
"""

FOLLOWER = """
import sys
from rocketstore import MessageStore, StoreConfig
from rocketstore.geometry import detect_geometry
with MessageStore.open(sys.argv[1], detect_geometry(sys.argv[1], StoreConfig()), readonly=True) as s:
    s.max_offset_in_queue("Orders", 0)
"""

CONSUMER = """
import sys
from rocketstore.consumer import open_consumer
with open_consumer(sys.argv[1], "bench", "Orders", start="earliest", auto_commit=False) as c:
    assert c.poll(1, timeout=5.0)
"""

CLI = ["-m", "rocketstore.cli"]


def cases(store: str) -> list[tuple[str, list[str]]]:
    return [
        ("rocketstore --version", [*CLI, "--version"]),
        ("rocketstore --help", [*CLI, "--help"]),
        ("rocketstore decode-id", [*CLI, "decode-id", "7F00000100002A9F00000000000273DB"]),
        ("rocketstore status", [*CLI, "status", store]),
        ("rocketstore print -m 1", [*CLI, "print", store, "-m", "1"]),
        ("import rocketstore", ["-c", "import rocketstore"]),
        ("follower open (read-only)", ["-c", FOLLOWER, store]),
        ("consumer open + 1 poll", ["-c", CONSUMER, store]),
    ]


def env_for(src: Path) -> dict[str, str]:
    env = dict(os.environ, PYTHONPATH=str(src))
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # what an installed package does: .pyc files kept
    return env


def run_once(args: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(wall, cpu) seconds of one process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run([sys.executable, *args], env=env, check=True, capture_output=True, timeout=600)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def import_ms(args: list[str], env: dict[str, str]) -> float:
    """Milliseconds spent importing: the cumulative times of the top-level imports."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", *args], env=env, check=True, capture_output=True, text=True
    )
    total = 0
    for line in done.stderr.splitlines():
        if line.startswith("import time:") and line.count("|") == 2:
            _, cumulative, name = line.split("|")
            if cumulative.strip().isdigit() and name.startswith(" ") and not name.startswith("  "):
                total += int(cumulative)
    return total / 1000


def measure(src: Path, store: str, runs: int) -> dict[str, tuple[float, float, float]]:
    env = env_for(src)
    results = {}
    for name, args in cases(store):
        run_once(args, env)  # warm-up: .pyc files, numba's cache, the page cache
        samples = [run_once(args, env) for _ in range(runs)]
        results[name] = (
            statistics.median(w for w, _ in samples),
            statistics.median(c for _, c in samples),
            import_ms(args, env),
        )
    return results


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--store", type=Path, help="A store to run status, print and the opens on.")
    parser.add_argument("--baseline", type=Path, action="append", default=[], help="Another src/ to compare.")
    args = parser.parse_args()
    variants = [("this", HERE_SRC), *((str(b), b.resolve()) for b in args.baseline)]
    with tempfile.TemporaryDirectory(prefix="rocketstore-startup-") as tmp:
        store = args.store
        if store is None:
            store = Path(tmp) / "store"
            subprocess.run([sys.executable, "-c", WRITE_STORE, str(store)], env=env_for(HERE_SRC), check=True)
        print(f"{args.runs} runs per case, medians; load average {os.getloadavg()[0]:.1f} at the start")
        table = {name: measure(src, str(store), args.runs) for name, src in variants}
    width = max(len(n) for n, _ in cases(""))
    header = "".join(f"  {name[-28:]:>28}" for name, _ in variants)
    print(f"{'':<{width}}{header}")
    print(f"{'case (wall s / cpu s / import ms)':<{width}}" + "".join(f"  {'':>28}" for _ in variants))
    for case, _ in cases(""):
        cells = "".join(
            f"  {table[v][case][0]:>8.3f} {table[v][case][1]:>8.3f} {table[v][case][2]:>9.0f}"
            for v, _ in variants
        )
        print(f"{case:<{width}}{cells}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
