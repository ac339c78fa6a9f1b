"""How soon a follower in another process sees a message after the writer's put returns.

A writer process puts 100-byte messages at a steady RATE (columnar ``put_batch`` of 100 every
millisecond, to topic Load) and, every 2 ms, one probe message (topic Probe, queue 0) whose put
return time (CLOCK_MONOTONIC, shared by every process of the machine) goes into a shared array.
A follower process (``MessageStore.open(readonly=True)``) waits on the probe queue with
``wait_for_message`` and notes when each probe becomes readable. Latency = seen - put returned
(0 when the follower saw it before the put call returned: dispatch runs beside the caller).

``--consumer`` has the follower read the probes with an asyncio consumer (``open_consumer`` and
``await apoll``) instead of ``wait_for_message``: the latency of the asyncio form.

``--all`` has the follower read every message the writer puts, not only the probes: a consumer of
both topics (``open_consumer``, after ``warm.preload_reads``) takes them as columns
(``poll_batch``), bodies included. Besides the probes' latency it gives each Load batch's: from
its put's return to the follower's first ``poll_batch`` return that reached its last message.

``--split`` also notes when the writer published each dispatch pass (``SignalWriter.publish``
returned) and when the follower applied each publication, and splits the latency into put ->
published -> applied -> readable (an instrumented run: it wraps those two methods).

    python benchmarks/follower.py [--seconds S] [--rate R] [--dir DIR] [--split] [--consumer | --all]
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import shutil
import tempfile
import time
from multiprocessing.sharedctypes import Synchronized, SynchronizedArray
from pathlib import Path

import numpy as np

from rocketstore import Message, MessageStore, StoreConfig, follow
from rocketstore.codec.dispatch_signal import DispatchSignal
from rocketstore.consumer import open_consumer
from rocketstore.warm import preload_reads

BODY = bytes(100)
CFG = StoreConfig(commitlog_segment_size=256 << 20)
EVENTS = 200_000  # publications / applications noted at most with --split


class Timeline:
    """(time, number) pairs noted by one process into shared arrays: a commitlog offset reached,
    or a Load batch's queue and end offset."""

    def __init__(self, ctx: mp.context.SpawnContext) -> None:
        self.ns = ctx.Array("q", EVENTS, lock=False)
        self.offset = ctx.Array("q", EVENTS, lock=False)
        self.count = ctx.Value("q", 0, lock=False)

    def note(self, dispatched_to: int, ns: int = 0) -> None:
        i = self.count.value
        if i < EVENTS:
            self.ns[i] = ns or time.monotonic_ns()
            self.offset[i] = dispatched_to
            self.count.value = i + 1

    def noted(self) -> tuple[np.ndarray, np.ndarray]:
        n = self.count.value
        return np.array(self.ns[:n], dtype=np.int64), np.array(self.offset[:n], dtype=np.int64)

    def first_reaching(self, ends: np.ndarray) -> np.ndarray:
        """For each commitlog end offset, when this timeline first reached it (0: never)."""
        n = self.count.value
        reached = np.maximum.accumulate(np.array(self.offset[:n], dtype=np.int64))
        at = np.searchsorted(reached, ends)
        found = at < n
        out = np.zeros(len(ends), dtype=np.int64)
        out[found] = np.array(self.ns[:n], dtype=np.int64)[at[found]]
        return out


def note_publications(timeline: Timeline) -> None:
    publish = follow.SignalWriter.publish

    def noted(self: follow.SignalWriter, dispatched_to: int) -> None:
        publish(self, dispatched_to)
        timeline.note(dispatched_to)

    follow.SignalWriter.publish = noted  # type: ignore[method-assign]


def note_applications(timeline: Timeline) -> None:
    apply = follow.StoreFollower._apply

    def noted(self: follow.StoreFollower, signal: DispatchSignal) -> None:
        apply(self, signal)
        timeline.note(signal.dispatched_to)

    follow.StoreFollower._apply = noted  # type: ignore[method-assign]


