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

import numpy as np
import numpy.typing as npt

from rocketstore.broker.remoting.codes import LANGUAGES, VERSION, RequestCode
from rocketstore.codec.big_endian import put_int, read_i32
from rocketstore.codec.byte_copy import copy_bytes
from rocketstore.codec.commitlog_record import SYSFLAG_CONTENT, SYSFLAG_TX_MASK, TX_PREPARED
from rocketstore.codec.message_batch import inner_message
from rocketstore.codec.properties import is_name, property_entry
from rocketstore.errors import CorruptDataError
from rocketstore.jit import kernel

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


# --- many frames at once: the broker's hot sends ---------------------------------------------
# ``scan_frames`` reads every whole frame of a connection's bytes in one compiled pass. A send it
# can store as it stands (SEND_MESSAGE, SEND_MESSAGE_V2, SEND_BATCH_MESSAGE with every field
# present and in range, ASCII headers, no property that needs the broker's judgement: delay,
# timer, transaction, retry) comes out as columns and its message in the batch encoding; every
# other frame is left to ``decode_command`` and its handler, which also gives each refusal its
# remark. ``encode_send_answers`` writes the answers of such sends in one pass.
SCAN_AT, SCAN_LEN, SCAN_HOT, SCAN_OPAQUE, SCAN_FLAG, SCAN_KIND = range(6)
SCAN_QUEUE, SCAN_SYS_FLAG, SCAN_BORN, SCAN_RECONSUME, SCAN_CODE = range(6, 11)
SCAN_DATA_AT, SCAN_DATA_LEN, SCAN_TOPIC_AT, SCAN_TOPIC_LEN, SCAN_TOPIC = range(11, 16)
SCAN_EXTRA_AT, SCAN_EXTRA_LEN = range(16, 18)
_SCAN_ROWS: Final = 18
HOT_SINGLE: Final = 1  # SCAN_HOT: a single message
HOT_BATCH: Final = 2  # a producer's batch
SCAN_BAD_LENGTH: Final = 1  # scan_frames' status: a length field outside 4..max_frame

_SEND_V1, _SEND_V2, _SEND_BATCH = (
    int(RequestCode.SEND_MESSAGE),
    int(RequestCode.SEND_MESSAGE_V2),
    int(RequestCode.SEND_BATCH_MESSAGE),
)
# SendMessageRequestHeader's fields: V2's one-letter names, then V1's, in the same order
_SEND_FIELD_NAMES: Final = (
    *"abcdefghijklmn",
    "producerGroup", "topic", "defaultTopic", "defaultTopicQueueNums", "queueId", "sysFlag",
    "bornTimestamp", "flag", "properties", "reconsumeTimes", "unitMode", "maxReconsumeTimes",
    "batch", "bname",
)  # fmt: skip
_F_GROUP, _F_TOPIC, _F_DEFAULT, _F_DEFAULT_QUEUES, _F_QUEUE, _F_SYS_FLAG, _F_BORN, _F_FLAG = range(8)
_F_PROPS, _F_RECONSUME, _F_UNIT, _F_MAX_RECONSUME, _F_BATCH, _F_BNAME = range(8, 14)
_N_FIELDS: Final = 14
_PULL: Final = int(RequestCode.PULL_MESSAGE)
_QUERY_OFFSET: Final = int(RequestCode.QUERY_CONSUMER_OFFSET)
_UPDATE_OFFSET: Final = int(RequestCode.UPDATE_CONSUMER_OFFSET)
# PullMessageRequestHeader's fields (at most _N_FIELDS), after the send fields in the name table;
# Query- and UpdateConsumerOffsetRequestHeader's are among them, by the same names
_PULL_FIELD_NAMES: Final = (
    "consumerGroup", "topic", "queueId", "queueOffset", "maxMsgNums", "sysFlag", "commitOffset",
    "suspendTimeoutMillis", "subscription", "subVersion", "expressionType",
)  # fmt: skip
_P_GROUP, _P_TOPIC, _P_QUEUE, _P_OFFSET, _P_MAX, _P_SYS_FLAG, _P_COMMIT, _P_SUSPEND = range(8)
_P_SUBSCRIPTION, _P_SUB_VERSION, _P_TYPE = range(8, 11)
_N_PULL_FIELDS: Final = len(_PULL_FIELD_NAMES)


def _name_table(names: tuple[str, ...]) -> tuple[npt.NDArray[np.uint8], npt.NDArray[np.int64]]:
    encoded = [n.encode() for n in names]
    return (
        np.frombuffer(b"".join(encoded), dtype=np.uint8).copy(),
        np.cumsum([0, *map(len, encoded)]).astype(np.int64),
    )


_FIELD_NAMES, _FIELD_NAME_AT = _name_table(_SEND_FIELD_NAMES + _PULL_FIELD_NAMES)
_TOP_NAMES, _TOP_NAME_AT = _name_table(("code", "opaque", "flag", "extFields"))
# properties a single send may not carry on the fast path: the broker or store acts on them
# (delay, timer, transaction, a retry's real topic), or the broker sets them (CLUSTER); WAIT
# is dropped when "true" and sends the message the slow way otherwise (no flush wait)
_SLOW_NAMES, _SLOW_NAME_AT = _name_table(
    (
        "DELAY", "REAL_TOPIC", "REAL_QID", "TIMER_DELAY_SEC", "TIMER_DELAY_MS", "TIMER_DELIVER_MS",
        "CLUSTER", "TRAN_MSG", "WAIT", "UNIQ_KEY", "TAGS", "KEYS",
    )
)  # fmt: skip
# rows of _SLOW_NAMES: those before _SLOW_WAIT send a single message the handler's way; a
# batch's own properties may carry only TRAN_MSG and WAIT of them (from _SLOW_UNIQ on they are
# each message's own); a single message must carry UNIQ_KEY
_SLOW_TRAN, _SLOW_WAIT, _SLOW_UNIQ = 7, 8, 9
_TRUE = np.frombuffer(b"true", dtype=np.uint8).copy()
_RETRY = np.frombuffer(b"%RETRY%", dtype=np.uint8).copy()


@kernel(cache=True, nogil=True, inline="always")
def _i16(u8: npt.NDArray[np.uint8], pos: int) -> int:
    v = (np.int64(u8[pos]) << 8) | u8[pos + 1]
    return int(v - 65536 if v >= 32768 else v)


