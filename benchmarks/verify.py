"""Time ``verify_store`` (the engine of ``rocketstore verify``) on a store of realistic size.

The store is built once in ``--dir`` (kept, so that runs of two versions of the code can be
alternated on the same files): ``--messages`` messages of 100-byte bodies over 4 topics x 4 queues,
each with tags, a KEYS word and a UNIQ_KEY (so each record has a consume-queue entry and two index
entries), in 64 MiB commitlog segments (several of them). Then ``verify_store`` runs ``--runs``
times (CRC included) and each run's wall and CPU seconds are printed (on a shared machine the CPU
time is the steadier figure); the first run of a process also loads the compiled kernels from
numba's cache.

    python benchmarks/verify.py --dir DIR [--messages 1500000] [--runs 2]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from rocketstore import MessageStore, StoreConfig
from rocketstore.verify import verify_store

TOPICS = 4
QUEUES = 4
BATCH = 4096
BODY = bytes(range(100))


def config() -> StoreConfig:
    return StoreConfig(generate_uniq_key=True, commitlog_segment_size=64 << 20)


def build(root: Path, n: int) -> None:
    with MessageStore.open(root, config()) as store:
        for first in range(0, n, BATCH):
            count = min(BATCH, n - first)
            topic = f"Bench{(first // BATCH) % TOPICS}"
            store.put_batch(
                topic,
                [BODY] * count,
                queue_ids=[i % QUEUES for i in range(count)],
                tags="TagA",
                keys=[f"key-{first + i}" for i in range(count)],
            )
        if not store.wait_dispatched(timeout=1800):
            raise RuntimeError(f"dispatch did not catch up: {store.failure!r}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--dir", type=Path, required=True, help="the store (built there if absent)")
    parser.add_argument("--messages", type=int, default=1_500_000)
    parser.add_argument("--runs", type=int, default=2)
    args = parser.parse_args()
    root: Path = args.dir
    if not (root / "commitlog").is_dir():
        start = time.perf_counter()
        build(root, args.messages)
        print(f"built {args.messages} messages in {time.perf_counter() - start:.1f} s")
    for _ in range(args.runs):
        start, cpu_start = time.perf_counter(), time.process_time()
        report = verify_store(root, config())
        seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu_start
        if not report.clean:
            raise SystemExit(f"the store is damaged: {report.damage[:3]}")
        print(
            json.dumps(
                {"verify_s": round(seconds, 3), "cpu_s": round(cpu_seconds, 3), "records": report.records}
            )
        )


if __name__ == "__main__":
    main()
