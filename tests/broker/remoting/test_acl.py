"""RocketMQ 4.9's plain ACL over remoting: signatures as the Java client computes them, and the
topics and groups each request names against the broker's ACL file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rocketstore.broker import BrokerConfig
from rocketstore.broker.auth import Acl
from rocketstore.broker.remoting.acl import RemotingAcl, signature
from rocketstore.broker.remoting.codes import RequestCode, ResponseCode
from rocketstore.broker.remoting.command import RemotingCommand
from rocketstore.broker.remoting.refusal import RequestRefused

from .client import RawClient
from .conftest import StartRemoting
from .test_producer import header

ACL = """
[[accounts]]
access_key = "RocketMQ"
secret_key = "12345678"
topics = ["Allowed"]
groups = ["cg"]

[[accounts]]
access_key = "rocketmq2"
secret_key = "12345678"
topics = ["*"]
groups = ["*"]
admin = true
"""


def test_signature_matches_the_java_client() -> None:
    # REMOTING.md §10.1, verified with the 4.9.8 jars
    ext = {"topic": "T", "queueId": "0", "bname": "broker-a", "AccessKey": "RocketMQ"}
    assert signature("12345678", ext, b"") == "Fu+r3SPhMRuWFd3kugXrKaV5ABg="
    # an existing Signature is not part of the content
    assert signature("12345678", {**ext, "Signature": "old"}, b"") == "Fu+r3SPhMRuWFd3kugXrKaV5ABg="


def signed(
    ext: dict[str, str], body: bytes = b"", ak: str = "RocketMQ", sk: str = "12345678"
) -> dict[str, str]:
    out = {**ext, "AccessKey": ak}
    out["Signature"] = signature(sk, out, body)
    return out


def test_requests_are_checked_against_the_acl_file(start_remoting: StartRemoting, tmp_path: Path) -> None:
    acl = tmp_path / "acl.toml"
    acl.write_text(ACL)
    r = start_remoting(BrokerConfig(acl_file=str(acl)))
    body = b"payload"
    with RawClient(r.port) as c:
        ext = header("Allowed", {"UNIQ_KEY": "A1"}).to_ext()
        unsigned = c.call(RequestCode.SEND_MESSAGE_V2, ext, body)
        assert unsigned.code == ResponseCode.SYSTEM_ERROR
        assert unsigned.remark == "org.apache.rocketmq.acl.common.AclException: No accessKey is configured"
        ok = c.call(RequestCode.SEND_MESSAGE_V2, signed(ext, body), body)
        assert ok.code == ResponseCode.SUCCESS, ok.remark
        tampered = c.call(RequestCode.SEND_MESSAGE_V2, signed(ext, body), body + b"!")
        assert "Check signature failed for accessKey=RocketMQ" in (tampered.remark or "")
        unknown = c.call(RequestCode.SEND_MESSAGE_V2, signed(ext, body, ak="nobody"), body)
        assert "No acl config for nobody" in (unknown.remark or "")
        other = header("Other", {"UNIQ_KEY": "O1"}).to_ext()
        denied = c.call(RequestCode.SEND_MESSAGE_V2, signed(other, body), body)
        assert denied.code == ResponseCode.SYSTEM_ERROR and "No permission for topic=Other" in (
            denied.remark or ""
        )
        assert c.call(RequestCode.SEND_MESSAGE_V2, signed(other, body, ak="rocketmq2"), body).code == 0
        # heartbeats name their consumer groups and subscribed topics
        beat = {
            "clientID": "c1",
            "consumerDataSet": [
                {"groupName": "other-group", "subscriptionDataSet": [{"topic": "Allowed", "subString": "*"}]}
            ],
            "producerDataSet": [],
        }
        raw = json.dumps(beat).encode()
        refused = c.call(RequestCode.HEART_BEAT, signed({}, raw), raw)
        assert "No permission for group=other-group" in (refused.remark or "")
        beat["consumerDataSet"][0]["groupName"] = "cg"  # type: ignore[index]
        raw = json.dumps(beat).encode()
        assert c.call(RequestCode.HEART_BEAT, signed({}, raw), raw).code == 0
    with RawClient(r.namesrv_port) as ns:  # the name server checks nothing
        assert ns.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "Allowed"}).code == 0


def test_unique_key_query_signed_either_way(tmp_path: Path) -> None:
    # the 4.9.8 client signs _UNIQUE_KEY_QUERY, which RocketMQ's broker leaves out: both pass
    acl = tmp_path / "acl.toml"
    acl.write_text(ACL)
    check = RemotingAcl(Acl.from_file(acl), lambda topic: False).check
    query = {"topic": "Allowed", "key": "k", "maxNum": "32", "beginTimestamp": "0", "endTimestamp": "1"}
    client_way = signed({**query, "_UNIQUE_KEY_QUERY": "false"})
    broker_way = {**query, "_UNIQUE_KEY_QUERY": "false", "AccessKey": "RocketMQ"}
    broker_way["Signature"] = signature("12345678", broker_way, b"", skip=("_UNIQUE_KEY_QUERY",))
    for ext in (client_way, broker_way):
        assert check(RemotingCommand(code=RequestCode.QUERY_MESSAGE, ext_fields=ext)).access_key == "RocketMQ"
    with pytest.raises(RequestRefused, match="No permission for topic=Secret"):
        check(
            RemotingCommand(code=RequestCode.QUERY_MESSAGE, ext_fields=signed({**query, "topic": "Secret"}))
        )
    admin_only = RemotingCommand(
        code=RequestCode.UPDATE_AND_CREATE_TOPIC, ext_fields=signed({"topic": "Allowed"})
    )
    with pytest.raises(RequestRefused, match="Need admin permission"):
        check(admin_only)
    admin = RemotingCommand(
        code=RequestCode.UPDATE_AND_CREATE_TOPIC, ext_fields=signed({"topic": "X"}, ak="rocketmq2")
    )
    assert check(admin).admin
