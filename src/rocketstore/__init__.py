"""rocketstore: a durable message store, byte-compatible with Apache RocketMQ 4.9 store directories.

The names below load with the first use of one (PEP 562): ``import rocketstore`` alone, or a
command that needs none of them (``rocketstore --version``), does not import the store.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rocketstore.cleanup import ReclaimReport
    from rocketstore.clock import Clock, ManualClock, SystemClock
    from rocketstore.codec.config_json import TopicConfig
    from rocketstore.codec.message_batch import EncodedBatch, EncodedColumns
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
        PutColumnsResult,
        PutMessageResult,
        PutStatus,
        RecordRead,
        RecordsResult,
    )
    from rocketstore.store import MessageStore

_WHERE = {
    "BrokerRole": "rocketstore.config",
    "Clock": "rocketstore.clock",
    "CorruptDataError": "rocketstore.errors",
    "DataLossError": "rocketstore.errors",
    "EncodedBatch": "rocketstore.codec.message_batch",
    "EncodedColumns": "rocketstore.codec.message_batch",
    "FlushDiskType": "rocketstore.config",
    "GetMessageResult": "rocketstore.results",
    "GetStatus": "rocketstore.results",
    "InvalidArgumentError": "rocketstore.errors",
    "InvalidMessageError": "rocketstore.errors",
    "ManualClock": "rocketstore.clock",
    "Message": "rocketstore.message",
    "MessageBatch": "rocketstore.results",
    "MessageExt": "rocketstore.message",
    "MessageStore": "rocketstore.store",
    "NotAStoreError": "rocketstore.errors",
    "PutBatchResult": "rocketstore.results",
    "PutColumnsResult": "rocketstore.results",
    "PutMessageResult": "rocketstore.results",
    "PutStatus": "rocketstore.results",
    "ReclaimReport": "rocketstore.cleanup",
    "RecordRead": "rocketstore.results",
    "RecordsResult": "rocketstore.results",
    "RocketStoreError": "rocketstore.errors",
    "StoreAccessError": "rocketstore.errors",
    "StoreClosedError": "rocketstore.errors",
    "StoreConfig": "rocketstore.config",
    "StoreConfigError": "rocketstore.errors",
    "StoreIOError": "rocketstore.errors",
    "StoreLockedError": "rocketstore.errors",
    "StorePathError": "rocketstore.errors",
    "StoreReadOnlyError": "rocketstore.errors",
    "SystemClock": "rocketstore.clock",
    "TopicConfig": "rocketstore.codec.config_json",
}

__all__ = [
    "BrokerRole",
    "Clock",
    "CorruptDataError",
    "DataLossError",
    "EncodedBatch",
    "EncodedColumns",
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
    "PutColumnsResult",
    "PutMessageResult",
    "PutStatus",
    "ReclaimReport",
    "RecordRead",
    "RecordsResult",
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


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'rocketstore' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
