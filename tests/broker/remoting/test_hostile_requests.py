"""Every request code the broker and the name server take, with hostile extFields and bodies: each
is answered (an answer with the request's opaque, or a refusal), and none makes a handler fail
(the server's "request code ... failed" log, which is for the broker's own bugs: a client's bad
field is a refusal naming it). The JSON bodies the handlers read are each taken whole and one part
of them made hostile."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rocketstore.broker import BrokerConfig
from rocketstore.broker.remoting.acl import signature
from rocketstore.broker.remoting.command import SERIALIZE_JSON, SERIALIZE_ROCKETMQ

from .client import RawClient
from .conftest import StartRemoting

# every extFields name a handler reads (the send headers' long and one-letter names among them)
NAMES = [
    *[
        "AccessKey",
        "beginTimestamp",
        "brokerAddr",
        "brokerId",
        "brokerName",
        "changed",
        "clientID",
        "clientId",
    ],
    *["clusterName", "commitLogOffset", "commitOffset", "commitOrRollback", "compressed", "consumerGroup"],
    *[
        "delayLevel",
        "endTimestamp",
        "expressionType",
        "fromTransactionCheck",
        "group",
        "haServerAddr",
        "isForce",
        "key",
    ],
    *[
        "masterAddr",
        "maxMsgNums",
        "maxNum",
        "maxReconsumeTimes",
        "msgId",
        "namespace",
        "offset",
        "order",
        "perm",
    ],
    *["producerGroup", "queueId", "queueOffset", "readQueueNums", "statsKey", "statsName", "subVersion"],
    *["subscription", "suspendTimeoutMillis", "sysFlag", "timestamp", "topic", "tranStateTableOffset"],
    *[
        "transactionId",
        "value",
        "writeQueueNums",
        "defaultTopic",
        "defaultTopicQueueNums",
        "bornTimestamp",
        "flag",
    ],
    *["properties", "reconsumeTimes", "unitMode", "batch", "bname", "topicFilterType", "topicSysFlag"],
    *"abcdefghijklmn",
]
# what a field of a well-formed request is changed to, in the sweep
HOSTILE = ["--3", "²", "1" * 5000, "", "-1", "9" * 20, "٣", "x", "+5", "1_0", " 1", "%RETRY%g"]
VALUES = st.one_of(
    st.sampled_from(
        [
            *HOSTILE,
            *[
                "0",
                "1",
                "7",
                "-0",
                "true",
                "TRUE",
                "null",
                "T",
                "g",
                "%DLQ%g",
                "TBW102",
                "SCHEDULE_TOPIC_XXXX",
                "*",
                "TAG",
                "SQL92",
            ],
            *("a b", "a || b", "a > 1", "127.0.0.1:1", "DefaultCluster", "broker-a", "é", "\ud7ff"),
            *("7F0000010000000000000000", "\x01\x02", "K\x01v\x02W\x01x"),
        ]
    ),
    st.text(max_size=12),
    st.integers(-(2**64), 2**64).map(str),
)
BODY_NAMES = [
    *NAMES,
    *["consumerDataSet", "producerDataSet", "subscriptionDataSet", "groupName", "mqSet"],
    *["topicConfigTable", "offsetTable", "dataVersion"],
]
JSON = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.text(max_size=6), VALUES),
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.sampled_from(BODY_NAMES), inner, max_size=5)
    ),
    max_leaves=12,
)
BODIES = st.one_of(
    st.just(b""),
    st.binary(max_size=64),
    JSON.map(lambda doc: json.dumps(doc).encode()),
    st.dictionaries(st.sampled_from(NAMES), VALUES, max_size=6).map(
        lambda doc: "\n".join(f"{k}={v}" for k, v in doc.items()).encode(errors="surrogatepass")
    ),
)


# a value for every name that most handlers take: a request starts whole, then some fields change
BASE = {
    "topic": "T", "consumerGroup": "g", "producerGroup": "pg", "group": "g", "queueId": "0",
    "queueOffset": "0", "maxMsgNums": "32", "sysFlag": "0", "commitOffset": "0",
    "suspendTimeoutMillis": "0", "subscription": "*", "subVersion": "0", "expressionType": "TAG",
    "offset": "0", "commitLogOffset": "0", "tranStateTableOffset": "0",
    "msgId": "7F00000100002A9F0000000000000000", "transactionId": "7F00000100002A9F0000000000000000",
    "key": "k", "maxNum": "32", "beginTimestamp": "0",
    "endTimestamp": "9999999999999", "timestamp": "0", "delayLevel": "0", "maxReconsumeTimes": "16",
    "clientID": "c1", "clientId": "c1", "brokerName": "broker-a", "brokerAddr": "127.0.0.1:1",
    "clusterName": "DefaultCluster", "brokerId": "0", "haServerAddr": "127.0.0.1:2", "compressed": "false",
    "readQueueNums": "4", "writeQueueNums": "4", "perm": "6", "order": "false", "namespace": "ns",
    "value": "v", "statsName": "TOPIC_PUT_NUMS", "statsKey": "T", "isForce": "false",
    "defaultTopic": "TBW102", "defaultTopicQueueNums": "4", "bornTimestamp": "1", "flag": "0",
    "properties": "UNIQ_KEY\x01u1", "reconsumeTimes": "0", "unitMode": "false", "batch": "false",
    "a": "pg", "b": "T", "c": "TBW102", "d": "4", "e": "0", "f": "0", "g": "1", "h": "0",
    "i": "UNIQ_KEY\x01u2", "j": "0", "k": "false", "l": "16", "m": "false",
}  # fmt: skip


@st.composite
def ext_fields(draw: st.DrawFn) -> dict[str, str]:
    """Mostly a whole request with one to three fields changed or dropped; else anything."""
    if draw(st.integers(0, 4)) == 0:
        return draw(st.dictionaries(st.sampled_from(NAMES), VALUES, max_size=8))
    ext = dict(BASE)
    for name in draw(st.lists(st.sampled_from(sorted(BASE)), min_size=1, max_size=3)):
        if draw(st.integers(0, 3)) == 0:
            ext.pop(name, None)
        else:
            ext[name] = draw(VALUES)
    return ext


def _answered(
    client: RawClient,
    caplog: pytest.LogCaptureFixture,
    code: int,
    ext: dict[str, str],
    body: bytes,
    kind: int,
) -> None:
    """``client`` asks, gets an answer, and no handler failed meanwhile."""
    caplog.clear()
    try:
        answer = client.call(code, ext, body, serialize_type=kind)
    except TimeoutError:
        pytest.fail(f"no answer to request {code} with {ext!r} and body {body[:300]!r}")
    assert answer.is_response
    failed = [r for r in caplog.records if r.levelno >= logging.ERROR and "failed" in r.getMessage()]
    assert not failed, f"request {code}, {ext!r}, body {body[:300]!r}: {failed[0].getMessage()}"


# an account that may use topic T and the groups of BASE: under the ACL, requests are signed by it
ACL = """
[[accounts]]
access_key = "ak"
secret_key = "sk12345678"
topics = ["T"]
groups = ["g", "pg", "cg"]
"""


@pytest.mark.parametrize("acl", [False, True], ids=["open", "acl"])
def test_no_request_makes_a_handler_fail(
    start_remoting: StartRemoting, caplog: pytest.LogCaptureFixture, tmp_path: Path, acl: bool
) -> None:
    config = BrokerConfig(long_polling_min_ms=50, long_polling_max_ms=100)
    if acl:
        (tmp_path / "acl.toml").write_text(ACL)
        config = config.replace(acl_file=str(tmp_path / "acl.toml"))
    r = start_remoting(config)
    r.store.create_topic("T", 2)
    endpoint = r.broker.remoting
    doors = [
        (r.port, sorted(endpoint.broker._handlers)),  # type: ignore[attr-defined]
        (r.namesrv_port, sorted(endpoint.namesrv._handlers)),  # type: ignore[attr-defined]
    ]
    clients = [RawClient(port, timeout=15) for port, _ in doors]

    @settings(
        max_examples=200,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
        derandomize=True,
    )
    @given(
        st.integers(0, 1),
        st.data(),
        ext_fields(),
        BODIES,
        st.sampled_from([SERIALIZE_JSON, SERIALIZE_ROCKETMQ]),
    )
    def one(door: int, data: Any, ext: dict[str, str], body: bytes, kind: int) -> None:
        code = data.draw(st.sampled_from(doors[door][1]))
        ask(door, code, {k: v.encode("utf-8", "replace").decode() for k, v in ext.items()}, body, kind)

    def ask(door: int, code: int, ext: dict[str, str], body: bytes, kind: int) -> None:
        if acl:
            ext = {**ext, "AccessKey": "ak"}
            ext["Signature"] = signature("sk12345678", ext, body)
        _answered(clients[door], caplog, code, ext, body, kind)

    with caplog.at_level(logging.ERROR):
        try:
            # every field of every request, one at a time, made each hostile value
            for door, (_, codes) in enumerate(doors):
                for code in codes:
                    for name in sorted(BASE):
                        for value in HOSTILE:
                            ask(door, code, {**BASE, name: value}, b"", SERIALIZE_JSON)
            one()  # and anything, bodies too
        finally:
            for c in clients:
                c.close()


# the JSON bodies the handlers read, whole; the test changes one part of one at a time
HEARTBEAT = {
    "clientID": "10.0.0.1@123#456",
    "consumerDataSet": [
        {
            "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET",
            "consumeType": "CONSUME_PASSIVELY",
            "groupName": "cg",
            "messageModel": "CLUSTERING",
            "subscriptionDataSet": [
                {
                    "classFilterMode": False,
                    "codeSet": [2598919, 2598920],
                    "expressionType": "TAG",
                    "subString": "TagA || TagB",
                    "subVersion": 1700000000000,
                    "tagsSet": ["TagA", "TagB"],
                    "topic": "T",
                }
            ],
            "unitMode": False,
        }
    ],
    "producerDataSet": [{"groupName": "pg"}, {"groupName": "CLIENT_INNER_PRODUCER"}],
}
LOCKS = {
    "consumerGroup": "cg",
    "clientId": "10.0.0.1@123#456",
    "mqSet": [{"topic": "T", "brokerName": "broker-a", "queueId": 0}],
}
CLIENT_CONFIG = {
    "clientId": "10.0.0.1@123#456",
    "group": "cg",
    "subscriptionData": {"topic": "T", "subString": "a > 1", "expressionType": "SQL92", "subVersion": 1},
}
TOPIC_TABLE = {
    "filterServerList": [],
    "topicConfigSerializeWrapper": {
        "dataVersion": {"counter": 0, "timestamp": 1700000000000},
        "topicConfigTable": {
            "T": {
                "order": False, "perm": 7, "readQueueNums": 8, "topicFilterType": "SINGLE_TAG",
                "topicName": "T", "topicSysFlag": 0, "writeQueueNums": 8,
            }
        },
    },
}  # fmt: skip
REGISTER = {
    "brokerName": "broker-b", "brokerAddr": "127.0.0.1:9", "clusterName": "DefaultCluster",
    "haServerAddr": "127.0.0.1:10", "brokerId": "0", "compressed": "false", "bodyCrc32": "0",
}  # fmt: skip
BROKER_BODIES = {34: HEARTBEAT, 41: LOCKS, 42: LOCKS, 46: CLIENT_CONFIG}
NAMESRV_BODIES = {103: TOPIC_TABLE, 322: {"counter": 1, "timestamp": 1700000000000}}
LEAVES = st.one_of(
    st.none(),
    st.booleans(),
    st.sampled_from([-1, 0, 2**31, 2**63, -(2**63) - 1, 10**30, 1.5, 1e308, float("inf"), float("nan")]),
    VALUES,
    st.lists(VALUES, max_size=3),
    st.dictionaries(VALUES, VALUES, max_size=2),
)


def _paths(doc: Any, at: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every place in ``doc``: the root, each member and each element, depth first."""
    out = [at]
    if isinstance(doc, dict):
        for key, value in doc.items():
            out += _paths(value, (*at, key))
    elif isinstance(doc, list):
        for i, value in enumerate(doc):
            out += _paths(value, (*at, i))
    return out


