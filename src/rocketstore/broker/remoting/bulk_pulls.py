"""Pulls in bulk: the PULL_MESSAGE requests of one read of a connection (and those woken from
parking in one turn of the loop) read by one store call and answered by one compiled pass
(issue 30).

The reader starts the round once it has handed on the read's frames (``run``), in the same turn,
so a pull's answer never waits behind the rounds of sends that turn scheduled. Each pull's
header is judged as the handler judges it (``PullProcessor.check``: permissions, the
subscription, the commit offset), then the round's reads go to the store together
(``MessageStore.get_records``), which copies each read's records as they lie in the commitlog
into one buffer, and ``command.encode_pull_answers`` writes every answer's frame, header and
records, in one pass; each connection's answers leave in one write, at once. A lone pull is a
round of one: no timer anywhere.

The reads of records in memory (RocketMQ's rule: within 40 % of physical memory from the
commitlog's end) are done on the event loop: handing them to a thread and back cost more CPU
than the reads, and two threads taking turns at the GIL do no more than one. Those that may
have to come from the disk go to the store's thread in a second call, so that the loop never
waits on the disk for a record (the consume queue's entries are read on the loop; they are
small and read in order). Up to eight rounds wait on the store's thread at once; while they do,
new pulls wait for one of them to end.

A pull that finds nothing and may wait (sysFlag 0x2) is parked, costing a timer and no task:
one watcher per broker looks at the parked pulls' queues after each arrival of messages (the
store's signal), and a pull whose queue has a message past its offset, or whose suspend time is
over, joins a round at the next turn, which reads it again and answers it whatever it finds. The
bound on parked pulls is the handler's (``PullProcessor.max_suspended``, shared with it; past it
SYSTEM_BUSY).
A refusal is answered with its code and remark, an error as the server answers a failed handler
(SYSTEM_ERROR), and an answer that the connection's full output or the frame limit would change
goes through ``Connection.answer``, which decides as it does for every answer.

Not with an ACL, which judges each request (its handler runs then).

Thread safety: everything here runs on the event loop but the reads that may touch the disk,
which run on the context's executor.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

import numpy as np

from rocketstore.broker.remoting.codes import RequestCode, ResponseCode
from rocketstore.broker.remoting.command import RemotingCommand, encode_pull_answers
from rocketstore.broker.remoting.context import RemotingContext
from rocketstore.broker.remoting.headers import PullHeader
from rocketstore.broker.remoting.pull import PullArgs, PullProcessor, pull_response, response_code
from rocketstore.broker.remoting.refusal import RequestRefused
from rocketstore.results import GetStatus, RecordRead, RecordsResult

if TYPE_CHECKING:
    from rocketstore.broker.remoting.server import Connection

__all__ = ["BulkPulls"]

log = logging.getLogger("rocketstore.broker.remoting")

_ROUNDS: Final = 8  # rounds running at once (those past the first wait on the disk's reads)
_MAX_ROUND_PULLS: Final = 1024  # a round's pulls at most (what waits beyond goes next round)
_WATCH_S: Final = 1.0  # the most the arrival watcher waits before it looks whether any pull is parked
# the remarks of answers that are not SUCCESS: the statuses' names (plain text, JSON as it is)
_STATUSES: Final = list(GetStatus)
_STATUS_IDS: Final = {status: i for i, status in enumerate(_STATUSES)}
_REMARKS: Final = np.frombuffer("".join(s.value for s in _STATUSES).encode(), dtype=np.uint8).copy()
_REMARK_AT: Final = np.cumsum([0] + [len(s.value) for s in _STATUSES], dtype=np.int64)
_PULL: Final = int(RequestCode.PULL_MESSAGE)
_SUCCESS: Final = int(ResponseCode.SUCCESS)
_NOT_FOUND: Final = int(ResponseCode.PULL_NOT_FOUND)


@dataclass(eq=False, slots=True)
class _Pull:
    conn: Connection
    cmd: RemotingCommand
    length: int  # of its frame, counted in progress on its connection
    read_at: float  # (moved on by the time it was parked: that is not slowness)
    header: PullHeader | None  # as the compiled reader read it (None: from cmd's extFields)
    args: PullArgs | None = None  # once checked
    parked_at: float = 0.0  # (loop time) when it found nothing and was parked
    timer: asyncio.TimerHandle | None = None  # ends its parking when its suspend time is over
    handled: bool = False  # answered or parked: none of its round's business any more


class BulkPulls:
    """The broker's pulls in bulk (see the module docstring)."""

    def __init__(self, ctx: RemotingContext, processor: PullProcessor) -> None:
        self.ctx = ctx
        self._processor = processor
        self._waiting: deque[_Pull] = deque()
        self._scheduled = False
        self._running = 0
        self._parked: dict[tuple[str, int], set[_Pull]] = {}  # by queue
        self._watcher: asyncio.Task[None] | None = None
        self.answered = 0  # pulls answered in bulk (tests count them)

    @property
    def parked(self) -> int:
        """Pulls parked, waiting for messages in their queue."""
        return sum(map(len, self._parked.values()))

    def offer(
        self, conn: Connection, cmd: RemotingCommand, length: int, read_at: float, header: PullHeader | None
    ) -> None:
        """Take a pull of ``conn`` already counted in progress there; the count ends with its
        answer. ``header``: its fields, when the compiled reader read them (``cmd`` has none)."""
        self._waiting.append(_Pull(conn, cmd, length, read_at, header))
        self._schedule()

    def run(self) -> None:
        """Start a round of the pulls waiting now, at once: the server's read pass calls it once
        every connection it read has handed on its frames, so that their pulls are answered in
        the same turn, ahead of the round of sends the pass starts next (a pull's answer waits
        for no put)."""
        if self._waiting and self._running < _ROUNDS:
            self._start_round()

    def _schedule(self) -> None:
        """A round at the loop's next turn, if pulls wait (and no reader starts it first)."""
        if self._waiting and not self._scheduled:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self._scheduled_round)

    def _scheduled_round(self) -> None:
        self._scheduled = False
        self.run()

    def _start_round(self) -> None:
        """The pulls waiting now (up to _MAX_ROUND_PULLS): judged, their reads of records in
        memory done and answered here; the reads that may touch the disk go to a task, one of
        at most _ROUNDS at once."""
        waiting = self._waiting
        pulls = [waiting.popleft() for _ in range(min(len(waiting), _MAX_ROUND_PULLS))]
        for pull in pulls:
            pull.handled = False  # (a parked one is this round's again)
        try:
            on_disk = self._read_in_memory(pulls)
        except Exception as exc:  # a bug must not strand the requests: each is answered
            self._round_failed(pulls, exc)
            return
        if on_disk:
            self._running += 1
            task = asyncio.get_running_loop().create_task(self._read_from_disk(*on_disk))
            pulls[0].conn.server.track(task)

    def _round_failed(self, pulls: list[_Pull], exc: Exception) -> None:
        log.exception("pulls in bulk: a round of %d pulls failed", len(pulls), exc_info=exc)
        for pull in pulls:
            if not pull.handled:
                self._finish(pull, _failed(pull.cmd, exc))

    def _read_in_memory(self, pulls: list[_Pull]) -> tuple[list[_Pull], list[RecordRead]] | None:
        """Judge the pulls and answer (or park) those whose records lie in memory; the rest, with
        their reads, for the store's thread (None: none)."""
        checked: list[_Pull] = []
        for pull in pulls:
            if pull.args is not None:  # back from parking: judged (and its offset committed) before
                checked.append(pull)
                continue
            try:
                pull.args = self._processor.check(pull.cmd, pull.conn, pull.header)
            except RequestRefused as exc:
                self._finish(pull, pull.cmd.response(exc.code, exc.remark))
                continue
            except Exception as exc:
                log.exception("pull from %s failed", pull.conn.peer)
                self._finish(pull, _failed(pull.cmd, exc))
                continue
            checked.append(pull)
        if not checked:
            return None
        reads = [RecordRead(a.topic, a.queue_id, a.offset, a.max_msgs, a.tags) for a in _args(checked)]
        # on the loop what lies in memory (a trip to a thread and back costs more than the
        # read); on the store's thread what may have to come from the disk
        started = time.monotonic()
        self.ctx.metrics.pull_reads.inc()
        try:
            found = self.ctx.store.get_records(reads, in_memory_only=True)
        except Exception as exc:  # as the server answers a handler that failed
            self._failed_read(checked, exc)
            return None
        self._deliver(checked, reads, found, started)
        on_disk = [i for i, status in enumerate(found.statuses) if status is None]
        if not on_disk:
            return None
        return [checked[i] for i in on_disk], [reads[i] for i in on_disk]

    async def _read_from_disk(self, pulls: list[_Pull], reads: list[RecordRead]) -> None:
        """The reads of ``pulls`` that may touch the disk, on the store's thread; then answered."""
        try:
            started = time.monotonic()
            self.ctx.metrics.pull_reads.inc()
            try:
                found = await self.ctx.run(self.ctx.store.get_records, reads)
            except Exception as exc:  # (a cancellation goes on to the outer handler)
                self._failed_read(pulls, exc)
                return
            self._deliver(pulls, reads, found, started)
        except asyncio.CancelledError:  # the broker stops
            for pull in pulls:
                if not pull.handled:
                    self._release(pull)
            raise
        except Exception as exc:
            self._round_failed(pulls, exc)
        finally:
            self._running -= 1
            self._schedule()

    def _failed_read(self, pulls: list[_Pull], exc: Exception) -> None:
        log.error("reading %d pulls failed", len(pulls), exc_info=exc)
        for pull in pulls:
            self._finish(pull, _failed(pull.cmd, exc))

    def _deliver(
        self, pulls: list[_Pull], reads: list[RecordRead], found: RecordsResult, started: float
    ) -> None:
        """Answer or park each of ``pulls`` whose read ``found`` holds (begun at ``started``)."""
        read_ms = int((time.monotonic() - started) * 1000)
        answered: list[int] = []
        codes: list[int] = []
        now = asyncio.get_running_loop().time()
        for i, (pull, status, read) in enumerate(zip(pulls, found.statuses, reads)):
            if status is None:
                continue  # not read
            code = response_code(status, read.offset)
            args = pull.args
            assert args is not None
            # a pull parked once is answered whatever its second read finds
            if args.suspends and not pull.parked_at and code == _NOT_FOUND:
                self._park(pull, args, now)
            else:
                answered.append(i)
                codes.append(code)
        if answered:
            self._answer(pulls, found, answered, codes, read_ms)

    # --- long polling -------------------------------------------------------------------------
    def _park(self, pull: _Pull, args: PullArgs, now: float) -> None:
        """Keep a pull that found nothing until its queue has a message past its offset or its
        suspend time is over; then it is read again and answered, whatever it finds."""
        pull.handled = True
        processor = self._processor
        if processor.suspended >= processor.max_suspended:
            busy = f"[OVERLOAD] {processor.max_suspended} pulls are suspended already"
            self._finish(pull, pull.cmd.response(ResponseCode.SYSTEM_BUSY, busy))
            return
        pull.parked_at = now
        key = (args.topic, args.queue_id)
        if self.ctx.store.max_offset_in_queue(*key) > args.offset:
            self._wake(pull, now)  # it came while the read's answer came back
            return
        processor.suspended += 1
        self._parked.setdefault(key, set()).add(pull)
        loop = asyncio.get_running_loop()
        pull.timer = loop.call_at(now + args.suspend_s, self._expire, key, pull)
        if self._watcher is None or self._watcher.done():
            self._watcher = loop.create_task(self._watch())
            pull.conn.server.track(self._watcher)

    async def _watch(self) -> None:
        """While pulls are parked: after each arrival of messages (the store's signal), the pulls
        whose queue has a message past their offset go to the next round."""
        arrival = self.ctx.arrival
        loop = asyncio.get_running_loop()
        with arrival.watching():
            try:
                while self._parked:
                    mark = arrival.mark()  # before the look: what comes after it ends the wait
                    self._arrived(loop.time())
                    if self._parked:
                        await arrival.wait(_WATCH_S, mark)
            except asyncio.CancelledError:
                for pulls in self._parked.values():
                    for pull in pulls:
                        self._unpark(pull)
                        self._release(pull)
                self._parked.clear()
                raise

    def _arrived(self, now: float) -> None:
        store = self.ctx.store
        for key, pulls in list(self._parked.items()):
            try:
                high = store.max_offset_in_queue(*key)
            except Exception:  # a store closing under the broker: the next round answers why
                high = 1 << 62
            for pull in [p for p in pulls if p.conn.closed or high > _offset(p)]:
                pulls.discard(pull)
                self._unpark(pull)
                self._wake(pull, now)
            if not pulls:
                del self._parked[key]

    def _expire(self, key: tuple[str, int], pull: _Pull) -> None:
        """Its suspend time is over: read once more and answered."""
        pulls = self._parked.get(key)
        if pulls is None or pull not in pulls:
            return
        pulls.discard(pull)
        if not pulls:
            del self._parked[key]
        self._unpark(pull)
        self._wake(pull, asyncio.get_running_loop().time())

    def _unpark(self, pull: _Pull) -> None:
        self._processor.suspended -= 1
        if pull.timer is not None:
            pull.timer.cancel()
            pull.timer = None

    def _wake(self, pull: _Pull, now: float) -> None:
        pull.read_at += now - pull.parked_at  # waiting on purpose is not slowness
        self._waiting.append(pull)
        self._schedule()

    def _answer(
        self, pulls: list[_Pull], found: RecordsResult, listed: list[int], codes: list[int], read_ms: int
    ) -> None:
        """The answers to ``pulls[listed]`` (``codes``) in one pass, each connection's in one write."""
        n = len(listed)
        rows = np.array(listed, dtype=np.int64)
        numbers = np.zeros((4, n), dtype=np.int64)  # suggestWhichBrokerId (0), then the offsets
        numbers[1] = found.next_begin_offsets[rows]
        numbers[2] = found.min_offsets[rows]
        numbers[3] = found.max_offsets[rows]
        frames, at = encode_pull_answers(
            np.array([pulls[i].cmd.serialize_type for i in listed], dtype=np.int64),
            np.array([pulls[i].cmd.opaque for i in listed], dtype=np.int64),
            np.array(codes, dtype=np.int64),
            numbers,
            np.array(
                [
                    -1 if code == _SUCCESS else _STATUS_IDS[_status(found, i)]
                    for i, code in zip(listed, codes)
                ],
                dtype=np.int64,
            ),
            _REMARKS,
            _REMARK_AT,
            np.frombuffer(found.records, dtype=np.uint8),
            found.starts[rows],
            found.starts[rows + 1],
        )
        self._count(pulls, listed, found, codes, read_ms)
        self.answered += n  # (before the answers leave: a client may look then)
        view = frames.data  # (the answers leave as views of it: no copy on their way)
        ends = at.tolist()
        mine: dict[Connection, list[int]] = {}  # each connection's answers (k: the k-th of listed)
        for k, i in enumerate(listed):
            mine.setdefault(pulls[i].conn, []).append(k)
        for conn, ks in mine.items():
            limits = conn.server.limits
            if conn.queued_bytes > limits.max_answer_bytes_per_connection or any(
                ends[k + 1] - ends[k] - 4 > limits.max_frame_size for k in ks
            ):
                # past a limit: each answer as Connection.answer decides for it
                for k in ks:
                    i = listed[k]
                    self._write_one(pulls[i], _response(pulls[i].cmd, found, i, codes[k]))
                continue
            out = _frames(view, ends, [k for k in ks if not pulls[listed[k]].cmd.is_oneway])
            if out:
                conn.queue_frames(out)
            for k in ks:
                self._release(pulls[listed[k]])

    def _count(
        self, pulls: list[_Pull], listed: list[int], found: RecordsResult, codes: list[int], read_ms: int
    ) -> None:
        """The answered pulls ``pulls[listed]`` (answered ``codes``): their statistics (per topic
        and group), request counts (per code) and slowness (the oldest's), as the server notes
        each request it answers."""
        gets: dict[tuple[str, str], list[int]] = {}
        answers: dict[int, int] = {}
        counts, starts = found.counts.tolist(), found.starts.tolist()
        for i, code in zip(listed, codes):
            answers[code] = answers.get(code, 0) + 1
            if code == _SUCCESS:
                args = pulls[i].args
                assert args is not None
                got = gets.setdefault((args.topic, args.group), [0, 0])
                got[0] += counts[i]
                got[1] += starts[i + 1] - starts[i]
        stats = self.ctx.metrics.stats
        for (topic, group), (count, size) in gets.items():
            stats.count_get(topic, group, count, size, read_ms)
        server = pulls[0].conn.server
        for code, count in answers.items():
            server.count(_PULL, code, count)
        elapsed = time.monotonic() - min(pulls[i].read_at for i in listed)
        if elapsed > server.requests.slow_s:
            server.requests.slow(elapsed, _PULL, codes[0], pulls[0].conn.peer)

    def _finish(self, pull: _Pull, response: RemotingCommand) -> None:
        """Answer one pull as the server answers a request its handler answered."""
        pull.conn.server.note(pull.conn, pull.cmd, response, pull.read_at)
        self._write_one(pull, response)

    def _write_one(self, pull: _Pull, response: RemotingCommand) -> None:
        pull.handled = True
        if pull.cmd.is_oneway:
            self._release(pull)
            return
        pull.conn.server.track(asyncio.get_running_loop().create_task(self._write(pull, response)))

    async def _write(self, pull: _Pull, response: RemotingCommand) -> None:
        try:
            await pull.conn.answer(response)
        finally:
            self._release(pull)

    @staticmethod
    def _release(pull: _Pull) -> None:
        pull.handled = True
        conn = pull.conn
        conn.requests_in_progress -= 1
        conn.bytes_in_progress -= pull.length
        conn.wake_reader()


