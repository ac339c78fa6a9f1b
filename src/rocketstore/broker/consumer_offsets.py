"""Consumer groups' offsets as clients give and ask for them: which commits the broker takes
(``check_commit``), and the offset a group resumes a queue from (``resume_offset``).

A client commits an offset (RocketMQ 4's UPDATE_CONSUMER_OFFSET, a pull's commit offset) only
for a topic that exists, one of its queues, and an offset between 0 and the queue's max offset:
anything else is refused and nothing is stored, so no client can leave in the offsets file a
value that readers (RocketMQ's among them) cannot take, nor offsets of topics that do not exist.

The resume offset (RocketMQ 4's QUERY_CONSUMER_OFFSET,
``ConsumerManageProcessor.queryConsumerOffset``) is the group's committed offset when it has
one. Without one, RocketMQ's broker answers 0 while the queue still starts at offset 0 and its
first message is within the newest 40 % of the machine's memory worth of commitlog
(``checkInDiskByConsumeOffset``): a new group then reads a young topic from its beginning even
when it asked to start from the last offset, so messages sent before the group first started
are not skipped. Otherwise there is no offset and the client picks its start (last offset,
first offset, or by time).

Protocol-free; reads only through the store's public API.
"""

from __future__ import annotations

import enum

from rocketstore.errors import RocketStoreError
from rocketstore.read_path import in_memory_bytes
from rocketstore.store import MessageStore

__all__ = ["CommitRefusal", "CommitRefusedError", "check_commit", "resume_offset"]


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
    return 0 if behind <= in_memory_bytes() else None


class CommitRefusal(enum.Enum):
    """Why a client's offset commit is refused."""

    NO_TOPIC = "no such topic"
    NO_QUEUE = "no such queue"
    OFFSET_OUT_OF_RANGE = "offset out of range"


class CommitRefusedError(RocketStoreError):
    """A commit ``check_commit`` refuses: ``reason`` says why, the message names the value."""

    def __init__(self, reason: CommitRefusal, message: str) -> None:
        super().__init__(message)
        self.reason = reason


def check_commit(store: MessageStore, topic: str, queue_id: int, offset: int) -> None:
    """Return if a client may commit ``offset`` for ``topic``/``queue_id``: the topic exists,
    the queue is one of its queues, and 0 <= offset <= the queue's max offset. Else raise
    CommitRefusedError naming what is wrong."""
    config = store.topic_config(topic)
    if config is None:
        raise CommitRefusedError(CommitRefusal.NO_TOPIC, f"topic[{topic}] not exist, apply first please!")
    queues = max(config.read_queues, config.write_queues)
    if not 0 <= queue_id < queues:
        raise CommitRefusedError(
            CommitRefusal.NO_QUEUE, f"queueId[{queue_id}] is illegal, topic:[{topic}] has {queues} queues"
        )
    high = store.max_offset_in_queue(topic, queue_id)
    if not 0 <= offset <= high:
        raise CommitRefusedError(
            CommitRefusal.OFFSET_OUT_OF_RANGE,
            f"commitOffset {offset} is out of topic[{topic}] queueId[{queue_id}]'s offsets 0..{high}",
        )
