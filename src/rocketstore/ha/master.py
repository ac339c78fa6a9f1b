"""The master side of replication: a listener, one connection per slave, and the SYNC_MASTER wait.

RocketMQ 4.9's HAService/HAConnection, wire-compatible (see ``frames``), minus its known bugs:
an empty slave (report 0) gets the whole log, not only the last segment (#3661); a first report
outside the log is logged, shown in ``status()`` and answered with a heartbeat carrying the
offset the master can serve, then the connection is closed (#3388: RocketMQ feeds it heartbeats
forever); an ack above what the connection was sent closes it and counts for nothing, and a
connection counts as a slave only once it has reported (#3015).
"""

from __future__ import annotations

import contextlib
import logging
import select
import socket
import threading

from rocketstore.clock import Clock
from rocketstore.commitlog import CommitLog
from rocketstore.config import StoreConfig
from rocketstore.ha.frames import encode_header, last_report

__all__ = ["HAMaster", "SlaveConnection"]

log = logging.getLogger(__name__)

_POLL = 0.01  # s: how long a connection's writer sleeps when there is nothing to send
_READ_WAIT = 0.1  # s: the reader's select bound (it then checks housekeeping and stopping)
_SEND_TIMEOUT = 10.0  # s: a send blocked this long closes the connection
_RECENT_PROBLEMS = 16


class SlaveConnection:
    """One slave: a reader thread (reports, housekeeping) and a writer thread (frames).

    Invariants: ``sent_to`` only rises and is where the next frame starts; an ack is accepted
    only up to ``sent_to`` (the slave cannot hold more than it was sent). Thread safety: the
    reader alone sets ``request_offset`` and ``acked``; the writer alone sets ``sent_to``.
    """

    def __init__(self, master: HAMaster, sock: socket.socket, address: str) -> None:
        self._master = master
        self._sock = sock
        self.address = address
        self.request_offset: int | None = None  # the first report: where this slave wants data from
        self.acked = -1
        self.sent_to = -1
        self._clock = master.clock
        self.last_read = self._clock.monotonic()
        self._last_write = self.last_read  # RocketMQ's heartbeat clock starts at accept
        self._closed = threading.Event()
        self._threads = [
            threading.Thread(target=self._read_loop, name=f"rocketstore-ha-read-{address}", daemon=True),
            threading.Thread(target=self._write_loop, name=f"rocketstore-ha-write-{address}", daemon=True),
        ]

    @property
    def is_slave(self) -> bool:
        """A live connection that has told where it stands (RocketMQ counts any open socket)."""
        return self.request_offset is not None and not self._closed.is_set()

    def start(self) -> None:
        self._sock.settimeout(_SEND_TIMEOUT)
        for t in self._threads:
            t.start()

    def close(self, reason: str) -> None:
        if self._closed.is_set():
            return
        self._closed.set()
        log.info("HA: closing the connection of slave %s: %s", self.address, reason)
        with contextlib.suppress(OSError):  # already reset by the peer: closing is all that is left
            self._sock.shutdown(socket.SHUT_RDWR)
        self._sock.close()
        self._master.forget(self)

    def join(self, timeout: float) -> None:
        for t in self._threads:
            if t is not threading.current_thread():
                t.join(timeout)

    # --- reading ---------------------------------------------------------------------------
    def _read_loop(self) -> None:
        buf = bytearray()
        housekeeping = self._master.config.ha_housekeeping_interval / 1000
        try:
            while not self._closed.is_set():
                ready, _, _ = select.select([self._sock], [], [], _READ_WAIT)
                if not ready:
                    if self._clock.monotonic() - self.last_read > housekeeping:
                        self.close(f"nothing read for {housekeeping * 1000:.0f} ms (housekeeping)")
                    continue
                data = self._sock.recv(65536)
                if not data:
                    self.close("the slave closed the connection")
                    return
                self.last_read = self._clock.monotonic()
                buf += data
                value = last_report(buf)
                if value is not None:
                    self._on_report(value)
        except (OSError, ValueError) as exc:
            self.close(f"read failed: {exc}")

    def _on_report(self, offset: int) -> None:
        if self.request_offset is None:
            self._on_request(offset)
            return
        if offset > self.sent_to:
            self._master.record_problem(
                self.address, "ack_above_sent", f"acked {offset} but was sent only up to {self.sent_to}"
            )
            self.close(f"ack {offset} above what it was sent ({self.sent_to})")
            return
        if offset > self.acked:
            self.acked = offset
            self._master.on_ack(offset)

    def _on_request(self, offset: int) -> None:
        commitlog = self._master.commitlog
        low, high = commitlog.files.min_offset, commitlog.max_offset
        if offset == 0:
            start = low  # the whole log (RocketMQ: only its last segment, #3661)
        elif low <= offset <= high:
            start = offset
        else:
            kind = "request_below_min" if offset < low else "request_above_max"
            detail = f"slave {self.address} asks for offset {offset}, outside this log [{low}, {high}]: " + (
                "those bytes are gone here (reclaimed); re-seed the slave"
                if offset < low
                else "the slave is ahead of its master (it holds bytes this log never had)"
            )
            self._master.record_problem(self.address, kind, detail)
            log.error("HA: %s", detail)
            self._send(encode_header(low if offset < low else high, 0))
            self.close(kind)
            return
        self.sent_to = start
        self.acked = offset
        self.request_offset = offset  # published last: the writer starts once this is set
        log.info("HA: slave %s starts at offset %d (it reported %d)", self.address, start, offset)
        self._master.on_ack(offset)

    # --- writing ---------------------------------------------------------------------------
    def _write_loop(self) -> None:
        master = self._master
        heartbeat = master.config.ha_send_heartbeat_interval / 1000
        batch = master.config.ha_transfer_batch_size
        try:
            while not self._closed.is_set():
                if self.request_offset is None:
                    self._closed.wait(_POLL)
                    continue
                if self._clock.monotonic() - self._last_write > heartbeat:
                    self._send(encode_header(self.sent_to, 0))
                seen = master.data_generation  # before the read: a put after it is not missed
                data = master.commitlog.read_raw(self.sent_to, batch)
                if data:
                    offset = self.sent_to
                    # moved before the send: the slave may ack these bytes before sendall returns
                    self.sent_to = offset + len(data)
                    self._send(encode_header(offset, len(data)) + data)
                    continue
                master.wait_for_data(seen, _POLL)
        except OSError as exc:
            self.close(f"write failed: {exc}")
        except Exception as exc:  # a store error reading the log: this slave cannot be served
            log.exception("HA: serving slave %s failed", self.address)
            self._master.record_problem(self.address, "read_failed", f"{type(exc).__name__}: {exc}")
            self.close(f"reading the log failed: {exc}")

    def _send(self, data: bytes) -> None:
        self._last_write = self._clock.monotonic()  # before: whoever sees the frame sees the time
        self._sock.sendall(data)

    def status(self) -> dict[str, object]:
        max_offset = self._master.commitlog.max_offset
        return {
            "address": self.address,
            "state": "streaming" if self.request_offset is not None else "awaiting_first_report",
            "request_offset": self.request_offset,
            "sent_offset": self.sent_to if self.request_offset is not None else None,
            "acked_offset": self.acked if self.request_offset is not None else None,
            "behind_bytes": max(0, max_offset - self.acked) if self.request_offset is not None else None,
            "last_contact_ms": round((self._clock.monotonic() - self.last_read) * 1000),
        }


