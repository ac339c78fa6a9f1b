"""Times as rocketstore reads and prints them: one rule for every entry point.

The CLI (``--begin``, ``--end``, ``--since``, printed and JSON times), the Spark source's options
(``startTime``, ``endTime``, ``startingTimestamp``) and the Spark charts all use this module:

- **Reading.** Epoch milliseconds (digits) are taken as they are. ISO 8601 with an offset or ``Z``
  (``2026-11-22T09:00:00+08:00``) is that instant. **A time without a zone is the machine's local
  time** (the ``TZ`` environment variable, else the system zone), as ``date``, ``ls -l`` and
  RocketMQ's mqadmin read it: the person typing a time at a terminal means the clock on the wall.
  mqadmin's ``yyyy-MM-dd#HH:mm:ss:SSS`` is accepted too (local time, as mqadmin reads it).
- **Printing.** ISO 8601 in the local zone, milliseconds, and always the offset
  (``2026-11-22T09:00:00.123+08:00``): a printed time names its instant whatever zone reads it.

Store timestamps are epoch milliseconds; the conversions here are exact (no float rounding).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import functools

__all__ = ["format_time", "parse_time"]

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
_MS = dt.timedelta(milliseconds=1)
_MQADMIN = "%Y-%m-%d#%H:%M:%S:%f"  # mqadmin's yyyy-MM-dd#HH:mm:ss:SSS


def parse_time(text: str) -> int:
    """Epoch milliseconds for ``text`` (see the module docstring). ValueError names what was wrong."""
    raw = text.strip()
    if raw.lstrip("-").isdigit():
        return int(raw)
    when: dt.datetime | None = None
    try:
        when = dt.datetime.fromisoformat(raw)
    except ValueError:
        with contextlib.suppress(ValueError):
            when = dt.datetime.strptime(raw, _MQADMIN)
    if when is None:
        raise ValueError(
            f"{text!r} is not a time (epoch ms, ISO 8601 such as 2026-11-22T09:00:00 or "
            "2026-11-22T09:00:00+08:00, or yyyy-MM-dd#HH:mm:ss:SSS)"
        )
    if when.tzinfo is None:
        when = when.astimezone()  # a naive datetime is local time: attach the zone in force then
    return (when - _EPOCH) // _MS


def format_time(ms: int | None, timespec: str = "milliseconds") -> str | None:
    """``ms`` as ISO 8601 local time with its offset (2026-11-22T09:00:00.123+08:00; ``timespec``
    as ``datetime.isoformat`` takes it); None for none (None or a negative time: 'no message')."""
    if ms is None or ms < 0:
        return None
    try:
        if timespec != "milliseconds":
            return (_EPOCH + ms * _MS).astimezone().isoformat(timespec=timespec)
        seconds, millis = divmod(ms, 1000)
        clock, offset = _local_second(seconds)
    except (OverflowError, ValueError, OSError):  # a garbage or far-future time (a checkpoint's)
        return f"{ms} (ms, not a representable date)"
    return f"{clock}.{millis:03d}{offset}"


@functools.lru_cache(maxsize=4096)
def _local_second(seconds: int) -> tuple[str, str]:
    """('2026-11-22T09:00:00', '+08:00') for an epoch second: printing a million messages stored in
    a few seconds asks the zone database a few times, not a million (the zone is read once per
    second printed; a process that changes TZ and calls time.tzset() clears this cache)."""
    text = (_EPOCH + dt.timedelta(seconds=seconds)).astimezone().isoformat()
    return text[:19], text[19:]
