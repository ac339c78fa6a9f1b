"""RocketMQ 4.9.8's Java clients signing with ``AclClientRPCHook`` against ``rocketstore serve
--acl``: an account's own producers, transactions with check-back, push consumers with retries
(a retried message sent back again included) and orderly consumers work as they do without the
ACL, and the broker refuses none of their requests."""

from __future__ import annotations

import urllib.request
from pathlib import Path
from typing import Any

import pytest

from .conftest import StartServe
from .harness import JavaPrograms, free_port

pytestmark = pytest.mark.slow

ACL = """
[[accounts]]
access_key = "app"
secret_key = "app-secret"
topics = ["AclT", "AclTx"]
groups = ["acl_p", "acl_tx", "acl_g", "acl_order_g"]
"""
KEYS = ("ak=app", "sk=app-secret")


def consumed(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in events if e["event"] == "consumed"]


def test_an_accounts_own_clients_work_and_are_refused_nothing(
    java: JavaPrograms, serve: StartServe, tmp_path: Path
) -> None:
    acl = tmp_path / "acl.toml"
    acl.write_text(ACL)
    metrics = f"127.0.0.1:{free_port()}"
    served = serve(
        None,
        "--acl",
        str(acl),
        "--metrics",
        metrics,
        settings="transactionTimeOut=1000\ntransactionCheckInterval=500\n",
    )
    ns = f"namesrv={served.namesrv}"
    sent = java.run("Produce", ns, "topic=AclT", "count=6", "group=acl_p", *KEYS)
    assert [e["status"] for e in sent if e["event"] == "sent"] == ["SEND_OK"] * 6
    tx = java.run("TxProduce", ns, "topic=AclTx", "count=6", "group=acl_tx", *KEYS)
    assert [e["status"] for e in tx if e["event"] == "sent"] == ["SEND_OK"] * 6
    assert sorted(e["body"] for e in tx if e["event"] == "checked") == ["tx-2", "tx-5"]

    # body-1 fails twice: sent back as delivered from AclT, then as delivered from %RETRY%acl_g
    events = java.run(
        "PushConsume",
        ns,
        "group=acl_g",
        "topic=AclT",
        "fail=body-1",
        "failTimes=2",
        "retryDelay=1",
        "expect=6",
        *KEYS,
    )
    assert [e["reconsumeTimes"] for e in consumed(events) if e["body"] == "body-1"] == [0, 1, 2]
    assert sorted(e["body"] for e in consumed(events) if e["result"] == "ok") == [
        f"body-{i}" for i in range(6)
    ]
    orderly = java.run(
        "PushConsume", ns, "group=acl_order_g", "topic=AclT", "orderly=true", "expect=6", *KEYS
    )
    assert sorted(e["body"] for e in consumed(orderly)) == [f"body-{i}" for i in range(6)]

    # none of their requests was refused (a refusal the client logs and works around, such as a
    # send-back the consumer then sends itself, shows here)
    with urllib.request.urlopen(f"http://{metrics}/metrics", timeout=30) as answer:
        text = answer.read().decode()
    answered = [
        line
        for line in text.splitlines()
        if line.startswith("rocketstore_broker_remoting_requests_total{") and 'listener="remoting"' in line
    ]
    assert any('request="CONSUMER_SEND_MSG_BACK"' in line for line in answered), answered
    assert any('request="LOCK_BATCH_MQ"' in line for line in answered), answered
    # (GET_CONSUMER_LIST_BY_GROUP answers SYSTEM_ERROR "no consumer for this group" to a rebalance
    # that comes before the group's first heartbeat, with or without the ACL; refused for the ACL,
    # the consumers above would have got no queues)
    errors = [
        line
        for line in answered
        if 'response="SYSTEM_ERROR"' in line and 'request="GET_CONSUMER_LIST_BY_GROUP"' not in line
    ]
    assert errors == []
