"""The offset a consumer group resumes a queue from when it asks the broker (RocketMQ 4's
QUERY_CONSUMER_OFFSET, ``ConsumerManageProcessor.queryConsumerOffset``).

The group's committed offset when it has one. Without one, RocketMQ's broker answers 0 while the
queue still starts at offset 0 and its first message is within the newest 40 % of the machine's
memory worth of commitlog (``checkInDiskByConsumeOffset``): a new group then reads a young topic
from its beginning even when it asked to start from the last offset, so messages sent before
the group first started are not skipped. Otherwise there is no offset and the client picks its
start (last offset, first offset, or by time).

Protocol-free; reads only through the store's public API.
"""

from __future__ import annotations

import os
from typing import Final

from rocketstore.store import MessageStore

__all__ = ["resume_offset"]

# RocketMQ's accessMessageInMemoryMaxRatio
_IN_MEMORY_RATIO: Final = 0.4


def _memory_bytes() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return 1 << 30


def resume_offset(store: MessageStore, group: str, topic: str, queue_id: int) -> int | None:
    """The offset ``group`` resumes ``topic``/``queue_id`` from, or None (see the module docstring)."""
    committed = store.query_offset(group, topic, queue_id)
    if committed >= 0:
        return committed
    if store.min_offset_in_queue(topic, queue_id) > 0:
        return None
    first = store.read_batch(topic, queue_id, 0, 1, bodies=False)
    if len(first) == 0 or int(first.queue_offsets[0]) != 0:
        return 0  # empty queue: everything that comes is new
    behind = store.max_phy_offset() - int(first.physical_offsets[0])
    return 0 if behind <= _memory_bytes() * _IN_MEMORY_RATIO else None
