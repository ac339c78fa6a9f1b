"""Fixtures of the remoting end-to-end tests: the RocketMQ 4.9.8 distribution that ``ROCKETMQ_HOME``
names, the Java test programs compiled once per session, RocketMQ's own name server and broker, and
``rocketstore serve`` as name server and broker. Without the distribution or a JDK the tests using
them skip, saying why (CI sets ``ROCKETMQ_HOME``, so there they fail instead)."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from .harness import (
    JavaPrograms,
    RocketMQDist,
    RocketMQServers,
    Served,
    compile_programs,
    start_rocketmq,
    start_serve,
    why_no_java_harness,
)


@pytest.fixture(scope="session")
def rocketmq_dist(tmp_path_factory: pytest.TempPathFactory) -> RocketMQDist:
    reason = why_no_java_harness()
    if reason is not None:
        # CI sets ROCKETMQ_HOME where it has the distribution, and `make test` installs the JDK:
        # a set ROCKETMQ_HOME that does not work there is a failure, a missing one a skip
        if os.environ.get("CI") and os.environ.get("ROCKETMQ_HOME"):
            pytest.fail(reason)
        pytest.skip(reason)
    return RocketMQDist(Path(os.environ["ROCKETMQ_HOME"]).resolve(), tmp_path_factory.mktemp("rmq-logs"))


@pytest.fixture(scope="session")
def java_classes(rocketmq_dist: RocketMQDist, tmp_path_factory: pytest.TempPathFactory) -> JavaPrograms:
    """tests/remoting/java compiled with ``javac -cp "$ROCKETMQ_HOME/lib/*"`` (once per session)."""
    return compile_programs(rocketmq_dist, tmp_path_factory.mktemp("java-classes"))


@pytest.fixture
def java(java_classes: JavaPrograms) -> Iterator[JavaPrograms]:
    """The compiled programs; whatever a test started in the background is killed at its end."""
    programs = JavaPrograms(java_classes.dist, java_classes.classes)
    yield programs
    programs.stop_all()


@pytest.fixture(scope="module")
def rocketmq(
    rocketmq_dist: RocketMQDist, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RocketMQServers]:
    """RocketMQ 4.9.8's own name server and broker (one per test module: a JVM pair boots slowly);
    tests sharing it use topics and groups of their own."""
    servers = start_rocketmq(rocketmq_dist, tmp_path_factory.mktemp("rocketmq"))
    yield servers
    servers.stop()


StartServe = Callable[..., Served]


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[StartServe]:
    """``serve(store=None, *extra_args, settings="", create=True, grpc=False) -> Served``:
    ``rocketstore serve`` with ``--namesrv``/``--remoting`` on free ports (default store: tmp_path/store);
    stopped (SIGTERM, then SIGKILL) at the test's end."""
    running: list[Served] = []

    def start(store: Path | None = None, *extra: str, **options: object) -> Served:
        served = start_serve(store or tmp_path / "store", *extra, **options)  # type: ignore[arg-type]
        running.append(served)
        return served

    yield start
    for served in reversed(running):
        served.stop()
