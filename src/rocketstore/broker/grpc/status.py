"""The protocol's answer codes, and ``StatusError``: a request refused with one of them.

Every unary response (and the first message of a receive stream) carries ``Status{code,
message}`` (BROKER.md §3). The service turns a ``StatusError`` raised while handling a request
into that status, and so a ``RequestRefusedError`` of the broker's core, with the code its
reason maps to (``refusal_status``); anything else unexpected becomes INTERNAL_ERROR with the
exception's text, never a dropped call.
"""

from __future__ import annotations

from typing import Any

from rocketstore.errors import Refusal, RequestRefusedError
from rocketstore.protocol import definition_pb2
from rocketstore.results import PutStatus

__all__ = ["Code", "StatusError", "put_status_code", "refusal_status", "status"]

Code: Any = definition_pb2.Code


class StatusError(Exception):
    """A request the broker refuses: ``code`` is the protocol's Code value, the text says why."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


# Code.Name is a Python call through protobuf's enum wrapper: looked up once for every code
_CODE_NAMES: dict[int, str] = {number: name for name, number in Code.items()}


def status(code: int, message: str = "") -> Any:
    return definition_pb2.Status(code=code, message=message or _CODE_NAMES.get(code) or Code.Name(code))


_PUT_CODES = {
    PutStatus.PUT_OK: Code.OK,
    PutStatus.FLUSH_DISK_TIMEOUT: Code.MASTER_PERSISTENCE_TIMEOUT,
    PutStatus.FLUSH_SLAVE_TIMEOUT: Code.SLAVE_PERSISTENCE_TIMEOUT,
    PutStatus.SLAVE_NOT_AVAILABLE: Code.HA_NOT_AVAILABLE,
    PutStatus.MESSAGE_ILLEGAL: Code.BAD_REQUEST,
    PutStatus.MESSAGE_SIZE_EXCEEDED: Code.MESSAGE_BODY_TOO_LARGE,
    PutStatus.PROPERTIES_SIZE_EXCEEDED: Code.MESSAGE_PROPERTIES_TOO_LARGE,
    PutStatus.OS_PAGECACHE_BUSY: Code.TOO_MANY_REQUESTS,
}


def put_status_code(put: PutStatus) -> int:
    """The Code a send answers for the store's PutStatus (RocketMQ proxy's mapping; the store's
    own refusals, a full disk or a failed service, are server errors)."""
    code: int = _PUT_CODES.get(put, Code.INTERNAL_SERVER_ERROR)
    return code


_REFUSAL_CODES = {
    Refusal.ILLEGAL_TOPIC: Code.ILLEGAL_TOPIC,
    Refusal.ILLEGAL_GROUP: Code.ILLEGAL_CONSUMER_GROUP,
    Refusal.UNAUTHORIZED: Code.UNAUTHORIZED,
    Refusal.FORBIDDEN: Code.FORBIDDEN,
    Refusal.OVER_LIMIT: Code.TOO_MANY_REQUESTS,
    Refusal.UNKNOWN_TRANSACTION: Code.INVALID_TRANSACTION_ID,
}


def refusal_status(exc: StatusError | RequestRefusedError) -> Any:
    """The Status a refused request is answered with: a StatusError's own code, or the Code the
    reason of a core refusal maps to."""
    if isinstance(exc, RequestRefusedError):
        return status(_REFUSAL_CODES[exc.reason], exc.message)
    return status(exc.code, exc.message)
