"""The registration codec: REGISTER_BROKER (both body forms, the checksum), its result,
QUERY_DATA_VERSION and UNREGISTER_BROKER, against the bytes RocketMQ 4.9.8 sends (CLUSTER.md §2)."""

from __future__ import annotations

import json
import struct
import zlib

import pytest

from rocketstore.broker.remoting import registration as reg
from rocketstore.broker.remoting.codes import RequestCode
from rocketstore.broker.remoting.command import (
    MAX_FRAME_SIZE,
    RemotingCommand,
    decode_command,
    encode_command,
)
from rocketstore.broker.remoting.refusal import RequestRefused
from rocketstore.broker.routes import DataVersion
from rocketstore.codec.config_json import TopicConfig
from rocketstore.errors import CorruptDataError

BROKER = reg.BrokerIdentity("DefaultCluster", "broker-a", "127.0.0.1:32911", 0)
TOPICS = {
    "TBW102": TopicConfig("TBW102", 8, 8, 7),
    "Orders": TopicConfig("Orders", 4, 2, 6, order=True, sys_flag=1),
    "SCHEDULE_TOPIC_XXXX": TopicConfig("SCHEDULE_TOPIC_XXXX", 18, 18, 6),
}


def wire(cmd: RemotingCommand) -> RemotingCommand:
    frame = b"".join(bytes(b) for b in encode_command(cmd))
    cmd = decode_command(frame[4:])
    cmd.body = bytes(cmd.body)
    return cmd


VERSION = DataVersion(1795847690157, 3)


def request(version: DataVersion = VERSION) -> reg.RegisterBrokerRequest:
    return reg.RegisterBrokerRequest(BROKER, "127.0.0.1:32912", version, TOPICS)


def test_uncompressed_round_trip_and_header() -> None:
    cmd = wire(reg.encode_register_broker(request()))
    assert cmd.code == RequestCode.REGISTER_BROKER
    assert cmd.ext_fields == {
        "brokerName": "broker-a",
        "brokerAddr": "127.0.0.1:32911",
        "clusterName": "DefaultCluster",
        "brokerId": "0",
        "haServerAddr": "127.0.0.1:32912",
        "compressed": "false",
        "bodyCrc32": str(zlib.crc32(cmd.body) & 0x7FFFFFFF),
    }
    body = json.loads(cmd.body)
    assert body["filterServerList"] == []
    wrapper = body["topicConfigSerializeWrapper"]
    assert wrapper["dataVersion"] == {"counter": 3, "timestamp": 1795847690157}
    assert wrapper["topicConfigTable"]["Orders"] == {
        "order": True,
        "perm": 6,
        "readQueueNums": 4,
        "topicFilterType": "SINGLE_TAG",
        "topicName": "Orders",
        "topicSysFlag": 1,
        "writeQueueNums": 2,
    }
    assert reg.decode_register_broker(cmd) == request()


def test_compressed_round_trip_drops_sys_flag_and_order() -> None:
    cmd = wire(reg.encode_register_broker(request(), compressed=True))
    assert cmd.ext_fields["compressed"] == "true"
    assert bytes(cmd.body[:2]) == b"\x78\xda"  # Deflater.BEST_COMPRESSION
    decoded = reg.decode_register_broker(cmd)
    assert decoded.version == DataVersion(1795847690157, 3)
    assert decoded.topics["Orders"] == TopicConfig("Orders", 4, 2, 6)  # order, sysFlag: not in this form
    assert decoded.topics["TBW102"] == TOPICS["TBW102"]


