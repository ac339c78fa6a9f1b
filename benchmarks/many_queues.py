"""A store with many queues under a small descriptor limit: time to open, and what an idle open
store holds (resident memory, descriptors, mappings of its files).

Each phase runs in a fresh process with ``RLIMIT_NOFILE`` lowered to ``--nofile`` (1024, as
``ulimit -n 1024``): create the store and put ``--per-queue`` messages (with keys) into each
of ``--queues`` queues (100 queues per topic), close; reopen it idle and measure; reopen,
read every queue back, put one more message into each, query keys, and close.

    python benchmarks/many_queues.py [--queues 20000] [--per-queue 5] [--entries 2] [--dir DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rocketstore import MessageStore, StoreConfig

QUEUES_PER_TOPIC = 100


def _config(entries: int) -> StoreConfig:
    return StoreConfig(
        commitlog_segment_size=16 << 20,
        consume_queue_entries=entries,
        index_hash_slots=50_000,
        index_max_entries=200_000,
    )


def _held(root: Path) -> tuple[int, int, int]:
    """(resident KiB, open descriptors, mappings of files under ``root``) of this process."""
    rss = 0
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            rss = int(line.split()[1])
    fds = len(os.listdir("/proc/self/fd"))
    prefix = str(root.resolve())
    maps = sum(1 for line in Path("/proc/self/maps").read_text().splitlines() if prefix in line)
    return rss, fds, maps


def _topic(q: int) -> tuple[str, int]:
    return f"T{q // QUEUES_PER_TOPIC}", q % QUEUES_PER_TOPIC


def _put_round(store: MessageStore, queues: int, round_: int) -> None:
    for t in range((queues + QUEUES_PER_TOPIC - 1) // QUEUES_PER_TOPIC):
        qids = list(range(min(QUEUES_PER_TOPIC, queues - t * QUEUES_PER_TOPIC)))
        store.put_batch(
            f"T{t}",
            [b"x" * 64] * len(qids),
            queue_ids=qids,
            keys=[f"k{t * QUEUES_PER_TOPIC + q}-{round_}" for q in qids],
        )


def _wait(store: MessageStore) -> None:
    if not store.wait_dispatched(timeout=600):
        raise RuntimeError(f"dispatch did not catch up: {store.failure!r}")


def phase(name: str, root: Path, queues: int, per_queue: int, entries: int) -> dict[str, float]:
    out: dict[str, float] = {}
    start = time.perf_counter()
    with MessageStore.open(root, _config(entries)) as store:
        out["open_s"] = time.perf_counter() - start
        if name == "create":
            for n in range(per_queue):
                _put_round(store, queues, n)
            _wait(store)
        elif name == "use":  # one get_message per queue, a put to each, then key queries
            start = time.perf_counter()
            count = 0
            for q in range(queues):
                count += len(store.get_message("g", *_topic(q), 0, 32).messages)
            out["read_s"] = time.perf_counter() - start
            out["read"] = count
            _put_round(store, queues, per_queue)
            _wait(store)
            out["queried"] = sum(
                len(store.query_message(_topic(q)[0], f"k{q}-0")) for q in range(0, queues, 97)
            )
        out["rss_kib"], out["fds"], out["maps"] = _held(root)
    return out


def child(args: argparse.Namespace) -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (args.nofile, args.nofile))
    try:
        result: dict[str, object] = {
            **phase(args.phase, args.root, args.queues, args.per_queue, args.entries)
        }
    except Exception as exc:  # reported to the parent, which prints it
        result = {"error": f"{type(exc).__name__}: {exc}"}
    print(json.dumps(result))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--queues", type=int, default=20_000)
    ap.add_argument("--per-queue", type=int, default=5)
    ap.add_argument("--entries", type=int, default=2, help="consume_queue_entries (entries per queue file)")
    ap.add_argument("--nofile", type=int, default=1024)
    ap.add_argument("--dir", type=Path, default=None)
    ap.add_argument("--phase", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--root", type=Path, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.phase:
        child(args)
        return
    base = Path(tempfile.mkdtemp(prefix="rocketstore-many-", dir=args.dir))
    try:
        for name in ("create", "idle", "use"):
            cmd = [sys.executable, __file__, "--phase", name, "--root", str(base / "store")]
            cmd += ["--queues", str(args.queues), "--per-queue", str(args.per_queue)]
            cmd += ["--entries", str(args.entries), "--nofile", str(args.nofile)]
            proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
            lines = proc.stdout.strip().splitlines()
            result = lines[-1] if lines else proc.stderr.strip().splitlines()[-1:]
            print(f"{name:<7} {result}", flush=True)
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
