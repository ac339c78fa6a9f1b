"""A store writer in another process, for tests of followers and consumers (see follow.py).

``LiveWriter(root, config)`` starts a process that opens the store and obeys commands sent over
a pipe: ``put(topic, n, ...)`` stores n messages (bodies ``{topic}-{i}``, one key each) and
returns when they are dispatched; ``stream(topic, n)`` starts storing n messages in batches
without waiting; ``kill()`` ends the process with SIGKILL (no close, no flush: a crash).
"""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from rocketstore import Message, MessageStore, StoreConfig


def _serve(root: str, config: StoreConfig, conn: Connection) -> None:
    # how full the test machine's disk is must not reclaim what the test reads (this process has
    # no half-full stand-in: see conftest.half_full_disk)
    config = config.replace(
        disk_max_used_space_ratio=100, disk_clean_forcibly_ratio=100, disk_warning_ratio=100
    )
    store = MessageStore.open(root, config)
    conn.send(("open", store.max_phy_offset()))
    counters: dict[str, int] = {}
    while True:
        command, args = conn.recv()
        if command == "close":
            store.close()
            conn.send(("closed", None))
            return
        topic, n, queues, batch = args
        start = counters.get(topic, 0)
        counters[topic] = start + n
        if command == "stream":
            conn.send(("streaming", None))
        for first in range(start, start + n, batch):
            msgs = [
                Message(
                    topic=topic,
                    body=f"{topic}-{i}".encode(),
                    keys=[f"k{i}"],
                    tags=f"T{i % 2}",
                    queue_id=i % queues,
                )
                for i in range(first, min(first + batch, start + n))
            ]
            store.put_messages(msgs)
        store.wait_dispatched(10)
        if command == "put":
            conn.send(("put", store.max_phy_offset()))


class LiveWriter:
    def __init__(self, root: Path, config: StoreConfig) -> None:
        ctx = mp.get_context("spawn")
        self._conn, child = ctx.Pipe()
        self.process = ctx.Process(target=_serve, args=(str(root), config, child), daemon=True)
        self.process.start()
        self._expect("open")

    def _expect(self, what: str, timeout: float = 60) -> Any:
        if not self._conn.poll(timeout):
            raise TimeoutError(f"the writer process did not answer {what!r} within {timeout} s")
        tag, value = self._conn.recv()
        assert tag == what, (tag, value)
        return value

    def put(self, topic: str, n: int, *, queues: int = 4, batch: int = 16) -> int:
        self._conn.send(("put", (topic, n, queues, batch)))
        return int(self._expect("put"))

    def stream(self, topic: str, n: int, *, queues: int = 4, batch: int = 16) -> None:
        self._conn.send(("stream", (topic, n, queues, batch)))
        self._expect("streaming")

    def close(self) -> None:
        self._conn.send(("close", None))
        self._expect("closed")
        self.process.join(30)

    def kill(self) -> None:
        assert self.process.pid is not None
        os.kill(self.process.pid, signal.SIGKILL)
        self.process.join(30)

    def __enter__(self) -> LiveWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.process.is_alive():
            self.kill()
