"""The source, the sinks and ``rocketstore spark rebuild`` on a real Spark standalone cluster: a
master and two workers started here from the installed PySpark (``bin/spark-class``), each
worker with one core, so the executors are two JVMs of their own, each with its own Python
workers, and a scan's partitions are spread over both.

The driver runs in a process of its own (tests/spark_cluster_driver.py): a process has one
SparkContext, and the other Spark tests hold a local one. The store is seen by every executor
through its path (one machine here; a shared file system on a real cluster). The executors'
Python is this interpreter (``session()`` sets PYSPARK_PYTHON), and the workers are given this
process's PYTHONPATH, so they import the rocketstore under test.
"""

from __future__ import annotations

import contextlib
import filecmp
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from rocketstore import Message, MessageStore, StoreConfig
from rocketstore.geometry import detect_geometry

pytestmark = pytest.mark.slow

HERE = Path(__file__).resolve().parent
START_TIMEOUT_S = 120  # master up and both workers registered
DRIVER_TIMEOUT_S = 900  # the driver's whole run, on a loaded 2-core machine
STOP_TIMEOUT_S = 30
CFG = StoreConfig(commitlog_segment_size=256 * 1024, consume_queue_entries=1000)
TOPICS = ("Orders", "Payments", "Shipments")
QUEUES = 4
PER_TOPIC = 1200


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def _need_java() -> None:
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        if os.environ.get("CI"):
            pytest.fail("Spark tests need Java 17+ (`make test` installs it where it can)")
        pytest.skip("Spark tests need Java 17+")


@dataclass
class Cluster:
    url: str
    web_port: int
    logs: Path
    env: dict[str, str]

    def workers(self) -> list[dict[str, object]]:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.web_port}/json/", timeout=10) as answer:
            return list(json.load(answer).get("workers", []))

    def logs_text(self) -> str:
        return "\n".join(
            f"--- {p.name}\n{p.read_text(errors='replace')[-4000:]}" for p in sorted(self.logs.glob("*"))
        )


def _signal_group(proc: subprocess.Popen[bytes], sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):  # the group has already ended
        os.killpg(proc.pid, sig)


def _stop(procs: list[subprocess.Popen[bytes]]) -> None:
    """Each daemon was started in a session of its own: its process group (the JVM and the
    executors a worker started) is sent SIGTERM, then SIGKILL when it does not end in time."""
    for proc in reversed(procs):
        _signal_group(proc, signal.SIGTERM)
    for proc in reversed(procs):
        try:
            proc.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            _signal_group(proc, signal.SIGKILL)
            proc.wait(STOP_TIMEOUT_S)
        _signal_group(proc, signal.SIGKILL)  # a worker's executors live in its group: none left


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """A standalone master and two one-core workers on 127.0.0.1, ports chosen free, logs and
    work directories under the test's temporary directory; stopped even when a test fails."""
    _need_java()
    base = tmp_path_factory.mktemp("spark-cluster")
    logs = base / "logs"
    logs.mkdir()
    home = _spark_home()
    env = {
        **os.environ,
        "SPARK_HOME": str(home),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_LOG_DIR": str(logs),
        "PYSPARK_PYTHON": sys.executable,
        # the executors' Python workers import the rocketstore this process imports
        "PYTHONPATH": os.pathsep.join(
            p for p in (str(HERE.parent / "src"), os.environ.get("PYTHONPATH")) if p
        ),
    }
    port, web_port = _free_port(), _free_port()
    url = f"spark://127.0.0.1:{port}"
    spark_class = str(home / "bin" / "spark-class")
    master = "org.apache.spark.deploy.master.Master"
    commands = [
        [spark_class, master, "--host", "127.0.0.1", "--port", str(port), "--webui-port", str(web_port)]
    ]
    for k in range(2):
        work = base / f"worker{k}"
        work.mkdir()
        ports = ["--port", str(_free_port()), "--webui-port", str(_free_port())]
        resources = ["--cores", "1", "--memory", "1g", "--work-dir", str(work)]
        commands.append(
            [
                spark_class,
                "org.apache.spark.deploy.worker.Worker",
                url,
                "--host",
                "127.0.0.1",
                *ports,
                *resources,
            ]
        )
    procs: list[subprocess.Popen[bytes]] = []
    found = Cluster(url, web_port, logs, env)
    try:
        for k, command in enumerate(commands):
            name = "master" if k == 0 else f"worker{k - 1}"
            with (logs / f"{name}.log").open("wb") as out:
                procs.append(
                    subprocess.Popen(
                        command, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
                    )
                )
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            dead = [p.args for p in procs if p.poll() is not None]
            if dead:
                pytest.fail(f"a Spark daemon ended at start: {dead}\n{found.logs_text()}")
            try:
                alive = [w for w in found.workers() if w.get("state") == "ALIVE"]
            except OSError:
                alive = []
            if len(alive) == 2:
                break
            if time.monotonic() > deadline:
                pytest.fail(
                    f"the master and 2 workers did not come up in {START_TIMEOUT_S} s\n{found.logs_text()}"
                )
            time.sleep(0.5)
        yield found
    finally:
        _stop(procs)