@kernel(cache=True, nogil=True, inline="always")
def _is_consumer_request(code: int) -> bool:
    """A request ``scan_consumer_request`` reads: a pull, a committed offset's query or update."""
    return code in (_PULL, _QUERY_OFFSET, _UPDATE_OFFSET)


@kernel(cache=True, nogil=True, inline="always")
def _is_hot(code: int) -> bool:
    """A request whose header the compiled passes read: a send or a consumer's request."""
    return code in (_SEND_V1, _SEND_V2, _SEND_BATCH) or _is_consumer_request(code)


@kernel(cache=True, nogil=True, inline="always")
def _ws(u8: npt.NDArray[np.uint8], p: int, end: int) -> int:
    while p < end and (u8[p] == 32 or u8[p] == 9 or u8[p] == 10 or u8[p] == 13):
        p += 1
    return p


@kernel(cache=True, nogil=True, inline="always")
def _hex(c: int) -> int:
    if 48 <= c <= 57:
        return c - 48
    if 97 <= c <= 102:
        return c - 87
    if 65 <= c <= 70:
        return c - 55
    return -1


@kernel(cache=True, nogil=True)
def _json_string(
    u8: npt.NDArray[np.uint8], p: int, end: int, out: npt.NDArray[np.uint8], o: int
) -> tuple[int, int]:
    """The JSON string at ``u8[p]`` (its opening quote) unescaped into ``out[o:]``: (where it
    ends, where the output ends), or (-1, o) for what this pass leaves to Python: anything not
    ASCII, a raw control character, an escape it does not take."""
    p += 1
    while p < end:
        c = u8[p]
        if c == 34:  # "
            return p + 1, o
        if c >= 0x80 or c < 0x20:
            return -1, o
        if c == 92:  # \
            if p + 1 >= end:
                return -1, o
            e = u8[p + 1]
            if e == 117:  # \uXXXX: ASCII only
                if p + 5 >= end:
                    return -1, o
                v = 0
                for k in range(4):
                    h = _hex(u8[p + 2 + k])
                    if h < 0:
                        return -1, o
                    v = v * 16 + int(h)
                if v >= 0x80:
                    return -1, o
                out[o] = v
                p += 6
            else:
                if e == 34 or e == 92 or e == 47:
                    out[o] = e
                elif e == 98:
                    out[o] = 8
                elif e == 102:
                    out[o] = 12
                elif e == 110:
                    out[o] = 10
                elif e == 114:
                    out[o] = 13
                elif e == 116:
                    out[o] = 9
                else:
                    return -1, o
                p += 2
            o += 1
        else:
            out[o] = c
            o += 1
            p += 1
    return -1, o


@kernel(cache=True, nogil=True, inline="always")
def _json_key(
    u8: npt.NDArray[np.uint8], p: int, end: int, texts: npt.NDArray[np.uint8], o: int
) -> tuple[int, int]:
    """The key of an object's member at ``u8[p]``, unescaped into ``texts[o:]`` (not kept: the
    next text overwrites it), and its colon: (where its value starts, the key's length), or
    (-1, 0) for what this pass leaves to Python."""
    if p >= end or u8[p] != 34:
        return -1, 0
    p, k_end = _json_string(u8, p, end, texts, o)
    if p < 0:
        return -1, 0
    p = _ws(u8, p, end)
    if p >= end or u8[p] != 58:
        return -1, 0
    return _ws(u8, p + 1, end), k_end - o


@kernel(cache=True, nogil=True, inline="always")
def _json_next(u8: npt.NDArray[np.uint8], p: int, end: int) -> tuple[int, bool]:
    """After a member's value: (where the next member starts, True) after a comma, (past the
    closing brace, False) at the end of the object, or (-1, False)."""
    p = _ws(u8, p, end)
    if p < end and u8[p] == 44:
        return _ws(u8, p + 1, end), True
    if p < end and u8[p] == 125:
        return p + 1, False
    return -1, False


@kernel(cache=True, nogil=True, inline="always")
def _json_scalar_end(u8: npt.NDArray[np.uint8], p: int, end: int) -> int:
    """The end of the number, true, false or null at ``p`` (-1 for anything else)."""
    q = p
    while q < end:
        c = u8[q]
        if (48 <= c <= 57) or c == 45 or c == 43 or c == 46 or (97 <= c <= 122) or (65 <= c <= 90):
            q += 1
        else:
            break
    return q if q > p else -1


_LITERALS, _LITERAL_AT = _name_table(("true", "false", "null"))


@kernel(cache=True, nogil=True, inline="always")
def _digits_end(u8: npt.NDArray[np.uint8], p: int, q: int) -> int:
    while p < q and 48 <= u8[p] <= 57:
        p += 1
    return p


@kernel(cache=True, nogil=True)
def _json_scalar_ok(u8: npt.NDArray[np.uint8], p: int, q: int) -> bool:
    """Whether u8[p:q] is true, false, null or a JSON number (as ``json.loads`` reads them)."""
    for j in range(len(_LITERAL_AT) - 1):
        if is_name(u8, p, q - p, _LITERALS, _LITERAL_AT, j):
            return True
    if p < q and u8[p] == 45:
        p += 1
    digits, p = p, _digits_end(u8, p, q)
    if p == digits or (u8[digits] == 48 and p - digits > 1):
        return False  # no integer part, or one with a leading zero
    if p < q and u8[p] == 46:
        digits, p = p + 1, _digits_end(u8, p + 1, q)
        if p == digits:
            return False
    if p < q and (u8[p] == 101 or u8[p] == 69):
        p += 1
        if p < q and (u8[p] == 43 or u8[p] == 45):
            p += 1
        digits, p = p, _digits_end(u8, p, q)
        if p == digits:
            return False
    return p == q


@kernel(cache=True, nogil=True, inline="always")
def _json_integer(u8: npt.NDArray[np.uint8], p: int, end: int) -> tuple[bool, int]:
    """A JSON integer of at most 18 digits at u8[p:end] (the whole span)."""
    neg = p < end and u8[p] == 45
    if neg:
        p += 1
    if p >= end or end - p > 18:
        return False, 0
    v = 0
    for k in range(p, end):
        c = u8[k]
        if c < 48 or c > 57:
            return False, 0
        v = v * 10 + (int(c) - 48)
    return True, -v if neg else v


