"""The pop consumers' state alone (``PopService`` over a store, no gRPC): CPU per message of
receiving and acking, the broker's store work apart from its gRPC and protobuf work.

N 1 KiB messages are stored in a topic of 4 queues; then one thread receives 32 at a time and
acks them, either one ack per message (``single``: what the official clients make the broker do,
one AckMessage each) or the 32 at once (``batch``: ``ack_batch``, a batching client's
AckMessage). Reported: the process's CPU per message (every thread: the store's dispatch and
flush services too) and messages per second, per flush policy.

``--src DIR ...`` runs it against each of these source trees in turn (say the main branch's
``src`` and this one's), ``--repeat N`` times in alternation, and reports the median and range.

Run: ``python benchmarks/pop.py [--messages 20000] [--src ../main/src src] [--repeat 3]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def measure(flush: str, acks: str, messages: int) -> dict[str, float]:
    """One run in this process (the sources on its path)."""
    from rocketstore import FlushDiskType, Message, MessageStore, StoreConfig
    from rocketstore.broker.pop import PopService

    config = StoreConfig(
        commitlog_segment_size=1 << 26,
        consume_queue_entries=1 << 16,
        index_hash_slots=4096,
        index_max_entries=1 << 16,
        flush_disk_type=FlushDiskType(flush),
    )
    with (
        tempfile.TemporaryDirectory(prefix="pop-bench-") as tmp,
        # however full the machine's disk is
        MessageStore.open(Path(tmp) / "store", config, disk_usage=lambda _path: 0.5) as store,
    ):
        store.create_topic("T", 4)
        pop = PopService(store)
        pop.start()
        pop.receive("g", "T", "*", 32, 60_000)  # the group starts at the queues' ends
        for _ in range(0, messages, 1000):
            store.put_messages([Message("T", b"x" * 1024) for _ in range(1000)])
        store.wait_dispatched()
        cpu0, start, done = time.process_time(), time.perf_counter(), 0
        while done < messages:
            got = pop.receive("g", "T", "*", 32, 60_000)
            if acks == "single":
                for p in got:
                    pop.ack("g", "T", p.receipt_handle)
            else:
                pop.ack_batch("g", "T", [p.receipt_handle for p in got])
            done += len(got)
        cpu, elapsed = time.process_time() - cpu0, time.perf_counter() - start
        pop.stop()
    return {"cpu_us": cpu / messages * 1e6, "per_s": messages / elapsed}


def cell(values: list[float], digits: int) -> str:
    text = f"{statistics.median(values):.{digits}f}"
    if len(values) > 1:
        text += f" ({min(values):.{digits}f}-{max(values):.{digits}f})"
    return text


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--src", nargs="+", default=[str(ROOT / "src")])
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--one", nargs=2, metavar=("FLUSH", "ACKS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:  # a child run: one row, as JSON
        print(json.dumps(measure(args.one[0], args.one[1], args.messages)))
        return
    rows = [(f, a, s) for f in ("ASYNC_FLUSH", "SYNC_FLUSH") for a in ("single", "batch") for s in args.src]
    results: dict[tuple[str, str, str], list[dict[str, float]]] = {row: [] for row in rows}
    print(f"{args.messages} messages of 1 KiB; load {os.getloadavg()[0]:.1f} at start")
    for _ in range(args.repeat):
        for row in rows:
            flush, acks, src = row
            out = subprocess.run(
                [sys.executable, __file__, "--messages", str(args.messages), "--one", flush, acks],
                env={**os.environ, "PYTHONPATH": src},
                capture_output=True,
                text=True,
                check=True,
            )
            results[row].append(json.loads(out.stdout.strip().splitlines()[-1]))
    print(f"load {os.getloadavg()[0]:.1f} at the end; medians (ranges) of {args.repeat} runs")
    print(f"{'flush':<13}{'acks':<8}{'source':<40}{'CPU us/msg':>24}{'msg/s':>24}")
    for row in rows:
        flush, acks, src = row
        runs = results[row]
        print(
            f"{flush:<13}{acks:<8}{src[-39:]:<40}{cell([r['cpu_us'] for r in runs], 1):>24}"
            f"{cell([r['per_s'] for r in runs], 0):>24}"
        )


if __name__ == "__main__":
    main()