def _messages() -> list[Message]:
    out = []
    for i in range(PER_TOPIC):
        for topic in TOPICS:
            out.append(
                Message(
                    topic=topic,
                    body=f"{topic}-{i}".encode(),
                    tags=f"t{i % 3}",
                    keys=(f"k{i}",),
                    queue_id=i % QUEUES,
                )
            )
    return out


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """3 topics x 4 queues, 1,200 messages a topic, over several 256 KiB commitlog segments."""
    root = tmp_path_factory.mktemp("cluster-store") / "store"
    with MessageStore.open(root, CFG) as s:
        msgs = _messages()
        for k in range(0, len(msgs), 500):
            s.put_messages(msgs[k : k + 500])
        s.wait_dispatched()
    assert len(list((root / "commitlog").iterdir())) > 2
    return root


def _run(cluster: Cluster, command: list[str]) -> None:
    try:
        done = subprocess.run(
            command, env=cluster.env, capture_output=True, timeout=DRIVER_TIMEOUT_S, cwd=HERE.parent
        )
    except subprocess.TimeoutExpired as exc:
        pytest.fail(
            f"{command[:4]} did not finish in {DRIVER_TIMEOUT_S} s\n{exc.stderr!r}\n{cluster.logs_text()}"
        )
    out, err = done.stdout.decode()[-3000:], done.stderr.decode()[-6000:]
    assert done.returncode == 0, f"{command[:4]} failed\n{out}\n{err}\n{cluster.logs_text()}"


def _bodies(root: Path) -> list[tuple[str, int, str]]:
    """(topic, queue offset, body) of every message, through the consume queues."""
    found = []
    with MessageStore.open(root, detect_geometry(root), readonly=True) as s:
        for topic, qids in sorted(s.topics().items()):
            for q in qids:
                offset, end = s.min_offset_in_queue(topic, q), s.max_offset_in_queue(topic, q)
                while offset < end:  # a call returns a bounded number of messages
                    result = s.get_message("g", topic, q, offset, 1000)
                    found.extend((m.topic, m.queue_offset, m.body.decode()) for m in result.messages)
                    assert result.next_begin_offset > offset
                    offset = result.next_begin_offset
    return found


def test_reads_streams_and_writes_on_a_standalone_cluster(
    cluster: Cluster, store: Path, tmp_path: Path
) -> None:
    result_path = tmp_path / "result.json"
    _run(
        cluster,
        [
            sys.executable,
            str(HERE / "spark_cluster_driver.py"),
            cluster.url,
            str(store),
            str(tmp_path),
            str(result_path),
        ],
    )
    result = json.loads(result_path.read_text())

    # the scan: every record once, its partitions run by both executors
    expected = sorted(
        [topic, i % QUEUES, i // QUEUES, f"{topic}-{i}"] for i in range(PER_TOPIC) for topic in TOPICS
    )
    assert result["scan_rows"] == expected
    assert result["hosts_rows"] == expected
    assert result["scan_partitions"] >= 2  # one per 256 KiB segment
    # each partition ran once, on one executor; both executors (two JVMs, one per worker) ran some
    ran = dict(result["scan_tasks"])
    assert sorted(ran) == list(range(result["scan_partitions"])), result["scan_tasks"]
    executors = {Path(d) for d in ran.values()}
    assert {d.parent.parent.name for d in executors} == {"worker0", "worker1"}, executors

    # Kafka's options: queue 0 from offset 10, queue 1 from the earliest to 20, the rest whole
    per_queue = PER_TOPIC // QUEUES
    kafka = (
        [["Orders", 0, o] for o in range(10, per_queue)]
        + [["Orders", 1, o] for o in range(20)]
        + [["Orders", q, o] for q in (2, 3) for o in range(per_queue)]
    )
    assert result["kafka_rows"] == sorted(kafka)

    # the streaming sink: two topics, each message once, in micro-batches of at most 700
    streamed = _bodies(tmp_path / "stream")
    assert sorted(b for _, _, b in streamed) == sorted(
        f"{t}-{i}" for t in TOPICS[:2] for i in range(PER_TOPIC)
    )
    assert result["stream_batches"] == -(-2 * PER_TOPIC // 700)

    # the batch sink
    written = _bodies(tmp_path / "batch")
    assert sorted(b for _, _, b in written) == sorted(f"Shipments-{i}" for i in range(PER_TOPIC))


def test_rebuild_on_a_standalone_cluster(cluster: Cluster, store: Path, tmp_path: Path) -> None:
    """`rocketstore spark rebuild --master spark://...`: the consume queues written by the
    cluster's executors are the store's own, byte for byte, and the index finds keys."""
    copy = tmp_path / "store"
    shutil.copytree(store, copy)
    for queue_file in (copy / "consumequeue").glob("*/*/*"):  # zeroed, their size (the geometry) kept
        queue_file.write_bytes(bytes(queue_file.stat().st_size))
    shutil.rmtree(copy / "index")
    cli = "import sys; from rocketstore.cli import main; sys.exit(main())"
    _run(cluster, [sys.executable, "-c", cli, "spark", "rebuild", str(copy), "--master", cluster.url])
    compared = filecmp.dircmp(store / "consumequeue", copy / "consumequeue")
    queues = [(t, q) for t in TOPICS for q in range(QUEUES)]
    for topic, qid in queues:
        mine, theirs = store / "consumequeue" / topic / str(qid), copy / "consumequeue" / topic / str(qid)
        names = sorted(p.name for p in mine.iterdir())
        assert names == sorted(p.name for p in theirs.iterdir())
        for name in names:
            assert (mine / name).read_bytes() == (theirs / name).read_bytes(), f"{topic}/{qid}/{name}"
    assert not compared.left_only and not compared.right_only
    with MessageStore.open(copy, detect_geometry(copy), readonly=True) as s:
        found = s.query_message("Payments", "k77")
        assert [m.body for m in found] == [b"Payments-77"]
