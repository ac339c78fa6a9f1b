"""Consumers over a store, in the writing process or in read-only followers (docs/consumers.md).

``MessageStore.consumer(group, subscription)`` or ``open_consumer(path, group, subscription)``.
"""

from rocketstore.consumer.consumer import Consumer, StartAt, open_consumer

__all__ = ["Consumer", "StartAt", "open_consumer"]