@st.composite
def changed(draw: st.DrawFn, doc: Any) -> Any:
    """``doc`` with one place replaced by something hostile, or removed, or repeated 1,000 times."""
    doc = json.loads(json.dumps(doc))
    path = draw(st.sampled_from(_paths(doc)))
    if not path:
        return draw(LEAVES)
    parent = doc
    for step in path[:-1]:
        parent = parent[step]
    how = draw(st.integers(0, 5))
    if how == 0:
        del parent[path[-1]]
    elif how == 1 and isinstance(parent, list):
        parent[:] = parent * 1000
    else:
        parent[path[-1]] = draw(LEAVES)
    return doc


def test_no_body_makes_a_handler_fail(
    start_remoting: StartRemoting, caplog: pytest.LogCaptureFixture
) -> None:
    """The JSON bodies the broker and the name server read, each part of each made hostile."""
    r = start_remoting()
    r.store.create_topic("T", 2)
    doors = [(r.port, BROKER_BODIES, {}), (r.namesrv_port, NAMESRV_BODIES, REGISTER)]
    clients = [RawClient(port, timeout=15) for port, _, _ in doors]

    @settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
    @given(st.integers(0, 1), st.data())
    def one(door: int, data: Any) -> None:
        bodies, ext = doors[door][1], doors[door][2]
        code = data.draw(st.sampled_from(sorted(bodies)))
        doc = data.draw(changed(bodies[code]))
        body = json.dumps(doc, allow_nan=True).encode()
        _answered(clients[door], caplog, code, ext, body, SERIALIZE_JSON)

    with caplog.at_level(logging.ERROR):
        try:
            one()
        finally:
            for c in clients:
                c.close()