@kernel(cache=True, nogil=True, inline="always")
def _text_int(t: npt.NDArray[np.uint8], p: int, n: int, low: int, high: int) -> tuple[bool, int]:
    """Decimal text ``[+-]?digits`` in low..high (what Java's parse methods take, and int())."""
    if n <= 0 or n > 20:
        return False, 0
    end = p + n
    neg = t[p] == 45
    if t[p] == 45 or t[p] == 43:
        p += 1
    if p >= end:
        return False, 0
    v = 0
    for k in range(p, end):
        c = t[k]
        if c < 48 or c > 57:
            return False, 0
        if v > 922337203685477580:  # the next digit would pass an int64
            return False, 0
        v = v * 10 + (int(c) - 48)
    if neg:
        v = -v
    return low <= v <= high, v


@kernel(cache=True, nogil=True, inline="always")
def _field_of(t: npt.NDArray[np.uint8], p: int, n: int, code: int) -> int:
    """The header field named ``t[p:p+n]`` of a request of ``code`` (a send's, V2's names or
    V1's, or a consumer's request's), or -1."""
    if _is_consumer_request(code):
        first, count = 2 * _N_FIELDS, _N_PULL_FIELDS
    else:
        first, count = (_N_FIELDS if code == _SEND_V1 else 0), _N_FIELDS
    for j in range(first, first + count):
        if is_name(t, p, n, _FIELD_NAMES, _FIELD_NAME_AT, j):
            return j - first
    return -1


@kernel(cache=True, nogil=True)
def _json_header(
    u8: npt.NDArray[np.uint8],
    p: int,
    end: int,
    texts: npt.NDArray[np.uint8],
    o: int,
    head: npt.NDArray[np.int64],
    f_at: npt.NDArray[np.int64],
    f_len: npt.NDArray[np.int64],
) -> int:
    """A JSON header at u8[p:end]: code, opaque and flag into ``head``, the send's or pull's
    fields' values into ``texts`` from ``o`` (spans in f_at/f_len, -1: absent); returns where
    texts end, or -1 when the header is one for Python (not an object of plain values, a code
    that is not a send's or a pull's, a value this pass does not read)."""
    head[0] = 0
    head[1] = 0
    head[2] = 0
    p = _ws(u8, p, end)
    if p >= end or u8[p] != 123:
        return -1
    p = _ws(u8, p + 1, end)
    ext_at = -1
    ext_end = -1
    if p < end and u8[p] == 125:
        p += 1
    else:
        while True:
            k_at = o
            p, k_len = _json_key(u8, p, end, texts, o)
            if p < 0 or p >= end:
                return -1
            which = -1
            for j in range(4):
                if is_name(texts, k_at, k_len, _TOP_NAMES, _TOP_NAME_AT, j):
                    which = j
            if which == 3:  # extFields: read once the code is known (it may come later)
                if u8[p] != 123:
                    return -1
                ext_at = p
                depth = 0
                while p < end:
                    c = u8[p]
                    if c == 34:
                        p, o = _json_string(u8, p, end, texts, o)
                        o = k_at
                        if p < 0:
                            return -1
                        continue
                    if c == 123 or c == 91:
                        depth += 1
                    elif c == 125 or c == 93:
                        depth -= 1
                        if depth == 0:
                            p += 1
                            break
                    p += 1
                if depth != 0:
                    return -1
                ext_end = p
            elif u8[p] == 34:
                if which >= 0:
                    return -1  # a quoted number: Python reads it
                p, o = _json_string(u8, p, end, texts, o)
                o = k_at
                if p < 0:
                    return -1
            else:
                q = _json_scalar_end(u8, p, end)
                if q < 0 or not _json_scalar_ok(u8, p, q):
                    return -1
                if which >= 0:
                    ok, v = _json_integer(u8, p, q)
                    if not ok:
                        return -1
                    head[which] = v
                p = q
            p, more = _json_next(u8, p, end)
            if p < 0:
                return -1
            if not more:
                break
    if _ws(u8, p, end) != end:
        return -1
    code = head[0]
    if not _is_hot(code) or ext_at < 0:
        return -1
    p = _ws(u8, ext_at + 1, ext_end)
    if p < ext_end and u8[p] == 125:
        return o
    while True:
        p, k_len = _json_key(u8, p, ext_end, texts, o)
        if p < 0:
            return -1
        f = _field_of(texts, o, k_len, code)
        if p >= ext_end or u8[p] != 34:
            return -1  # a value that is not a string: Python reads it
        v_at = o
        p, o = _json_string(u8, p, ext_end, texts, o)
        if p < 0:
            return -1
        if f >= 0:
            f_at[f] = v_at
            f_len[f] = o - v_at
        else:
            o = v_at
        p, more = _json_next(u8, p, ext_end)
        if p < 0:
            return -1
        if not more:
            break
    return o


@kernel(cache=True, nogil=True)
def _binary_header(
    u8: npt.NDArray[np.uint8],
    p: int,
    end: int,
    texts: npt.NDArray[np.uint8],
    o: int,
    head: npt.NDArray[np.int64],
    f_at: npt.NDArray[np.int64],
    f_len: npt.NDArray[np.int64],
) -> int:
    """``_json_header`` for a ROCKETMQ (binary) header: its values copied into ``texts``."""
    if end - p < 21:
        return -1
    code = _i16(u8, p)
    if not _is_hot(code):
        return -1
    head[0] = code
    head[1] = read_i32(u8, p + 5)
    head[2] = read_i32(u8, p + 9)
    remark = read_i32(u8, p + 13)
    p += 17
    if remark < 0 or remark > end - p - 4:
        return -1
    p += remark
    ext = read_i32(u8, p)
    p += 4
    if ext < 0 or ext > end - p:
        return -1
    stop = p + ext
    while p < stop:
        if stop - p < 6:
            return -1
        klen = _i16(u8, p)
        if klen < 0 or klen > stop - p - 6:
            return -1
        k_at = p + 2
        vlen = read_i32(u8, k_at + klen)
        v_at = k_at + klen + 4
        if vlen < 0 or vlen > stop - v_at:
            return -1
        for k in range(k_at, v_at + vlen):
            if u8[k] >= 0x80:
                return -1  # not ASCII: Python decodes it
        if klen and vlen:  # an empty key or value is absent
            f = _field_of(u8, k_at, klen, code)
            if f >= 0:
                copy_bytes(texts, o, u8, v_at, vlen)
                f_at[f] = o
                f_len[f] = vlen
                o += vlen
        p = v_at + vlen
    return o


