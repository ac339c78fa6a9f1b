"""Every exception rocketstore raises on purpose.

::

    RocketStoreError                 base of everything below
    ├── StoreConfigError             a setting is invalid, or does not match the files on disk
    ├── StorePathError               a store path holds the wrong kind of thing (a FIFO, directory,
    │   │                            device or link where a file belongs, a file where a directory
    │   │                            belongs); carries the path, what belongs there and what is there
    │   └── NotAStoreError           no store at that path: nothing there, or a directory holding none
    │                                of a store's files (also a FileNotFoundError)
    ├── StoreAccessError             the system refuses access to a store path (permissions, a
    │                                read-only file system); carries the path (also a PermissionError)
    ├── StoreIOError                 the system failed an I/O the store needed on a path: a full disk
    │                                (ENOSPC, EDQUOT), an I/O error (EIO), too many open files
    │                                (EMFILE, ENFILE), a file gone under the store (ENOENT) ...;
    │                                carries ``errno``, ``path`` and what was being done (also an
    │                                OSError, with ``errno``, ``strerror`` and ``filename``)
    ├── StoreLockedError             another process (or another open in this one) holds the store
    ├── StoreClosedError             the store was used after close()
    ├── StoreReadOnlyError           a write (put, topic change, offset commit, reclaim) on a
    │                                store opened with readonly=True
    ├── InvalidArgumentError         an argument of the wrong type (a str queue id ...); also a
    │                                TypeError
    ├── InvalidMessageError          a message that must not be stored; carries the PutStatus
    ├── CorruptDataError             bytes on disk (or given to a codec) that break the format;
    │                                carries the path and offset when known
    ├── DataLossError                a reader was promised messages that are gone (reclaimed)
    ├── StoreWriteError              the store did not take a write whose durability a caller
    │                                waits on (a pop consumer's ack); carries the PutStatus
    ├── InvalidReceiptHandleError    a pop receipt handle that is malformed, or names no message
    │                                this consumer group was handed (also a ValueError)
    └── RequestRefusedError          a broker request refused for what it names or who sends it;
                                     carries the ``Refusal`` (why, in no protocol's words) and the
                                     text the client is shown: each protocol adapter answers it
                                     with its own code

Bad input is rejected before anything is written. Corrupt files are reported with a
``CorruptDataError`` naming the file and offset; readers never loop on them.
"""

from __future__ import annotations

import enum
import errno
import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rocketstore.results import PutStatus

__all__ = [
    "CorruptDataError",
    "DataLossError",
    "InvalidArgumentError",
    "InvalidMessageError",
    "InvalidReceiptHandleError",
    "NotAStoreError",
    "Refusal",
    "RequestRefusedError",
    "RocketStoreError",
    "StoreAccessError",
    "StoreClosedError",
    "StoreConfigError",
    "StoreIOError",
    "StoreLockedError",
    "StorePathError",
    "StoreReadOnlyError",
    "StoreWriteError",
    "as_store_error",
]


class RocketStoreError(Exception):
    """Base class of every error rocketstore raises deliberately."""


class StoreConfigError(RocketStoreError, ValueError):
    """A configuration value is invalid, or the store's files were written with another geometry."""


class StorePathError(RocketStoreError):
    """A path of the store holds something other than what belongs there.

    ``expected`` says what belongs at ``path`` ("a regular file", "a directory"), ``found`` what
    is there ("a FIFO", "a symbolic link" ...). Raised when a store is opened or a file is
    loaded, before anything is read from or written to the path.
    """

    def __init__(self, path: str | os.PathLike[str], expected: str, found: str) -> None:
        self.path = os.fspath(path)
        self.expected = expected
        self.found = found
        super().__init__(f"{self.path}: expected {expected}, found {found}")


class NotAStoreError(StorePathError, FileNotFoundError):
    """No store at the path: nothing is there, or a directory with none of a store's files.

    Also a ``FileNotFoundError``, as the missing directory of a read-only open always was.
    """

    def __init__(self, path: str | os.PathLike[str], found: str) -> None:
        self.path = os.fspath(path)
        self.expected = "a store directory"
        self.found = found
        RocketStoreError.__init__(self, f"{self.path} is not a store directory: {found}")


class StoreAccessError(RocketStoreError, PermissionError):
    """The system refuses an access the store needs: permissions, or a read-only file system."""

    def __init__(self, path: str | os.PathLike[str], access: str, reason: str) -> None:
        self.path = os.fspath(path)
        self.access = access
        super().__init__(f"{self.path}: cannot {access}: {reason}")