def _args(pulls: list[_Pull]) -> list[PullArgs]:
    out = [p.args for p in pulls]
    assert all(a is not None for a in out)
    return out  # type: ignore[return-value]


def _frames(view: memoryview, ends: list[int], ks: list[int]) -> list[memoryview]:
    """Answers ``ks`` (ascending) of the encoded ``view`` whose k-th answer ends at ``ends[k + 1]``:
    a run of consecutive answers as one view."""
    out = []
    i = 0
    while i < len(ks):
        j = i
        while j + 1 < len(ks) and ks[j + 1] == ks[j] + 1:
            j += 1
        out.append(view[ends[ks[i]] : ends[ks[j] + 1]])
        i = j + 1
    return out


def _offset(pull: _Pull) -> int:
    assert pull.args is not None
    return pull.args.offset


def _failed(cmd: RemotingCommand, exc: Exception) -> RemotingCommand:
    return cmd.response(ResponseCode.SYSTEM_ERROR, f"{type(exc).__name__}: {exc}")


def _status(found: RecordsResult, i: int) -> GetStatus:
    """Read i's status (a read that was done)."""
    status = found.statuses[i]
    assert status is not None
    return status


def _response(cmd: RemotingCommand, found: RecordsResult, i: int, code: int) -> RemotingCommand:
    """Read i's answer as a command (``encode_pull_answers`` writes the same bytes)."""
    return pull_response(
        cmd,
        code,
        _status(found, i),
        int(found.next_begin_offsets[i]),
        int(found.min_offsets[i]),
        int(found.max_offsets[i]),
        memoryview(found.records)[int(found.starts[i]) : int(found.starts[i + 1])],
    )
