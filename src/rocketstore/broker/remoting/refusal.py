"""``RequestRefused``: a request answered with a RocketMQ response code and a remark instead of
SUCCESS. A handler raises it; the server turns it into the response (REMOTING.md §9)."""

from __future__ import annotations

__all__ = ["RequestRefused"]


class RequestRefused(Exception):
    """``code`` is a ``ResponseCode``; ``remark`` says why, as the client will show it."""

    def __init__(self, code: int, remark: str) -> None:
        super().__init__(remark)
        self.code = int(code)
        self.remark = remark
