"""Which puts ask for a timer, and the rewrite RocketMQ 5 makes of them (TIMER.md §1-2).

``HookUtils.checkIfTimerMessage`` / ``transformTimerMessage``: a message (not a prepared half)
with ``TIMER_DELAY_SEC``, else ``TIMER_DELAY_MS``, else ``TIMER_DELIVER_MS`` is due at
``now + sec*1000``, ``now + ms`` or the absolute ms. Due later than now, it is stored in
``rmq_sys_wheel_timer`` queue 0 with ``REAL_TOPIC``, ``REAL_QID`` and ``TIMER_OUT_MS`` = the
due time rounded down to the slot that starts before it (a slot is read one precision after
its start, so delivery is never early). Due now or earlier, it is stored in its topic as it
is. A delay level wins: its ``TIMER_*`` are dropped. The caller (``prepare``) applies this to
the properties it is about to encode.
"""

from __future__ import annotations

from datetime import datetime
from typing import Final

from rocketstore.codec.java_number import parse_java_long
from rocketstore.errors import InvalidMessageError
from rocketstore.message import (
    PROPERTY_REAL_QUEUE_ID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_TIMER_DEL_UNIQKEY,
    PROPERTY_TIMER_DELAY_MS,
    PROPERTY_TIMER_DELAY_SEC,
    PROPERTY_TIMER_DELIVER_MS,
    PROPERTY_TIMER_DEQUEUE_MS,
    PROPERTY_TIMER_ENQUEUE_MS,
    PROPERTY_TIMER_OUT_MS,
    PROPERTY_TIMER_ROLL_TIMES,
    TIMER_TOPIC,
)
from rocketstore.results import PutStatus

__all__ = ["ASKING", "DELIVERY_HEADROOM", "TimerRules", "deliver_at_ms", "slot_time"]

ASKING: Final = (PROPERTY_TIMER_DELAY_SEC, PROPERTY_TIMER_DELAY_MS, PROPERTY_TIMER_DELIVER_MS)
_ASKING_SET: Final = frozenset(ASKING)
_ILLEGAL = PutStatus.MESSAGE_ILLEGAL
# Bytes the delivery (or a roll) may add to a timer's properties at most: TIMER_ENQUEUE_MS and
# TIMER_DEQUEUE_MS (longs) and TIMER_ROLL_TIMES (an int), each "name\x01value\x02". The put
# keeps this room, so a timer it accepts is never refused at delivery.
DELIVERY_HEADROOM: Final = sum(
    len(name) + 2 + digits
    for name, digits in (
        (PROPERTY_TIMER_ENQUEUE_MS, 19),
        (PROPERTY_TIMER_DEQUEUE_MS, 19),
        (PROPERTY_TIMER_ROLL_TIMES, 10),
    )
)
_LONG_MAX: Final = (1 << 63) - 1  # (a delivery time is a Java long)


def deliver_at_ms(value: object) -> int:
    """``Message.deliver_at`` as ms since the epoch: an int, or an aware datetime."""
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise InvalidMessageError(
                "deliver_at must be an aware datetime (with a timezone) or ms since the epoch", _ILLEGAL
            )
        return int(value.timestamp() * 1000)
    if type(value) is not int or not 0 <= value <= _LONG_MAX:
        raise InvalidMessageError(
            f"deliver_at must be an aware datetime or ms since the epoch, not {value!r}", _ILLEGAL
        )
    return value


def slot_time(deliver_ms: int, precision_ms: int) -> int:
    """RocketMQ's rounding: the start of the slot before ``deliver_ms`` (one precision earlier
    when it is a slot start itself)."""
    if deliver_ms % precision_ms == 0:
        return deliver_ms - precision_ms
    return deliver_ms // precision_ms * precision_ms


class TimerRules:
    """The store's timer settings, as the put applies them."""

    def __init__(self, enabled: bool, precision_ms: int, max_delay_ms: int) -> None:
        self.enabled = enabled
        self.precision_ms = precision_ms
        self.max_delay_ms = max_delay_ms

    def rewrite(self, props: dict[str, str], topic: str, queue_id: int, now_ms: int) -> bool:
        """Turn ``props`` into a timer's (adding TIMER_OUT_MS, REAL_TOPIC, REAL_QID) when they ask
        for a time after ``now_ms``; True then (the record goes to TIMER_TOPIC queue 0).
        InvalidMessageError for what RocketMQ answers WHEEL_TIMER_MSG_ILLEGAL or _NOT_ENABLE."""
        if topic == TIMER_TOPIC or PROPERTY_TIMER_OUT_MS in props:
            return False  # already converted (a delivered or rolled timer)
        if props.keys().isdisjoint(_ASKING_SET):  # most puts: one C-level check
            return False
        if not self.enabled:
            raise InvalidMessageError(
                "accurate timer message is not enabled, timer_wheel_enable is false", _ILLEGAL
            )
        if PROPERTY_TIMER_DELAY_SEC in props:
            deliver_ms = now_ms + _long(props, PROPERTY_TIMER_DELAY_SEC) * 1000
        elif PROPERTY_TIMER_DELAY_MS in props:
            deliver_ms = now_ms + _long(props, PROPERTY_TIMER_DELAY_MS)
        else:
            deliver_ms = _long(props, PROPERTY_TIMER_DELIVER_MS)
        cancels = props.get(PROPERTY_TIMER_DEL_UNIQKEY)
        if cancels is not None and not cancels.startswith(f"{topic}+"):
            # a cancel may name only a timer of its own topic: whoever may write there
            raise InvalidMessageError(
                f"timer message illegal: {PROPERTY_TIMER_DEL_UNIQKEY}={cancels!r} names a timer "
                f"of another topic than {topic!r}",
                _ILLEGAL,
            )
        if deliver_ms <= now_ms:
            if cancels is not None:
                raise InvalidMessageError(self._illegal(), _ILLEGAL)
            return False  # due already: stored in its topic, delivered at once
        if deliver_ms - now_ms > self.max_delay_ms:
            raise InvalidMessageError(self._illegal(), _ILLEGAL)
        props[PROPERTY_TIMER_OUT_MS] = str(slot_time(deliver_ms, self.precision_ms))
        props[PROPERTY_REAL_TOPIC] = topic
        props[PROPERTY_REAL_QUEUE_ID] = str(queue_id)
        return True

    def _illegal(self) -> str:
        return (
            "timer message illegal, the delay time should not be bigger than the max delay "
            f"{self.max_delay_ms}ms; or if set del msg, the delay time should be bigger than the current time"
        )


def _long(props: dict[str, str], name: str) -> int:
    text = props[name]
    value = parse_java_long(text)
    if value is None:
        raise InvalidMessageError(f"timer message illegal: {name}={text!r} is not a number", _ILLEGAL)
    return value
