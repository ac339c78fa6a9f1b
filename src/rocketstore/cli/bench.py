"""``rocketstore bench``: the put/get benchmark of ``benchmarks/put_get.py`` in small, on a fresh
temporary store (one thread, one topic x 8 queues, ASYNC_FLUSH): single puts, ``put_messages`` and
``put_batch`` of the same messages, and ``get_message``."""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from rocketstore.config import StoreConfig
from rocketstore.message import Message
from rocketstore.store import MessageStore

__all__ = ["run_bench"]

_QUEUES = 8


def run_bench(work_dir: Path | None, n: int, body_size: int) -> Iterator[dict[str, Any]]:
    """Rows: workload, msgs/s, MB/s (bodies only). A first small round, not reported, loads the
    compiled kernels (the first call of each in a process costs tens of milliseconds)."""
    root = Path(tempfile.mkdtemp(prefix="rocketstore-bench-", dir=work_dir))
    try:
        for _ in _rounds(root / "warm-up", 512, body_size):
            pass
        yield from _rounds(root / "measured", n, body_size)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _rounds(root: Path, n: int, body_size: int) -> Iterator[dict[str, Any]]:
    body = bytes(i % 251 for i in range(body_size))
    cfg = StoreConfig(commitlog_segment_size=256 << 20, generate_uniq_key=False)
    for name, keys, batch in (
        ("single put, no keys", False, 1),
        ("batch put (256), no keys", False, 256),
        ("batch put (256), KEYS + UNIQ_KEY", True, 256),
        ("put_batch (256), no keys", False, -256),
        ("put_batch (256), KEYS + UNIQ_KEY", True, -256),
    ):
        msgs = [
            Message("Bench", body, tags="TagA", keys=[f"k{i}"] if keys else (), queue_id=i % _QUEUES)
            for i in range(n)
        ]
        with MessageStore.open(root / name.replace(" ", "_"), cfg.replace(generate_uniq_key=keys)) as store:
            columns = _columns(msgs) if batch < 0 else None
            start = time.perf_counter()
            if batch == 1:
                for m in msgs:
                    store.put_message(m)
            elif columns is not None:  # the columnar put of the same messages
                bodies, queue_ids, keys_texts = columns
                for i in range(0, n, -batch):
                    j = i - batch
                    store.put_batch(
                        "Bench", bodies[i:j], queue_ids=queue_ids[i:j], tags="TagA", keys=keys_texts[i:j]
                    )
            else:
                for i in range(0, n, batch):
                    store.put_messages(msgs[i : i + batch])
            store.wait_dispatched()
            yield _row(f"{name} (+dispatch)", n, body_size, time.perf_counter() - start)
            if batch == 1:
                start = time.perf_counter()
                got = 0
                for q in range(_QUEUES):
                    offset = 0
                    while True:
                        res = store.get_message("bench", "Bench", q, offset, 32)
                        if not res.messages:
                            break
                        got += sum(len(m.body_view) for m in res.messages) // body_size
                        offset = res.next_begin_offset
                yield _row(
                    "get_message (32 per call), bodies read", got, body_size, time.perf_counter() - start
                )


def _columns(msgs: list[Message]) -> tuple[list[bytes], npt.NDArray[np.int64], list[str | None]]:
    """What put_batch takes for ``msgs``: bodies, queue ids, KEYS texts."""
    queue_ids = np.array([m.queue_id for m in msgs], dtype=np.int64)
    return [m.body for m in msgs], queue_ids, [" ".join(m.keys) or None for m in msgs]


def _row(name: str, n: int, body_size: int, seconds: float) -> dict[str, Any]:
    rate = n / seconds if seconds > 0 else 0.0
    return {"workload": name, "msgs_per_s": round(rate), "mb_per_s": round(rate * body_size / 1e6, 1)}