def test_decodes_a_body_compressed_as_rocketmq_4_9_8_writes_it() -> None:
    # RegisterBrokerBody.encode(true) of a slave (CLUSTER.md §2.3, verified on the wire)
    def sized(data: bytes) -> bytes:
        return struct.pack(">i", len(data)) + data

    plain = (
        sized(b'{"counter":0,"timestamp":1795847690157}')
        + struct.pack(">i", 2)
        + sized(b"SCHEDULE_TOPIC_XXXX 18 18 6 SINGLE_TAG")
        + sized(b"broker-a 1 1 7 SINGLE_TAG")
        + sized(b"[]")
    )
    body = zlib.compress(plain, 9)
    version, topics, servers = reg.decode_register_body(body, compressed=True)
    assert version == DataVersion(1795847690157, 0)
    assert topics == {
        "SCHEDULE_TOPIC_XXXX": TopicConfig("SCHEDULE_TOPIC_XXXX", 18, 18, 6),
        "broker-a": TopicConfig("broker-a", 1, 1, 7),
    }
    assert servers == []


def test_decodes_rocketmq_4_9_8_uncompressed_body_and_verified_header() -> None:
    body = (
        b'{"filterServerList":[],"topicConfigSerializeWrapper":{"dataVersion":{"counter":0,'
        b'"timestamp":1795847690157},"topicConfigTable":{"TBW102":{"order":false,"perm":7,'
        b'"readQueueNums":8,"topicFilterType":"SINGLE_TAG","topicName":"TBW102","topicSysFlag":0,'
        b'"writeQueueNums":8}}}}'
    )
    header = {
        "brokerId": "0",
        "bodyCrc32": str(zlib.crc32(body) & 0x7FFFFFFF),
        "clusterName": "DefaultCluster",
        "brokerAddr": "127.0.0.1:32911",
        "haServerAddr": "127.0.0.1:32912",
        "compressed": "false",
        "brokerName": "broker-a",
    }
    decoded = reg.decode_register_broker(RemotingCommand(code=103, ext_fields=header, body=body))
    assert decoded.broker == BROKER
    assert decoded.ha_server_addr == "127.0.0.1:32912"
    assert decoded.topics == {"TBW102": TopicConfig("TBW102", 8, 8, 7)}


def test_bad_checksum_and_bad_bodies_are_named() -> None:
    cmd = reg.encode_register_broker(request())
    cmd.ext_fields["bodyCrc32"] = "12345"
    with pytest.raises(reg.BodyChecksumError, match="crc32 not match"):
        reg.decode_register_broker(cmd)
    cmd.ext_fields["bodyCrc32"] = "0"  # unchecked
    assert reg.decode_register_broker(cmd).topics == TOPICS
    with pytest.raises(CorruptDataError, match="not a zlib stream"):
        reg.decode_register_body(b"nope", compressed=True)
    truncated = zlib.compress(struct.pack(">i", 100) + b"{}", 9)
    with pytest.raises(CorruptDataError, match="runs past the end"):
        reg.decode_register_body(truncated, compressed=True)
    bad_topic = zlib.compress(
        struct.pack(">i", 2) + b"{}" + struct.pack(">i", 1) + struct.pack(">i", 3) + b"a b", 9
    )
    with pytest.raises(CorruptDataError, match="is not 'name read write perm filter'"):
        reg.decode_register_body(bad_topic, compressed=True)
    for entry in ("a ² 1 6 SINGLE_TAG", "a 1 ٣ 6 SINGLE_TAG", f"a {'1' * 5000} 1 6 SINGLE_TAG"):
        raw = entry.encode()
        odd = zlib.compress(
            struct.pack(">i", 2) + b"{}" + struct.pack(">i", 1) + struct.pack(">i", len(raw)) + raw, 9
        )
        with pytest.raises(CorruptDataError, match="is not 'name read write perm filter'"):
            reg.decode_register_body(odd, compressed=True)
    for servers in (b"[1,", b"\xff[]", b"[" * 100_000, b"[" + b"9" * 5000 + b"]"):
        raw = b"a 1 1 6 SINGLE_TAG"
        odd = zlib.compress(
            struct.pack(">i", 2) + b"{}" + struct.pack(">i", 1) + struct.pack(">i", len(raw)) + raw
            + struct.pack(">i", len(servers)) + servers,
            9,
        )  # fmt: skip
        with pytest.raises(CorruptDataError, match="filterServerList is not valid JSON"):
            reg.decode_register_body(odd, compressed=True)
    with pytest.raises(CorruptDataError, match="topicConfigTable must be an object"):
        reg.decode_register_body(b'{"topicConfigSerializeWrapper":{"topicConfigTable":[]}}', compressed=False)
    with pytest.raises(RequestRefused, match="clusterName is null"):
        reg.decode_register_broker(RemotingCommand(code=103, ext_fields={"brokerAddr": "x"}))


