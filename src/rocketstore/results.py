"""What puts and gets return."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NamedTuple

import numpy as np
import numpy.typing as npt

from rocketstore.codec.text_column import TextColumn

if TYPE_CHECKING:
    from rocketstore.message import MessageExt

__all__ = [
    "GetMessageResult",
    "GetStatus",
    "MessageBatch",
    "PutBatchResult",
    "PutColumnsResult",
    "PutMessageResult",
    "PutStatus",
    "RecordRead",
    "RecordsResult",
]


class PutStatus(enum.Enum):
    """RocketMQ's PutMessageStatus. Statuses about the message itself come with an
    ``InvalidMessageError`` (nothing written); the others describe the store's state."""

    PUT_OK = "PUT_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"
    SERVICE_NOT_AVAILABLE = "SERVICE_NOT_AVAILABLE"
    CREATE_MAPPED_FILE_FAILED = "CREATE_MAPPED_FILE_FAILED"
    MESSAGE_ILLEGAL = "MESSAGE_ILLEGAL"
    MESSAGE_SIZE_EXCEEDED = "MESSAGE_SIZE_EXCEEDED"
    PROPERTIES_SIZE_EXCEEDED = "PROPERTIES_SIZE_EXCEEDED"
    OS_PAGECACHE_BUSY = "OS_PAGECACHE_BUSY"
    # the disk is above disk_warning_ratio: no put is taken until reclamation frees space
    # (RocketMQ answers SERVICE_NOT_AVAILABLE and says why only in its log)
    DISK_FULL = "DISK_FULL"
    # SYNC_MASTER: stored here, but no slave acknowledged it within slave_timeout
    FLUSH_SLAVE_TIMEOUT = "FLUSH_SLAVE_TIMEOUT"
    # SYNC_MASTER: stored here, but no slave is connected, or the best is too far behind
    SLAVE_NOT_AVAILABLE = "SLAVE_NOT_AVAILABLE"
    UNKNOWN_ERROR = "UNKNOWN_ERROR"


class GetStatus(enum.Enum):
    """RocketMQ's GetMessageStatus, same meanings."""

    FOUND = "FOUND"
    NO_MATCHED_MESSAGE = "NO_MATCHED_MESSAGE"
    MESSAGE_WAS_REMOVING = "MESSAGE_WAS_REMOVING"
    OFFSET_FOUND_NULL = "OFFSET_FOUND_NULL"
    OFFSET_OVERFLOW_BADLY = "OFFSET_OVERFLOW_BADLY"
    OFFSET_OVERFLOW_ONE = "OFFSET_OVERFLOW_ONE"
    OFFSET_TOO_SMALL = "OFFSET_TOO_SMALL"
    NO_MATCHED_LOGIC_QUEUE = "NO_MATCHED_LOGIC_QUEUE"
    NO_MESSAGE_IN_QUEUE = "NO_MESSAGE_IN_QUEUE"


class PutMessageResult(NamedTuple):
    """Outcome of one put. On PUT_OK every field is set; otherwise offsets are -1.

    A tuple underneath: a batch put makes one per message, so it must be cheap to build.
    """

    status: PutStatus
    topic: str = ""
    queue_id: int = -1
    physical_offset: int = -1
    queue_offset: int = -1
    store_timestamp: int = 0
    wrote_bytes: int = 0
    id_prefix: str = ""  # store host + port in hex: the offsetMsgId without its offset

    @property
    def ok(self) -> bool:
        return self.status is PutStatus.PUT_OK

    @property
    def msg_id(self) -> str | None:
        """The offsetMsgId (store host + physical offset), None when nothing was stored."""
        if self.physical_offset < 0:
            return None
        return f"{self.id_prefix}{self.physical_offset:016X}"


