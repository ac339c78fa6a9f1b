"""What a slave may write of the bytes its master sends: only whole records that check out.

RocketMQ's protocol carries no checksum and its slave writes whatever arrives. Here every
transfer's records are checked first (``check_transfer``: magic code, sizes adding up, body CRC,
PHYSICALOFFSET equal to the record's position, QUEUEID and QUEUEOFFSET not negative, a BLANK
reaching its segment's end). A record cut by the end of a transfer is held back, in memory,
until the rest arrives; so the slave's log, and every ack it sends, ends at the last good byte,
and a new connection resumes from there.

What the record format cannot show: the CRC covers the body only, so a changed byte inside the
topic or the properties (not their length fields), or in a fixed field no rule above ties to
anything (flag, SYSFLAG's bits other than the host kinds, timestamps, hosts, reconsume times,
prepared-transaction offset, a QUEUEID or QUEUEOFFSET that stays non-negative), passes.
"""

from __future__ import annotations

from rocketstore.codec.commitlog_scan import check_transfer
from rocketstore.errors import CorruptDataError

__all__ = ["Piece", "TransferCheck", "prepare_transfer_check"]

Piece = tuple[int, bytes | memoryview]  # (log offset, bytes that may be written there)


class TransferCheck:
    """Splits one connection's transfers into the pieces that may be written, in log order.

    Each transfer must continue the last (``expected``) and lie inside one segment, as the
    protocol promises. At the first thing that is wrong ``accept`` answers, with the pieces
    before it, a CorruptDataError (``offset``: the log offset of the bad record); nothing of
    that record or after it is given.
    """

    def __init__(self, segment_size: int) -> None:
        self._segment_size = segment_size
        self.expected: int | None = None  # the offset the next transfer must start at
        self._held = bytearray()  # the first bytes of a record the next transfer completes
        self._held_at = 0  # their log offset
        self._filler_to = 0  # after a checked BLANK: the end of its segment (filler up to there)
        self._refused: CorruptDataError | None = None
        self._span = bytearray()  # where a held record and several bodies are joined to be checked

    @property
    def held(self) -> int:
        """Bytes received but not given out: the start of an incomplete record."""
        return len(self._held)

    def accept(self, offset: int, *bodies: memoryview) -> tuple[list[Piece], CorruptDataError | None]:
        """The checked bytes that ``bodies``, consecutive transfers from ``offset`` in one
        segment, complete, as at most one (offset, bytes) piece (a view of the one body, or,
        when a record began in an earlier transfer or several bodies came, of a buffer the next
        call reuses: write it before), and what is wrong with the rest of them, if anything
        (then nothing more is accepted)."""
        pieces: list[Piece] = []
        if self._refused is not None:
            return pieces, self._refused
        try:
            self._accept(offset, bodies, pieces)
        except CorruptDataError as exc:
            self._refused = exc
            return _joined(pieces), exc
        return _joined(pieces), None

    def _accept(self, offset: int, bodies: tuple[memoryview, ...], pieces: list[Piece]) -> None:
        if self.expected is not None and offset != self.expected:
            raise CorruptDataError(f"a transfer from offset {offset} does not continue at {self.expected}")
        self.expected = offset + sum(len(body) for body in bodies)
        # one walk over the held record and every body (a copy once, not a call per transfer)
        span: memoryview
        if self._held or len(bodies) != 1:
            base = self._held_at if self._held else offset
            span = self._joined_span((self._held, *bodies))
            self._held = bytearray()
        else:
            span, base = bodies[0], offset
        pos = self._filler(base, span, 0, pieces)
        if pos == len(span):
            return
        try:
            reached, stop, _ = check_transfer(span, base, pos, self._segment_size)
        except CorruptDataError as exc:  # the records before the bad one are good
            assert exc.offset is not None
            if exc.offset > base + pos:
                pieces.append((base + pos, span[pos : exc.offset - base]))
            raise
        if reached > pos:
            pieces.append((base + pos, span[pos:reached]))
        if stop == "incomplete":
            self._held = bytearray(span[reached:])
            self._held_at = base + reached
        elif stop == "blank":
            self._filler_to = base + reached + self._segment_size - (base + reached) % self._segment_size
            if self._filler(base, span, reached, pieces) < len(span):
                raise CorruptDataError("a transfer runs past the end of its segment", offset=offset)

    def _joined_span(self, parts: tuple[bytearray | memoryview, ...]) -> memoryview:
        """``parts`` copied one after the other into the reused span buffer (a fresh buffer per
        read would fault in its pages each time)."""
        size = sum(len(part) for part in parts)
        if len(self._span) < size:
            self._span = bytearray(max(size, 2 * len(self._span)))
        span = memoryview(self._span)[:size]
        at = 0
        for part in parts:
            span[at : at + len(part)] = part
            at += len(part)
        return span

    def _filler(self, offset: int, body: memoryview, pos: int, pieces: list[Piece]) -> int:
        """Give the bytes after a checked BLANK up to its segment's end; where they end in ``body``."""
        end = min(len(body), self._filler_to - offset)
        if end <= pos:
            return pos
        pieces.append((offset + pos, body[pos:end]))
        return end


def _joined(pieces: list[Piece]) -> list[Piece]:
    """The pieces (consecutive) as one: one write, not a small one into an untouched page of the
    mapping (a page fault each transfer) and the rest by pwrite."""
    if len(pieces) < 2:
        return pieces
    return [(pieces[0][0], b"".join(piece for _, piece in pieces))]


def prepare_transfer_check() -> None:
    """Load the compiled check, so the first transfer does not wait for it (the version for
    writable buffers: the receive buffer and a held record are both)."""
    check_transfer(bytearray(), 0, 0, 1)
