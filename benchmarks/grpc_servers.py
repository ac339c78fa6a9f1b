"""What one unary RPC costs a grpc-python server, by server kind: the floor under the broker's CPU
per message (the official clients make one SendMessage and one AckMessage call per message).

The servers answer ``SendMessage`` with a fixed response after reading the metadata and the peer,
as the broker's handlers do, and nothing else; a grpc.aio client keeps ``--window`` calls with a
1 KiB message in flight. Reported: calls per second and the server's CPU per call, for the
``grpc.aio`` server (the broker's) and the thread-pool server (``grpc.server``).

Run: ``python benchmarks/grpc_servers.py [--calls 3000] [--repeat 2]``.
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import multiprocessing as mp
import time
from typing import Any

import grpc
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as rpc
from rocketmq.grpc_protocol import service_pb2_grpc

from broker import cpu_seconds  # this directory's: the script's own


def answer() -> Any:
    return rpc.SendMessageResponse(
        status=pb.Status(code=pb.Code.OK, message="OK"),
        entries=[rpc.SendResultEntry(status=pb.Status(code=pb.Code.OK), message_id="id", offset=1)],
    )


class AioServicer(service_pb2_grpc.MessagingServiceServicer):  # type: ignore[misc]
    async def SendMessage(self, request: Any, context: Any) -> Any:
        context.invocation_metadata()
        context.peer()
        return answer()


class ThreadServicer(service_pb2_grpc.MessagingServiceServicer):  # type: ignore[misc]
    def SendMessage(self, request: Any, context: Any) -> Any:
        context.invocation_metadata()
        context.peer()
        return answer()


def serve(kind: str, ports: Any) -> None:
    if kind == "grpc.aio":

        async def main() -> None:
            server = grpc.aio.server()
            service_pb2_grpc.add_MessagingServiceServicer_to_server(AioServicer(), server)
            ports.put(server.add_insecure_port("127.0.0.1:0"))
            await server.start()
            await server.wait_for_termination()

        asyncio.run(main())
    else:
        server = grpc.server(concurrent.futures.ThreadPoolExecutor(8))
        service_pb2_grpc.add_MessagingServiceServicer_to_server(ThreadServicer(), server)
        ports.put(server.add_insecure_port("127.0.0.1:0"))
        server.start()
        server.wait_for_termination()


async def call(port: int, calls: int, window: int) -> None:
    request = rpc.SendMessageRequest(messages=[pb.Message(topic=pb.Resource(name="T"), body=b"x" * 1024)])
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = service_pb2_grpc.MessagingServiceStub(channel)
        slots = asyncio.Semaphore(window)

        async def one() -> None:
            async with slots:
                await stub.SendMessage(request, metadata=(("x-mq-client-id", "bench"),))

        await asyncio.gather(*(one() for _ in range(calls)))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--calls", type=int, default=3000)
    parser.add_argument("--window", type=int, default=32)
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()
    ctx = mp.get_context("spawn")
    print(f"{'server':<14}{'calls/s':>10}{'server cpu ms/call':>20}")
    for _ in range(args.repeat):
        for kind in ("grpc.aio", "grpc.server"):
            ports = ctx.Queue()
            proc = ctx.Process(target=serve, args=(kind, ports), daemon=True)
            proc.start()
            try:
                port = ports.get(timeout=60)
                asyncio.run(call(port, 200, 8))  # connect, warm up
                cpu0, start = cpu_seconds(proc.pid), time.perf_counter()
                asyncio.run(call(port, args.calls, args.window))
                elapsed, cpu = time.perf_counter() - start, cpu_seconds(proc.pid) - cpu0
            finally:
                proc.terminate()
                proc.join(30)
            print(f"{kind:<14}{args.calls / elapsed:>10.0f}{cpu / args.calls * 1000:>20.3f}", flush=True)


if __name__ == "__main__":
    main()
