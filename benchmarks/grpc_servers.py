"""What a grpc-python server costs per call and per streamed response, by server form: the floor
under the broker's CPU per message.

The official clients make one SendMessage and one AckMessage call per message, and the protocol
answers a ReceiveMessage with one streamed ``ReceiveMessageResponse`` per message, so both costs
are paid per message whatever the broker does.

The servers do nothing else: ``SendMessage`` reads the metadata and the peer, as the broker's
handlers do, and answers a fixed response; ``ReceiveMessage`` streams a status, ``--stream``
messages of 1 KiB and a delivery timestamp, as a receive of that many does. A grpc.aio client
keeps ``--window`` calls in flight. Server forms:

* ``grpc.aio``: the asyncio server (the broker's).
* ``grpc.server``: the thread-pool server, handlers in its threads.
* ``grpc.server+loop``: the thread-pool server whose handlers run a coroutine on an event-loop
  thread and wait for it, as a thread-pool server in front of the broker's asyncio core would.

Reported: calls per second, the server's CPU per call and, for the stream, per streamed message.

Run: ``python benchmarks/grpc_servers.py [--calls 3000] [--stream 32] [--repeat 2]``.
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import multiprocessing as mp
import threading
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import grpc
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as rpc
from rocketmq.grpc_protocol import service_pb2_grpc

from broker import cpu_seconds  # this directory's: the script's own

KINDS = ("grpc.aio", "grpc.server", "grpc.server+loop")


def sent() -> Any:
    return rpc.SendMessageResponse(
        status=pb.Status(code=pb.Code.OK, message="OK"),
        entries=[rpc.SendResultEntry(status=pb.Status(code=pb.Code.OK), message_id="id", offset=1)],
    )


def received(count: int) -> list[Any]:
    """What a receive of ``count`` messages streams: a status, the messages, a timestamp."""
    message = pb.Message(
        topic=pb.Resource(name="T"),
        body=b"x" * 1024,
        system_properties=pb.SystemProperties(
            message_id="01C0A8000100002A9F0000000000000001",
            receipt_handle="r" * 96,
            body_digest=pb.Digest(type=pb.DigestType.MD5, checksum="0" * 32),
            queue_id=1,
            queue_offset=7,
        ),
    )
    return [
        rpc.ReceiveMessageResponse(status=pb.Status(code=pb.Code.OK)),
        *(rpc.ReceiveMessageResponse(message=message) for _ in range(count)),
        rpc.ReceiveMessageResponse(delivery_timestamp={"seconds": 1}),
    ]


async def answer_send(context: Any) -> Any:
    context.invocation_metadata()
    context.peer()
    await asyncio.sleep(0)  # a handler that awaits its store call
    return sent()


async def answer_receive(context: Any, responses: list[Any]) -> list[Any]:
    context.invocation_metadata()
    await asyncio.sleep(0)  # a handler that awaits its pop
    return responses


class AioServicer(service_pb2_grpc.MessagingServiceServicer):  # type: ignore[misc]
    def __init__(self, stream: int) -> None:
        self.responses = received(stream)

    async def SendMessage(self, request: Any, context: Any) -> Any:
        return await answer_send(context)

    async def ReceiveMessage(self, request: Any, context: Any) -> AsyncIterator[Any]:
        context.invocation_metadata()
        for response in self.responses:
            yield response


class ThreadServicer(service_pb2_grpc.MessagingServiceServicer):  # type: ignore[misc]
    def __init__(self, stream: int) -> None:
        self.responses = received(stream)

    def SendMessage(self, request: Any, context: Any) -> Any:
        context.invocation_metadata()
        context.peer()
        return sent()

    def ReceiveMessage(self, request: Any, context: Any) -> Iterator[Any]:
        context.invocation_metadata()
        yield from self.responses


class LoopServicer(ThreadServicer):
    def __init__(self, stream: int, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(stream)
        self.loop = loop

    def SendMessage(self, request: Any, context: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(answer_send(context), self.loop).result()

    def ReceiveMessage(self, request: Any, context: Any) -> Iterator[Any]:
        answered = asyncio.run_coroutine_threadsafe(answer_receive(context, self.responses), self.loop)
        yield from answered.result()


def serve(kind: str, stream: int, ports: Any) -> None:
    if kind == "grpc.aio":

        async def main() -> None:
            server = grpc.aio.server()
            service_pb2_grpc.add_MessagingServiceServicer_to_server(AioServicer(stream), server)
            ports.put(server.add_insecure_port("127.0.0.1:0"))
            await server.start()
            await server.wait_for_termination()

        asyncio.run(main())
        return
    servicer = ThreadServicer(stream)
    if kind == "grpc.server+loop":
        loop = asyncio.new_event_loop()
        threading.Thread(target=loop.run_forever, daemon=True).start()
        servicer = LoopServicer(stream, loop)
    server = grpc.server(concurrent.futures.ThreadPoolExecutor(8))
    service_pb2_grpc.add_MessagingServiceServicer_to_server(servicer, server)
    ports.put(server.add_insecure_port("127.0.0.1:0"))
    server.start()
    server.wait_for_termination()


async def call(port: int, method: str, calls: int, window: int) -> None:
    send = rpc.SendMessageRequest(messages=[pb.Message(topic=pb.Resource(name="T"), body=b"x" * 1024)])
    receive = rpc.ReceiveMessageRequest(batch_size=32)
    metadata = (("x-mq-client-id", "bench"),)
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = service_pb2_grpc.MessagingServiceStub(channel)
        slots = asyncio.Semaphore(window)

        async def one() -> None:
            async with slots:
                if method == "send":
                    await stub.SendMessage(send, metadata=metadata)
                else:
                    async for _ in stub.ReceiveMessage(receive, metadata=metadata):
                        pass

        await asyncio.gather(*(one() for _ in range(calls)))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--calls", type=int, default=3000, help="unary calls per run (streams: a tenth)")
    parser.add_argument("--stream", type=int, default=32, help="messages per ReceiveMessage")
    parser.add_argument("--window", type=int, default=32)
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()
    ctx = mp.get_context("spawn")
    print(f"{'server':<18}{'call':<9}{'calls/s':>9}{'server cpu ms/call':>20}{'ms/streamed msg':>17}")
    for _ in range(args.repeat):
        for kind in KINDS:
            ports = ctx.Queue()
            proc = ctx.Process(target=serve, args=(kind, args.stream, ports), daemon=True)
            proc.start()
            try:
                port = ports.get(timeout=60)
                for method, calls, window in (
                    ("send", args.calls, args.window),
                    ("receive", max(1, args.calls // 10), 4),
                ):
                    asyncio.run(call(port, method, 100, window))  # connect, warm up
                    cpu0, start = cpu_seconds(proc.pid), time.perf_counter()
                    asyncio.run(call(port, method, calls, window))
                    elapsed, cpu = time.perf_counter() - start, cpu_seconds(proc.pid) - cpu0
                    per_call = cpu / calls * 1000
                    streamed = f"{per_call / args.stream:.3f}" if method == "receive" else "-"
                    print(
                        f"{kind:<18}{method:<9}{calls / elapsed:>9.0f}{per_call:>20.3f}{streamed:>17}",
                        flush=True,
                    )
            finally:
                proc.terminate()
                proc.join(30)


if __name__ == "__main__":
    main()
