"""The official Node.js client (rocketmq-client-nodejs) against the broker: normal, FIFO and delay
sends received and acked by its SimpleConsumer. `make test` installs the client (`make node`: npm ci in
tests/broker/node, pinned by its package-lock.json); skipped, with the reason, where `node` or the
package is missing (or set ROCKETSTORE_NODE_MODULES to a node_modules directory that has it)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from rocketstore.broker import BrokerConfig

from .conftest import StartBroker

SCRIPT = Path(__file__).resolve().parent / "node" / "clients.js"


def node_env() -> dict[str, str]:
    env = dict(os.environ)
    modules = os.environ.get("ROCKETSTORE_NODE_MODULES")
    if modules:
        env["NODE_PATH"] = os.pathsep.join(filter(None, [modules, env.get("NODE_PATH")]))
    return env


def node_client_missing() -> str | None:
    node = shutil.which("node")
    if node is None:
        return "node is not installed"
    probe = subprocess.run(
        [node, "-e", "require.resolve('rocketmq-client-nodejs')"],
        env=node_env(),
        capture_output=True,
        cwd=SCRIPT.parent,
    )
    if probe.returncode != 0:
        return "rocketmq-client-nodejs is not installed (npm install it; see this module's docstring)"
    return None


@pytest.mark.slow
def test_node_client_sends_receives_and_acks(start_broker: StartBroker) -> None:
    missing = node_client_missing()
    if missing:
        pytest.skip(missing)
    _, store, port = start_broker(BrokerConfig(long_polling_min_ms=0))
    result = subprocess.run(
        ["node", str(SCRIPT), f"127.0.0.1:{port}"],
        env=node_env(),
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert sorted(r["body"] for r in report["received"]) == ["node-delay", "node-fifo", "node-normal"]
    assert {r["id"] for r in report["received"]} == set(report["sent"])
    assert all(r["attempt"] == 1 for r in report["received"])
    assert store.topic_configs()["NodeTopic"].order  # it took a FIFO message
