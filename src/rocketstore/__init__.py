"""rocketstore: a durable message store, byte-compatible with Apache RocketMQ 4.9 store directories."""

from rocketstore.cleanup import ReclaimReport
from rocketstore.clock import Clock, ManualClock, SystemClock
from rocketstore.codec.config_json import TopicConfig
from rocketstore.config import BrokerRole, FlushDiskType, StoreConfig
from rocketstore.errors import (
    CorruptDataError,
    DataLossError,
    InvalidArgumentError,
    InvalidMessageError,
    NotAStoreError,
    RocketStoreError,
    StoreAccessError,
    StoreClosedError,
    StoreConfigError,
    StoreIOError,
    StoreLockedError,
    StorePathError,
    StoreReadOnlyError,
)
from rocketstore.message import Message, MessageExt
from rocketstore.results import (
    GetMessageResult,
    GetStatus,
    MessageBatch,
    PutBatchResult,
    PutMessageResult,
    PutStatus,
)
from rocketstore.store import MessageStore

__all__ = [
    "BrokerRole",
    "Clock",
    "CorruptDataError",
    "DataLossError",
    "FlushDiskType",
    "GetMessageResult",
    "GetStatus",
    "InvalidArgumentError",
    "InvalidMessageError",
    "ManualClock",
    "Message",
    "MessageBatch",
    "MessageExt",
    "MessageStore",
    "NotAStoreError",
    "PutBatchResult",
    "PutMessageResult",
    "PutStatus",
    "ReclaimReport",
    "RocketStoreError",
    "StoreAccessError",
    "StoreClosedError",
    "StoreConfig",
    "StoreConfigError",
    "StoreIOError",
    "StoreLockedError",
    "StorePathError",
    "StoreReadOnlyError",
    "SystemClock",
    "TopicConfig",
]

__version__ = "0.1.0"
