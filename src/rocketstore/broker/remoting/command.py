"""RocketMQ's RemotingCommand on the wire: the only module that packs or unpacks a frame.

Frame (big-endian, REMOTING.md §1.2)::

    4   L = 4 + H + B                     length of everything after this field
    4   (serialize type << 24) | H        type 0 = JSON, 1 = ROCKETMQ (binary)
    H   header
    B   body (may be empty)

JSON header (§1.3): ``{"code","extFields","flag","language","opaque","remark",
"serializeTypeCurrentRPC","version"}`` read as leniently as fastjson reads it (unknown keys
ignored, numbers and booleans in ``extFields`` taken as their text, a quoted ``code``).
ROCKETMQ header (§1.4): code int16, language int8, version int16, opaque int32, flag int32,
remark (int32 length + UTF-8), extFields (int32 total length, then int16 key length + key +
int32 value length + value per entry); an empty string there means absent, as in Java.

Flag bit 0 marks a response, bit 1 a oneway request. A frame that breaks any of this is a
``CorruptDataError``: the connection it came on is closed (the reader's decision, not this
module's).
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass, field
from typing import Final

from rocketstore.broker.remoting.codes import LANGUAGES, VERSION
from rocketstore.errors import CorruptDataError

__all__ = [
    "FLAG_ONEWAY",
    "FLAG_RESPONSE",
    "MAX_FRAME_SIZE",
    "SERIALIZE_JSON",
    "SERIALIZE_ROCKETMQ",
    "RemotingCommand",
    "decode_command",
    "encode_command",
    "frame_length",
]

FLAG_RESPONSE: Final = 0x1
FLAG_ONEWAY: Final = 0x2
SERIALIZE_JSON: Final = 0
SERIALIZE_ROCKETMQ: Final = 1
# Netty's LengthFieldBasedFrameDecoder bound in RocketMQ (com.rocketmq.remoting.frameMaxLength)
MAX_FRAME_SIZE: Final = 16 * 1024 * 1024

_LENGTH = struct.Struct(">i")
_PREFIX = struct.Struct(">ii")
_BINARY_FIXED = struct.Struct(">hbhii")  # code, language, version, opaque, flag
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_LANGUAGE_CODES: Final = {name: code for code, name in enumerate(LANGUAGES)}


@dataclass(slots=True)
class RemotingCommand:
    """One request or response. ``ext_fields`` is the custom header (all values text);
    ``serialize_type`` is the header encoding it came in (a response is written in its
    request's). ``body`` may be any bytes-like object: it is written without a copy."""

    code: int
    opaque: int = 0
    flag: int = 0
    ext_fields: dict[str, str] = field(default_factory=dict)
    remark: str | None = None
    body: bytes | bytearray | memoryview = b""
    language: str = "JAVA"
    version: int = VERSION
    serialize_type: int = SERIALIZE_JSON

    @property
    def is_response(self) -> bool:
        return bool(self.flag & FLAG_RESPONSE)

    @property
    def is_oneway(self) -> bool:
        return bool(self.flag & FLAG_ONEWAY)

    def response(
        self,
        code: int = 0,
        remark: str | None = None,
        ext_fields: dict[str, str] | None = None,
        body: bytes | bytearray | memoryview = b"",
    ) -> RemotingCommand:
        """The response to this request: its opaque, the response flag, its header encoding."""
        return RemotingCommand(
            code=int(code),
            opaque=self.opaque,
            flag=FLAG_RESPONSE,
            ext_fields=ext_fields if ext_fields is not None else {},
            remark=remark,
            body=body,
            serialize_type=self.serialize_type,
        )


def frame_length(prefix: bytes, max_frame: int = MAX_FRAME_SIZE) -> int:
    """The length field of a frame (its first 4 bytes): how many bytes follow it."""
    length: int = _LENGTH.unpack(prefix)[0]
    if length < 4 or length > max_frame:
        raise CorruptDataError(f"frame length {length} is outside 4..{max_frame}")
    return length


def encode_command(cmd: RemotingCommand) -> list[bytes | bytearray | memoryview]:
    """The frame of ``cmd`` as buffers to write in order (the body is not copied)."""
    if cmd.serialize_type == SERIALIZE_ROCKETMQ:
        header = _encode_binary(cmd)
    else:
        header = _encode_json(cmd)
    body = cmd.body
    h = len(header)
    prefix = _PREFIX.pack(4 + h + len(body), (cmd.serialize_type << 24) | h)
    return [prefix, header, body] if len(body) else [prefix, header]


def decode_command(frame: bytes | bytearray | memoryview) -> RemotingCommand:
    """A command from one frame without its length field (the ``L`` bytes after it)."""
    view = memoryview(frame)
    if len(view) < 4:
        raise CorruptDataError(f"frame of {len(view)} bytes has no header length")
    (word,) = _I32.unpack_from(view, 0)
    kind = (word >> 24) & 0xFF
    h = word & 0xFFFFFF
    if h > len(view) - 4:
        raise CorruptDataError(f"header length {h} exceeds the frame's {len(view) - 4} bytes")
    header = view[4 : 4 + h]
    if kind == SERIALIZE_JSON:
        cmd = _decode_json(header)
    elif kind == SERIALIZE_ROCKETMQ:
        cmd = _decode_binary(header)
    else:
        raise CorruptDataError(f"unknown header serialization type {kind}")
    cmd.serialize_type = kind
    cmd.body = view[4 + h :]
    return cmd


# --- JSON -------------------------------------------------------------------------------------
def _encode_json(cmd: RemotingCommand) -> bytes:
    obj: dict[str, object] = {"code": cmd.code}
    if cmd.ext_fields:
        obj["extFields"] = cmd.ext_fields
    obj["flag"] = cmd.flag
    obj["language"] = cmd.language
    obj["opaque"] = cmd.opaque
    if cmd.remark is not None:
        obj["remark"] = cmd.remark
    obj["serializeTypeCurrentRPC"] = "JSON"
    obj["version"] = cmd.version
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode()


def _json_int(obj: dict[str, object], key: str) -> int:
    value = obj.get(key)
    if value is None:
        return 0
    if isinstance(value, bool):
        raise CorruptDataError(f"JSON header: {key} is a boolean, not a number")
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        try:
            return int(value.strip())
        except ValueError:
            pass
    raise CorruptDataError(f"JSON header: {key} is {value!r}, not an integer")


def _json_text(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return value
    if isinstance(value, (int, float)):
        return str(value)
    try:
        return json.dumps(value, separators=(",", ":"))
    except RecursionError:
        raise CorruptDataError("JSON header: an extFields value nests too deeply") from None


def _decode_json(header: memoryview) -> RemotingCommand:
    try:
        obj = json.loads(bytes(header))
    except (ValueError, UnicodeDecodeError) as exc:
        raise CorruptDataError(f"JSON header does not parse: {exc}") from None
    except RecursionError:
        raise CorruptDataError("JSON header nests too deeply to parse") from None
    if not isinstance(obj, dict):
        raise CorruptDataError(f"JSON header is a {type(obj).__name__}, not an object")
    ext = obj.get("extFields")
    fields: dict[str, str] = {}
    if isinstance(ext, dict):
        fields = {str(k): _json_text(v) for k, v in ext.items() if v is not None}
    elif ext is not None:
        raise CorruptDataError("JSON header: extFields is not an object")
    language = obj.get("language", "JAVA")
    if isinstance(language, int) and not isinstance(language, bool) and 0 <= language < len(LANGUAGES):
        language = LANGUAGES[language]
    elif not isinstance(language, str) or language not in _LANGUAGE_CODES:
        language = "OTHER"
    remark = obj.get("remark")
    return RemotingCommand(
        code=_json_int(obj, "code"),
        opaque=_json_int(obj, "opaque"),
        flag=_json_int(obj, "flag"),
        ext_fields=fields,
        remark=None if remark is None else _json_text(remark),
        language=language,
        version=_json_int(obj, "version"),
    )


# --- ROCKETMQ (binary) ------------------------------------------------------------------------
# a key's bytes on the wire (length + UTF-8), encoded once: response keys repeat
_KEY_BYTES: dict[str, bytes] = {}
# extFields keys repeat from request to request: decoded once
_KEYS: dict[bytes, str] = {}
_MAX_CACHED_KEYS: Final = 4096
_HEAD_AND_REMARK = struct.Struct(">hbhiii")  # the fixed fields and the remark's length
_I16_FROM = _I16.unpack_from
_I32_FROM = _I32.unpack_from
_I32_PACK = _I32.pack


def _encode_binary(cmd: RemotingCommand) -> bytes:
    remark = cmd.remark.encode() if cmd.remark else b""
    parts: list[bytes] = []
    key_bytes = _KEY_BYTES
    for key, value in cmd.ext_fields.items():
        k = key_bytes.get(key)
        if k is None:
            raw = key.encode()
            k = _I16.pack(len(raw)) + raw
            if len(key_bytes) < _MAX_CACHED_KEYS:
                key_bytes[key] = k
        v = value.encode()
        parts.append(k)
        parts.append(_I32_PACK(len(v)))
        parts.append(v)
    entries = b"".join(parts)
    return b"".join(
        (
            _HEAD_AND_REMARK.pack(
                cmd.code,
                _LANGUAGE_CODES.get(cmd.language, 0),
                cmd.version,
                cmd.opaque,
                cmd.flag,
                len(remark),
            ),
            remark,
            _I32_PACK(len(entries)),
            entries,
        )
    )


def _decode_binary(header: memoryview) -> RemotingCommand:
    data = bytes(header)
    h = len(data)
    pos = _HEAD_AND_REMARK.size
    if h < pos + 4:
        raise CorruptDataError(f"binary header of {h} bytes is shorter than its fixed {pos + 4}")
    code, language, version, opaque, flag, remark_len = _HEAD_AND_REMARK.unpack_from(data, 0)
    if remark_len < 0 or remark_len > h - pos - 4:
        raise CorruptDataError(f"binary header: remark length {remark_len} exceeds the header")
    what = "remark"  # what is being decoded, for the error
    value_of: str | None = None  # or the value of this key
    i16, i32, keys = _I16_FROM, _I32_FROM, _KEYS
    try:
        remark = data[pos : pos + remark_len].decode() if remark_len else None
        pos += remark_len
        (ext_len,) = i32(data, pos)
        pos += 4
        if ext_len < 0 or ext_len > h - pos:
            raise CorruptDataError(f"binary header: extFields length {ext_len} exceeds the header")
        end = pos + ext_len
        fields: dict[str, str] = {}
        while pos < end:
            if end - pos < 6:
                raise CorruptDataError(f"binary header: extFields entry at byte {pos} is cut short")
            (klen,) = i16(data, pos)
            if klen < 0 or klen > end - pos - 6:
                raise CorruptDataError(f"binary header: key length {klen} at byte {pos} exceeds extFields")
            pos += 2
            kend = pos + klen
            raw_key = data[pos:kend]
            key = keys.get(raw_key)
            if key is None:
                what, value_of = "an extFields key", None
                key = raw_key.decode()
                if len(keys) < _MAX_CACHED_KEYS:
                    keys[raw_key] = key
            (vlen,) = i32(data, kend)
            pos = kend + 4
            if vlen < 0 or vlen > end - pos:
                raise CorruptDataError(f"binary header: value length {vlen} of {key!r} exceeds extFields")
            if klen and vlen:  # an empty key or value is absent (Java's readStr gives null)
                value_of = key
                fields[key] = data[pos : pos + vlen].decode()
            pos += vlen
    except UnicodeDecodeError:
        if value_of is not None:
            what = f"the value of {value_of!r}"
        raise CorruptDataError(f"binary header: {what} is not UTF-8") from None
    return RemotingCommand(
        code,
        opaque,
        flag,
        fields,
        remark,
        b"",
        LANGUAGES[language] if 0 <= language < len(LANGUAGES) else "OTHER",
        version,
    )