@kernel(cache=True, nogil=True, inline="always")
def _is_true(t: npt.NDArray[np.uint8], p: int, n: int) -> bool:
    if n != 4:
        return False
    for k in range(4):
        c = t[p + k]
        if 65 <= c <= 90:
            c += 32
        if c != _TRUE[k]:
            return False
    return True


@kernel(cache=True, nogil=True, inline="always")
def _topic_ok(t: npt.NDArray[np.uint8], p: int, n: int) -> bool:
    """RocketMQ's topic rule, and not a retry topic (its dead-letter routing is the handler's)."""
    if n < 1 or n > 127:
        return False
    for k in range(p, p + n):
        c = t[k]
        if not (
            (48 <= c <= 57)
            or (65 <= c <= 90)
            or (97 <= c <= 122)
            or c == 37
            or c == 124
            or c == 95
            or c == 45
        ):
            return False
    if n >= 7:
        retry = True
        for k in range(7):
            if t[p + k] != _RETRY[k]:
                retry = False
        if retry:
            return False
    return True


# holds the GIL: on the event loop, a short kernel that let it go would wait to take it back
# behind the store's threads
@kernel(cache=True)
def scan_frames(
    u8: npt.NDArray[np.uint8], max_frame: int, max_body: int, cluster: npt.NDArray[np.uint8]
) -> tuple[
    int, int, npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.uint8], npt.NDArray[np.uint8],
    npt.NDArray[np.uint8],
]:  # fmt: skip
    """Every whole frame of ``u8``: (a status, 0 or SCAN_BAD_LENGTH at the first frame whose
    length is outside 4..max_frame; where the whole frames end; the columns, one per frame
    (rows SCAN_*; SCAN_TOPIC numbers the read's distinct topics); the row that names each
    distinct topic first; the sends' messages in the batch encoding; their topics' text; the
    properties the broker adds to each: a batch's own, then ``cluster`` (``CLUSTER``'s entry))."""
    n_max = len(u8) // 8 + 1
    cols = np.empty((_SCAN_ROWS, n_max), dtype=np.int64)
    data = np.empty(len(u8) + 24 * n_max, dtype=np.uint8)
    texts = np.empty(len(u8), dtype=np.uint8)
    extras = np.empty(len(u8) + (len(cluster) + 1) * n_max, dtype=np.uint8)
    vals = np.zeros(_N_FIELDS, dtype=np.int64)
    topic_rows = np.empty(n_max, dtype=np.int64)  # the first row of each distinct topic
    nt = 0
    head = np.zeros(3, dtype=np.int64)
    f_at = np.full(_N_FIELDS, -1, dtype=np.int64)
    f_len = np.zeros(_N_FIELDS, dtype=np.int64)
    slow_names = len(_SLOW_NAME_AT) - 1
    s_at = np.full(slow_names, -1, dtype=np.int64)
    s_len = np.zeros(slow_names, dtype=np.int64)
    status = 0
    pos = 0
    n = 0
    o = 0  # texts used
    d = 0  # data used
    x = 0  # extras used
    while len(u8) - pos >= 4:
        length = read_i32(u8, pos)
        if length < 4 or length > max_frame:
            status = SCAN_BAD_LENGTH
            break
        if len(u8) - pos - 4 < length:
            break
        at = pos + 4
        frame_end = at + length
        pos = frame_end
        i = n
        n += 1
        cols[:, i] = -1
        cols[SCAN_AT, i] = at
        cols[SCAN_LEN, i] = length
        cols[SCAN_HOT, i] = 0
        word = read_i32(u8, at)
        kind = (word >> 24) & 0xFF
        h = word & 0xFFFFFF
        if h > length - 4 or (kind != 0 and kind != 1):
            continue
        for k in range(_N_FIELDS):
            f_at[k] = -1
            f_len[k] = 0
        if kind == 0:
            o2 = _json_header(u8, at + 4, at + 4 + h, texts, o, head, f_at, f_len)
        else:
            o2 = _binary_header(u8, at + 4, at + 4 + h, texts, o, head, f_at, f_len)
        if o2 < 0 or _is_consumer_request(head[0]):
            continue
        if head[2] & FLAG_RESPONSE or f_at[_F_GROUP] < 0 or f_at[_F_TOPIC] < 0 or f_at[_F_DEFAULT] < 0:
            continue
        ok = True
        vals[_F_RECONSUME] = 0
        for f, low, high in (
            (_F_DEFAULT_QUEUES, -(1 << 63), (1 << 63) - 1),
            (_F_QUEUE, -(1 << 31), (1 << 31) - 1),
            (_F_SYS_FLAG, -(1 << 31), (1 << 31) - 1),
            (_F_BORN, -(1 << 63), (1 << 63) - 1),
            (_F_FLAG, -(1 << 31), (1 << 31) - 1),
        ):
            good, v = _text_int(texts, f_at[f], f_len[f], low, high)
            ok = ok and good
            vals[f] = v
        if f_at[_F_RECONSUME] >= 0:
            good, v = _text_int(texts, f_at[_F_RECONSUME], f_len[_F_RECONSUME], 0, (1 << 31) - 1)
            ok = ok and good
            vals[_F_RECONSUME] = v
        if f_at[_F_MAX_RECONSUME] >= 0:
            good, v = _text_int(
                texts, f_at[_F_MAX_RECONSUME], f_len[_F_MAX_RECONSUME], -(1 << 63), (1 << 63) - 1
            )
            ok = ok and good
        if not ok or not _topic_ok(texts, f_at[_F_TOPIC], f_len[_F_TOPIC]):
            continue
        batch = f_at[_F_BATCH] >= 0 and _is_true(texts, f_at[_F_BATCH], f_len[_F_BATCH])
        sys_flag = vals[_F_SYS_FLAG]
        if (batch and sys_flag & SYSFLAG_TX_MASK) or (sys_flag & SYSFLAG_TX_MASK) == TX_PREPARED:
            continue
        body_at = at + 4 + h
        body_len = frame_end - body_at
        if body_len > max_body:
            continue
        # the properties: every entry a name and a value, none of the slow names
        p_at = f_at[_F_PROPS]
        p_end = p_at + f_len[_F_PROPS] if p_at >= 0 else p_at
        s_at[:] = -1
        q = p_at
        while q < p_end:
            sep, stop = property_entry(texts, q, p_end)
            if not q < sep < stop - 1:
                ok = False
                break
            for j in range(slow_names):
                if is_name(texts, q, sep - q, _SLOW_NAMES, _SLOW_NAME_AT, j):
                    s_at[j] = sep + 1
                    s_len[j] = stop - sep - 1
            q = stop + 1
        if not ok:
            continue
        if batch:
            for j in range(slow_names):
                if s_at[j] >= 0 and (j < _SLOW_WAIT or j >= _SLOW_UNIQ) and j != _SLOW_TRAN:
                    ok = False
            # the body: whole inner messages
            q = body_at
            if q == frame_end:
                ok = False
            while ok and q < frame_end:
                problem, size, _, _, _, _ = inner_message(u8, q, frame_end)
                if problem:
                    ok = False
                else:
                    q += size
        else:
            for j in range(_SLOW_WAIT):
                if s_at[j] >= 0:
                    ok = False
            if s_at[_SLOW_WAIT] >= 0 and not _is_true(texts, s_at[_SLOW_WAIT], s_len[_SLOW_WAIT]):
                ok = False
            if s_at[_SLOW_UNIQ] < 0:
                ok = False  # the store gives it one: the handler's way
        if not ok:
            continue
        # the message(s) in the batch encoding, and the properties the broker adds
        cols[SCAN_DATA_AT, i] = d
        if batch:
            d = copy_bytes(data, d, u8, body_at, body_len)
        else:
            d0 = d
            put_int(data, d, 0, 4)  # TOTALSIZE, below
            d += 4
            put_int(data, d, 0, 4)
            d += 4
            put_int(data, d, 0, 4)
            d += 4
            put_int(data, d, vals[_F_FLAG], 4)
            d += 4
            put_int(data, d, body_len, 4)
            d += 4
            d = copy_bytes(data, d, u8, body_at, body_len) + 2  # PROPERTIESLENGTH, below
            props_at = d
            q = p_at
            while q < p_end:
                sep, stop = property_entry(texts, q, p_end)
                # WAIT is not stored, however many times it is given (RocketMQ drops it too)
                if not is_name(texts, q, sep - q, _SLOW_NAMES, _SLOW_NAME_AT, _SLOW_WAIT):
                    if d > props_at:
                        data[d] = 2
                        d += 1
                    d = copy_bytes(data, d, texts, q, stop - q)
                q = stop + 1
            if d - props_at >= 0x8000:
                d = d0
                continue
            put_int(data, d0, d - d0, 4)
            put_int(data, props_at - 2, d - props_at, 2)
        cols[SCAN_DATA_LEN, i] = d - cols[SCAN_DATA_AT, i]
        cols[SCAN_EXTRA_AT, i] = x
        if batch and p_at >= 0 and p_end > p_at:
            stop = p_end
            while stop > p_at and texts[stop - 1] == 2:
                stop -= 1
            x = copy_bytes(extras, x, texts, p_at, stop - p_at)
            extras[x] = 2
            x += 1
        x = copy_bytes(extras, x, cluster, 0, len(cluster))
        cols[SCAN_EXTRA_LEN, i] = x - cols[SCAN_EXTRA_AT, i]
        t_at, t_len = f_at[_F_TOPIC], f_len[_F_TOPIC]
        topic = 0
        while topic < nt:  # the read's topics so far (a handful): is it one of them?
            first = topic_rows[topic]
            if cols[SCAN_TOPIC_LEN, first] == t_len:
                f0 = cols[SCAN_TOPIC_AT, first]
                same = True
                for k in range(t_len):
                    if texts[f0 + k] != texts[t_at + k]:
                        same = False
                        break
                if same:
                    break
            topic += 1
        if topic == nt:
            topic_rows[nt] = i
            nt += 1
        cols[SCAN_HOT, i] = HOT_BATCH if batch else HOT_SINGLE
        cols[SCAN_CODE, i] = head[0]
        cols[SCAN_OPAQUE, i] = head[1]
        cols[SCAN_FLAG, i] = head[2]
        cols[SCAN_KIND, i] = kind
        cols[SCAN_QUEUE, i] = vals[_F_QUEUE]
        cols[SCAN_SYS_FLAG, i] = sys_flag & SYSFLAG_CONTENT
        cols[SCAN_BORN, i] = vals[_F_BORN]
        cols[SCAN_RECONSUME, i] = vals[_F_RECONSUME]
        cols[SCAN_TOPIC_AT, i] = f_at[_F_TOPIC]
        cols[SCAN_TOPIC_LEN, i] = f_len[_F_TOPIC]
        cols[SCAN_TOPIC, i] = topic
        o = o2
    return status, pos, cols[:, :n], topic_rows[:nt], data[:d], texts[:o], extras[:x]


