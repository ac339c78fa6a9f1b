"""Brokers registering with name servers, on the wire (CLUSTER.md §2): the one module that
writes and reads REGISTER_BROKER (103), its body and result, QUERY_DATA_VERSION (322) and
UNREGISTER_BROKER (104), for both sides (the broker's registration service, the name server).

REGISTER_BROKER header (extFields, all text): ``brokerName``, ``brokerAddr`` (brokerIP1:listenPort),
``clusterName``, ``haServerAddr`` (brokerIP2:haListenPort), ``brokerId`` ("0" master), ``compressed``
("true"/"false") and ``bodyCrc32`` = CRC32(body as sent) & 0x7FFFFFFF (0 or absent: unchecked).

Body, uncompressed (RegisterBrokerBody, fastjson)::

    {"filterServerList":[],"topicConfigSerializeWrapper":{"dataVersion":{"counter":N,"timestamp":T},
     "topicConfigTable":{name: TopicConfig JSON, ...}}}

A request older than V3_0_11 (version < 35) carries the bare TopicConfigSerializeWrapper.

Body, compressed: a zlib stream (level 9, header ``78 DA``) of, big-endian::

    int32 len, DataVersion JSON
    int32 topicCount
      per topic: int32 len, "name readQueueNums writeQueueNums perm SINGLE_TAG" (UTF-8)
    int32 len, filterServerList JSON

``topicSysFlag`` and ``order`` are not in that form (read back as 0 / false).

Result: SUCCESS, header {``haServerAddr``, ``masterAddr``} (a slave's master, absent for a master),
body the KV table ``{"table":{...}}`` of namespace ORDER_TOPIC_CONFIG, absent when empty.

QUERY_DATA_VERSION: header {brokerName, brokerAddr, clusterName, brokerId}, body the DataVersion
JSON; answer header ``changed`` ("true"/"false"), body the version the name server holds (absent
when none). UNREGISTER_BROKER: the same header, no body.

Malformed input is a ``CorruptDataError`` naming what was wrong; ``BodyChecksumError`` when the
checksum does not match (the name server answers SYSTEM_ERROR ``crc32 not match``).
"""

from __future__ import annotations

import json
import re
import struct
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from rocketstore.broker.remoting.codes import RequestCode
from rocketstore.broker.remoting.command import FLAG_ONEWAY, MAX_FRAME_SIZE, RemotingCommand
from rocketstore.broker.remoting.headers import flag, number, optional_number, text, to_ext
from rocketstore.broker.routes import DataVersion
from rocketstore.codec.config_json import TopicConfig, decode_json, decode_topic_table
from rocketstore.codec.json_body import json_body
from rocketstore.errors import CorruptDataError

__all__ = [
    "MAX_REGISTER_TOPICS",
    "BodyChecksumError",
    "BrokerIdentity",
    "RegisterBrokerRequest",
    "RegisterBrokerResult",
    "body_crc32",
    "decode_data_version",
    "decode_register_body",
    "decode_register_broker",
    "decode_register_result",
    "encode_data_version",
    "encode_query_data_version",
    "encode_register_body",
    "encode_register_broker",
    "encode_register_result",
    "encode_unregister_broker",
]

# MQVersion.Version.V3_0_11: from it on the body is a RegisterBrokerBody
V3_0_11: Final = 35
# a compressed body inflates to at most what an uncompressed one may be: one frame
MAX_BODY_BYTES: Final = MAX_FRAME_SIZE
# topics one registration may carry (RocketMQ has no bound; its brokers hold up to tens of
# thousands, and a table past this one would not fit a frame as JSON, ~150 B a topic)
MAX_REGISTER_TOPICS: Final = 100_000
_I32 = struct.Struct(">i")
# a compressed body's queue count or permission: ASCII digits within a Java int (Integer.parseInt)
_QUEUE_NUMBER: Final = re.compile(r"[0-9]{1,9}", re.ASCII)


class BodyChecksumError(CorruptDataError):
    """The body's CRC32 is not the header's ``bodyCrc32``."""


def body_crc32(body: bytes | bytearray | memoryview) -> int:
    """UtilAll.crc32: CRC32 masked to a non-negative Java int."""
    return zlib.crc32(body) & 0x7FFFFFFF


@dataclass(frozen=True, slots=True)
class BrokerIdentity:
    """Who a broker is in a cluster: the fields every one of these requests carries."""

    cluster_name: str
    broker_name: str
    broker_addr: str
    broker_id: int = 0

    def to_ext(self) -> dict[str, str]:
        return to_ext(
            brokerName=self.broker_name,
            brokerAddr=self.broker_addr,
            clusterName=self.cluster_name,
            brokerId=self.broker_id,
        )

    @classmethod
    def from_ext(cls, ext: Mapping[str, str]) -> BrokerIdentity:
        return cls(
            text(ext, "clusterName"),
            text(ext, "brokerName"),
            text(ext, "brokerAddr"),
            number(ext, "brokerId"),
        )


