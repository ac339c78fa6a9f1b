"""Timer messages: any delivery time, through RocketMQ 5's time wheel (TIMER.md; docs/timers.md).

- ``request``: which puts ask for a timer and how they are rewritten to ``rmq_sys_wheel_timer``.
- ``timerlog``, ``timerwheel``, ``timercheck``, ``timermetrics``: the four files, one module each.
- ``service``: the loop that enqueues timers into the wheel and delivers them when due.

``cancel_message`` builds the message that cancels a pending timer (``TIMER_DEL_UNIQKEY``).
Nothing here is imported by ``import rocketstore`` beyond ``request`` (the put path needs it).
"""

from __future__ import annotations

from datetime import datetime

from rocketstore.message import PROPERTY_TIMER_DEL_UNIQKEY, Message

__all__ = ["cancel_message"]


def cancel_message(topic: str, uniq_key: str, deliver_at: datetime | int) -> Message:
    """The message that cancels the timer of ``topic`` with id ``uniq_key`` asked for
    ``deliver_at`` (the same value: the cancel must land in the timer's slot, as RocketMQ's
    recall does). Put it like any message; it is never delivered itself. A timer already
    delivered is not affected; a ``deliver_at`` that has passed is refused (MESSAGE_ILLEGAL)."""
    return Message(
        topic=topic,
        body=b"0",
        tags="_RECALL_TAG_",
        properties={PROPERTY_TIMER_DEL_UNIQKEY: f"{topic}+{uniq_key}"},
        uniq_key=uniq_key,
        deliver_at=deliver_at,
    )
