"""What the broker's doors log about the requests they answer: refusals, with the request and
the code they were answered with, and requests slower than a threshold, with their code and
duration. Both are rate-limited (``rate_limited_log.RateLimitedLog``: one line per kind a
minute, the next one saying how many were left out), so a client repeating a refused request
cannot flood the log. A kind is the request's and the answer's labels, which callers take from
fixed sets (a code's name, ``OTHER`` for a code the protocol does not define), never from what
a client sent: the table of kinds stays bounded.

A request's duration runs from when its frame was read to when its answer is ready, less the
time it waited on purpose: a long poll (a pull or receive parked until a message arrives) says
so with ``parked(seconds)``, noted in the running task's context, so each request keeps its own.
The cost on the hot path is one monotonic clock read and a comparison per request; the rest is
paid only by the requests that are logged.
"""

from __future__ import annotations

import logging
from contextvars import ContextVar
from typing import Final

from rocketstore.broker.rate_limited_log import RateLimitedLog

__all__ = ["DEFAULT_SLOW_REQUEST_MS", "RequestLog", "parked"]

DEFAULT_SLOW_REQUEST_MS: Final = 1000
_REMARK_CHARS: Final = 200  # of a refusal's remark (it may quote what the client sent)

_parked_s: ContextVar[float] = ContextVar("rocketstore_parked_s", default=0.0)


def parked(seconds: float) -> None:
    """The request running in this task waited ``seconds`` on purpose (a long poll): that time
    is not slowness."""
    _parked_s.set(_parked_s.get() + seconds)


class RequestLog:
    """The refusal and slow-request lines of one door (``door`` names it in each line).
    ``slow_ms`` 0: no slow-request lines."""

    def __init__(self, logger: logging.Logger, door: str, slow_ms: int = DEFAULT_SLOW_REQUEST_MS) -> None:
        self.door = door
        self.slow_s = slow_ms / 1000 if slow_ms > 0 else float("inf")
        self._lines = RateLimitedLog(logger)

    def refused(self, request: str, code: str, peer: str, remark: str | None) -> None:
        """``request`` from ``peer`` was answered with the refusal ``code`` (both labels from
        fixed sets)."""
        self._lines.warning(
            f"refused {request} {code}",
            "%s: refused %s from %s: %s %s",
            self.door,
            request,
            peer,
            code,
            (remark or "")[:_REMARK_CHARS],
        )

    def slow(self, elapsed: float, request: str, code: str, peer: str) -> None:
        """A request answered with ``code`` ``elapsed`` seconds after it began, which is more
        than ``slow_s`` (the caller compares, so a quick request pays nothing more): a line
        when it stays over the threshold without its parked time."""
        elapsed -= _parked_s.get()
        if elapsed > self.slow_s:
            self._lines.warning(
                f"slow {request}",
                "%s: slow request: %s from %s answered %s after %.0f ms (threshold %.0f ms)",
                self.door,
                request,
                peer,
                code,
                elapsed * 1000,
                self.slow_s * 1000,
            )
