"""Replication on loopback: ASYNC_MASTER slave lag, SYNC_MASTER put throughput and latency.

0. Ingest: an empty slave takes a log of N messages written before it connected; its rate of
   receiving (acked to the master) and of dispatching (consume queues and index built), from
   its first byte.
1. ASYNC_MASTER + one SLAVE: ``put_batch`` of B messages (100-byte bodies) as fast as it goes;
   after each batch the slave's lag is sampled (master max offset - slave max offset, in bytes,
   and how long the slave then takes to reach the master's end, in ms), as the slave's acks
   tell the master; the slave runs in its own process. Reported: put rate,
   lag p50 / p99 / max in bytes, catch-up time p50 / p99 / max in ms, and how long the slave
   needs to hold everything after the last put; the same for the slave's dispatch (from the
   slave's own samples of its dispatched end).
2. SYNC_MASTER + one SLAVE, puts of one message from 1 and from 16 threads: messages per second
   and per-put latency p50 / p99; then the same with a plain ASYNC_MASTER (no slave) in the
   same run.

    python benchmarks/replication.py [--messages N] [--batch B] [--sync-puts N] [--dir DIR]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from rocketstore import Message, MessageStore, PutStatus, StoreConfig

BODY = bytes(range(100))
BASE = StoreConfig(commitlog_segment_size=64 << 20, ha_listen_host="127.0.0.1", ha_listen_port=0)


_SLAVE = """
import json, sys, threading, time
from rocketstore import MessageStore, StoreConfig
config = StoreConfig(commitlog_segment_size=64 << 20, broker_role="SLAVE", ha_master_address=sys.argv[2])
samples = []  # (time, log end, dispatched end) every ~1 ms: perf_counter is the system's monotonic clock
with MessageStore.open(sys.argv[1], config) as store:
    done = threading.Event()
    def sample():
        while not done.is_set():
            end = store.max_phy_offset()
            samples.append((time.perf_counter(), end, end - store.dispatch_behind_bytes))
            time.sleep(0.001)
    sampler = threading.Thread(target=sample)
    sampler.start()
    sys.stdin.read()  # until the benchmark closes it
    store.wait_dispatched(120)  # the samples then show when queues and index held everything
    time.sleep(0.01)
    done.set()
    sampler.join()
json.dump(samples, sys.stdout)
"""


class _Slave:
    """The slave process's samples of its own log end and dispatched end, once it has stopped."""

    samples: np.ndarray  # (time, log end, dispatched end) rows

    def dispatched_at(self, times: np.ndarray) -> np.ndarray:
        """The slave's dispatched end at each of ``times``."""
        at = np.searchsorted(self.samples[:, 0], times, side="right") - 1
        return np.maximum.accumulate(self.samples[:, 2])[np.maximum(at, 0)]

    def dispatched_by(self, offsets: np.ndarray) -> np.ndarray:
        """When the slave had dispatched up to each of ``offsets`` (the last sample if never)."""
        reached = np.searchsorted(np.maximum.accumulate(self.samples[:, 2]), offsets, side="left")
        return self.samples[np.minimum(reached, len(self.samples) - 1), 0]