def test_old_clients_send_the_bare_wrapper_and_an_empty_body_registers_no_topics() -> None:
    wrapper = b'{"dataVersion":{"counter":2,"timestamp":5},"topicConfigTable":{}}'
    cmd = reg.encode_register_broker(request())
    cmd.body, cmd.version = wrapper, 34
    del cmd.ext_fields["bodyCrc32"]
    assert reg.decode_register_broker(cmd).version == DataVersion(5, 2)
    cmd.body = b""
    empty = reg.decode_register_broker(cmd)
    assert (empty.version, empty.topics) == (DataVersion(), {})


def test_register_result_round_trip() -> None:
    req = reg.encode_register_broker(request())
    req.opaque = 7
    master = wire(reg.encode_register_result(req, reg.RegisterBrokerResult()))
    assert (master.opaque, master.ext_fields, bytes(master.body)) == (7, {}, b"")
    assert reg.decode_register_result(master) == reg.RegisterBrokerResult()
    result = reg.RegisterBrokerResult("127.0.0.1:32911", "127.0.0.1:32912", {"Orders": "broker-a:4"})
    slave = wire(reg.encode_register_result(req, result))
    assert slave.ext_fields == {"masterAddr": "127.0.0.1:32911", "haServerAddr": "127.0.0.1:32912"}
    assert json.loads(slave.body) == {"table": {"Orders": "broker-a:4"}}
    assert reg.decode_register_result(slave) == result


def test_query_data_version_and_unregister() -> None:
    query = wire(reg.encode_query_data_version(BROKER, DataVersion(1795847694564, 1)))
    assert query.code == RequestCode.QUERY_DATA_VERSION
    assert bytes(query.body) == b'{"counter":1,"timestamp":1795847694564}'
    assert reg.BrokerIdentity.from_ext(query.ext_fields) == BROKER
    assert reg.decode_data_version(query.body) == DataVersion(1795847694564, 1)
    gone = wire(reg.encode_unregister_broker(BROKER))
    assert gone.code == RequestCode.UNREGISTER_BROKER
    assert gone.ext_fields == {
        "brokerName": "broker-a",
        "brokerAddr": "127.0.0.1:32911",
        "clusterName": "DefaultCluster",
        "brokerId": "0",
    }
    assert not gone.body


def test_a_body_inflating_past_one_frame_is_refused() -> None:
    assert reg.MAX_BODY_BYTES == MAX_FRAME_SIZE  # no more than an uncompressed body may be
    bomb = zlib.compress(b"\0" * (reg.MAX_BODY_BYTES + 1), 9)
    assert len(bomb) < 64 * 1024
    with pytest.raises(CorruptDataError, match=f"inflates to more than {reg.MAX_BODY_BYTES} bytes"):
        reg.decode_register_body(bomb, compressed=True)


@pytest.mark.parametrize("compressed", [False, True])
def test_topics_past_the_limit_of_a_registration_are_refused(
    compressed: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(reg, "MAX_REGISTER_TOPICS", 2)
    body = reg.encode_register_body(VERSION, TOPICS, compressed=compressed)
    with pytest.raises(CorruptDataError, match="3 topics, over the limit of 2 a registration"):
        reg.decode_register_body(body, compressed=compressed)
    two = {name: TOPICS[name] for name in ("TBW102", "Orders")}
    body = reg.encode_register_body(VERSION, two, compressed=compressed)
    assert set(reg.decode_register_body(body, compressed=compressed)[1]) == set(two)
