"""A send to a topic that does not exist yet is checked whole before the broker creates the
topic: a refused send creates nothing.

The store validates every message when it appends it, but a broker creates a new topic first
(with the queue count and permission its protocol's auto-creation gives), so a send the store
then refuses (properties over 32 KiB, a damaged batch encoding, a field out of range) would
leave its topic behind. For such sends only, the messages are validated first as the store will
validate them, by an encoder of the store's settings that writes nothing
(``prepare.MessageEncoder``, a new one per check: its caches stay empty of refused names).
Sends to existing topics pay nothing.

Protocol-free; both adapters call it between their own checks and the topic's creation.
"""

from __future__ import annotations

from collections.abc import Sequence

from rocketstore.clock import SystemClock
from rocketstore.codec.message_batch import EncodedBatch
from rocketstore.config import StoreConfig
from rocketstore.errors import InvalidMessageError
from rocketstore.message import Message
from rocketstore.prepare import MessageEncoder

__all__ = ["batch_refusal", "messages_refusal"]


def messages_refusal(
    config: StoreConfig, msgs: Sequence[Message], *, internal: bool | Sequence[bool] = False
) -> InvalidMessageError | None:
    """The InvalidMessageError the store would refuse a put of ``msgs`` with (all or none of a
    put is stored: the first bad message's, named by its place), or None. A message naming no
    queue is checked as bound for queue 0. ``internal`` (one for all, or one per message): the
    broker's own records (transaction halves), as ``MessageStore.put_messages(internal=True)``
    takes them."""
    encoder = MessageEncoder(config, SystemClock())
    kinds = [internal] * len(msgs) if isinstance(internal, bool) else internal
    for i, (msg, kind) in enumerate(zip(msgs, kinds, strict=True)):
        try:
            encoder.prepare(msg, internal=kind, queue_id=0 if msg.queue_id is None else msg.queue_id)
        except InvalidMessageError as exc:
            return InvalidMessageError(f"message {i} of the batch: {exc}", exc.status)
    return None


def batch_refusal(config: StoreConfig, batch: EncodedBatch) -> InvalidMessageError | None:
    """The InvalidMessageError the store would refuse a producer's batch with, or None."""
    try:
        MessageEncoder(config, SystemClock()).prepare_encoded([batch])
    except InvalidMessageError as exc:
        return exc
    return None