def writer(
    root: str,
    seconds: float,
    rate: int,
    put_ns: SynchronizedArray[int],
    put_end: SynchronizedArray[int],
    ready: Synchronized[int],
    published: Timeline | None,
    batches: Timeline | None,
) -> None:
    if published is not None:
        note_publications(published)
    with MessageStore.open(root, CFG) as store:
        store.put_message(Message(topic="Probe", body=b"start", queue_id=0))
        for queue_id in range(4):  # every queue there before the follower opens
            store.put_batch("Load", [BODY] * 25, queue_ids=queue_id)
        store.wait_dispatched()
        ready.value = 1
        while ready.value != 2:  # the follower is open and waiting
            time.sleep(0.001)
        per_ms = max(1, rate // 1000)
        bodies = [BODY] * per_ms
        start = time.monotonic()
        probes = 0
        tick = 0
        while time.monotonic() - start < seconds and probes < len(put_ns):
            tick += 1
            put = store.put_batch("Load", bodies, queue_ids=tick % 4)
            if batches is not None:  # the batch's queue and end offset, coded in one number
                batches.note((tick % 4) << 40 | int(put.queue_offsets[-1]) + 1)
            if tick % 2 == 0:
                r = store.put_message(Message(topic="Probe", body=b"p", queue_id=0))
                put_ns[probes] = time.monotonic_ns()
                put_end[probes] = r.physical_offset + r.wrote_bytes
                probes += 1
            lag = start + tick / 1000 - time.monotonic()
            if lag > 0:
                time.sleep(lag)
        store.wait_dispatched()


def follower(
    root: str,
    probes_max: int,
    seen_ns: SynchronizedArray[int],
    ready: Synchronized[int],
    applied: Timeline | None,
) -> None:
    if applied is not None:
        note_applications(applied)
    with MessageStore.open(root, CFG, readonly=True) as store:
        ready.value = 2
        for i in range(probes_max):
            # probe i is queue offset i + 1 (offset 0 is the start message)
            if not store.wait_for_message("Probe", 0, i + 1, 5.0):
                return
            seen_ns[i] = time.monotonic_ns()


def async_follower(
    root: str,
    probes_max: int,
    seen_ns: SynchronizedArray[int],
    ready: Synchronized[int],
    applied: Timeline | None,
) -> None:
    if applied is not None:
        note_applications(applied)

    async def consume() -> None:
        with open_consumer(root, "bench", "Probe", config=CFG, start="earliest", auto_commit=False) as c:
            ready.value = 2
            while True:
                messages = await c.apoll(64, timeout=5.0)
                if not messages:
                    return
                now = time.monotonic_ns()
                for m in messages:
                    if m.queue_id == 0 and 0 < m.queue_offset <= probes_max:
                        seen_ns[m.queue_offset - 1] = now

    asyncio.run(consume())


def every_message_follower(
    root: str,
    probes_max: int,
    seen_ns: SynchronizedArray[int],
    ready: Synchronized[int],
    applied: Timeline | None,
    reached: Timeline,
) -> None:
    if applied is not None:
        note_applications(applied)
    preload_reads()  # before it reads: not half a second into the writer's stream
    subscription = {"Load": None, "Probe": None}
    with open_consumer(root, "bench", subscription, config=CFG, start="earliest", auto_commit=False) as c:
        ready.value = 2
        read = 0
        while True:
            batches = c.poll_batch(timeout=5.0)
            if not batches:
                break
            now = time.monotonic_ns()
            for b in batches:
                read += len(b.queue_offsets)
                if b.topic == "Load" and len(b.queue_offsets):
                    reached.note(b.queue_id << 40 | int(b.queue_offsets[-1]) + 1, now)
                elif b.topic == "Probe":
                    offsets = b.queue_offsets[(b.queue_offsets > 0) & (b.queue_offsets <= probes_max)]
                    for offset in offsets.tolist():
                        seen_ns[offset - 1] = now
    print(f"the follower read {read:,} messages")


def print_batch_latency(batches: Timeline, reached: Timeline) -> None:
    """Each Load batch's latency: its put's return to the follower's first read reaching its end."""
    put_at, put_key = batches.noted()
    read_at, read_key = reached.noted()
    lat = []
    for queue_id in range(4):
        mine = (put_key >> 40) == queue_id
        ends = put_key[mine] & ((1 << 40) - 1)
        got = (read_key >> 40) == queue_id
        read_ends = np.maximum.accumulate(read_key[got] & ((1 << 40) - 1))
        at = np.searchsorted(read_ends, ends)
        seen = at < len(read_ends)
        lat.append(np.maximum(0, read_at[got][at[seen]] - put_at[mine][seen]) / 1e6)
    every = np.concatenate(lat)
    print(f"Load batches seen by the follower: {len(every):,} of {len(put_at):,}")
    print_latency("latency of each batch, put returned -> read by the follower", every)


def print_latency(what: str, ms: np.ndarray) -> None:
    if len(ms):
        p50, p90, p99, worst = np.percentile(ms, [50, 90, 99, 100])
        print(f"{what}: median {p50:.3f} ms, p90 {p90:.3f} ms, p99 {p99:.3f} ms, max {worst:.3f} ms")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--rate", type=int, default=100_000, help="messages per second the writer puts")
    ap.add_argument("--dir", type=Path, default=None)
    ap.add_argument("--split", action="store_true", help="split the latency at publication and application")
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--consumer", action="store_true", help="the follower is an asyncio consumer")
    mode.add_argument("--all", action="store_true", help="the follower reads every message, as columns")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(dir=args.dir))
    root = str(work / "store")
    try:
        n = int(args.seconds * 500) + 10
        ctx = mp.get_context("spawn")
        put_ns = ctx.Array("q", n, lock=False)
        put_end = ctx.Array("q", n, lock=False)
        seen_ns = ctx.Array("q", n, lock=False)
        ready = ctx.Value("i", 0, lock=False)
        published = Timeline(ctx) if args.split else None
        applied = Timeline(ctx) if args.split else None
        batches = Timeline(ctx) if args.all else None
        reached = Timeline(ctx)
        w = ctx.Process(
            target=writer, args=(root, args.seconds, args.rate, put_ns, put_end, ready, published, batches)
        )
        w.start()
        while ready.value != 1:
            time.sleep(0.01)
        if args.all:
            f = ctx.Process(target=every_message_follower, args=(root, n, seen_ns, ready, applied, reached))
        else:
            read = async_follower if args.consumer else follower
            f = ctx.Process(target=read, args=(root, n, seen_ns, ready, applied))
        f.start()
        w.join()
        f.join(30)
        puts = np.array(put_ns[:], dtype=np.int64)
        seen = np.array(seen_ns[:], dtype=np.int64)
        done = (puts > 0) & (seen > 0)
        lat_ms = np.maximum(0, seen[done] - puts[done]) / 1e6
        with MessageStore.open(root, CFG, readonly=True) as store:
            load = sum(store.max_offset_in_queue("Load", q) for q in range(4))
        print(f"writer: {load:,} Load messages + {int((puts > 0).sum())} probes in {args.seconds:.1f} s")
        print(f"probes seen by the follower: {int(done.sum())} of {int((puts > 0).sum())}")
        print_latency("latency put returned -> visible in the follower", lat_ms)
        if batches is not None:
            print_batch_latency(batches, reached)
        if published is not None and applied is not None and done.any():
            ends = np.array(put_end[:], dtype=np.int64)[done]
            pub = published.first_reaching(ends)
            app = applied.first_reaching(ends)
            # signed: the follower may apply a publication before the writer's thread notes it
            for name, later, earlier in (
                ("put returned -> published", pub, puts[done]),
                ("published -> applied by the follower", app, pub),
                ("applied -> readable", seen[done], app),
            ):
                part = (later - earlier) / 1e6
                q50, q90, q99 = np.percentile(part, [50, 90, 99])
                print(f"  {name:38s} median {q50:7.3f} ms, p90 {q90:7.3f} ms, p99 {q99:7.3f} ms")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
