"""End-to-end harness for the remoting protocol: RocketMQ 4.9.8's Java client programs (compiled from
tests/remoting/java against the distribution ``ROCKETMQ_HOME`` names), ``mqadmin``, RocketMQ's own name
server and broker for comparisons, and ``rocketstore serve`` with ``--namesrv``/``--remoting``.

Every wait here is for a condition (a port accepting connections, a line printed, a process exiting),
bounded generously: the tests run on a shared machine at high load.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

JAVA_SOURCES = Path(__file__).resolve().parent / "java"
SRC = str(Path(__file__).resolve().parents[2] / "src")
MARK = "@@ "

# What the programs and servers get to start on a machine at load 10: generous, never a pause.
BOOT_TIMEOUT = 180.0


def why_no_java_harness() -> str | None:
    """Why the Java end-to-end tests cannot run here, or None when they can."""
    home = os.environ.get("ROCKETMQ_HOME", "")
    if not home:
        return "set ROCKETMQ_HOME to a RocketMQ 4.9.8 distribution (bin/, lib/) to run the Java client tests"
    root = Path(home)
    missing = [p for p in ("bin/mqnamesrv", "bin/mqbroker", "bin/mqadmin", "lib") if not (root / p).exists()]
    if missing:
        return f"ROCKETMQ_HOME={home} is not a RocketMQ 4.9.8 distribution: no {', '.join(missing)}"
    if not list((root / "lib").glob("rocketmq-client-*.jar")):
        return f"ROCKETMQ_HOME={home} has no lib/rocketmq-client-*.jar"
    if shutil.which("javac") is None or shutil.which("java") is None:
        return "the Java client tests need a JDK (javac and java); `make test` installs one where it can"
    return None


def free_port(also: Iterable[int] = ()) -> int:
    """A TCP port on 127.0.0.1 that is free now, and so are ``port + d`` for each d in ``also``
    (RocketMQ's broker binds listenPort-2 and listenPort+1 beside listenPort)."""
    for _ in range(200):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port: int = s.getsockname()[1]
        if all(_is_free(port + d) for d in also):
            return port
    raise RuntimeError("no free TCP port found on 127.0.0.1")


def _is_free(port: int) -> bool:
    if not 0 < port < 65536:
        return False
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def accepts(address: str) -> bool:
    host, port = address.rsplit(":", 1)
    try:
        with socket.create_connection((host, int(port)), timeout=2):
            return True
    except OSError:
        return False


def wait_until(condition: Callable[[], bool], what: str, timeout: float = BOOT_TIMEOUT) -> None:
    """Poll ``condition`` until it holds; fail naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    delay = 0.05
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(delay)
        delay = min(delay * 2, 0.5)


def events(stdout: str) -> list[dict[str, Any]]:
    """The machine-readable events a test program printed (lines ``@@ {json}``)."""
    return [json.loads(line[len(MARK) :]) for line in stdout.splitlines() if line.startswith(MARK)]


class Process:
    """A child process whose output lines are collected as they come (both streams, in order)."""

    def __init__(self, argv: list[str], env: dict[str, str], cwd: Path | None = None) -> None:
        self.argv = argv
        self.proc = subprocess.Popen(
            argv,
            env=env,
            cwd=cwd,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        self.lines: list[str] = []
        self._changed = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with self._changed:
                self.lines.append(line.rstrip("\n"))
                self._changed.notify_all()

    @property
    def output(self) -> str:
        return "\n".join(self.lines)

    @property
    def events(self) -> list[dict[str, Any]]:
        return events(self.output)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def wait_for(
        self, condition: Callable[[Process], bool], what: str, timeout: float = BOOT_TIMEOUT
    ) -> None:
        """Wait until ``condition(self)`` holds; fail with the output so far if the process exits first."""

        def ready() -> bool:
            if condition(self):
                return True
            if not self.alive():
                self._reader.join(5)
                if condition(self):
                    return True
                raise AssertionError(
                    f"{self.argv[0]} exited ({self.proc.returncode}) before {what}:\n{self.output[-6000:]}"
                )
            return False

        try:
            wait_until(ready, what, timeout)
        except AssertionError as e:
            if "timed out" in str(e):
                raise AssertionError(f"{e}; output so far:\n{self.output[-6000:]}") from None
            raise

    def wait_event(self, name: str, timeout: float = BOOT_TIMEOUT) -> dict[str, Any]:
        self.wait_for(lambda p: any(e["event"] == name for e in p.events), f"event {name!r}", timeout)
        return next(e for e in self.events if e["event"] == name)

    def finish(self, timeout: float = BOOT_TIMEOUT) -> str:
        """Wait for the process to exit by itself (killed after ``timeout``); its whole output."""
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(
                f"{self.argv[0]} still running after {timeout:.0f} s:\n{self.output[-6000:]}"
            ) from None
        self._reader.join(10)
        return self.output

    def stop(self, timeout: float = 60.0) -> int:
        """SIGTERM, then SIGKILL if it has not exited after ``timeout`` seconds; the exit status."""
        if self.alive():
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()
        self._reader.join(10)
        return self.proc.returncode

    def kill(self) -> None:
        """SIGKILL of the process group (a launcher script and its JVM alike)."""
        if self.alive():
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(30)


@dataclass
class RocketMQDist:
    """The RocketMQ 4.9.8 distribution of ``ROCKETMQ_HOME``, with logs redirected to ``log_dir``
    (the distribution may be read-only)."""

    home: Path
    log_dir: Path

    def env(self) -> dict[str, str]:
        return {
            **os.environ,
            "ROCKETMQ_HOME": str(self.home),
            "RMQ_LOG_DIR": str(self.log_dir),
            "RMQ_HEAP": HEAP,
        }

    def mqadmin(self, *args: str, timeout: float = BOOT_TIMEOUT) -> subprocess.CompletedProcess[str]:
        """``mqadmin ARGS``; its stdout and stderr, and exit status (not checked)."""
        return subprocess.run(
            [str(self.home / "bin" / "mqadmin"), *args],
            env=self.env(),
            capture_output=True,
            text=True,
            timeout=timeout,
        )


_TRANSPORT_ERRORS = ("RemotingSendRequestException", "RemotingTimeoutException", "RemotingConnectException")

# Small heaps: several JVMs run at once on a shared 2-core machine.
HEAP = "-Xms64m -Xmx256m -XX:MaxDirectMemorySize=256m"


@dataclass
class JavaPrograms:
    """The programs of tests/remoting/java compiled against ``dist``'s jars into ``classes``."""

    dist: RocketMQDist
    classes: Path
    running: list[Process] = field(default_factory=list)

    def command(self, main: str, *args: str) -> list[str]:
        return [
            "java",
            *HEAP.split(),
            "-XX:+UseSerialGC",
            "-XX:TieredStopAtLevel=1",
            f"-Drocketmq.client.logRoot={self.dist.log_dir}",
            "-Drocketmq.client.logLevel=WARN",
            "-cp",
            f"{self.classes}{os.pathsep}{self.dist.home / 'lib'}/*",
            main,
            *args,
        ]

    def start(self, main: str, *args: str) -> Process:
        """Start ``main`` with ``key=value`` ``args`` in the background (stopped at the test's end)."""
        p = Process(self.command(main, *args), self.dist.env())
        self.running.append(p)
        return p

    def run(
        self, main: str, *args: str, timeout: float = BOOT_TIMEOUT, attempts: int = 1
    ) -> list[dict[str, Any]]:
        """Run ``main`` to its end; its events. Fails with its output when it exits non-zero or
        prints an ``error`` event. A program that only reads may be given ``attempts`` > 1: it
        runs again when the client failed in transport (a JVM slowed by a loaded machine misses
        its own 3 s timeout of a call and closes the connection under its other calls)."""
        for attempt in range(1, attempts + 1):
            p = self.start(main, *args)
            out = p.finish(timeout)
            found = p.events
            bad = [e for e in found if e["event"] == "error"]
            if p.proc.returncode == 0 and not bad:
                return found
            transport = any(name in e.get("error", "") for e in bad for name in _TRANSPORT_ERRORS)
            if attempt == attempts or not transport:
                raise AssertionError(f"{main} {' '.join(args)} failed ({p.proc.returncode}):\n{out[-6000:]}")
        raise AssertionError("unreachable")

    def stop_all(self) -> None:
        for p in reversed(self.running):
            p.kill()
        self.running.clear()


def compile_programs(dist: RocketMQDist, classes: Path) -> JavaPrograms:
    sources = sorted(str(p) for p in JAVA_SOURCES.glob("*.java"))
    run = subprocess.run(
        [
            "javac",
            "-nowarn",
            "-encoding",
            "UTF-8",
            "-d",
            str(classes),
            "-cp",
            f"{dist.home / 'lib'}/*",
            *sources,
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    if run.returncode != 0:
        raise AssertionError(f"javac failed:\n{run.stdout}\n{run.stderr}")
    return JavaPrograms(dist, classes)


@dataclass
class RocketMQServers:
    """RocketMQ 4.9.8's own name server and one master broker over a store in ``store``."""

    namesrv: str
    broker: str
    store: Path
    processes: list[Process]

    def stop(self) -> None:
        for p in reversed(self.processes):
            p.stop()


def start_rocketmq(
    dist: RocketMQDist, work: Path, store: Path | None = None, settings: str = ""
) -> RocketMQServers:
    """Start RocketMQ's name server and a broker (its ``mkbrokerconf`` settings, then ``settings``:
    broker.conf lines, which win) over ``store`` (default: ``work/store``) on free ports; return
    once the broker has registered with the name server (its route for ``TBW102`` is served)."""
    work.mkdir(parents=True, exist_ok=True)
    ns = start_rocketmq_namesrv(dist, work)
    try:
        servers = start_rocketmq_broker(dist, work, ns.namesrv, store, settings)
    except BaseException:
        ns.stop()
        raise
    return RocketMQServers(ns.namesrv, servers.broker, servers.store, [*ns.processes, *servers.processes])


def start_rocketmq_namesrv(dist: RocketMQDist, work: Path) -> RocketMQServers:
    """RocketMQ's name server alone on a free port (``broker`` and ``store`` are empty)."""
    work.mkdir(parents=True, exist_ok=True)
    ns_port = free_port()
    (work / "namesrv.conf").write_text(f"listenPort={ns_port}\n")
    ns = Process([str(dist.home / "bin" / "mqnamesrv"), "-c", str(work / "namesrv.conf")], dist.env())
    try:
        ns.wait_for(lambda p: "boot success" in p.output, "the name server's 'boot success'")
    except BaseException:
        ns.kill()
        raise
    return RocketMQServers(f"127.0.0.1:{ns_port}", "", Path(), [ns])


def start_rocketmq_broker(
    dist: RocketMQDist, work: Path, namesrv: str, store: Path | None = None, settings: str = ""
) -> RocketMQServers:
    """A RocketMQ broker (``mkbrokerconf``'s settings, then ``settings``) registering with
    ``namesrv`` (any RocketMQ 4.9 name server); returns once its ``TBW102`` route is served."""
    work.mkdir(parents=True, exist_ok=True)
    store = store or work / "store"
    broker_port = free_port(also=(-2, 1))
    conf = subprocess.run(
        [str(dist.home / "bin" / "mkbrokerconf"), str(store), str(broker_port)],
        env={**dist.env(), "COMMITLOG_FILE_SIZE": str(32 << 20), "CQ_FILE_SIZE": str(20 * 20000)},
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    (work / "broker.conf").write_text(conf + "diskMaxUsedSpaceRatio=95\n" + settings)
    broker = Process(
        [str(dist.home / "bin" / "mqbroker"), "-n", namesrv, "-c", str(work / "broker.conf")], dist.env()
    )
    try:
        broker.wait_for(lambda p: "boot success" in p.output, "the broker's 'boot success'")
        servers = RocketMQServers(namesrv, f"127.0.0.1:{broker_port}", store, [broker])
        wait_until(
            lambda: dist.mqadmin("topicRoute", "-n", namesrv, "-t", "TBW102").returncode == 0,
            "the broker's registration with the name server",
        )
        return servers
    except BaseException:
        broker.kill()
        raise


@dataclass
class Served:
    """A ``rocketstore serve`` process answering as name server and broker."""

    process: Process
    store: Path
    namesrv: str
    broker: str
    grpc: str | None

    def stop(self) -> int:
        status = self.process.stop()
        self._keep_log()
        return status

    def kill(self) -> None:
        self.process.kill()
        self._keep_log()

    def _keep_log(self) -> None:
        """The server's log beside its store, for a failed test's post-mortem."""
        (self.store.parent / f"{self.store.name}.serve.log").write_text(self.process.output)


def start_serve(
    store: Path,
    *extra: str,
    settings: str = "",
    create: bool = True,
    grpc: bool = False,
    namesrv: bool = True,
    remoting: bool = True,
) -> Served:
    """``rocketstore serve STORE --namesrv 127.0.0.1:P1 --remoting 127.0.0.1:P2`` (gRPC off unless
    ``grpc``; either of the others ``off`` when its flag is false, with an empty address) with
    ``settings`` (broker.conf lines) on small files; returns once its ports accept connections."""
    conf = store.parent / f"{store.name}.conf"
    # the shared machine's disk may be fuller than the store's limits; small files: the disk is shared
    conf.write_text(
        "disk_warning_ratio=100\ndisk_clean_forcibly_ratio=100\ndiskMaxUsedSpaceRatio=95\n"
        "mappedFileSizeCommitLog=8388608\nmappedFileSizeConsumeQueue=400000\n" + settings
    )
    namesrv_address = f"127.0.0.1:{free_port()}" if namesrv else ""
    # the port below too: a replication master serves RocketMQ's VIP channel there
    broker = f"127.0.0.1:{free_port(also=(-2,))}" if remoting else ""
    grpc_address = f"127.0.0.1:{free_port()}" if grpc else None
    argv = [
        sys.executable,
        "-m",
        "rocketstore.cli",
        "serve",
        str(store),
        "--config",
        str(conf),
        "--namesrv",
        namesrv_address or "off",
        "--remoting",
        broker or "off",
        "--listen",
        grpc_address or "off",
        *(["--create"] if create else []),
        *extra,
    ]
    env = {**os.environ, "PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", "")}
    p = Process(argv, env)
    listening = [a for a in (namesrv_address, broker, grpc_address) if a]
    try:
        p.wait_for(
            lambda _p: all(accepts(a) for a in listening),
            f"rocketstore serve accepting connections on {', '.join(listening)}",
        )
    except BaseException:
        p.kill()
        raise
    return Served(p, store, namesrv_address, broker, grpc_address)
