"""The slave side of replication: one connection to the master, bytes appended as they come.

RocketMQ 4.9's HAClient, wire-compatible (see ``frames``), with its bugs left out: the link is
dropped after ``ha_housekeeping_interval`` with nothing read (4.9 measures from its own last
report and never notices a silent master); every wait is bounded and a broken link or a refused
connection is retried with a backoff, never in a tight loop (#2476): the first retry within a
quarter second (a slave started before its master finds it as soon as it listens), doubling to
RocketMQ's 5 s at most, each failed try logged with its reason and the next try; a master that
answers with an offset below this log's end (this slave is ahead of it) or above it (it cannot
serve this offset) stops the replication with the reason in ``status()`` instead of diverging or
idling (#3388). Unlike RocketMQ's, it writes only records that check out (``transfer_check``): a
bad transfer stops the replication with the record's offset and what is wrong, and nothing of it
is written or acked.
"""

from __future__ import annotations

import contextlib
import logging
import select
import socket
import threading
from collections.abc import Callable

from rocketstore.clock import Clock
from rocketstore.commitlog import CommitLog
from rocketstore.config import StoreConfig
from rocketstore.errors import CorruptDataError
from rocketstore.ha.frames import FrameReader, encode_report
from rocketstore.ha.transfer_check import TransferCheck, prepare_transfer_check

__all__ = ["HASlave"]

log = logging.getLogger(__name__)

_READ_WAIT = 0.1  # s: the select bound; then reports, housekeeping and stopping are checked
_CONNECT_TIMEOUT = 5.0  # s, as RocketMQ's slave
_FIRST_RETRY = 0.25  # s: the first retry after a failed try or a dropped link; then doubling
_PREPARE_WAIT = 60.0  # s: the most the first transfer waits for the compiled code to load
_MAX_RETRY = 5.0  # s: the longest pause between tries (RocketMQ's HAClient tries every 5 s)


class _Stop(Exception):
    """The master and this slave disagree on where the log stands: replication must not go on."""

    def __init__(self, state: str, detail: str) -> None:
        super().__init__(detail)
        self.state = state


