"""`rocketstore serve` as a process: startup, `rocketstore status` while it runs, a clean stop on
SIGTERM, and a SIGKILL in the middle of sends followed by a restart on the same store."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from rocketstore import Message, MessageStore, StoreConfig
from rocketstore.protocol import definition_pb2 as pb
from rocketstore.protocol import service_pb2 as rpc
from rocketstore.protocol import service_pb2_grpc

from .clients import message, producer, simple_consumer

SRC = str(Path(__file__).resolve().parents[2] / "src")
ENV = {**os.environ, "PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", "")}


class Served:
    """A `rocketstore serve` process; its log lines are collected as they come."""

    def __init__(self, *args: str, env: dict[str, str] | None = None) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "rocketstore.cli", *args],
            env=env or ENV,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.lines: list[str] = []
        self._port = threading.Event()
        self.port = 0
        threading.Thread(target=self._read, daemon=True).start()
        if not self._port.wait(60) or not self.port:
            self.proc.kill()
            raise AssertionError(f"serve did not start: {self.log()}")

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.append(line)
            found = re.search(r"(?:serving .* on|name server on) [\d.]+:(\d+)", line)
            if found:
                self.port = int(found.group(1))
                self._port.set()
        self._port.set()

    def log(self) -> str:
        return "".join(self.lines)


@pytest.fixture
def served() -> Iterator[list[Served]]:
    running: list[Served] = []
    yield running
    for s in running:
        if s.proc.poll() is None:
            s.proc.kill()
            s.proc.wait()


# this shared machine's disk may be fuller than the store's limits (it then refuses puts as
# DISK_FULL): the broker's store here ignores how full it is
# (small files: the disk is shared)
UNLIMITED_DISK = (
    "disk_warning_ratio=100\ndisk_clean_forcibly_ratio=100\ndiskMaxUsedSpaceRatio=95\n"
    "mappedFileSizeCommitLog=8388608\nmappedFileSizeConsumeQueue=400000\n"
)


def serve(
    running: list[Served], store: Path, *extra: str, settings: str = "", env: dict[str, str] | None = None
) -> Served:
    conf = store.parent / f"{store.name}.conf"
    conf.write_text(UNLIMITED_DISK + settings)
    s = Served(
        "serve",
        str(store),
        "--listen",
        "127.0.0.1:0",
        "--remoting",
        "off",
        "--namesrv",
        "off",
        "--config",
        str(conf),
        *extra,
        env=env,
    )
    running.append(s)
    return s


def test_serve_logs_clients_shows_them_in_status_and_stops_cleanly(
    served: list[Served], tmp_path: Path
) -> None:
    store = tmp_path / "store"
    s = serve(served, store, "--create")
    with producer(s.port, ("Ops",)) as p:
        p.send(message("Ops", b"hello"))
        deadline = time.monotonic() + 30
        broker: Any = None
        while time.monotonic() < deadline:
            out = subprocess.run(
                [sys.executable, "-m", "rocketstore.cli", "status", str(store), "--json"],
                env=ENV,
                capture_output=True,
                text=True,
                check=True,
            ).stdout
            broker = json.loads(out)["broker"]
            if broker and broker["clients"]:
                break
            time.sleep(0.2)
        assert broker["port"] == s.port
        assert broker["clients"][0]["type"] == "PRODUCER"
    s.proc.send_signal(signal.SIGTERM)
    assert s.proc.wait(60) == 128 + signal.SIGTERM, s.log()
    assert "client connected" in s.log()
    assert not (store / "abort").exists()  # closed cleanly
    assert not (store / "broker.json").exists()


def test_serve_writes_nothing_outside_its_store(served: list[Served], tmp_path: Path) -> None:
    """The broker writes its store and its log (stderr) only: nothing under $HOME (the official
    client's package, which logs to $HOME/logs/rocketmq_python, is never imported)."""
    home = tmp_path / "home"
    home.mkdir()
    s = serve(served, tmp_path / "store", "--create", env={**ENV, "HOME": str(home)})
    channel = grpc.insecure_channel(f"127.0.0.1:{s.port}")
    try:
        stub = service_pb2_grpc.MessagingServiceStub(channel)
        client = (("x-mq-client-id", "home-test"),)
        sent = stub.SendMessage(
            rpc.SendMessageRequest(
                messages=[
                    pb.Message(
                        topic=pb.Resource(name="Home"),
                        body=b"x",
                        system_properties=pb.SystemProperties(
                            message_id="01", body_encoding=pb.Encoding.IDENTITY
                        ),
                    )
                ]
            ),
            metadata=client,
            timeout=30,
        )
        assert sent.status.code == pb.Code.OK, sent
    finally:
        channel.close()
    s.proc.send_signal(signal.SIGTERM)
    assert s.proc.wait(60) == 128 + signal.SIGTERM, s.log()
    assert sorted(str(p.relative_to(home)) for p in home.rglob("*")) == []


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for process {pid}")


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads a process's RSS from /proc")
def test_a_client_flooding_its_telemetry_stream_leaves_the_brokers_memory_flat(
    served: list[Served], tmp_path: Path
) -> None:
    """250 settings commands naming 1,000 long topics, none of the answers read (each echoes
    its 128 kB of topics): before its per-client bound the broker kept every answer (1.6 GB
    with bigger commands); now it closes the stream past 64 unread answers."""
    s = serve(served, tmp_path / "store", "--create")
    big = rpc.TelemetryCommand(
        settings=pb.Settings(
            client_type=pb.ClientType.PRODUCER,
            publishing=pb.Publishing(topics=[pb.Resource(name=f"T{i:05d}" + "x" * 120) for i in range(1000)]),
        )
    )
    # no window growth (BDP probes): what the client does not read stays in the broker
    channel = grpc.insecure_channel(f"127.0.0.1:{s.port}", options=[("grpc.http2.bdp_probe", 0)])
    stop = threading.Event()

    def commands() -> Iterator[Any]:
        for _ in range(250):
            if stop.is_set():
                return
            yield big

    try:
        stub = service_pb2_grpc.MessagingServiceStub(channel)
        heartbeat = stub.Heartbeat(rpc.HeartbeatRequest(), metadata=(("x-mq-client-id", "flooder"),))
        assert heartbeat.status.code == pb.Code.OK
        deadline = time.monotonic() + 120  # numba, loaded on a thread at start, is not the flood's
        while "compiled kernels loaded" not in s.log() and time.monotonic() < deadline:
            time.sleep(0.1)
        before = rss_bytes(s.proc.pid)
        call = stub.Telemetry(commands(), metadata=(("x-mq-client-id", "flooder"),))
        deadline = time.monotonic() + 120
        while "telemetry stream of client flooder closed" not in s.log() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert "telemetry stream of client flooder closed" in s.log()
        grown = rss_bytes(s.proc.pid) - before
        assert grown < 100 << 20, f"RSS grew by {grown >> 20} MB"
        stop.set()
        call.cancel()
    finally:
        channel.close()
    s.proc.send_signal(signal.SIGTERM)
    assert s.proc.wait(60) == 128 + signal.SIGTERM, s.log()


def test_importing_the_broker_leaves_the_official_client_out() -> None:
    code = (
        "import sys, rocketstore.cli, rocketstore.broker, rocketstore.broker.serve, "
        "rocketstore.broker.grpc.messaging_service, rocketstore.broker.server\n"
        "print(sorted(m for m in sys.modules if m == 'rocketmq' or m.startswith('rocketmq.')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], env=ENV, capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "[]"


def test_serve_refuses_a_directory_without_a_store(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "rocketstore.cli", "serve", str(tmp_path / "none")],
        env=ENV,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 1
    assert "--create" in result.stderr


def test_json_logs(served: list[Served], tmp_path: Path) -> None:
    s = serve(served, tmp_path / "store", "--create", "--json")
    s.proc.send_signal(signal.SIGINT)
    assert s.proc.wait(60) == 128 + signal.SIGINT
    entries = [json.loads(line) for line in s.lines]
    assert any(e["message"].startswith("serving ") for e in entries)


@pytest.mark.slow
def test_sigkill_during_sends_loses_no_acknowledged_message(served: list[Served], tmp_path: Path) -> None:
    store = tmp_path / "store"
    conf = "flushDiskType=SYNC_FLUSH\n"
    s = serve(served, store, "--create", settings=conf)
    acked: list[str] = []
    failures: list[BaseException] = []
    stop = threading.Event()

    def send(worker: int) -> None:
        with producer(s.port, ("Crash",)) as p:
            i = 0
            while not stop.is_set():
                try:
                    acked.append(p.send(message("Crash", f"{worker}-{i}".encode())).message_id)
                except Exception as exc:  # the broker is gone
                    failures.append(exc)
                    return
                i += 1

    threads = [threading.Thread(target=send, args=(w,)) for w in range(4)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 60
    while len(acked) < 300 and time.monotonic() < deadline:
        time.sleep(0.05)
    s.proc.send_signal(signal.SIGKILL)
    s.proc.wait(30)
    stop.set()
    for t in threads:
        t.join(60)
    sent = list(acked)
    assert len(sent) >= 300
    assert (store / "abort").exists()  # it did die mid-flight

    again = serve(served, store, settings=conf)
    with producer(again.port, ("Crash",)) as p:
        p.send(message("Crash", b"after the restart"))
    again.proc.send_signal(signal.SIGTERM)
    assert again.proc.wait(60) == 128 + signal.SIGTERM, again.log()

    with MessageStore.open(store, readonly=True) as reopened:
        ids = set()
        for queue_id in reopened.topics()["Crash"]:
            offset = 0
            while True:
                res = reopened.get_message("check", "Crash", queue_id, offset, 1000)
                if not res.messages:
                    break
                ids.update(m.uniq_key for m in res.messages)
                offset = res.next_begin_offset
    missing = [m for m in sent if m not in ids]
    assert missing == []
    assert len(ids) >= len(sent) + 1


@pytest.mark.slow
def test_sigkill_with_messages_in_flight_redelivers_them_and_not_the_acked(
    served: list[Served], tmp_path: Path
) -> None:
    store = tmp_path / "store"
    conf = "flushDiskType=SYNC_FLUSH\ninvisible_min_ms=1000\nlong_polling_min_ms=0\n"
    s = serve(served, store, "--create", settings=conf)
    with simple_consumer(s.port, "G", "Work", await_s=1) as c:
        assert c.receive(16, 30) == []
        with producer(s.port, ("Work",)) as p:
            for i in range(10):
                p.send(message("Work", f"job{i}".encode()))
        got: list[Any] = []
        deadline = time.monotonic() + 30
        while len(got) < 10 and time.monotonic() < deadline:
            got += c.receive(16, 2)
        assert len(got) == 10
        acked = {m.body for m in got[:6]}
        for m in got[:6]:
            c.ack(m)
        s.proc.send_signal(signal.SIGKILL)
        s.proc.wait(30)

    again = serve(served, store, settings=conf)
    with simple_consumer(again.port, "G", "Work", await_s=1) as c:
        back: list[Any] = []
        deadline = time.monotonic() + 30
        while len(back) < 4 and time.monotonic() < deadline:
            back += c.receive(16, 30)
        assert sorted(m.body for m in back) == sorted({m.body for m in got} - acked)
        assert all(m.delivery_attempt == 2 for m in back)
        assert c.receive(16, 30) == []  # nothing acked comes back
    again.proc.send_signal(signal.SIGTERM)
    assert again.proc.wait(60) == 128 + signal.SIGTERM, again.log()


def acked(master: MessageStore) -> int:
    status: Any = master.ha_status()["master"]
    return int(status["acked_offset"])


@pytest.mark.slow
def test_serve_as_a_slave_replicates_its_master(served: list[Served], tmp_path: Path) -> None:
    master_cfg = StoreConfig(
        commitlog_segment_size=1 << 20, consume_queue_entries=1000, ha_listen_port=0, disk_warning_ratio=100
    )
    with MessageStore.open(tmp_path / "master", master_cfg) as master:
        master.put_messages([Message(topic="Rep", body=b"m%d" % i, queue_id=i % 2) for i in range(50)])
        end = master.max_phy_offset()
        s = serve(
            served,
            tmp_path / "slave",
            "--create",
            "--role",
            "slave",
            "--master",
            f"127.0.0.1:{master.ha_port}",
            settings="mappedFileSizeCommitLog=1048576\n",
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and acked(master) < end:
            time.sleep(0.1)
        s.proc.send_signal(signal.SIGTERM)
        assert s.proc.wait(60) == 128 + signal.SIGTERM, s.log()
    cfg = StoreConfig(commitlog_segment_size=1 << 20, consume_queue_entries=400000 // 20)
    with MessageStore.open(tmp_path / "slave", cfg, readonly=True) as slave:
        assert slave.max_phy_offset() == end
        got = slave.get_message("g", "Rep", 1, 0, 100)
        assert [m.body for m in got.messages] == [b"m%d" % i for i in range(1, 50, 2)]


def test_serve_refuses_a_slave_without_its_master(tmp_path: Path) -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "rocketstore.cli",
            "serve",
            str(tmp_path / "s"),
            "--create",
            "--role",
            "SLAVE",
        ],
        env=ENV,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 1
    assert "a SLAVE needs ha_master_address" in result.stderr


def _status(store: Path) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, "-m", "rocketstore.cli", "status", str(store), "--json"],
        env=ENV,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    shown: dict[str, Any] = json.loads(out)
    return shown


def _until(ready: Any, what: str, timeout: float = 60) -> Any:
    deadline = time.monotonic() + timeout
    while not (value := ready()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)
    return value


def test_a_slave_served_before_its_master_logs_its_tries_and_status_shows_its_link(
    served: list[Served], tmp_path: Path
) -> None:
    """Each refused try is logged with the reason and the next try, the pauses growing from a
    quarter second; once the master listens the slave connects and catches up, and `rocketstore
    status` on the slave's store shows the serving broker's replication state."""
    with socket.create_server(("127.0.0.1", 0)) as placeholder:
        port = int(placeholder.getsockname()[1])
    s = serve(
        served,
        tmp_path / "slave",
        "--create",
        "--role",
        "slave",
        "--master",
        f"127.0.0.1:{port}",
        settings="mappedFileSizeCommitLog=1048576\n",
    )
    tries = re.compile(r"HA: cannot connect to master 127\.0\.0\.1:\d+: .*refused.*; next try in ([\d.]+) s")
    pauses = _until(
        lambda: [float(p) for p in tries.findall(s.log())][:3] if len(tries.findall(s.log())) >= 3 else None,
        "three logged tries",
    )
    assert pauses == [0.25, 0.5, 1.0], s.log()
    shown = _until(lambda: _status(tmp_path / "slave")["replication"].get("slave"), "the broker's state")
    assert shown["state"] in ("connecting", "disconnected") and "refused" in shown["problem"]
    master_cfg = StoreConfig(commitlog_segment_size=1 << 20, ha_listen_port=port, disk_warning_ratio=100)
    with MessageStore.open(tmp_path / "master", master_cfg) as master:
        master.put_messages([Message(topic="Rep", body=b"m%d" % i) for i in range(50)])
        end = master.max_phy_offset()
        _until(lambda: acked(master) >= end, "the slave to catch up")

        def caught_up() -> dict[str, Any] | None:
            replication = _status(tmp_path / "slave")["replication"]
            link = replication.get("slave") or {}
            return replication if link.get("state") == "connected" and link.get("behind_bytes") == 0 else None

        replication = _until(caught_up, "status to show the slave connected and caught up")
        assert replication["role"] == "SLAVE"
        assert replication["slave"]["master_address"] == f"127.0.0.1:{port}"
        assert replication["slave"]["master_offset"] == replication["slave"]["slave_offset"] == end


def test_run_until_signalled_stops_on_sigterm_and_holds_signals_until_restored() -> None:
    import asyncio

    from rocketstore.broker.serve import run_until_signalled

    steps: list[str] = []

    async def start() -> None:
        steps.append("start")
        asyncio.get_running_loop().call_later(0.05, os.kill, os.getpid(), signal.SIGTERM)

    async def stop() -> None:
        steps.append("stop")

    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        assert run_until_signalled(start, stop) == 128 + signal.SIGTERM
        assert steps == ["start", "stop"]
        # until the caller restores them: what it closes next is not cut short
        assert signal.getsignal(signal.SIGTERM) == signal.SIG_IGN
        assert signal.getsignal(signal.SIGINT) == signal.SIG_IGN

        async def failing() -> None:
            raise OSError("port taken")

        steps.clear()
        with pytest.raises(OSError, match="port taken"):
            run_until_signalled(failing, stop)
        assert steps == ["stop"]
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