# scan_consumer_request's numbers: the frame's header encoding, opaque and flag, then the
# request's fields (a pull's all; an offset query's queueId; an update's queueId, commitOffset)
CONSUMER_KIND, CONSUMER_OPAQUE, CONSUMER_FLAG, CONSUMER_QUEUE, CONSUMER_OFFSET, CONSUMER_MAX = range(6)
CONSUMER_SYS_FLAG, CONSUMER_COMMIT, CONSUMER_SUSPEND, CONSUMER_SUB_VERSION = range(6, 10)
# then the spans of its texts (at, length; at -1: absent): group, topic, subscription, type
CONSUMER_GROUP_AT, CONSUMER_TOPIC_AT, CONSUMER_SUBSCRIPTION_AT, CONSUMER_TYPE_AT = 10, 12, 14, 16
CONSUMER_CODE: Final = 18  # and the request's code
_CONSUMER_NUMBERS: Final = 19
_SPAN_FIELDS = np.array([_P_GROUP, _P_TOPIC, _P_SUBSCRIPTION, _P_TYPE], dtype=np.int64)


_CODE_KEY = np.frombuffer(b'"code"', dtype=np.uint8).copy()


@kernel(cache=True, nogil=True, inline="always")
def _leading_code(u8: npt.NDArray[np.uint8], p: int, end: int) -> int:
    """The code of a JSON header that begins ``{"code":<digits>`` (as RocketMQ's clients write
    it), or -1 for a header that begins otherwise."""
    p = _ws(u8, p, end)
    if p >= end or u8[p] != 123:
        return -1
    p = _ws(u8, p + 1, end)
    if end - p < len(_CODE_KEY):
        return -1
    for k in range(len(_CODE_KEY)):
        if u8[p + k] != _CODE_KEY[k]:
            return -1
    p = _ws(u8, p + len(_CODE_KEY), end)
    if p >= end or u8[p] != 58:
        return -1
    p = _ws(u8, p + 1, end)
    q = p
    while q < end and 48 <= u8[q] <= 57 and q - p < 9:
        q += 1
    if q == p:
        return -1
    ok, code = _json_integer(u8, p, q)
    return code if ok else -1


