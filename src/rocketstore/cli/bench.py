"""``rocketstore bench``: the put/get benchmark of ``benchmarks/put_get.py`` in small, on a fresh
temporary store (one thread, one topic x 8 queues, ASYNC_FLUSH)."""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rocketstore.config import StoreConfig
from rocketstore.message import Message
from rocketstore.store import MessageStore

__all__ = ["run_bench"]

_QUEUES = 8


def run_bench(work_dir: Path | None, n: int, body_size: int) -> Iterator[dict[str, Any]]:
    """Rows: workload, msgs/s, MB/s (bodies only)."""
    body = bytes(i % 251 for i in range(body_size))
    root = Path(tempfile.mkdtemp(prefix="rocketstore-bench-", dir=work_dir))
    cfg = StoreConfig(commitlog_segment_size=256 << 20, generate_uniq_key=False)
    try:
        for name, keys, batch in (
            ("single put, no keys", False, 1),
            ("batch put (256), no keys", False, 256),
            ("batch put (256), KEYS + UNIQ_KEY", True, 256),
        ):
            msgs = [
                Message("Bench", body, tags="TagA", keys=[f"k{i}"] if keys else (), queue_id=i % _QUEUES)
                for i in range(n)
            ]
            with MessageStore.open(
                root / name.replace(" ", "_"), cfg.replace(generate_uniq_key=keys)
            ) as store:
                start = time.perf_counter()
                if batch == 1:
                    for m in msgs:
                        store.put_message(m)
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
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _row(name: str, n: int, body_size: int, seconds: float) -> dict[str, Any]:
    rate = n / seconds if seconds > 0 else 0.0
    return {"workload": name, "msgs_per_s": round(rate), "mb_per_s": round(rate * body_size / 1e6, 1)}
