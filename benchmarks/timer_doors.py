"""Timer messages through `rocketstore serve`'s doors: sends of timers against plain sends.

One broker (`rocketstore serve`, ASYNC_FLUSH, gRPC and remoting) in its own process; for each
door, ``--count`` sends of a 100 B body with ``--window`` in flight, plain and then as timers
due an hour ahead, alternated ``--repeat`` times; printed: the median messages/s of each and the
ratio (a timer costs the broker one more rewrite into the timer topic and its wheel entry).

* remoting: SEND_MESSAGE_V2 requests over one connection (the broker's own remoting client),
  the timer ones with the ``TIMER_DELAY_SEC`` property, as RocketMQ 4.9.8's Java client sends a
  user property;
* grpc: the official Python client's ``send_async``, the timer ones with ``delivery_timestamp``.

Then ``--lateness`` timers (300) spread 3-25 s ahead through the official Python client, received
by its SimpleConsumer: lateness p50 / p99 / max as the consumer sees it, and how many came early.

    python benchmarks/timer_doors.py [--count 20000] [--window 64] [--repeat 3]

Not for figures on a shared machine: run it alone.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.remoting.harness import Process, accepts, free_port  # noqa: E402  (as benchmarks/remoting.py)

BODY = bytes(range(100))
HOUR_S = 3600


async def remoting_rate(address: str, count: int, window: int, timer: bool) -> float:
    from rocketstore.broker.remoting.client import RemotingClient
    from rocketstore.broker.remoting.codes import RequestCode, ResponseCode
    from rocketstore.broker.remoting.command import RemotingCommand
    from rocketstore.broker.remoting.headers import SendMessageHeader
    from rocketstore.codec.properties import encode_properties

    client = RemotingClient(address)
    slots = asyncio.Semaphore(window)

    async def one(i: int) -> None:
        props = {"UNIQ_KEY": f"B{timer:d}{i:012d}", "WAIT": "true"}
        if timer:
            props["TIMER_DELAY_SEC"] = str(HOUR_S)
        header = SendMessageHeader(
            "bench", "TimerDoor", "TBW102", 4, i % 4, 0, int(time.time() * 1000), 0,
            encode_properties(props), 0, False, None, False, None,
        )  # fmt: skip
        async with slots:
            answer = await client.invoke(
                RemotingCommand(code=RequestCode.SEND_MESSAGE_V2, ext_fields=header.to_ext(), body=BODY), 30
            )
        if answer.code != ResponseCode.SUCCESS:
            raise SystemExit(f"remoting send refused: {answer.code} {answer.remark}")

    try:
        await one(-1)  # the topic made, the connection up
        start = time.perf_counter()
        await asyncio.gather(*(one(i) for i in range(count)))
        return count / (time.perf_counter() - start)
    finally:
        await client.close()


def grpc_rate(producer: Any, count: int, window: int, timer: bool) -> float:
    from rocketmq.v5.model import Message

    slots = threading.Semaphore(window)
    futures = []
    start = time.perf_counter()
    for _ in range(count):
        slots.acquire()
        m = Message()
        m.topic = "TimerDoor"
        m.body = BODY
        if timer:
            m.delivery_timestamp = int(time.time()) + HOUR_S
        f = producer.send_async(m)
        f.add_done_callback(lambda _f: slots.release())
        futures.append(f)
    for f in futures:
        f.result()
    return count / (time.perf_counter() - start)


def grpc_lateness(port: int, producer: Any, count: int) -> str:
    """``count`` timers spread 3-25 s ahead (whole seconds, as the official Python client sends
    them), received by a SimpleConsumer: how late each arrived, and how many early."""
    from rocketmq.v5.client import ClientConfiguration, Credentials
    from rocketmq.v5.consumer import SimpleConsumer
    from rocketmq.v5.model import FilterExpression, Message

    consumer = SimpleConsumer(
        ClientConfiguration(f"127.0.0.1:{port}", Credentials()),
        "lateness",
        {"TimerLate": FilterExpression("*")},
        2,
    )
    consumer.startup()
    base = int(time.time())
    due: dict[bytes, float] = {}
    for i in range(count):
        m = Message()
        m.topic = "TimerLate"
        m.body = b"%d" % i
        m.delivery_timestamp = base + 3 + i * 23 // count
        due[m.body] = float(m.delivery_timestamp)
        producer.send(m)
    late: list[float] = []
    deadline = time.monotonic() + 60
    while len(late) < count and time.monotonic() < deadline:
        for msg in consumer.receive(32, 20):
            late.append(time.time() - due[msg.body])
            consumer.ack(msg)
    consumer.shutdown()
    late.sort()
    p99 = late[min(len(late) - 1, int(len(late) * 0.99))]
    return (
        f"grpc lateness: {len(late)} of {count} timers 3-25 s ahead received, p50 "
        f"{statistics.median(late) * 1000:.0f} ms, p99 {p99 * 1000:.0f} ms, max {late[-1] * 1000:.0f} ms, "
        f"early {sum(1 for x in late if x < 0)}"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--count", type=int, default=20_000)
    ap.add_argument("--window", type=int, default=64)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--lateness", type=int, default=300, help="timers 3-25 s ahead, received over gRPC")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp())
    grpc_port, remoting_port, namesrv_port = free_port(), free_port(), free_port()
    argv = [sys.executable, "-m", "rocketstore.cli", "serve", str(work / "store"), "--create"]
    argv += ["--listen", f"127.0.0.1:{grpc_port}", "--remoting", f"127.0.0.1:{remoting_port}"]
    argv += ["--namesrv", f"127.0.0.1:{namesrv_port}"]
    serve = Process(argv, {**os.environ, "PYTHONPATH": str(ROOT / "src")})
    try:
        serve.wait_for(
            lambda _p: accepts(f"127.0.0.1:{grpc_port}") and accepts(f"127.0.0.1:{remoting_port}"),
            "rocketstore serve accepting connections",
        )
        from rocketmq.v5.client import ClientConfiguration, Credentials
        from rocketmq.v5.producer import Producer

        producer = Producer(ClientConfiguration(f"127.0.0.1:{grpc_port}", Credentials()), ("TimerDoor",))
        producer.startup()
        rates: dict[tuple[str, bool], list[float]] = {}
        grpc_rate(producer, 200, args.window, False)  # warm: the topic, the channel
        for _ in range(args.repeat):
            for timer in (False, True):
                address = f"127.0.0.1:{remoting_port}"
                rate = asyncio.run(remoting_rate(address, args.count, args.window, timer))
                rates.setdefault(("remoting", timer), []).append(rate)
                rates.setdefault(("grpc", timer), []).append(
                    grpc_rate(producer, args.count, args.window, timer)
                )
        print(grpc_lateness(grpc_port, producer, args.lateness))
        producer.shutdown()
        for door in ("remoting", "grpc"):
            plain, timed = (statistics.median(rates[(door, t)]) for t in (False, True))
            print(f"{door}: plain {plain:,.0f}/s, timers {timed:,.0f}/s ({timed / plain:.2f} of plain)")
    finally:
        serve.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
