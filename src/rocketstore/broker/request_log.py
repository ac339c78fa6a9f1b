"""What the broker's doors log about the requests they answer: refusals, with the request and
the code they were answered with, and requests slower than a threshold, with their code and
duration. Both are rate-limited (``rate_limited_log.RateLimitedLog``: one line per kind a
minute, the next one saying how many were left out), so a client repeating a refused request
cannot flood the log. A kind is the request and the answer as the door has them (a code, a
handler's name), which callers take from fixed sets (``OTHER`` for a code the protocol does not
define), never from what a client sent: the table of kinds stays bounded. A refusal costs a
look-up of its kind; the labels of a line (``request_label``, ``code_label``) are made only for
the lines written, so a flood of refusals costs little when the broker is busiest.

A request's duration runs from when its frame was read to when its answer is ready, less the
time it waited on purpose: a long poll (a pull or receive parked until a message arrives) says
so with ``parked(seconds)``, noted in the running task's context, so each request keeps its own.
The cost on the hot path is one monotonic clock read and a comparison per request; the rest is
paid only by the requests that are logged.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Hashable
from contextvars import ContextVar
from typing import Any, Final

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
    ``slow_ms`` 0: no slow-request lines. ``request_label`` and ``code_label`` make a line's
    labels of the request and the answer code it was given. Thread safety: the door's event
    loop only (no lock)."""

    def __init__(
        self,
        logger: logging.Logger,
        door: str,
        slow_ms: int = DEFAULT_SLOW_REQUEST_MS,
        *,
        request_label: Callable[[Any], str] = str,
        code_label: Callable[[Any], str] = str,
    ) -> None:
        self.door = door
        self.slow_s = slow_ms / 1000 if slow_ms > 0 else float("inf")
        self._request_label = request_label
        self._code_label = code_label
        self._refusals = RateLimitedLog(logger)
        self._slow = RateLimitedLog(logger)

    def refused(self, request: Hashable, code: Hashable, peer: str, remark: str | None) -> None:
        """``request`` from ``peer`` was answered with the refusal ``code`` (both from fixed
        sets)."""
        due = self._refusals.due((request, code))
        if due is not None:
            self._refusals.write(
                due,
                "%s: refused %s from %s: %s %s",
                self.door,
                self._request_label(request),
                peer,
                self._code_label(code),
                (remark or "")[:_REMARK_CHARS],
            )

    def slow(self, elapsed: float, request: Hashable, code: Hashable, peer: str) -> None:
        """A request answered with ``code`` ``elapsed`` seconds after it began, which is more
        than ``slow_s`` (the caller compares, so a quick request pays nothing more): a line
        when it stays over the threshold without its parked time."""
        elapsed -= _parked_s.get()
        if elapsed <= self.slow_s:
            return
        due = self._slow.due(request)
        if due is not None:
            self._slow.write(
                due,
                "%s: slow request: %s from %s answered %s after %.0f ms (threshold %.0f ms)",
                self.door,
                self._request_label(request),
                peer,
                self._code_label(code),
                elapsed * 1000,
                self.slow_s * 1000,
            )
