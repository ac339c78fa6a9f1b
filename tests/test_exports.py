"""The public surface is exactly what rocketstore/__init__.py exports; everything else is private."""

from __future__ import annotations

import rocketstore

PUBLIC = {
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
}


def test_export_list_is_pinned() -> None:
    assert set(rocketstore.__all__) == PUBLIC
    for name in PUBLIC:
        assert getattr(rocketstore, name) is not None


def test_every_error_derives_from_one_base() -> None:
    for name in (
        "CorruptDataError",
        "DataLossError",
        "InvalidArgumentError",
        "InvalidMessageError",
        "StoreClosedError",
        "StoreConfigError",
        "StoreLockedError",
        "StorePathError",
        "NotAStoreError",
        "StoreAccessError",
        "StoreIOError",
        "StoreReadOnlyError",
    ):
        assert issubclass(getattr(rocketstore, name), rocketstore.RocketStoreError)
