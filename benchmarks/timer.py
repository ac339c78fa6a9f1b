"""Timer messages through the library (docs/timers.md): what they cost and how late they arrive.

1. **Enqueue rate**: ``--count`` timers due an hour ahead, put one by one, against as many plain
   puts of the same body in the same run (messages/s each, and the ratio).
2. **Lateness**: ``--rate`` timers per second for ``--seconds``, each due 1-3 s after its put (any
   millisecond); a reader follows the real topic and records, per timer, the time it could read it
   minus the time it asked for. Printed: p50 / p99 / max, and how many came early (must be 0).
3. **Burst**: ``--burst`` timers (put in batches of 1,000 before their time) all due within the
   same second, 3 s ahead; printed: when the last was readable after its time, and the delivery
   rate over the burst; then as many due at one instant: how long their delivery takes, per timer.
4. **Memory**: RSS of the process before and after ``--pending`` timers due in an hour are stored
   and in the wheel, anonymous (the process's own memory) and file-backed (mapped store files'
   pages in the page cache) apart; and a plain message's put and read latency (p50, p99), one
   at a time, before and after.

    python benchmarks/timer.py [--count N] [--rate R] [--seconds S] [--burst N] [--pending N] [--dir DIR]

Not for figures on a shared machine: the timings move with whatever else runs.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

from rocketstore import GetStatus, Message, MessageStore, StoreConfig

BODY = bytes(range(100))
HOUR_MS = 3_600_000


def rss_mb() -> tuple[float, float]:
    """(anonymous, file-backed) resident MB: the second is mapped store files' pages (commitlog,
    queues, index, timer log, wheel) the kernel keeps in the page cache and may drop."""
    fields = dict(
        line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines() if ":" in line
    )
    return int(fields["RssAnon"].split()[0]) / 1024, int(fields["RssFile"].split()[0]) / 1024


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def enqueue_rate(store: MessageStore, count: int) -> None:
    start = time.perf_counter()
    for _ in range(count):
        store.put_message(Message("Plain", BODY, queue_id=0))
    plain = count / (time.perf_counter() - start)
    due = now_ms() + HOUR_MS
    start = time.perf_counter()
    for i in range(count):
        store.put_message(Message("Timed", BODY, queue_id=0, deliver_at=due + i))
    timed = count / (time.perf_counter() - start)
    print(f"enqueue: plain {plain:,.0f}/s, timers {timed:,.0f}/s ({timed / plain:.2f} of plain)")


def lateness(store: MessageStore, rate: int, seconds: float) -> None:
    # warm up the delivery path (its first puts into a new topic create files, compile kernels)
    store.put_messages([Message("Late", b"warm", queue_id=0, deliver_at=now_ms() + 200) for _ in range(10)])
    while store.max_offset_in_queue("Late", 0) < 10:
        time.sleep(0.05)
    total = int(rate * seconds)
    asked: dict[bytes, int] = {}
    seen: list[int] = []
    done = threading.Event()

    def read() -> None:
        offset = 10
        while len(seen) < total and not done.is_set():
            store.wait_for_message("Late", 0, offset, 0.5)
            res = store.get_message("bench", "Late", 0, offset, 256, transfer_limits=False)
            if res.status is not GetStatus.FOUND:
                continue
            t = now_ms()
            seen.extend(t - int(m.properties["TIMER_DELIVER_MS"]) for m in res.messages)
            offset = res.next_begin_offset

    reader = threading.Thread(target=read)
    reader.start()
    rng = np.random.default_rng(1)
    start = time.perf_counter()
    for i in range(total):
        wait = start + i / rate - time.perf_counter()
        if wait > 0:
            time.sleep(wait)
        due = now_ms() + 1000 + int(rng.integers(0, 2000))
        asked[b"%d" % i] = due
        store.put_message(Message("Late", b"%d" % i, queue_id=0, deliver_at=due))
    reader.join(timeout=seconds + 30)
    done.set()
    late = np.array(seen)
    print(
        f"lateness at {rate}/s: {len(late)} of {total} delivered, p50 {np.percentile(late, 50):.0f} ms, "
        f"p99 {np.percentile(late, 99):.0f} ms, max {late.max()} ms, early {(late < 0).sum()}"
    )


def burst(store: MessageStore, count: int) -> None:
    due = (now_ms() // 1000 + 4) * 1000  # a whole second, at least 3 s ahead
    for first in range(0, count, 1000):
        store.put_messages(
            [
                Message("Burst", b"%d" % i, queue_id=0, deliver_at=due + i * 1000 // count)
                for i in range(first, min(count, first + 1000))
            ]
        )
    if now_ms() >= due:
        print(f"burst: enqueueing {count} timers took past their time; use a smaller --burst")
        return
    offset, first_at, last_late = 0, None, 0
    deadline = time.monotonic() + 60
    while offset < count and time.monotonic() < deadline:
        store.wait_for_message("Burst", 0, offset, 0.5)
        res = store.get_message("bench", "Burst", 0, offset, 1024, transfer_limits=False)
        if res.status is not GetStatus.FOUND:
            continue
        t = now_ms()
        first_at = t if first_at is None else first_at
        last_late = max(last_late, *(t - int(m.properties["TIMER_DELIVER_MS"]) for m in res.messages))
        offset = res.next_begin_offset
    spread = (now_ms() - first_at) / 1000 if first_at is not None else 0.0
    print(
        f"burst: {offset} of {count} timers due within one second delivered; the last {last_late} ms "
        f"after its time; delivered over {spread:.2f} s ({offset / max(spread, 1e-3):,.0f}/s)"
    )


def plain_latency(store: MessageStore, n: int = 2000) -> str:
    """p50 / p99 of a plain message's put and of a read of it, one at a time."""
    puts, gets, offsets = [], [], []
    for _ in range(n):
        t0 = time.perf_counter()
        offsets.append(store.put_message(Message("PlainLatency", BODY, queue_id=0)).queue_offset)
        puts.append(time.perf_counter() - t0)
    store.wait_dispatched()
    for offset in offsets:
        t0 = time.perf_counter()
        got = store.get_message("bench", "PlainLatency", 0, offset, 1)
        gets.append(time.perf_counter() - t0)
        assert got.status is GetStatus.FOUND
    put_us, get_us = np.array(puts) * 1e6, np.array(gets) * 1e6
    return (
        f"put p50 {np.percentile(put_us, 50):.0f} µs p99 {np.percentile(put_us, 99):.0f} µs, "
        f"read p50 {np.percentile(get_us, 50):.0f} µs p99 {np.percentile(get_us, 99):.0f} µs"
    )