class HASlave:
    """Connects to its master's HA address (``config.ha_master_address``, or the one given to
    ``set_master_address``), reports this log's end, appends what arrives.

    States (``status()["state"]``): waiting_for_master (no address yet: the broker learns it
    from its name servers, ``set_master_address``), connecting, connected, disconnected (retrying after a
    delay), stopped, and stopped for good (see ``problem``): ahead_of_master,
    master_cannot_serve, bad_transfer (the master sent a record that does not check out; the
    log ends at the last good byte, where a new connection resumes), failed (a store error
    while appending).
    Thread safety: one thread runs the loop and alone writes to the commitlog.
    """

    def __init__(
        self, commitlog: CommitLog, config: StoreConfig, clock: Clock, on_appended: Callable[[], None]
    ) -> None:
        self._commitlog = commitlog
        self._on_appended = on_appended  # the dispatcher's wakeup: it parses what arrived
        self._config = config
        self._clock = clock
        self.master_address = _host_port(config.ha_master_address) if config.ha_master_address else None
        self._new_address = threading.Event()  # set by set_master_address: reconnect there
        self.state = "connecting" if self.master_address is not None else "waiting_for_master"
        self.problem: str | None = None
        self.master_offset: int | None = None  # the master's position as its frames tell it
        self.last_read: float | None = None
        self.connects = 0
        self._taken_to: int | None = None  # the end of the last frame taken from this connection
        self._stopping = threading.Event()
        self._prepared = threading.Event()  # the compiled check and parser are loaded
        self._thread = threading.Thread(target=self._run, name="rocketstore-ha-slave", daemon=True)

    def set_master_address(self, address: str) -> None:
        """Replicate from ``address`` (``host:port``) from now on: a new address ends the
        current connection (RocketMQ's updateHaMasterAddress). Thread-safe."""
        new = _host_port(address)
        if new != self.master_address:
            log.info("HA: master address is now %s", address)
            self.master_address = new
            self._new_address.set()

    def start(self) -> None:
        # the parser's compiled code loads beside the first tries, not before them: a slave
        # whose master is not up yet says so at once (the dispatcher waits for it, if it must)
        threading.Thread(target=self._prepare, name="rocketstore-ha-warm", daemon=True).start()
        self._thread.start()

    def _prepare(self) -> None:
        try:
            self._commitlog.prepare_replica()
            prepare_transfer_check()
        finally:
            self._prepared.set()

    def stop(self, timeout: float = 10.0) -> None:
        self._stopping.set()
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise RuntimeError(f"the HA slave did not stop within {timeout} s")

    def _run(self) -> None:
        longest = min(_MAX_RETRY, max(_FIRST_RETRY, self._config.ha_send_heartbeat_interval / 1000))
        pause = _FIRST_RETRY
        while not self._stopping.is_set():
            address = self.master_address
            if address is None:  # a slave that learns its master from the name servers
                self.state = "waiting_for_master"
                self._stopping.wait(_READ_WAIT)
                continue
            self._new_address.clear()
            self.state = "connecting"
            try:
                sock = socket.create_connection(address, timeout=_CONNECT_TIMEOUT)
            except OSError as exc:
                self._disconnected(f"cannot connect to master {self._address_text}: {exc}", pause)
                self._stopping.wait(pause)
                pause = min(2 * pause, longest)
                continue
            self.connects += 1
            pause = _FIRST_RETRY
            try:
                self._session(sock)
            except _Stop as stop:
                self.state, self.problem = stop.state, str(stop)
                log.error("HA: replication from %s stopped: %s", self._address_text, stop)
                return
            except CorruptDataError as exc:
                self.state = "bad_transfer"
                self.problem = (
                    f"the master sent bytes that are not valid records: {exc}; nothing from offset "
                    f"{self._commitlog.max_offset} on was written"
                )
                log.error("HA: replication from %s stopped: %s", self._address_text, self.problem)
                return
            except (OSError, ValueError) as exc:
                self._disconnected(f"link to master {self._address_text} down: {exc}", pause)
            except Exception as exc:  # a store error: replicating on could only make it worse
                self.state, self.problem = "failed", f"{type(exc).__name__}: {exc}"
                log.exception("HA: replication from %s failed and stopped", self._address_text)
                return
            finally:
                sock.close()
            self._stopping.wait(pause)
        self.state = "stopped"

    @property
    def _address_text(self) -> str:
        address = self.master_address
        return f"{address[0]}:{address[1]}" if address is not None else "(not known yet)"

    def _disconnected(self, reason: str, pause: float) -> None:
        if not self._stopping.is_set():
            log.warning("HA: %s; next try in %.2g s", reason, pause)
            self.problem = reason
        self.state = "disconnected"

    def _session(self, sock: socket.socket) -> None:
        """One connection, until it breaks, goes silent or the slave stops."""
        config, clock, commitlog = self._config, self._clock, self._commitlog
        interval = config.ha_send_heartbeat_interval / 1000
        housekeeping = config.ha_housekeeping_interval / 1000
        reader = FrameReader()
        check = TransferCheck(config.commitlog_segment_size)
        self._taken_to = None
        reported = commitlog.max_offset
        start = reported if reported else (config.ha_start_offset or 0)
        sock.settimeout(_CONNECT_TIMEOUT)
        sock.sendall(encode_report(start))
        last_report = self.last_read = clock.monotonic()
        self.state, self.problem = "connected", None
        log.info("HA: connected to master %s, asking for offset %d", self._address_text, start)
        while not self._stopping.is_set():
            if self._new_address.is_set():
                raise ConnectionError("the master's address changed")
            ready, _, _ = select.select([sock], [], [], _READ_WAIT)
            now = clock.monotonic()
            if ready:
                received = sock.recv_into(reader.space())
                if not received:
                    raise ConnectionError("the master closed the connection")
                self.last_read = now
                reader.received(received)
                frames: list[tuple[int, memoryview]] = []  # every whole frame this read completed
                refused: _Stop | None = None  # a frame that does not continue: the ones before it go in
                while reader.header is not None:
                    try:
                        self._check_header(reader.header[0])
                    except _Stop as stop:
                        refused = stop
                        break
                    frame = reader.take()
                    if frame is None:
                        break
                    frames.append(frame)
                    self._taken_to = frame[0] + len(frame[1])
                if frames:
                    reported, last_report = self._ingest(sock, check, frames, reported, last_report)
                if refused is not None:
                    raise refused
            elif now - self.last_read > housekeeping:
                raise ConnectionError(f"nothing heard from the master for {housekeeping * 1000:.0f} ms")
            if now - last_report >= interval:
                reported, last_report = self._report(sock, commitlog.max_offset)

    def _ingest(
        self,
        sock: socket.socket,
        check: TransferCheck,
        frames: list[tuple[int, memoryview]],
        reported: int,
        last_report: float,
    ) -> tuple[int, float]:
        """Check and write what ``frames`` (one read's) hold, then one report if the log grew
        (RocketMQ reports per frame; a read holds many when the slave is behind, and each
        report is a send and a wakeup of the master). Raises what is wrong with a record after
        writing and acking the good bytes before it."""
        commitlog = self._commitlog
        # the first transfers wait for the loading (which would stall the check, or the
        # dispatcher, mid-stream) rather than compete with it
        self._prepared.wait(_PREPARE_WAIT)
        for offset, bodies in _runs(frames, self._config.commitlog_segment_size):
            pieces, bad = check.accept(offset, *bodies)
            if not bodies[0] and not check.held:  # a heartbeat: an empty log starts where it says
                pieces = [(offset, bodies[0])]
            for at, piece in pieces:
                commitlog.append_raw(at, piece)
            if bad is not None:
                self._on_appended()
                with contextlib.suppress(OSError):  # the ack of the good bytes, if it can go
                    self._report(sock, commitlog.max_offset)
                raise bad
        self._on_appended()
        self.master_offset = self._taken_to
        if commitlog.max_offset > reported:
            return self._report(sock, commitlog.max_offset)
        return reported, last_report

    def _report(self, sock: socket.socket, offset: int) -> tuple[int, float]:
        sock.sendall(encode_report(offset))
        return offset, self._clock.monotonic()

    def _check_header(self, offset: int) -> None:
        """Before a body is read: the frame must continue this log and what is held back of
        an incomplete record (RocketMQ's check, which applies to heartbeats too); an empty log
        takes a segment boundary."""
        mine = self._taken_to
        if mine is None:
            mine = self._commitlog.max_offset
        if mine == 0:
            wanted = self._config.ha_start_offset
            if offset % self._config.commitlog_segment_size or (wanted is not None and offset != wanted):
                raise _Stop(
                    "master_cannot_serve",
                    f"the master offers offset {offset} to an empty slave that wants "
                    + (f"offset {wanted}" if wanted is not None else "a segment boundary")
                    + f" (commitlog_segment_size {self._config.commitlog_segment_size})",
                )
            return
        if offset < mine:
            raise _Stop(
                "ahead_of_master",
                f"this slave's log ends at {mine} but its master's at {offset}: the slave holds bytes "
                "the master does not have (failover or a wiped master); it will not diverge further",
            )
        if offset > mine:
            raise _Stop(
                "master_cannot_serve",
                f"the master cannot serve offset {mine}: it offers {offset} (its log no longer holds "
                "the bytes this slave lacks); re-seed the slave",
            )

    def status(self) -> dict[str, object]:
        local = self._commitlog.max_offset
        master = self.master_offset
        last = self.last_read
        return {
            "state": self.state,
            "master_address": self._address_text,
            "master_offset": master,
            "slave_offset": local,
            "behind_bytes": max(0, master - local) if master is not None else None,
            "last_contact_ms": round((self._clock.monotonic() - last) * 1000) if last is not None else None,
            "problem": self.problem,
            "connects": self.connects,
        }


def _host_port(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"HA master address {address!r}: expected HOST:PORT")
    return host.strip("[]"), int(port)


def _runs(frames: list[tuple[int, memoryview]], segment_size: int) -> list[tuple[int, list[memoryview]]]:
    """``frames`` (consecutive) as runs checked in one call each: the bodies of frames in one
    segment together; a heartbeat (no body) alone."""
    runs: list[tuple[int, list[memoryview]]] = []
    segment = -1
    for offset, body in frames:
        if body and runs and runs[-1][1][0] and offset // segment_size == segment:
            runs[-1][1].append(body)
        else:
            runs.append((offset, [body]))
            segment = offset // segment_size
    return runs
