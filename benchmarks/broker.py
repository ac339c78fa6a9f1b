"""`rocketstore serve` end to end with the official Python client, against Redis Streams.

Workload (issue 16): P client processes (1 and 8 by default), each with a producer sending 1 KiB
messages and a SimpleConsumer receiving (32 per call) and acking them, all at once; a run ends
when every message was acked. The broker runs as its own process (`rocketstore serve`), as
redis-server does. Reported per row: send and end-to-end (acked) throughput, p50/p99 send
latency, and CPU seconds per 1000 messages of the broker and of the clients (where the time goes);
the clock and the CPU counts start once every client process is up and connected.

* rocketstore: `rocketstore serve` with ASYNC_FLUSH and with SYNC_FLUSH. Producers use
  ``send_async`` with ``--window`` sends in flight each (the client's only way to have several
  sends in flight: it sends one message per request); consumers ack with 8 threads (one ack per
  RPC, as the client does). A send's latency is from ``send_async`` to its receipt.
* Redis Streams (redis-py and a private redis-server, AOF ``everysec`` against ASYNC_FLUSH and
  ``always`` against SYNC_FLUSH): XADD pipelined ``--window`` per round trip (one message's
  latency is its pipeline's), XREADGROUP COUNT 32 BLOCK 1000 + XACK of the batch, one stream.

``--profile FILE`` runs the ASYNC_FLUSH broker under cProfile (its event-loop thread: gRPC,
protobuf, the service) and prints the top functions.

Run: ``python benchmarks/broker.py [--messages 20000] [--clients 1 8]``.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import multiprocessing as mp
import os
import pstats
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SRC = str(ROOT / "src")
sys.path.insert(0, str(ROOT / "benchmarks"))
BODY = b"x" * 1024
TOPIC = "Bench"
GROUP = "BenchGroup"
# the shared machine's disk may be fuller than the store's default limits
BROKER_CONF = (
    "disk_warning_ratio=100\ndisk_clean_forcibly_ratio=100\ndiskMaxUsedSpaceRatio=95\n"
    "mappedFileSizeCommitLog=268435456\nlong_polling_min_ms=0\n"
)


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def count_acked(acked: Any, finished: Any, n: int, total: int) -> None:
    """Add ``n`` acks; the one that completes ``total`` records the time of the run's end."""
    with acked.get_lock():
        acked.value += n
        if acked.value >= total and not finished.value:
            finished.value = time.perf_counter()