@contextlib.contextmanager
def _slave(master: MessageStore, root: Path) -> Iterator[_Slave]:
    """A slave in its own process (as in production: it must not share the master's GIL)."""
    address = f"127.0.0.1:{master.ha_port}"
    proc = subprocess.Popen(
        [sys.executable, "-c", _SLAVE, str(root), address], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    handle = _Slave()
    try:
        yield handle
    finally:
        out, _ = proc.communicate(timeout=120)
        handle.samples = np.array(json.loads(out) or [[0.0, 0, 0]], dtype=np.float64)


def _wait_dispatched(handle: _Slave, end: int) -> float:
    """When the slave had dispatched ``end`` (its samples are read once it has stopped)."""
    return float(handle.dispatched_by(np.array([end]))[0])


def _streaming(master: MessageStore) -> bool:
    slaves = master.ha_status()["master"]["slaves"]  # type: ignore[index]
    return any(s["state"] == "streaming" for s in slaves)  # type: ignore[attr-defined]


def _acked(master: MessageStore) -> int:
    """The slave's end as its acks tell the master."""
    return int(master.ha_status()["master"]["acked_offset"])  # type: ignore[index]


def _wait_for(condition: object, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise RuntimeError("timed out")
        time.sleep(0.0005)


def _percentiles(values: np.ndarray, unit: str, fmt: str = ",.0f") -> str:
    return ", ".join(f"{name} {v:{fmt}} {unit}" for name, v in zip(("p50", "p99", "max"), _p(values)))


def _p(values: np.ndarray) -> tuple[float, float, float]:
    return float(np.percentile(values, 50)), float(np.percentile(values, 99)), float(values.max())


def async_lag(root: Path, n: int, batch: int) -> None:
    with MessageStore.open(root / "am", BASE) as master, _slave(master, root / "as") as slave:
        _wait_for(lambda: _streaming(master))
        bodies = [BODY] * batch
        seen: list[tuple[float, int]] = []  # (time, the slave's acked end), polled every ~1 ms
        done = threading.Event()

        def watch() -> None:
            while not done.is_set():
                seen.append((time.perf_counter(), _acked(master)))
                time.sleep(0.001)

        watcher = threading.Thread(target=watch)
        watcher.start()
        puts: list[tuple[float, int]] = []  # (time, master end) after each batch
        start = time.perf_counter()
        for i in range(n // batch):
            assert master.put_batch("Bench", bodies, queue_ids=i % 8).status is PutStatus.PUT_OK
            puts.append((time.perf_counter(), master.max_phy_offset()))
        put_s = time.perf_counter() - start
        end = master.max_phy_offset()
        _wait_for(lambda: _acked(master) >= end)
        drain_ms = (time.perf_counter() - start - put_s) * 1000
        done.set()
        watcher.join()
    times = np.array([t for t, _ in seen])
    acked = np.maximum.accumulate(np.array([a for _, a in seen]))
    put_t = np.array([t for t, _ in puts])
    put_end = np.array([e for _, e in puts])
    # bytes behind right after each batch, and how long until the slave acked that batch's end
    lag = put_end - acked[np.maximum(np.searchsorted(times, put_t, side="right") - 1, 0)]
    reached = np.searchsorted(acked, put_end, side="left")
    ms = (times[np.minimum(reached, len(times) - 1)] - put_t) * 1000
    # the same for the slave's dispatch (its consume queues and index), from its own samples
    dlag = put_end - slave.dispatched_at(put_t)
    dms = (slave.dispatched_by(put_end) - put_t) * 1000
    total = len(puts) * batch
    print(
        f"ASYNC_MASTER + slave, put_batch of {batch}: {total / put_s:,.0f} msg/s "
        f"({end / put_s / 1e6:.1f} MB/s)"
    )
    print(f"  slave behind after a batch: {_percentiles(lag, 'B')}")
    print(f"  until acked: {_percentiles(ms, 'ms', '.1f')}")
    print(f"  slave acked everything {drain_ms:.1f} ms after the last put")
    print(f"  slave dispatch behind after a batch: {_percentiles(dlag, 'B')}")
    print(f"  until dispatched: {_percentiles(dms, 'ms', '.1f')}")
    last_ms = (_wait_dispatched(slave, end) - put_t[-1]) * 1000
    print(f"  slave dispatched everything {last_ms:.1f} ms after the last put")


def ingest(root: Path, n: int, batch: int) -> None:
    """How fast an empty slave takes a log written before it connected: received (acked) and
    dispatched, from its first byte."""
    with MessageStore.open(root / "im", BASE) as master:
        for i in range(n // batch):
            assert master.put_batch("Bench", [BODY] * batch, queue_ids=i % 8).status is PutStatus.PUT_OK
        end = master.max_phy_offset()
        with _slave(master, root / "is") as slave:
            _wait_for(lambda: _acked(master) >= end, 300)
            acked_at = time.perf_counter()
    samples = slave.samples
    first = float(samples[np.argmax(samples[:, 1] > 0), 0])  # the slave's first bytes
    dispatched_at = _wait_dispatched(slave, end)
    count = n // batch * batch
    for what, at in (("received", acked_at), ("dispatched", dispatched_at)):
        secs = at - first
        print(
            f"slave from empty, {end / 1e6:.0f} MB / {count:,} messages {what} in {secs * 1000:.0f} ms: "
            f"{end / secs / 1e6:.1f} MB/s, {count / secs:,.0f} msg/s"
        )


def sync_puts(store: MessageStore, n: int, threads: int) -> tuple[float, np.ndarray]:
    per_thread = n // threads
    latencies: list[list[float]] = [[] for _ in range(threads)]
    statuses: set[PutStatus] = set()

    def work(k: int) -> None:
        msg = Message("Bench", BODY, queue_id=k % 8)
        out = latencies[k]
        for _ in range(per_thread):
            t0 = time.perf_counter()
            r = store.put_message(msg)
            out.append(time.perf_counter() - t0)
            statuses.add(r.status)

    workers = [threading.Thread(target=work, args=(k,)) for k in range(threads)]
    start = time.perf_counter()
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    elapsed = time.perf_counter() - start
    assert statuses == {PutStatus.PUT_OK}, statuses
    return per_thread * threads / elapsed, np.array([x for lat in latencies for x in lat]) * 1000


def sync_master(root: Path, n: int) -> None:
    rows = []
    with (
        MessageStore.open(root / "sm", BASE.replace(broker_role="SYNC_MASTER")) as master,
        _slave(master, root / "ss"),
    ):
        _wait_for(lambda: _streaming(master), 30)
        for threads in (1, 16):
            rate, lat = sync_puts(master, n, threads)
            rows.append(("SYNC_MASTER + slave", threads, rate, lat))
    with MessageStore.open(root / "nm", BASE) as alone:
        for threads in (1, 16):
            rate, lat = sync_puts(alone, n, threads)
            rows.append(("ASYNC_MASTER, no slave", threads, rate, lat))
    for name, threads, rate, lat in rows:
        print(
            f"{name:24s} {threads:2d} thread(s): {rate:9,.0f} puts/s, latency p50 "
            f"{np.percentile(lat, 50):.3f} ms, p99 {np.percentile(lat, 99):.3f} ms"
        )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--sync-puts", type=int, default=16_000)
    parser.add_argument("--dir", type=Path, default=None)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="rocketstore-repl-", dir=args.dir))
    try:
        ingest(root, args.messages, args.batch)
        async_lag(root, args.messages, args.batch)
        sync_master(root, args.sync_puts)
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