class StoreIOError(RocketStoreError, OSError):
    """The system failed an I/O the store needed: ``errno`` says why (ENOSPC, EIO, EMFILE ...),
    ``path`` where, ``access`` what the store was doing ("write", "flush", "open" ...). Nothing
    the store acknowledged before is lost; what this write would have added was not taken."""

    def __init__(self, path: str | os.PathLike[str], access: str, error: OSError) -> None:
        super().__init__(error.errno, error.strerror or str(error), os.fspath(path))
        self.path = os.fspath(path)
        self.access = access

    def __str__(self) -> str:
        name = errno.errorcode.get(self.errno, str(self.errno)) if self.errno is not None else "?"
        return f"{self.path}: cannot {self.access}: {self.strerror} ({name})"


def as_store_error(exc: BaseException, path: str | os.PathLike[str], access: str) -> BaseException:
    """``exc`` as the store raises it: an OSError that is not already a rocketstore error
    becomes a StoreIOError (its own file name if it has one, else ``path``); anything else is
    returned as it is."""
    if isinstance(exc, OSError) and not isinstance(exc, RocketStoreError):
        error = StoreIOError(exc.filename if exc.filename is not None else path, access, exc)
        error.__cause__ = exc
        return error
    return exc


class StoreLockedError(RocketStoreError):
    """The store directory is already open, by another process or by this one."""

    def __init__(self, path: str, detail: str = "") -> None:
        self.path = path
        msg = f"store {path!r} is already open by another process or store instance"
        super().__init__(f"{msg}: {detail}" if detail else msg)


class StoreClosedError(RocketStoreError):
    """An operation was attempted on a closed store."""


class StoreReadOnlyError(RocketStoreError):
    """A write was asked of a store opened with ``readonly=True``; nothing was written."""


class InvalidArgumentError(RocketStoreError, TypeError):
    """An argument of the wrong type: a queue id, offset or count that is not an int, a topic
    that is not a str (without this a str queue id would simply find no queue); or an int out
    of its range where storing it would break the store's files (``commit_offset``'s queue id
    and offset)."""


class InvalidMessageError(RocketStoreError, ValueError):
    """A message that cannot be stored: bad topic, too large, bad properties. Nothing was written."""

    def __init__(self, message: str, status: PutStatus) -> None:
        super().__init__(message)
        self.status = status


class CorruptDataError(RocketStoreError):
    """Bytes that do not follow the on-disk format.

    ``path`` is the file (None for in-memory buffers), ``offset`` the byte position of the
    damaged structure: a global commitlog offset for commitlog records, a position in the
    buffer or file otherwise.
    """

    def __init__(self, reason: str, *, path: str | None = None, offset: int | None = None) -> None:
        self.reason = reason
        self.path = path
        self.offset = offset
        where = []
        if path is not None:
            where.append(path)
        if offset is not None:
            where.append(f"offset {offset}")
        super().__init__(f"{reason} ({', '.join(where)})" if where else reason)


class DataLossError(RocketStoreError):
    """Messages a reader was to read next are gone: reclaimed (or damaged) before it got to them."""


class StoreWriteError(RocketStoreError):
    """The store did not take a write a caller must know durable (``status``: why; FLUSH_DISK_TIMEOUT
    means stored but not known to be on disk)."""

    def __init__(self, message: str, status: PutStatus) -> None:
        super().__init__(message)
        self.status = status


class InvalidReceiptHandleError(RocketStoreError, ValueError):
    """A receipt handle (``rocketstore.broker.pop``) that is malformed, of another broker, or names
    a message the consumer group was never handed; ``handle`` is the text given, and the message
    says what was wrong with it."""

    def __init__(self, handle: object, reason: str) -> None:
        super().__init__(f"invalid receipt handle {handle!r}: {reason}")
        self.handle = handle
        self.reason = reason


class Refusal(enum.Enum):
    """Why the broker refuses a request, whichever protocol carries it."""

    ILLEGAL_TOPIC = "illegal topic"  # not a valid name, or one of the broker's own topics
    ILLEGAL_GROUP = "illegal group"  # not a valid consumer group name, or a system group
    UNAUTHORIZED = "unauthorized"  # no valid signature of a known access key
    FORBIDDEN = "forbidden"  # the signing account may not use the topic or group named
    OVER_LIMIT = "over limit"  # a bound the broker keeps (client ids on one connection)
    UNKNOWN_TRANSACTION = "unknown transaction"  # malformed, names no half, or already ended


class RequestRefusedError(RocketStoreError):
    """A request the broker's core refuses: ``reason`` says why in no protocol's words, and
    ``message`` names what was wrong, as the client is to be shown it. The protocol adapters
    answer it with their own codes (the gRPC adapter's ``status.refusal_status``)."""

    def __init__(self, reason: Refusal, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message