@kernel(cache=True)  # holds the GIL (see scan_frames)
def scan_consumer_request(
    u8: npt.NDArray[np.uint8], at: int, length: int
) -> tuple[bool, npt.NDArray[np.int64], npt.NDArray[np.uint8]]:
    """The PULL_MESSAGE, QUERY_CONSUMER_OFFSET or UPDATE_CONSUMER_OFFSET request in the frame
    ``u8[at:at+length]`` (without its length field), in either header encoding: (True, its
    numbers and text spans (CONSUMER_*), the texts), or False for a frame that is not one this
    pass reads whole, which goes to ``decode_command``: another code, a response, non-ASCII
    text, a required field absent or out of a Java number's range (consumerGroup, topic,
    queueId; a pull's queueOffset, maxMsgNums, sysFlag, its commitOffset when sysFlag asks to
    commit and suspendTimeoutMillis when it asks to suspend; an update's commitOffset), a
    pull's subVersion present but not a Java long (which its handler refuses)."""
    out = np.full(_CONSUMER_NUMBERS, -1, dtype=np.int64)
    texts = np.empty(max(length, 0), dtype=np.uint8)
    if length < 4:
        return False, out, texts
    word = read_i32(u8, at)
    kind = (word >> 24) & 0xFF
    h = word & 0xFFFFFF
    if h > length - 4 or (kind != 0 and kind != 1):
        return False, out, texts
    # another request's frame is let go at its code, before its header is read
    if kind == 1 and (h < 2 or not _is_consumer_request(_i16(u8, at + 4))):
        return False, out, texts
    if kind == 0:
        leading = _leading_code(u8, at + 4, at + 4 + h)
        if leading != -1 and not _is_consumer_request(leading):
            return False, out, texts
    head = np.zeros(3, dtype=np.int64)
    f_at = np.full(_N_FIELDS, -1, dtype=np.int64)
    f_len = np.zeros(_N_FIELDS, dtype=np.int64)
    if kind == 0:
        o = _json_header(u8, at + 4, at + 4 + h, texts, 0, head, f_at, f_len)
    else:
        o = _binary_header(u8, at + 4, at + 4 + h, texts, 0, head, f_at, f_len)
    code = head[0]
    if o < 0 or not _is_consumer_request(code) or head[2] & FLAG_RESPONSE:
        return False, out, texts
    if f_at[_P_GROUP] < 0 or f_at[_P_TOPIC] < 0:
        return False, out, texts
    out[CONSUMER_CODE] = code
    out[CONSUMER_KIND] = kind
    out[CONSUMER_OPAQUE] = head[1]
    out[CONSUMER_FLAG] = head[2]
    int_low, int_high = -(1 << 31), (1 << 31) - 1
    long_low, long_high = -(1 << 63), (1 << 63) - 1
    for f in range(_N_PULL_FIELDS):
        row, low, high = -1, long_low, long_high
        if f == _P_QUEUE:
            row, low, high = CONSUMER_QUEUE, int_low, int_high
        elif code == _UPDATE_OFFSET and f == _P_COMMIT:
            row = CONSUMER_COMMIT
        elif code == _PULL and f == _P_OFFSET:
            row = CONSUMER_OFFSET
        elif code == _PULL and f == _P_MAX:
            row, low, high = CONSUMER_MAX, int_low, int_high
        elif code == _PULL and f == _P_SYS_FLAG:
            row, low, high = CONSUMER_SYS_FLAG, int_low, int_high
        if row < 0:
            continue
        good, v = _text_int(texts, f_at[f], f_len[f], low, high)
        if f_at[f] < 0 or not good:
            return False, out, texts
        out[row] = v
    out[CONSUMER_GROUP_AT] = f_at[_P_GROUP]
    out[CONSUMER_GROUP_AT + 1] = f_len[_P_GROUP]
    out[CONSUMER_TOPIC_AT] = f_at[_P_TOPIC]
    out[CONSUMER_TOPIC_AT + 1] = f_len[_P_TOPIC]
    if code != _PULL:
        return True, out, texts[:o]
    sys_flag = out[CONSUMER_SYS_FLAG]
    for f, row, bit in ((_P_COMMIT, CONSUMER_COMMIT, 0x1), (_P_SUSPEND, CONSUMER_SUSPEND, 0x2)):
        out[row] = 0
        if sys_flag & bit:
            good, v = _text_int(texts, f_at[f], f_len[f], long_low, long_high)
            if f_at[f] < 0 or not good:
                return False, out, texts
            out[row] = v
    out[CONSUMER_SUB_VERSION] = 0
    if f_at[_P_SUB_VERSION] >= 0:
        good, v = _text_int(texts, f_at[_P_SUB_VERSION], f_len[_P_SUB_VERSION], long_low, long_high)
        if not good:
            return False, out, texts
        out[CONSUMER_SUB_VERSION] = v
    for k in range(2, 4):
        f = _SPAN_FIELDS[k]
        out[CONSUMER_GROUP_AT + 2 * k] = f_at[f]
        out[CONSUMER_GROUP_AT + 2 * k + 1] = f_len[f]
    return True, out, texts[:o]