def delivery_cost(store: MessageStore, count: int) -> None:
    """``count`` timers due at one instant: how long their delivery takes, per timer."""
    due = (now_ms() // 1000 + 4) * 1000
    for first in range(0, count, 1000):
        n = min(1000, count - first)
        store.put_messages([Message("Instant", b"i", queue_id=0, deliver_at=due) for _ in range(n)])
    offset, deadline = 0, time.monotonic() + 60
    while offset < count and time.monotonic() < deadline:
        store.wait_for_message("Instant", 0, offset, 0.5)
        offset = max(offset, store.max_offset_in_queue("Instant", 0))
    took = (now_ms() - due) / 1000
    print(
        f"delivery: {offset} timers due at one instant delivered {took:.2f} s after it "
        f"({took / max(offset, 1) * 1e6:.0f} µs a timer, the wheel's 100 ms slot included)"
    )


def memory(store: MessageStore, pending: int) -> None:
    without = plain_latency(store)
    before = rss_mb()
    due = now_ms() + HOUR_MS
    batch = 1000
    for first in range(0, pending, batch):
        store.put_messages(
            [Message("Mem", BODY, queue_id=0, deliver_at=due + (first + i) % HOUR_MS) for i in range(batch)]
        )
    while store.timer_status()["not_enqueued"]:
        time.sleep(0.5)
    after = rss_mb()
    print(
        f"memory: RSS anonymous {before[0]:.0f} -> {after[0]:.0f} MB, mapped files {before[1]:.0f} -> "
        f"{after[1]:.0f} MB, with {store.timer_status()['pending']:,} pending timers"
    )
    print(f"a plain message without pending timers: {without}")
    print(f"a plain message with them: {plain_latency(store)}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--count", type=int, default=50_000)
    ap.add_argument("--rate", type=int, default=1000)
    ap.add_argument("--seconds", type=float, default=10)
    ap.add_argument("--burst", type=int, default=20_000)
    ap.add_argument("--pending", type=int, default=200_000)
    ap.add_argument("--dir", type=Path)
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(dir=args.dir))
    try:
        with MessageStore.open(root / "store", StoreConfig()) as store:
            enqueue_rate(store, args.count)
            lateness(store, args.rate, args.seconds)
            burst(store, args.burst)
            delivery_cost(store, args.burst)
            memory(store, args.pending)
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