@dataclass(frozen=True, slots=True)
class RegisterBrokerRequest:
    broker: BrokerIdentity
    ha_server_addr: str
    version: DataVersion
    topics: dict[str, TopicConfig]
    filter_servers: list[str] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class RegisterBrokerResult:
    master_addr: str | None = None
    ha_server_addr: str | None = None
    kv_table: dict[str, str] = field(default_factory=dict)


# --- REGISTER_BROKER ------------------------------------------------------------------------
def encode_register_body(
    version: DataVersion,
    topics: Mapping[str, TopicConfig],
    filter_servers: list[str] | None = None,
    *,
    compressed: bool = False,
) -> bytes:
    servers = filter_servers or []
    if not compressed:
        doc = {
            "filterServerList": servers,
            "topicConfigSerializeWrapper": {
                "dataVersion": version.to_json(),
                "topicConfigTable": {name: topics[name].to_json() for name in sorted(topics)},
            },
        }
        return json_body(doc)
    parts = [_sized(json_body(version.to_json())), _I32.pack(len(topics))]
    for name in sorted(topics):
        t = topics[name]
        parts.append(_sized(f"{name} {t.read_queues} {t.write_queues} {t.perm} {t.filter_type}".encode()))
    parts.append(_sized(json_body(servers)))
    return zlib.compress(b"".join(parts), 9)


def decode_register_body(
    body: bytes | bytearray | memoryview, *, compressed: bool, wrapper_only: bool = False
) -> tuple[DataVersion, dict[str, TopicConfig], list[str]]:
    """(version, topics, filter servers) of a REGISTER_BROKER body; an empty body is version 0
    with no topics (RocketMQ registers such a broker)."""
    if not len(body):
        return DataVersion(), {}, []
    if compressed:
        return _decode_compressed(bytes(body))
    doc = decode_json(bytes(body).decode("utf-8", errors="replace"), "REGISTER_BROKER body")
    if wrapper_only:
        wrapper: Any = doc
        servers: Any = []
    else:
        wrapper = doc.get("topicConfigSerializeWrapper")
        wrapper = {} if wrapper is None else wrapper
        servers = doc.get("filterServerList")
        servers = [] if servers is None else servers
    if not isinstance(wrapper, dict) or not isinstance(servers, list):
        raise CorruptDataError("REGISTER_BROKER body: topicConfigSerializeWrapper must be an object")
    table = wrapper.get("topicConfigTable")
    table = {} if table is None else table
    if not isinstance(table, dict):
        raise CorruptDataError("REGISTER_BROKER body: topicConfigTable must be an object")
    _check_topic_count(len(table), "REGISTER_BROKER body")
    version = _version(wrapper.get("dataVersion"), "REGISTER_BROKER body")
    return version, decode_topic_table(table, "REGISTER_BROKER body"), [str(s) for s in servers]


def _decode_compressed(body: bytes) -> tuple[DataVersion, dict[str, TopicConfig], list[str]]:
    what = "REGISTER_BROKER compressed body"
    inflater = zlib.decompressobj()
    try:
        data = inflater.decompress(body, MAX_BODY_BYTES)
    except zlib.error as exc:
        raise CorruptDataError(f"{what}: not a zlib stream: {exc}") from None
    if inflater.unconsumed_tail:
        raise CorruptDataError(f"{what}: inflates to more than {MAX_BODY_BYTES} bytes")
    view = memoryview(data)
    pos = 0

    def chunk() -> bytes:
        nonlocal pos
        if pos + 4 > len(view):
            raise CorruptDataError(f"{what}: ends at byte {pos} where a length was due")
        (n,) = _I32.unpack_from(view, pos)
        if n < 0 or pos + 4 + n > len(view):
            raise CorruptDataError(f"{what}: length {n} at byte {pos} runs past the end ({len(view)})")
        pos += 4 + n
        return bytes(view[pos - n : pos])

    version = _version(decode_json(chunk().decode("utf-8", errors="replace"), what), what)
    if pos + 4 > len(view):
        raise CorruptDataError(f"{what}: no topic count")
    (count,) = _I32.unpack_from(view, pos)
    pos += 4
    if count < 0 or count * 4 > len(view) - pos:
        raise CorruptDataError(f"{what}: topic count {count} does not fit the body")
    _check_topic_count(count, what)
    topics: dict[str, TopicConfig] = {}
    for _ in range(count):
        fields = chunk().decode("utf-8", errors="replace").split(" ")
        if len(fields) != 5 or not all(_QUEUE_NUMBER.fullmatch(f) for f in fields[1:4]):
            raise CorruptDataError(
                f"{what}: topic entry {' '.join(fields)!r} is not 'name read write perm filter'"
            )
        name, read, write, perm, filter_type = fields
        topics[name] = TopicConfig(name, int(read), int(write), int(perm), filter_type=filter_type)
    try:
        servers = json.loads(chunk().decode("utf-8", errors="replace") or "[]")
    except (ValueError, RecursionError) as exc:  # not JSON, a number of too many digits, deep nesting
        raise CorruptDataError(f"{what}: filterServerList is not valid JSON: {exc}") from None
    if not isinstance(servers, list):
        raise CorruptDataError(f"{what}: filterServerList must be a JSON array")
    return version, topics, [str(s) for s in servers]