class HAMaster:
    """Accepts slaves on ``port`` and tracks the best ack (RocketMQ's push2SlaveMaxOffset, which
    only rises). ``start``/``stop`` own every thread it runs; stop closes every connection."""

    def __init__(self, commitlog: CommitLog, config: StoreConfig, clock: Clock, host: str = "") -> None:
        self.commitlog = commitlog
        self.config = config
        self.clock = clock
        assert config.ha_listen_port is not None
        self._listener = socket.create_server((host, config.ha_listen_port), reuse_port=False)
        self._listener.settimeout(_READ_WAIT)
        self.port: int = self._listener.getsockname()[1]
        self.acked = 0
        self._acked_changed = threading.Condition()
        self._data = threading.Condition()
        self.data_generation = 0  # moves on every wake-up of the writers
        self._lock = threading.Lock()
        self._connections: list[SlaveConnection] = []
        self.problems: list[dict[str, object]] = []
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._accept_loop, name="rocketstore-ha-accept", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        self._thread.join(5.0)
        self._listener.close()
        with self._lock:
            connections = list(self._connections)
        for c in connections:
            c.close("the master is stopping")
        for c in connections:
            c.join(5.0)
        with self._acked_changed:
            self._acked_changed.notify_all()

    def _accept_loop(self) -> None:
        while not self._stopping.is_set():
            try:
                sock, peer = self._listener.accept()
            except TimeoutError:
                continue
            except OSError as exc:
                if not self._stopping.is_set():
                    log.error("HA: accepting slaves failed, the master stops listening: %s", exc)
                return
            conn = SlaveConnection(self, sock, f"{peer[0]}:{peer[1]}")
            with self._lock:
                self._connections = [*self._connections, conn]
            log.info("HA: slave %s connected", conn.address)
            conn.start()

    def forget(self, conn: SlaveConnection) -> None:
        with self._lock:
            self._connections = [c for c in self._connections if c is not conn]

    def record_problem(self, address: str, kind: str, detail: str) -> None:
        entry: dict[str, object] = {
            "address": address,
            "problem": kind,
            "detail": detail,
            "at_ms": self.clock.now_ms(),
        }
        with self._lock:
            self.problems = [*self.problems[-(_RECENT_PROBLEMS - 1) :], entry]

    # --- acks and SYNC_MASTER ------------------------------------------------------------------
    def on_ack(self, offset: int) -> None:
        with self._acked_changed:
            if offset > self.acked:
                self.acked = offset
                self._acked_changed.notify_all()

    def slave_ok(self, end: int) -> bool:
        """RocketMQ's isSlaveOK: a slave is connected and the gap to ``end`` is below the limit."""
        return (
            any(c.is_slave for c in self._connections)
            and end - self.acked < self.config.ha_slave_fallbehind_max
        )

    def wait_acked(self, end: int, timeout: float) -> bool:
        """Wake the writers and block until some slave acked ``end`` (True) or ``timeout`` s pass."""
        with self._data:
            self.data_generation += 1
            self._data.notify_all()
        with self._acked_changed:
            return (
                self._acked_changed.wait_for(lambda: self.acked >= end or self._stopping.is_set(), timeout)
                and self.acked >= end
            )

    def wait_for_data(self, seen: int, timeout: float) -> None:
        """A writer that found nothing to send when the generation was ``seen`` sleeps here; a
        SYNC_MASTER put wakes it at once (and one that came in between is not slept through)."""
        with self._data:
            if self.data_generation == seen:
                self._data.wait(timeout)

    def status(self) -> dict[str, object]:
        with self._lock:
            connections = list(self._connections)
            problems = list(self.problems)
        return {
            "listen_port": self.port,
            "acked_offset": self.acked,
            "slaves": [c.status() for c in connections],
            "problems": problems,
        }
