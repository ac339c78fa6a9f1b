"""Consumer throughput when behind, beside the store's own readers, in one run.

N messages of 100 bytes (one topic x 8 queues, columnar put_batch) are stored, then read back
whole by: ``read_batch`` 4096 at a time, ``get_message`` 32 at a time (the store's readers), and
by consumers that start at the earliest offset: ``poll_batch`` (columns) and ``poll(256)``
(``MessageExt`` objects; much bigger polls keep thousands of objects alive at once, and the cyclic
garbage collector's promotions of them cost as much as the reading), in the writing process and
in a follower process (a read-only open in another process, beside the open writer). Figures are
messages per second; ratios are against ``read_batch`` and ``get_message`` of the same run.

    python benchmarks/consumer.py [--messages N] [--dir DIR]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import shutil
import tempfile
import time
from multiprocessing.connection import Connection
from pathlib import Path

from rocketstore import MessageStore, StoreConfig
from rocketstore.consumer import Consumer, open_consumer

QUEUES = 8
TOPIC = "Bench"
BODY = bytes(range(100))
CFG = StoreConfig(commitlog_segment_size=256 << 20, generate_uniq_key=False)


def fill(store: MessageStore, n: int) -> None:
    chunk = 4096
    for first in range(0, n, chunk):
        count = min(chunk, n - first)
        store.put_batch(TOPIC, [BODY] * count, queue_ids=[(first + i) % QUEUES for i in range(count)])
    store.wait_dispatched()


def read_batch_all(store: MessageStore) -> int:
    total = 0
    for q in range(QUEUES):
        offset, end = 0, store.max_offset_in_queue(TOPIC, q)
        while offset < end:
            batch = store.read_batch(TOPIC, q, offset, 4096)
            total += len(batch)
            offset = batch.next_offset
    return total


def get_message_all(store: MessageStore) -> int:
    total = 0
    for q in range(QUEUES):
        offset, end = 0, store.max_offset_in_queue(TOPIC, q)
        while offset < end:
            res = store.get_message("bench", TOPIC, q, offset, 32)
            total += len(res.messages)
            offset = res.next_begin_offset
    return total


def consume_all(consumer: Consumer, n: int, columns: bool) -> int:
    total = 0
    with consumer:
        while total < n:
            if columns:
                got = sum(len(b) for b in consumer.poll_batch(65536, timeout=1.0))
            else:
                got = len(consumer.poll(256, timeout=1.0))
            if not got:
                break
            total += got
    return total


def timed(what: str, n: int, run: object) -> tuple[str, float]:
    assert callable(run)
    start = time.perf_counter()
    got = run()
    seconds = time.perf_counter() - start
    assert got == n, (what, got, n)
    return what, n / seconds


def _follower(root: str, n: int, group: str, columns: bool, conn: Connection) -> None:
    consumer = open_consumer(root, group, TOPIC, start="earliest", auto_commit=False, config=CFG)
    start = time.perf_counter()
    got = consume_all(consumer, n, columns)
    conn.send((got, time.perf_counter() - start))


def in_follower(root: Path, n: int, group: str, columns: bool) -> float:
    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe()
    p = ctx.Process(target=_follower, args=(str(root), n, group, columns, child))
    p.start()
    got, seconds = parent.recv()
    p.join()
    assert got == n, (group, got, n)
    return float(n / seconds)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--messages", "-n", type=int, default=1_000_000)
    ap.add_argument("--dir", type=Path, default=None)
    args = ap.parse_args()
    n = args.messages
    work = Path(tempfile.mkdtemp(dir=args.dir))
    root = work / "store"
    try:
        with MessageStore.open(root, CFG) as store:
            fill(store, n)
            read_batch_all(store)  # every reader below finds the pages in memory
            rates = dict(
                [
                    timed("read_batch (4096)", n, lambda: read_batch_all(store)),
                    timed("get_message (32)", n, lambda: get_message_all(store)),
                    timed(
                        "consumer poll_batch, in-process",
                        n,
                        lambda: consume_all(
                            store.consumer("b", TOPIC, start="earliest", auto_commit=False), n, True
                        ),
                    ),
                    timed(
                        "consumer poll (MessageExt), in-process",
                        n,
                        lambda: consume_all(
                            store.consumer("m", TOPIC, start="earliest", auto_commit=False), n, False
                        ),
                    ),
                ]
            )
            rates["consumer poll_batch, follower process"] = in_follower(root, n, "fb", True)
            rates["consumer poll (MessageExt), follower process"] = in_follower(root, n, "fm", False)
        base_batch, base_get = rates["read_batch (4096)"], rates["get_message (32)"]
        print(f"{n:,} messages of {len(BODY)} B, {QUEUES} queues")
        print(f"{'reader':46} {'msgs/s':>12} {'/read_batch':>12} {'/get_message':>13}")
        for what, rate in rates.items():
            print(f"{what:46} {rate:12,.0f} {rate / base_batch:12.2f} {rate / base_get:13.2f}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