def _byte_arrays(*parts: bytes) -> list[npt.NDArray[np.uint8]]:
    """Constant byte strings as the arrays the answer kernels copy from."""
    return [np.frombuffer(part, dtype=np.uint8).copy() for part in parts]


_JSON_ANSWER_PARTS = _byte_arrays(
    b'{"code":',
    b',"extFields":{"msgId":"',
    b'","queueId":"',
    b'","queueOffset":"',
    b'","MSG_REGION":"DefaultRegion","TRACE_ON":"true"},"flag":1,"language":"JAVA","opaque":',
    b',"remark":',
    b',"serializeTypeCurrentRPC":"JSON","version":' + str(VERSION).encode() + b"}",
)
_J_CODE, _J_ID, _J_QUEUE, _J_OFFSET, _J_REST, _J_REMARK, _J_END = _JSON_ANSWER_PARTS
_BINARY_KEYS = _byte_arrays(
    *(
        struct.pack(">h", len(k)) + k
        for k in (b"msgId", b"queueId", b"queueOffset", b"MSG_REGION", b"TRACE_ON")
    )
)
_B_ID, _B_QUEUE, _B_OFFSET, _B_REGION, _B_TRACE = _BINARY_KEYS
_REGION = np.frombuffer(b"DefaultRegion", dtype=np.uint8).copy()
_TRUE_TEXT = np.frombuffer(b"true", dtype=np.uint8).copy()
_HEX = np.frombuffer(b"0123456789ABCDEF", dtype=np.uint8).copy()


@kernel(cache=True, nogil=True, inline="always")
def _put_bytes(out: npt.NDArray[np.uint8], o: int, part: npt.NDArray[np.uint8]) -> int:
    return copy_bytes(out, o, part, 0, len(part))


@kernel(cache=True, nogil=True, inline="always")
def _put_decimal(out: npt.NDArray[np.uint8], o: int, value: int) -> int:
    if value < 0:
        out[o] = 45
        o += 1
        value = -value
    digits = 1
    v = value
    while v >= 10:
        v //= 10
        digits += 1
    for k in range(digits - 1, -1, -1):
        out[o + k] = 48 + value % 10
        value //= 10
    return o + digits


@kernel(cache=True, nogil=True, inline="always")
def _put_ids(
    out: npt.NDArray[np.uint8],
    o: int,
    prefix: npt.NDArray[np.uint8],
    phys: npt.NDArray[np.int64],
    a: int,
    b: int,
) -> int:
    """The offset message ids of ``phys[a:b]``, comma-separated (a batch's msgId)."""
    for m in range(a, b):
        if m > a:
            out[o] = 44
            o += 1
        o = _put_bytes(out, o, prefix)
        v = phys[m]
        for k in range(15, -1, -1):
            out[o + k] = _HEX[v & 0xF]
            v >>= 4
        o += 16
    return o


@kernel(cache=True, nogil=True, inline="always")
def _put_binary_number(out: npt.NDArray[np.uint8], o: int, key: npt.NDArray[np.uint8], value: int) -> int:
    """One extFields entry of a binary header: ``key`` (with its length) and ``value`` as text."""
    o = _put_bytes(out, o, key)
    v_at = o
    o = _put_decimal(out, o + 4, value)
    put_int(out, v_at, o - v_at - 4, 4)
    return o


@kernel(cache=True, nogil=True, inline="always")
def _put_binary_head(
    out: npt.NDArray[np.uint8],
    o: int,
    code: int,
    opaque: int,
    text: npt.NDArray[np.uint8],
    remark_at: int,
    remark_len: int,
) -> int:
    """A binary response header's fixed fields (language JAVA, this version) and its remark
    ``text[remark_at:remark_at + remark_len]``, up to its extFields."""
    put_int(out, o, code, 2)
    put_int(out, o + 2, 0, 1)  # JAVA
    put_int(out, o + 3, VERSION, 2)
    put_int(out, o + 5, opaque, 4)
    put_int(out, o + 9, FLAG_RESPONSE, 4)
    put_int(out, o + 13, remark_len, 4)
    return copy_bytes(out, o + 17, text, remark_at, remark_len)


@kernel(cache=True)  # holds the GIL (see scan_frames)
def encode_send_answers(
    cols: npt.NDArray[np.int64],
    queue_offsets: npt.NDArray[np.int64],
    phys: npt.NDArray[np.int64],
    ends: npt.NDArray[np.int64],
    code: int,
    prefix: npt.NDArray[np.uint8],
    json_remark: npt.NDArray[np.uint8],
    remark: npt.NDArray[np.uint8],
) -> tuple[npt.NDArray[np.uint8], npt.NDArray[np.int64]]:
    """The frames answering stored sends, back to back, and where each starts (and the end):
    the answer to send i (``scan_frames``' row ``cols[:, i]``, none when it is one-way) in its
    header encoding to its opaque, whose messages are ``phys[ends[i - 1]:ends[i]]`` (offset ids
    ``prefix`` + 16 hex digits), queue ``cols[SCAN_QUEUE, i]`` from the first one's
    ``queue_offsets``, with ``code`` and (when not empty) a remark, given as JSON (quoted) and
    as text."""
    n = cols.shape[1]
    cap = 0
    for i in range(n):
        cap += (
            400 + len(json_remark) + len(remark) + (ends[i] - (ends[i - 1] if i else 0)) * (len(prefix) + 17)
        )
    out = np.empty(cap, dtype=np.uint8)
    at = np.empty(n + 1, dtype=np.int64)
    o = 0
    for i in range(n):
        at[i] = o
        if cols[SCAN_FLAG, i] & FLAG_ONEWAY:
            continue
        first = ends[i - 1] if i else 0
        kind = cols[SCAN_KIND, i]
        opaque = cols[SCAN_OPAQUE, i]
        queue = cols[SCAN_QUEUE, i]
        start = o
        o += 8  # the length and the header length words, below
        if kind == 0:
            o = _put_bytes(out, o, _J_CODE)
            o = _put_decimal(out, o, code)
            o = _put_bytes(out, o, _J_ID)
            o = _put_ids(out, o, prefix, phys, first, ends[i])
            o = _put_bytes(out, o, _J_QUEUE)
            o = _put_decimal(out, o, queue)
            o = _put_bytes(out, o, _J_OFFSET)
            o = _put_decimal(out, o, queue_offsets[first])
            o = _put_bytes(out, o, _J_REST)
            o = _put_decimal(out, o, opaque)
            if len(json_remark):
                o = _put_bytes(out, o, _J_REMARK)
                o = _put_bytes(out, o, json_remark)
            o = _put_bytes(out, o, _J_END)
        else:
            o = _put_binary_head(out, o, code, opaque, remark, 0, len(remark))
            ext_at = o
            o += 4
            o = _put_bytes(out, o, _B_ID)
            id_at = o
            o = _put_ids(out, o + 4, prefix, phys, first, ends[i])
            put_int(out, id_at, o - id_at - 4, 4)
            o = _put_binary_number(out, o, _B_QUEUE, queue)
            o = _put_binary_number(out, o, _B_OFFSET, queue_offsets[first])
            o = _put_bytes(out, o, _B_REGION)
            put_int(out, o, len(_REGION), 4)
            o += 4
            o = _put_bytes(out, o, _REGION)
            o = _put_bytes(out, o, _B_TRACE)
            put_int(out, o, len(_TRUE_TEXT), 4)
            o += 4
            o = _put_bytes(out, o, _TRUE_TEXT)
            put_int(out, ext_at, o - ext_at - 4, 4)
        h = o - start - 8
        put_int(out, start, h + 4, 4)
        put_int(out, start + 4, (kind << 24) | h, 4)
    at[n] = o
    return out[:o], at


