"""The timer files (TIMER.md §5, docs/timers.md), read through the modules that own their bytes:

- ``timerwheel``: exactly ``slots_total * 2 * 32`` bytes (``file_size``);
- ``timerlog/``: segment names and sizes (``file_name``, ``file_size``); every unit up to the
  first zero bytes whole, its timer record inside the commitlog's valid data (``timer_log_unit``);
- ``config/timercheck``: 4096 bytes, its flushed position within the timer log (``timer_file``);
- ``config/timermetrics``: RocketMQ's JSON (``timer_file``).

A store without timers has none of them: nothing to check. Nothing is written.
"""

from __future__ import annotations

from pathlib import Path

from rocketstore.errors import CorruptDataError, StorePathError
from rocketstore.storage.paths import (
    StoreLayout,
    read_store_file,
    read_store_text,
    segment_files,
    store_dir_exists,
    store_file_size,
)
from rocketstore.timer.service import timer_paths
from rocketstore.timer.timercheck import TIMERCHECK_FILE_SIZE, decode_timercheck
from rocketstore.timer.timerlog import UNIT_SIZE, TimerLog
from rocketstore.timer.timermetrics import decode_timermetrics
from rocketstore.timer.timerwheel import SLOT_SIZE, SLOTS_TOTAL
from rocketstore.verify.listing import store_relative, wrong_kind
from rocketstore.verify.report import DamageLog

__all__ = ["check_timer_files"]


def check_timer_files(paths: StoreLayout, commitlog_end: int, segment_size: int, damage: DamageLog) -> None:
    """Check the four timer files; ``commitlog_end`` is where the commitlog's valid data ends."""
    wheel, log_dir, check, metrics = timer_paths(paths)
    try:
        size = store_file_size(wheel)
        if size != SLOTS_TOTAL * 2 * SLOT_SIZE:
            damage.add("file_size", "timerwheel", 0, f"{size} bytes, expected {SLOTS_TOTAL * 2 * SLOT_SIZE}")
    except StorePathError as exc:
        wrong_kind(paths, wheel, exc.found, exc.expected, damage)
    except FileNotFoundError:
        pass
    log_end = _check_timer_log(paths, log_dir, commitlog_end, segment_size, damage)
    data = read_store_file(check) if check.is_file() else None
    if data is not None:
        name = store_relative(paths, check)
        if len(data) != TIMERCHECK_FILE_SIZE:
            damage.add("file_size", name, 0, f"{len(data)} bytes, expected {TIMERCHECK_FILE_SIZE}")
        else:
            flushed = decode_timercheck(data).last_timer_log_flush_pos
            if log_end is not None and flushed > log_end:
                damage.add("timer_file", name, 8, f"timer log flushed to {flushed}, but it ends at {log_end}")
    text = read_store_text(metrics) if metrics.is_file() else None
    if text is not None:
        try:
            decode_timermetrics(text)
        except CorruptDataError as exc:
            damage.add("timer_file", store_relative(paths, metrics), 0, exc.reason)


def _check_timer_log(
    paths: StoreLayout, log_dir: Path, commitlog_end: int, segment_size: int, damage: DamageLog
) -> int | None:
    """The timer log's end (None without one)."""
    if not store_dir_exists(log_dir):
        return None
    sizes = {store_file_size(p) for _, p in segment_files(log_dir)}
    if len(sizes) > 1:
        damage.add("file_size", "timerlog", 0, f"segments of different sizes: {sorted(sizes)}")
        return None
    size = sizes.pop() if sizes else segment_size
    log = TimerLog(log_dir, size, readonly=True)
    try:
        log.files.load()
    except CorruptDataError as exc:
        damage.add("file_name", "timerlog", 0, exc.reason)
        return None
    try:
        found, end = log.scan(log.files.min_offset)
        for first, units in found:
            beyond = units["offset_py"] + units["size_py"] > commitlog_end
            for i in beyond.nonzero()[0].tolist()[:10]:
                damage.add(
                    "timer_log_unit",
                    "timerlog",
                    first + i * UNIT_SIZE,
                    f"its record {int(units['offset_py'][i])} is past the commitlog end {commitlog_end}",
                )
        last = log.files.last
        if last is not None and end < last.from_offset + last.size:
            # after the valid units only zeros: anything else is a damaged unit
            pos = end - last.from_offset
            if end >= last.from_offset and last.data_end(pos) > pos:
                damage.add("timer_log_unit", "timerlog", end, "not a whole unit, and data follows")
        return end
    finally:
        log.close()
