"""Pending timers per real topic: ``{root}/config/timermetrics``, RocketMQ 5's TimerMetrics
(TIMER.md §5.4). JSON, as fastjson writes it::

    {"dataVersion":{"counter":N,"stateVersion":N,"timestamp":ms},
     "timingCount":{"<realTopic>":{"count":N,"timeStamp":ms}}}

+1 when a timer enters the wheel, -1 when it leaves (delivered, rolled or cancelled). Persisted
at each timer flush, atomically (temporary file, fsync, rename). The counts are statistics,
not state: recovery does not recount them, and a crash may leave them off by what changed
since the last flush (as in RocketMQ).
"""

from __future__ import annotations

import json
from pathlib import Path

from rocketstore.errors import CorruptDataError
from rocketstore.storage.paths import DEFAULT_FILE_MODE, atomic_write, read_store_text

__all__ = ["TimerMetrics", "decode_timermetrics", "encode_timermetrics"]


def encode_timermetrics(counts: dict[str, tuple[int, int]], counter: int, now_ms: int) -> bytes:
    """``counts``: topic -> (pending count, time of its last change)."""
    doc = {
        "dataVersion": {"counter": counter, "stateVersion": 0, "timestamp": now_ms},
        "timingCount": {t: {"count": c, "timeStamp": ts} for t, (c, ts) in sorted(counts.items())},
    }
    return json.dumps(doc, separators=(",", ":")).encode()


def decode_timermetrics(text: str, path: str | None = None) -> tuple[dict[str, tuple[int, int]], int]:
    """(topic -> (count, timeStamp), dataVersion counter); CorruptDataError for anything else."""
    try:
        doc = json.loads(text)
        counts = {
            str(topic): (int(v["count"]), int(v.get("timeStamp", 0)))
            for topic, v in doc.get("timingCount", {}).items()
        }
        counter = int(doc.get("dataVersion", {}).get("counter", 0))
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise CorruptDataError(f"timermetrics is not RocketMQ's JSON: {exc}", path=path) from None
    return counts, counter


class TimerMetrics:
    """The per-topic counts, in memory between flushes. One writer (the timer service)."""

    def __init__(self, path: Path, *, mode: int = DEFAULT_FILE_MODE) -> None:
        self.path = path
        self.mode = mode
        self.counts: dict[str, tuple[int, int]] = {}
        self.counter = 0
        self._changed = False

    def load(self) -> None:
        text = read_store_text(self.path)
        if text is not None:
            self.counts, self.counter = decode_timermetrics(text, str(self.path))

    def add(self, topic: str, delta: int, now_ms: int) -> None:
        count = self.counts.get(topic, (0, 0))[0] + delta
        self.counts[topic] = (max(0, count), now_ms)
        self._changed = True

    def total(self) -> int:
        return sum(c for c, _ in list(self.counts.values()))  # list(): read from other threads

    def persist(self, now_ms: int) -> None:
        if not self._changed:
            return
        self.counter += 1
        counts = dict(self.counts)  # one C-level copy: the timer loop changes it meanwhile
        atomic_write(self.path, encode_timermetrics(counts, self.counter, now_ms), self.mode)
        self._changed = False