_PULL_JSON_PARTS = _byte_arrays(
    b'{"code":',
    b',"extFields":{"suggestWhichBrokerId":"',
    b'","nextBeginOffset":"',
    b'","minOffset":"',
    b'","maxOffset":"',
    b'"},"flag":1,"language":"JAVA","opaque":',
    b',"remark":"',
    b'"',
)
_PA_CODE, _PA_BROKER, _PA_NEXT, _PA_MIN, _PA_MAX, _PA_OPAQUE, _PA_REMARK, _PA_QUOTE = _PULL_JSON_PARTS
_PA_END = _J_END
_PULL_BINARY_KEYS = _byte_arrays(
    *(
        struct.pack(">h", len(k)) + k
        for k in (b"suggestWhichBrokerId", b"nextBeginOffset", b"minOffset", b"maxOffset")
    )
)
_PB_BROKER, _PB_NEXT, _PB_MIN, _PB_MAX = _PULL_BINARY_KEYS


@kernel(cache=True)  # holds the GIL (see scan_frames)
def encode_pull_answers(
    kinds: npt.NDArray[np.int64],
    opaques: npt.NDArray[np.int64],
    codes: npt.NDArray[np.int64],
    numbers: npt.NDArray[np.int64],
    remark_ids: npt.NDArray[np.int64],
    remarks: npt.NDArray[np.uint8],
    remark_at: npt.NDArray[np.int64],
    records: npt.NDArray[np.uint8],
    record_at: npt.NDArray[np.int64],
    record_end: npt.NDArray[np.int64],
) -> tuple[npt.NDArray[np.uint8], npt.NDArray[np.int64]]:
    """The frames answering pulls, back to back, and where each starts (and the end): answer i
    in header encoding ``kinds[i]`` to request ``opaques[i]``, with ``codes[i]``, the header
    fields ``numbers[:, i]`` (suggestWhichBrokerId, nextBeginOffset, minOffset, maxOffset), remark
    j = ``remark_ids[i]``, ``remarks[remark_at[j]:remark_at[j + 1]]`` (none when j < 0; plain
    text that JSON needs no escape for) and, as its body, the stored records
    ``records[record_at[i]:record_end[i]]``. Byte for byte ``encode_command``'s frames."""
    n = len(kinds)
    cap = 0
    for i in range(n):
        cap += 300 + record_end[i] - record_at[i]
        j = remark_ids[i]
        if j >= 0:
            cap += remark_at[j + 1] - remark_at[j]
    out = np.empty(cap, dtype=np.uint8)
    at = np.empty(n + 1, dtype=np.int64)
    o = 0
    for i in range(n):
        at[i] = o
        start = o
        o += 8  # the length and the header length words, below
        j = remark_ids[i]
        r_at = remark_at[j] if j >= 0 else 0
        r_len = remark_at[j + 1] - r_at if j >= 0 else 0
        if kinds[i] == 0:
            o = _put_bytes(out, o, _PA_CODE)
            o = _put_decimal(out, o, codes[i])
            o = _put_bytes(out, o, _PA_BROKER)
            o = _put_decimal(out, o, numbers[0, i])
            o = _put_bytes(out, o, _PA_NEXT)
            o = _put_decimal(out, o, numbers[1, i])
            o = _put_bytes(out, o, _PA_MIN)
            o = _put_decimal(out, o, numbers[2, i])
            o = _put_bytes(out, o, _PA_MAX)
            o = _put_decimal(out, o, numbers[3, i])
            o = _put_bytes(out, o, _PA_OPAQUE)
            o = _put_decimal(out, o, opaques[i])
            if j >= 0:
                o = _put_bytes(out, o, _PA_REMARK)
                o = copy_bytes(out, o, remarks, r_at, r_len)
                o = _put_bytes(out, o, _PA_QUOTE)
            o = _put_bytes(out, o, _PA_END)
        else:
            o = _put_binary_head(out, o, codes[i], opaques[i], remarks, r_at, r_len)
            ext_at = o
            o += 4
            o = _put_binary_number(out, o, _PB_BROKER, numbers[0, i])
            o = _put_binary_number(out, o, _PB_NEXT, numbers[1, i])
            o = _put_binary_number(out, o, _PB_MIN, numbers[2, i])
            o = _put_binary_number(out, o, _PB_MAX, numbers[3, i])
            put_int(out, ext_at, o - ext_at - 4, 4)
        h = o - start - 8
        body = record_end[i] - record_at[i]
        put_int(out, start, h + 4 + body, 4)
        put_int(out, start + 4, (kinds[i] << 24) | h, 4)
        o = copy_bytes(out, o, records, record_at[i], body)
    at[n] = o
    return out[:o], at