def encode_register_broker(
    request: RegisterBrokerRequest, *, compressed: bool = False, oneway: bool = False
) -> RemotingCommand:
    body = encode_register_body(
        request.version, request.topics, request.filter_servers, compressed=compressed
    )
    ext = request.broker.to_ext()
    ext.update(to_ext(haServerAddr=request.ha_server_addr, compressed=compressed, bodyCrc32=body_crc32(body)))
    return RemotingCommand(
        code=RequestCode.REGISTER_BROKER, ext_fields=ext, body=body, flag=FLAG_ONEWAY if oneway else 0
    )


def decode_register_broker(cmd: RemotingCommand) -> RegisterBrokerRequest:
    """The request of a REGISTER_BROKER command (header fields missing: RequestRefused)."""
    ext = cmd.ext_fields
    broker = BrokerIdentity.from_ext(ext)
    ha_server_addr = text(ext, "haServerAddr")
    crc = optional_number(ext, "bodyCrc32") or 0
    if crc and crc != body_crc32(cmd.body):
        raise BodyChecksumError("crc32 not match")
    compressed = "compressed" in ext and flag(ext, "compressed")
    version, topics, servers = decode_register_body(
        cmd.body, compressed=compressed, wrapper_only=cmd.version < V3_0_11
    )
    return RegisterBrokerRequest(broker, ha_server_addr, version, topics, servers)


def encode_register_result(cmd: RemotingCommand, result: RegisterBrokerResult) -> RemotingCommand:
    """The answer to ``cmd`` (a REGISTER_BROKER)."""
    ext: dict[str, str] = {}
    if result.master_addr is not None:
        ext["masterAddr"] = result.master_addr
    if result.ha_server_addr is not None:
        ext["haServerAddr"] = result.ha_server_addr
    body = json_body({"table": result.kv_table}) if result.kv_table else b""
    return cmd.response(ext_fields=ext, body=body)


def decode_register_result(response: RemotingCommand) -> RegisterBrokerResult:
    ext = response.ext_fields
    kv: dict[str, str] = {}
    if len(response.body):
        table = decode_json(
            bytes(response.body).decode("utf-8", errors="replace"), "RegisterBrokerResult"
        ).get("table")
        if isinstance(table, dict):
            kv = {str(k): str(v) for k, v in table.items()}
    return RegisterBrokerResult(ext.get("masterAddr") or None, ext.get("haServerAddr") or None, kv)


# --- QUERY_DATA_VERSION, UNREGISTER_BROKER ----------------------------------------------------
def encode_data_version(version: DataVersion) -> bytes:
    return json_body(version.to_json())


def decode_data_version(body: bytes | bytearray | memoryview, what: str = "DataVersion") -> DataVersion:
    return _version(decode_json(bytes(body).decode("utf-8", errors="replace"), what), what)


def encode_query_data_version(broker: BrokerIdentity, version: DataVersion) -> RemotingCommand:
    return RemotingCommand(
        code=RequestCode.QUERY_DATA_VERSION, ext_fields=broker.to_ext(), body=encode_data_version(version)
    )


def encode_unregister_broker(broker: BrokerIdentity) -> RemotingCommand:
    return RemotingCommand(code=RequestCode.UNREGISTER_BROKER, ext_fields=broker.to_ext())


# --- helpers ------------------------------------------------------------------------------------
def _check_topic_count(count: int, what: str) -> None:
    if count > MAX_REGISTER_TOPICS:
        raise CorruptDataError(
            f"{what}: {count} topics, over the limit of {MAX_REGISTER_TOPICS} a registration"
        )


def _sized(data: bytes) -> bytes:
    return _I32.pack(len(data)) + data


def _version(raw: object, what: str) -> DataVersion:
    if raw is None:
        return DataVersion()
    if not isinstance(raw, dict):
        raise CorruptDataError(f"{what}: dataVersion must be an object, not {raw!r:.80}")
    values = []
    for key in ("timestamp", "counter"):
        value = raw.get(key, 0)
        if isinstance(value, bool) or not isinstance(value, int):
            raise CorruptDataError(f"{what}: dataVersion.{key} must be an integer, not {value!r:.80}")
        values.append(value)
    return DataVersion(values[0], values[1])