@dataclass(frozen=True, eq=False)
class PutBatchResult:
    """Outcome of ``MessageStore.put_batch``: one status for the whole batch, and per-message
    columns (message i is at ``physical_offsets[i]``, queue ``queue_ids[i]``, offset
    ``queue_offsets[i]``). The batch is stored whole or not at all: on any status but PUT_OK
    and FLUSH_DISK_TIMEOUT (stored, not yet known to be on disk) the offsets are -1."""

    status: PutStatus
    topic: str
    queue_ids: npt.NDArray[np.int64]
    queue_offsets: npt.NDArray[np.int64]
    physical_offsets: npt.NDArray[np.int64]
    sizes: npt.NDArray[np.int64]
    store_timestamp: int
    id_prefix: str
    uniq_keys: TextColumn

    def __len__(self) -> int:
        return len(self.physical_offsets)

    @property
    def ok(self) -> bool:
        return self.status is PutStatus.PUT_OK

    def msg_id(self, i: int) -> str | None:
        """Message i's offsetMsgId, None when nothing was stored."""
        offset = int(self.physical_offsets[i])
        return f"{self.id_prefix}{offset:016X}" if offset >= 0 else None

    def uniq_key(self, i: int) -> str | None:
        """Message i's UNIQ_KEY (None when the store generates none: ``generate_uniq_key``)."""
        return self.uniq_keys[i]

    def __getitem__(self, i: int) -> PutMessageResult:
        stored = int(self.physical_offsets[i]) >= 0
        return PutMessageResult(
            self.status,
            self.topic,
            int(self.queue_ids[i]),
            int(self.physical_offsets[i]),
            int(self.queue_offsets[i]),
            self.store_timestamp if stored else 0,
            int(self.sizes[i]) if stored else 0,
            self.id_prefix,
        )


@dataclass(frozen=True)
class PutColumnsResult:
    """Outcome of ``MessageStore.put_encoded_columns``: one status for every batch (stored all
    together or not at all), and per-message columns, the messages of batch b being
    ``ends[b - 1]`` (0 for the first) to ``ends[b]``. Message i went to topic ``topic_ids[i]``
    of the columns' topics, queue ``queue_ids[i]`` at ``queue_offsets[i]``, commitlog
    ``physical_offsets[i]`` (-1 when nothing was stored), ``sizes[i]`` bytes."""

    status: PutStatus
    ends: npt.NDArray[np.int64]
    topic_ids: npt.NDArray[np.int64]
    queue_ids: npt.NDArray[np.int64]
    queue_offsets: npt.NDArray[np.int64]
    physical_offsets: npt.NDArray[np.int64]
    sizes: npt.NDArray[np.int64]
    store_timestamp: int
    id_prefix: str
    uniq_keys: TextColumn

    def __len__(self) -> int:
        return len(self.physical_offsets)

    @property
    def stored(self) -> bool:
        """Whether the messages were stored (a timeout status says so too, offsets known)."""
        return len(self) == 0 or int(self.physical_offsets[0]) >= 0


@dataclass
class GetMessageResult:
    status: GetStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    messages: list[MessageExt] = field(default_factory=list)

    @property
    def found(self) -> bool:
        return self.status is GetStatus.FOUND


class RecordRead(NamedTuple):
    """One read of ``MessageStore.get_records``: ``get_message``'s arguments."""

    topic: str
    queue_id: int
    offset: int
    max_msgs: int
    tags: str | None = None


@dataclass(frozen=True)
class RecordsResult:
    """What ``MessageStore.get_records`` found, read by read: read i's status, next begin offset
    and queue bounds are ``statuses[i]``, ``next_begin_offsets[i]``, ``min_offsets[i]`` and
    ``max_offsets[i]``, as ``get_message`` gives them; its ``counts[i]`` records, byte for byte
    as stored, are ``records[starts[i]:starts[i + 1]]``. A status None is a read not done (asked
    ``in_memory_only``, its records may be on the disk): its other columns are 0."""

    statuses: list[GetStatus | None]
    next_begin_offsets: npt.NDArray[np.int64]
    min_offsets: npt.NDArray[np.int64]
    max_offsets: npt.NDArray[np.int64]
    counts: npt.NDArray[np.int64]
    records: bytearray
    starts: npt.NDArray[np.int64]

    def __len__(self) -> int:
        return len(self.statuses)


@dataclass(frozen=True)
class MessageBatch:
    """Consecutive messages of one queue as columns (``MessageStore.read_batch``): no Python object
    per message, ready for Arrow (``body`` + ``body_offsets`` is Arrow's binary layout). Message i's
    body is ``body[body_offsets[i]:body_offsets[i + 1]]``; ``body`` is empty when bodies were not
    asked for. ``next_offset`` is where the next read of the queue starts."""

    topic: str
    queue_id: int
    queue_offsets: npt.NDArray[np.int64]
    physical_offsets: npt.NDArray[np.int64]
    sizes: npt.NDArray[np.int64]
    tags_codes: npt.NDArray[np.int64]
    born_timestamps: npt.NDArray[np.int64]
    store_timestamps: npt.NDArray[np.int64]
    body: bytearray
    body_offsets: npt.NDArray[np.int64]
    next_offset: int

    def __len__(self) -> int:
        return len(self.queue_offsets)

    def body_at(self, i: int) -> memoryview:
        return memoryview(self.body)[int(self.body_offsets[i]) : int(self.body_offsets[i + 1])]
