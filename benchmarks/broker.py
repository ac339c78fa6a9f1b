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

Load sources (``--load``, several at once):

* ``python``: the official Python client as above.
* ``batch``: a client built from the protocol's generated stubs that sends ``SEND_BATCH`` (100)
  messages per SendMessage, ``SEND_REQUESTS`` requests in flight, receives 32 per ReceiveMessage and
  acks the 32 in one AckMessage, two consumer threads per process: the broker's own floor, apart
  from what the official clients cost it (one RPC per send and per ack).
* ``node``: the official Node.js client (``benchmarks/broker_node.js``; `make node` installs it
  into tests/broker/node, or set ROCKETSTORE_NODE_MODULES), ``--window`` sends and acks in flight.

``--src DIR ...`` runs the broker from each of these source trees in turn (say the main branch's
``src`` and this one's), ``--repeat N`` times in alternation, and reports the median and range of
each figure per tree: on a shared machine only figures taken side by side compare.

``--profile FILE`` runs the ASYNC_FLUSH broker under cProfile (its event-loop thread: gRPC,
protobuf, the service) and prints the top functions.

Run: ``python benchmarks/broker.py [--messages 20000] [--clients 1 8] [--load python batch node]``.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
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
NODE_SCRIPT = ROOT / "benchmarks" / "broker_node.js"
NODE_MODULES = ROOT / "tests" / "broker" / "node" / "node_modules"
SEND_BATCH = 100  # messages per SendMessage of the batching load
SEND_REQUESTS = 2  # SendMessage calls in flight per batching producer
RECEIVE_BATCH = 32
sys.path.insert(0, str(ROOT / "benchmarks"))
BODY = b"x" * 1024
TOPIC = "Bench"
GROUP = "BenchGroup"
# the shared machine's disk may be fuller than the store's default limits
BROKER_CONF = (
    "disk_warning_ratio=100\ndisk_clean_forcibly_ratio=100\ndiskMaxUsedSpaceRatio=95\n"
    "mappedFileSizeCommitLog=268435456\nlong_polling_min_ms=0\n"
)


def cpu_seconds(pid: int, stat: str | None = None) -> float:
    """User + system CPU seconds of a process (or of the thread whose ``stat`` file is given)."""
    fields = Path(stat or f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def count_acked(acked: Any, finished: Any, n: int, total: int) -> None:
    """Add ``n`` acks; the one that completes ``total`` records the time of the run's end."""
    with acked.get_lock():
        acked.value += n
        if acked.value >= total and not finished.value:
            finished.value = time.perf_counter()


# --- rocketstore ---------------------------------------------------------------------------------
@contextmanager
def rocketstore_broker(root: Path, flush: str, profile: str | None, src: str) -> Iterator[tuple[int, int]]:
    conf = root / "broker.conf"
    conf.write_text(BROKER_CONF + f"flushDiskType={flush}\n")
    cmd = [sys.executable]
    if profile:
        cmd += ["-m", "cProfile", "-o", profile]
    cmd += ["-m", "rocketstore.cli", "serve", str(root / "store"), "--create", "--listen", "127.0.0.1:0"]
    cmd += ["--remoting", "off", "--namesrv", "off"]  # gRPC only: no fixed ports to clash
    cmd += ["--config", str(conf)]
    env = {**os.environ, "PYTHONPATH": src}
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
                try:
                    msgs = consumer.receive(32, 30)
                except Exception as exc:  # a receive the client timed out (a loaded machine): again
                    print(f"receive failed, retried: {exc!r:.200}", file=sys.stderr)
                    continue
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
    """Before the clock starts: the group starts at the end of the queues, so it receives once
    before anything is sent; and a few messages of another topic are sent, received and acked,
    so that what a broker does once (the index hash's JIT compile or cache load, first imports)
    is not counted per message."""
    from rocketmq.v5.client import ClientConfiguration, Credentials
    from rocketmq.v5.consumer import SimpleConsumer
    from rocketmq.v5.model import FilterExpression, Message
    from rocketmq.v5.producer import Producer

    config = ClientConfiguration(f"127.0.0.1:{port}", Credentials())
    consumer = SimpleConsumer(config, GROUP, {TOPIC: FilterExpression("*")}, 1)
    consumer.startup()
    for _ in range(4):  # every queue of the topic
        consumer.receive(32, 30)
    consumer.shutdown()
    warm_topic, warm_group = f"{TOPIC}Warm", f"{GROUP}Warm"
    warm = SimpleConsumer(config, warm_group, {warm_topic: FilterExpression("*")}, 1)
    warm.startup()
    for _ in range(4):
        warm.receive(32, 30)
    producer = Producer(config, (warm_topic,))
    producer.startup()
    for i in range(16):
        m = Message()
        m.topic = warm_topic
        m.body = BODY
        m.keys = f"warm{i}"
        producer.send(m)
    acked = 0
    deadline = time.monotonic() + 120
    while acked < 16 and time.monotonic() < deadline:
        try:
            got = warm.receive(32, 30)
        except Exception as exc:  # a receive the client timed out (a loaded machine): again
            print(f"warm-up receive failed, retried: {exc!r:.200}", file=sys.stderr)
            continue
        for msg in got:
            warm.ack(msg)
            acked += 1
    producer.shutdown()
    warm.shutdown()


def protocol() -> tuple[Any, Any, Any]:
    """The protocol's generated modules: definitions, service messages, service stubs."""
    from rocketstore.protocol import definition_pb2, service_pb2, service_pb2_grpc

    return definition_pb2, service_pb2, service_pb2_grpc


def batch_client(
    port: int, share: int, total: int, window: int, acked: Any, finished: Any, out: Any, ready: Any, go: Any
) -> None:
    """The batching load: SEND_BATCH messages per SendMessage, RECEIVE_BATCH per ReceiveMessage,
    one AckMessage per received batch (``window`` is unused: SEND_REQUESTS calls are in flight)."""
    import grpc
    from google.protobuf.duration_pb2 import Duration

    pb, rpc, stubs = protocol()
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    stub = stubs.MessagingServiceStub(channel)
    metadata = (("x-mq-client-id", f"bench-batch-{os.getpid()}"),)
    topic, group = pb.Resource(name=TOPIC), pb.Resource(name=GROUP)
    stub.QueryRoute(rpc.QueryRouteRequest(topic=topic), metadata=metadata)
    ready.put(os.getpid())
    go.wait()
    cpu0 = sum(os.times()[:2])
    latencies: list[float] = []
    sent_at = [0.0, 0.0]
    prefix = f"{os.getpid():08X}"

    def request(first: int, n: int) -> Any:
        return rpc.SendMessageRequest(
            messages=[
                pb.Message(
                    topic=topic,
                    body=BODY,
                    system_properties=pb.SystemProperties(
                        message_id=f"{prefix}{first + i:016X}", message_type=pb.MessageType.NORMAL
                    ),
                )
                for i in range(n)
            ]
        )

    def produce() -> None:
        start = time.perf_counter()
        in_flight: list[tuple[Any, float, int]] = []
        sent = 0

        def settle(future: Any, t0: float, n: int) -> None:
            answer = future.result()
            if answer.status.code != pb.Code.OK:
                raise RuntimeError(f"SendMessage answered {answer.status}")
            latencies.extend([time.perf_counter() - t0] * n)

        while sent < share:
            n = min(SEND_BATCH, share - sent)
            in_flight.append(
                (stub.SendMessage.future(request(sent, n), metadata=metadata), time.perf_counter(), n)
            )
            sent += n
            if len(in_flight) >= SEND_REQUESTS:
                settle(*in_flight.pop(0))
        for item in in_flight:
            settle(*item)
        sent_at[:] = [start, time.perf_counter()]

    receive = rpc.ReceiveMessageRequest(
        group=group,
        message_queue=pb.MessageQueue(topic=topic),
        filter_expression=pb.FilterExpression(type=pb.FilterType.TAG, expression="*"),
        batch_size=RECEIVE_BATCH,
        invisible_duration=Duration(seconds=30),
        long_polling_timeout=Duration(seconds=1),
    )

    def consume() -> None:
        while acked.value < total:
            msgs = [
                r.message for r in stub.ReceiveMessage(receive, metadata=metadata) if r.HasField("message")
            ]
            if not msgs:
                continue
            entries = [
                rpc.AckMessageEntry(
                    message_id=m.system_properties.message_id,
                    receipt_handle=m.system_properties.receipt_handle,
                )
                for m in msgs
            ]
            answer = stub.AckMessage(
                rpc.AckMessageRequest(group=group, topic=topic, entries=entries), metadata=metadata
            )
            if answer.status.code != pb.Code.OK:
                raise RuntimeError(f"AckMessage answered {answer.status}")
            count_acked(acked, finished, len(msgs), total)

    threads = [
        threading.Thread(target=produce),
        threading.Thread(target=consume),
        threading.Thread(target=consume),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    out.put((sent_at[0], sent_at[1], latencies, sum(os.times()[:2]) - cpu0))
    channel.close()


def node_env() -> dict[str, str]:
    modules = os.environ.get("ROCKETSTORE_NODE_MODULES") or str(NODE_MODULES)
    return {**os.environ, "NODE_PATH": modules}


def node_missing() -> str | None:
    node = shutil.which("node")
    if node is None:
        return "node is not installed"
    probe = subprocess.run(
        [node, "-e", "require.resolve('rocketmq-client-nodejs')"], env=node_env(), capture_output=True
    )
    if probe.returncode != 0:
        return "rocketmq-client-nodejs is not installed (make node, or set ROCKETSTORE_NODE_MODULES)"
    return None


def run_node(port: int, server_pid: int, clients: int, messages: int, window: int) -> dict[str, float]:
    """``clients`` Node.js processes (broker_node.js): started, then told "go" together; the run
    ends when their "acked N" lines add up to every message sent."""
    share = messages // clients
    total = share * clients
    cmd = ["node", str(NODE_SCRIPT), f"127.0.0.1:{port}", TOPIC, GROUP, str(share), str(window)]
    procs = [
        subprocess.Popen(cmd, env=node_env(), stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        for _ in range(clients)
    ]
    for proc in procs:
        assert proc.stdout is not None
        line = proc.stdout.readline().strip()
        if line != "ready":
            raise RuntimeError(f"a Node.js load process did not start (exit {proc.wait()}): {line!r}")
    lock = threading.Lock()
    count = [0]
    finished = [0.0]
    reports: list[dict[str, Any]] = []

    def follow(proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.startswith("acked "):
                with lock:
                    count[0] += int(line.split()[1])
                    if count[0] >= total and not finished[0]:
                        finished[0] = time.perf_counter()
                        for p in procs:
                            assert p.stdin is not None
                            p.stdin.write("stop\n")
                            p.stdin.flush()
            elif line.startswith("{"):
                reports.append(json.loads(line))

    readers = [threading.Thread(target=follow, args=(p,)) for p in procs]
    for t in readers:
        t.start()
    cpu0 = cpu_seconds(server_pid)
    start = time.perf_counter()
    for proc in procs:
        assert proc.stdin is not None
        proc.stdin.write("go\n")
        proc.stdin.flush()
    for t in readers:
        t.join(1800)
    server_cpu = cpu_seconds(server_pid) - cpu0
    for proc in procs:
        if proc.wait(120) != 0 or not finished[0]:
            raise RuntimeError(f"a Node.js load process failed (exit {proc.returncode})")
    latencies = sorted(x / 1000 for r in reports for x in r["latencies"])
    send_start = min(r["sendStart"] for r in reports) / 1000
    send_end = max(r["sendEnd"] for r in reports) / 1000
    return {
        "send_per_s": total / (send_end - send_start),
        "acked_per_s": total / (finished[0] - start),
        "p50_ms": statistics.median(latencies) * 1000,
        "p99_ms": latencies[int(len(latencies) * 0.99) - 1] * 1000,
        "server_cpu_s_per_1k": server_cpu / total * 1000,
        "client_cpu_s_per_1k": sum(r["cpu"] for r in reports) / total * 1000,
    }


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
    target = {"python": rocketstore_client, "batch": batch_client, "redis": redis_client}[kind]
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


def one_row(
    kind: str,
    flush: str,
    appendfsync: str,
    clients: int,
    args: argparse.Namespace,
    src: str,
    profile: str | None,
) -> dict[str, float]:
    """One run on a fresh broker (or redis-server) in a temporary directory."""
    with tempfile.TemporaryDirectory(prefix="broker-bench-") as tmp:
        root = Path(tmp)
        if kind == "redis":
            with redis_broker(root, appendfsync) as (port, pid):
                return run(kind, port, pid, clients, args.messages, args.window)
        with rocketstore_broker(root, flush, profile, src) as (port, pid):
            warm_group(port)
            if kind == "node":
                return run_node(port, pid, clients, args.messages, args.window)
            return run(kind, port, pid, clients, args.messages, args.window)


FIGURES = ("send_per_s", "acked_per_s", "p50_ms", "p99_ms", "server_cpu_s_per_1k", "client_cpu_s_per_1k")


def cell(values: list[float], digits: int) -> str:
    """The median, and the range when there are several values."""
    text = f"{statistics.median(values):.{digits}f}"
    if len(values) > 1:
        text += f" ({min(values):.{digits}f}-{max(values):.{digits}f})"
    return text


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--window", type=int, default=32, help="sends in flight per producer")
    parser.add_argument(
        "--load", nargs="+", choices=["python", "batch", "node", "redis"], default=["python", "redis"]
    )
    parser.add_argument(
        "--flush", nargs="+", choices=["ASYNC_FLUSH", "SYNC_FLUSH"], default=["ASYNC_FLUSH", "SYNC_FLUSH"]
    )
    parser.add_argument("--src", nargs="+", default=[SRC], help="rocketstore source trees to compare")
    parser.add_argument("--repeat", type=int, default=1, help="runs of each row, in alternation")
    parser.add_argument("--profile", help="cProfile the first ASYNC_FLUSH broker into this file")
    args = parser.parse_args()
    if "node" in args.load and node_missing():
        parser.error(f"--load node: {node_missing()}")
    if "redis" in args.load and not shutil.which("redis-server"):
        parser.error("--load redis: redis-server is not installed")
    appendfsync = {"ASYNC_FLUSH": "everysec", "SYNC_FLUSH": "always"}
    rows: list[tuple[str, str, int, str]] = []  # load, flush, clients, source tree ("" for redis)
    for flush in args.flush:
        for load in args.load:
            for clients in args.clients:
                for src in [""] if load == "redis" else args.src:
                    rows.append((load, flush, clients, src))
    results: dict[tuple[str, str, int, str], list[dict[str, float]]] = {row: [] for row in rows}
    print(f"{args.messages} messages of 1 KiB; window {args.window}; load {os.getloadavg()[0]:.1f} at start")
    for _ in range(args.repeat):
        for row in rows:
            load, flush, clients, src = row
            profile = args.profile if load != "redis" and flush == "ASYNC_FLUSH" else None
            results[row].append(one_row(load, flush, appendfsync[flush], clients, args, src, profile))
            print(f"run: {row} {results[row][-1]}", flush=True)  # kept should a later run fail
            if profile:
                stats = pstats.Stats(profile)
                stats.sort_stats("tottime").print_stats(25)
                args.profile = None  # one profile
    print(f"load average at the end {os.getloadavg()[0]:.1f}; medians (ranges) of {args.repeat} runs")
    print(
        f"{'system':<46}{'clients':>8}{'send/s':>18}{'acked/s':>18}{'p50 ms':>18}{'p99 ms':>18}"
        f"{'srv cpu s/1k':>22}{'cli cpu s/1k':>22}"
    )
    for row in rows:
        load, flush, clients, src = row
        if load == "redis":
            label = f"Redis Streams AOF {appendfsync[flush]}"
        else:
            label = f"{load} -> serve {flush}" + (f" [{Path(src).parent.name}]" if len(args.src) > 1 else "")
        runs = results[row]
        widths = (18, 18, 18, 18, 22, 22)
        digits = (0, 0, 2, 2, 3, 3)
        cells = "".join(f"{cell([r[f] for r in runs], d):>{w}}" for f, w, d in zip(FIGURES, widths, digits))
        print(f"{label:<46}{clients:>8}{cells}", flush=True)


if __name__ == "__main__":
    main()