# --- rocketstore ---------------------------------------------------------------------------------
@contextmanager
def rocketstore_broker(root: Path, flush: str, profile: str | None) -> Iterator[tuple[int, int]]:
    conf = root / "broker.conf"
    conf.write_text(BROKER_CONF + f"flushDiskType={flush}\n")
    cmd = [sys.executable]
    if profile:
        cmd += ["-m", "cProfile", "-o", profile]
    cmd += ["-m", "rocketstore.cli", "serve", str(root / "store"), "--create", "--listen", "127.0.0.1:0"]
    cmd += ["--remoting", "off", "--namesrv", "off"]  # gRPC only: no fixed ports to clash
    cmd += ["--config", str(conf)]
    env = {**os.environ, "PYTHONPATH": SRC}
    proc = subprocess.Popen(cmd, env=env, stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    port = 0
    for line in proc.stderr:
        found = re.search(r"serving .* on [\d.]+:(\d+)", line)
        if found:
            port = int(found.group(1))
            break
    if not port:
        raise RuntimeError(f"rocketstore serve did not start (exit {proc.wait()})")
    threading.Thread(target=lambda: [None for _ in proc.stderr], daemon=True).start()  # type: ignore[union-attr]
    try:
        yield port, proc.pid
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(120)


def rocketstore_client(
    port: int, share: int, total: int, window: int, acked: Any, finished: Any, out: Any, ready: Any, go: Any
) -> None:
    from rocketmq.v5.client import ClientConfiguration, Credentials
    from rocketmq.v5.consumer import SimpleConsumer
    from rocketmq.v5.model import FilterExpression, Message
    from rocketmq.v5.producer import Producer

    config = ClientConfiguration(f"127.0.0.1:{port}", Credentials())
    producer = Producer(config, (TOPIC,))
    consumer = SimpleConsumer(config, GROUP, {TOPIC: FilterExpression("*")}, 2)
    producer.startup()
    consumer.startup()
    ready.put(os.getpid())
    go.wait()
    cpu0 = sum(os.times()[:2])
    latencies: list[float] = []
    slots = threading.Semaphore(window)
    done = threading.Event()
    sent_at: list[float] = [0.0, 0.0]

    def produce() -> None:
        start = time.perf_counter()
        futures = []
        for _ in range(share):
            slots.acquire()
            m = Message()
            m.topic = TOPIC
            m.body = BODY
            t0 = time.perf_counter()
            f = producer.send_async(m)

            def finished(fut: Any, t0: float = t0) -> None:
                latencies.append(time.perf_counter() - t0)
                slots.release()

            f.add_done_callback(finished)
            futures.append(f)
        for f in futures:
            f.result()
        sent_at[:] = [start, time.perf_counter()]

    def consume() -> None:
        with concurrent.futures.ThreadPoolExecutor(8) as acks:
            while acked.value < total:
                msgs = consumer.receive(32, 30)
                for _ in acks.map(consumer.ack, msgs):
                    pass
                count_acked(acked, finished, len(msgs), total)
        done.set()

    threads = [threading.Thread(target=produce), threading.Thread(target=consume)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    out.put((sent_at[0], sent_at[1], latencies, sum(os.times()[:2]) - cpu0))
    producer.shutdown()
    consumer.shutdown()


def warm_group(port: int) -> None:
    """A group starts at the end of the queues: receive once before anything is sent."""
    from rocketmq.v5.client import ClientConfiguration, Credentials
    from rocketmq.v5.consumer import SimpleConsumer
    from rocketmq.v5.model import FilterExpression

    consumer = SimpleConsumer(
        ClientConfiguration(f"127.0.0.1:{port}", Credentials()), GROUP, {TOPIC: FilterExpression("*")}, 1
    )
    consumer.startup()
    for _ in range(4):  # every queue of the topic
        consumer.receive(32, 30)
    consumer.shutdown()


# --- Redis Streams -----------------------------------------------------------------------------
def redis_client(
    port: int, share: int, total: int, window: int, acked: Any, finished: Any, out: Any, ready: Any, go: Any
) -> None:
    import redis

    redis.Redis(host="127.0.0.1", port=port).ping()
    ready.put(os.getpid())
    go.wait()
    cpu0 = sum(os.times()[:2])
    latencies: list[float] = []
    sent_at = [0.0, 0.0]

    def produce() -> None:
        r = redis.Redis(host="127.0.0.1", port=port)
        start = time.perf_counter()
        left = share
        while left:
            n = min(window, left)
            pipe = r.pipeline(transaction=False)
            for _ in range(n):
                pipe.xadd(TOPIC, {"body": BODY})
            t0 = time.perf_counter()
            pipe.execute()
            latencies.extend([time.perf_counter() - t0] * n)
            left -= n
        sent_at[:] = [start, time.perf_counter()]

    def consume() -> None:
        r = redis.Redis(host="127.0.0.1", port=port)
        name = f"c{os.getpid()}"
        while acked.value < total:
            reply = r.xreadgroup(GROUP, name, {TOPIC: ">"}, count=32, block=1000)
            for _, entries in reply or ():
                ids = [entry_id for entry_id, _ in entries]
                if ids:
                    r.xack(TOPIC, GROUP, *ids)
                    count_acked(acked, finished, len(ids), total)

    threads = [threading.Thread(target=produce), threading.Thread(target=consume)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    out.put((sent_at[0], sent_at[1], latencies, sum(os.times()[:2]) - cpu0))


@contextmanager
def redis_broker(root: Path, appendfsync: str) -> Iterator[tuple[int, int]]:
    from compare import redis_server

    with redis_server(root / "redis", appendfsync) as client:
        client.xgroup_create(TOPIC, GROUP, id="0", mkstream=True)
        pid = int(client.info("server")["process_id"])
        port = int(client.connection_pool.connection_kwargs["port"])
        yield port, pid


# --- one run -------------------------------------------------------------------------------------
def run(kind: str, port: int, server_pid: int, clients: int, messages: int, window: int) -> dict[str, float]:
    ctx = mp.get_context("spawn")
    acked, finished = ctx.Value("q", 0), ctx.Value("d", 0.0)
    out, ready, go = ctx.Queue(), ctx.Queue(), ctx.Event()
    target = rocketstore_client if kind == "rocketstore" else redis_client
    share = messages // clients
    total = share * clients
    procs = [
        ctx.Process(target=target, args=(port, share, total, window, acked, finished, out, ready, go))
        for _ in range(clients)
    ]
    for p in procs:
        p.start()
    for _ in procs:  # client start-up (imports, routes, settings) is not the broker's time
        ready.get(timeout=300)
    cpu0 = cpu_seconds(server_pid)
    start = time.perf_counter()
    go.set()
    results = [out.get(timeout=1800) for _ in procs]
    server_cpu = cpu_seconds(server_pid) - cpu0
    for p in procs:
        p.join()
    # the last ack: not the other consumers' last (empty) poll, nor the clients' shutdown
    elapsed = finished.value - start
    send_start = min(r[0] for r in results)
    send_end = max(r[1] for r in results)
    latencies = sorted(x for r in results for x in r[2])
    return {
        "send_per_s": total / (send_end - send_start),
        "acked_per_s": total / elapsed,
        "p50_ms": statistics.median(latencies) * 1000,
        "p99_ms": latencies[int(len(latencies) * 0.99) - 1] * 1000,
        "server_cpu_s_per_1k": server_cpu / total * 1000,
        "client_cpu_s_per_1k": sum(r[3] for r in results) / total * 1000,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--window", type=int, default=32, help="sends in flight per producer")
    parser.add_argument("--only", choices=["rocketstore", "redis"])
    parser.add_argument(
        "--flush", nargs="+", choices=["ASYNC_FLUSH", "SYNC_FLUSH"], default=["ASYNC_FLUSH", "SYNC_FLUSH"]
    )
    parser.add_argument("--profile", help="cProfile the ASYNC_FLUSH broker into this file")
    args = parser.parse_args()
    pairs = [("ASYNC_FLUSH", "everysec"), ("SYNC_FLUSH", "always")]
    header = f"{'system':<34}{'clients':>8}{'send/s':>10}{'acked/s':>10}{'p50 ms':>9}{'p99 ms':>9}"
    print(f"{args.messages} messages of 1 KiB; window {args.window}")
    print(header + f"{'srv cpu s/1k':>14}{'cli cpu s/1k':>14}")
    for flush, appendfsync in pairs:
        if flush not in args.flush:
            continue
        systems = []
        if args.only in (None, "rocketstore"):
            systems.append(("rocketstore", f"rocketstore serve {flush}"))
        if args.only in (None, "redis") and shutil.which("redis-server"):
            systems.append(("redis", f"Redis Streams AOF {appendfsync}"))
        for kind, label in systems:
            for clients in args.clients:
                with tempfile.TemporaryDirectory(prefix="broker-bench-") as tmp:
                    root = Path(tmp)
                    profile = args.profile if kind == "rocketstore" and flush == "ASYNC_FLUSH" else None
                    broker = (
                        rocketstore_broker(root, flush, profile)
                        if kind == "rocketstore"
                        else redis_broker(root, appendfsync)
                    )
                    with broker as (port, pid):
                        if kind == "rocketstore":
                            warm_group(port)
                        row = run(kind, port, pid, clients, args.messages, args.window)
                print(
                    f"{label:<34}{clients:>8}{row['send_per_s']:>10.0f}{row['acked_per_s']:>10.0f}"
                    f"{row['p50_ms']:>9.2f}{row['p99_ms']:>9.2f}"
                    f"{row['server_cpu_s_per_1k']:>14.3f}{row['client_cpu_s_per_1k']:>14.3f}",
                    flush=True,
                )
                if profile:
                    stats = pstats.Stats(profile)
                    stats.sort_stats("tottime").print_stats(15)
                    args.profile = None  # one profile


if __name__ == "__main__":
    main()
