"""The RemotingCommand frame, both header encodings, custom headers and the batch body, against
the bytes REMOTING.md quotes from RocketMQ 4.9.8 (verified there with the Java jars)."""

from __future__ import annotations

import json
import struct

import pytest

from rocketstore.broker.remoting.codes import LANGUAGES, ResponseCode
from rocketstore.broker.remoting.command import (
    FLAG_ONEWAY,
    FLAG_RESPONSE,
    SERIALIZE_JSON,
    SERIALIZE_ROCKETMQ,
    RemotingCommand,
    decode_command,
    encode_command,
    frame_length,
)
from rocketstore.broker.remoting.headers import SendMessageHeader, flag, number, text, to_ext
from rocketstore.broker.remoting.refusal import RequestRefused
from rocketstore.codec.message_batch import BatchEntry, decode_batch, encode_batch_body
from rocketstore.errors import CorruptDataError


def frame(cmd: RemotingCommand) -> bytes:
    return b"".join(bytes(b) for b in encode_command(cmd))


def test_binary_header_matches_the_java_example() -> None:
    # REMOTING.md §1.4: SEND_MESSAGE_V2, JAVA, version 409, opaque 1, flag 0, no remark, a=pg first
    cmd = RemotingCommand(
        code=310, opaque=1, ext_fields={"a": "pg"}, serialize_type=SERIALIZE_ROCKETMQ, body=b"hello"
    )
    data = frame(cmd)
    header = bytes.fromhex("0136 00 0199 00000001 00000000 00000000 00000009 0001 61 00000002 7067")
    assert data[8 : 8 + len(header)] == header
    (length, word) = struct.unpack(">ii", data[:8])
    assert word >> 24 == SERIALIZE_ROCKETMQ and word & 0xFFFFFF == len(header)
    assert length == 4 + len(header) + 5 and data.endswith(b"hello")
    back = decode_command(data[4:])
    assert (back.code, back.opaque, back.flag, back.version, back.language) == (310, 1, 0, 409, "JAVA")
    assert back.ext_fields == {"a": "pg"} and bytes(back.body) == b"hello"
    assert back.serialize_type == SERIALIZE_ROCKETMQ


def test_json_header_keys_and_decoding_leniency() -> None:
    response = RemotingCommand(code=0, opaque=7, flag=FLAG_RESPONSE, ext_fields={"queueId": "1"})
    data = frame(response)
    header = json.loads(data[8:])
    # what the client needs: code, flag, opaque always; language and version 409
    assert header == {
        "code": 0,
        "extFields": {"queueId": "1"},
        "flag": 1,
        "language": "JAVA",
        "opaque": 7,
        "serializeTypeCurrentRPC": "JSON",
        "version": 409,
    }
    assert list(header) == sorted(header)  # Java's order
    # fastjson reads numbers and booleans in extFields as text, a quoted code, \u0001 escapes
    text_header = (
        b'{"code":"310","extFields":{"a":"pg","d":4,"k":false,"i":"TAGS\\u0001t"},"flag":0,'
        b'"language":"JAVA","opaque":3,"unknown":[1],"version":409}'
    )
    raw = struct.pack(">i", len(text_header)) + text_header
    cmd = decode_command(raw)
    assert cmd.code == 310 and cmd.opaque == 3
    assert cmd.ext_fields == {"a": "pg", "d": "4", "k": "false", "i": "TAGS\x01t"}
    assert cmd.serialize_type == SERIALIZE_JSON


@pytest.mark.parametrize("kind", [SERIALIZE_JSON, SERIALIZE_ROCKETMQ])
def test_round_trip(kind: int) -> None:
    cmd = RemotingCommand(
        code=11,
        opaque=-5,
        flag=FLAG_ONEWAY,
        ext_fields={"topic": "T", "ключ": "значение"},
        remark="why",
        body=bytes(range(256)),
        language="GO",
        version=401,
        serialize_type=kind,
    )
    back = decode_command(frame(cmd)[4:])
    assert (back.code, back.opaque, back.flag, back.remark, back.language, back.version) == (
        11,
        -5,
        FLAG_ONEWAY,
        "why",
        "GO",
        401,
    )
    assert back.ext_fields == cmd.ext_fields and bytes(back.body) == bytes(range(256))
    assert back.is_oneway and not back.is_response


def test_binary_empty_strings_are_absent() -> None:
    cmd = RemotingCommand(
        code=1, ext_fields={"a": "", "b": "x"}, remark="", serialize_type=SERIALIZE_ROCKETMQ
    )
    back = decode_command(frame(cmd)[4:])
    assert back.ext_fields == {"b": "x"} and back.remark is None


def binary_frame(header: bytes, body: bytes = b"", h: int | None = None, kind: int = 1) -> bytes:
    hl = len(header) if h is None else h
    return struct.pack(">i", (kind << 24) | hl) + header + body


FIXED = struct.pack(">hbhii", 34, 0, 409, 1, 0)


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"\x00\x00", "no header length"),
        (binary_frame(b"{}", h=10, kind=0), "exceeds the frame"),
        (binary_frame(b"{}", kind=7), "unknown header serialization type 7"),
        (binary_frame(b"{not json", kind=0), "does not parse"),
        (binary_frame(b"[1,2]", kind=0), "not an object"),
        (binary_frame(b'{"code":"x"}', kind=0), "not an integer"),
        (binary_frame(b'{"code":1,"extFields":[1]}', kind=0), "extFields is not an object"),
        (binary_frame(b"\xff\xfe", kind=0), "does not parse"),
        (binary_frame(FIXED[:5]), "shorter than its fixed"),
        (binary_frame(FIXED + struct.pack(">i", 100) + struct.pack(">i", 0)), "remark length 100"),
        (binary_frame(FIXED + struct.pack(">ii", 0, 50)), "extFields length 50"),
        (binary_frame(FIXED + struct.pack(">ii", 0, 8) + struct.pack(">h", 40) + b"abcdef"), "key length 40"),
        (
            binary_frame(
                FIXED + struct.pack(">ii", 0, 8) + struct.pack(">h", 1) + b"a" + struct.pack(">i", 9) + b"x"
            ),
            "value length 9",
        ),
        (binary_frame(FIXED + struct.pack(">ii", 0, 4) + b"abcd"), "cut short"),
        (
            binary_frame(FIXED + struct.pack(">i", 2) + b"\xff\xfe" + struct.pack(">i", 0)),
            "remark is not UTF-8",
        ),
    ],
)
def test_malformed_frames_are_refused(data: bytes, reason: str) -> None:
    with pytest.raises(CorruptDataError, match=reason):
        decode_command(data)


def test_frame_length_bounds() -> None:
    assert frame_length(struct.pack(">i", 4)) == 4
    for bad in (3, -1, 16 * 1024 * 1024 + 1):
        with pytest.raises(CorruptDataError, match="frame length"):
            frame_length(struct.pack(">i", bad))
    with pytest.raises(CorruptDataError):
        frame_length(struct.pack(">i", 2000), max_frame=1024)


def test_send_header_short_and_long_names() -> None:
    header = SendMessageHeader(
        producer_group="pg",
        topic="T",
        default_topic="TBW102",
        default_topic_queue_nums=4,
        queue_id=1,
        sys_flag=0x301,
        born_timestamp=1700000000000,
        flag=0,
        properties="UNIQ_KEY\x01abc\x02WAIT\x01true",
        reconsume_times=0,
        unit_mode=False,
        max_reconsume_times=None,
        batch=False,
        broker_name="broker-a",
    )
    v2 = header.to_ext()
    assert v2["a"] == "pg" and v2["f"] == "769" and v2["k"] == "false" and v2["n"] == "broker-a"
    assert "l" not in v2
    assert SendMessageHeader.from_ext(v2, v2=True) == header
    v1 = header.to_ext(v2=False)
    assert v1["producerGroup"] == "pg" and v1["bname"] == "broker-a"
    assert SendMessageHeader.from_ext(v1, v2=False) == header
    del v2["b"]
    with pytest.raises(RequestRefused, match=r"topic \(b\) is null"):
        SendMessageHeader.from_ext(v2, v2=True)


def test_header_field_readers() -> None:
    ext = {"n": "12", "bad": "x", "t": "TRUE", "s": "v"}
    assert number(ext, "n") == 12 and text(ext, "s") == "v"
    assert flag(ext, "t") and not flag(ext, "s") and not flag(ext, "missing")
    with pytest.raises(RequestRefused, match="the custom field bad is 'x', not a Java long"):
        number(ext, "bad")
    # what Java's broker parses (Long.parseLong, Integer.parseInt), nothing more
    edges = {"lo": str(-(1 << 63)), "hi": str((1 << 63) - 1), "plus": "+7", "ihi": str((1 << 31) - 1)}
    assert [number(edges, k) for k in ("lo", "hi", "plus")] == [-(1 << 63), (1 << 63) - 1, 7]
    assert number(edges, "ihi", java_int=True) == (1 << 31) - 1
    for value in [str(1 << 63), str(-(1 << 63) - 1), str(1 << 64), "1_0", " 1", "1 ", "٣", "", "0x10"]:
        with pytest.raises(RequestRefused, match="not a Java long") as err:
            number({"f": value}, "f")
        assert err.value.code == ResponseCode.SYSTEM_ERROR
    for value in [str(1 << 31), str(-(1 << 31) - 1), str(1 << 64)]:
        with pytest.raises(RequestRefused, match=r"the custom field queueId is .*, not a Java int"):
            number({"queueId": value}, "queueId", java_int=True)
    with pytest.raises(RequestRefused, match="the custom field missing is null"):
        text(ext, "missing")
    assert to_ext(a=True, b=None, c=-1) == {"a": "true", "c": "-1"}


def test_batch_body_round_trip_and_damage() -> None:
    entries = [BatchEntry(0, b"one", "UNIQ_KEY\x01u1\x02TAGS\x01a"), BatchEntry(7, b"", "UNIQ_KEY\x01u2")]
    body = encode_batch_body(entries)
    assert decode_batch(body) == entries
    first_len = struct.unpack(">i", body[:4])[0]
    assert first_len == 20 + 3 + 2 + len(entries[0].properties)
    with pytest.raises(CorruptDataError, match="cut short"):
        decode_batch(body[:10])
    with pytest.raises(CorruptDataError, match="TOTALSIZE"):
        decode_batch(body[:-1])
    bad = bytearray(body)
    struct.pack_into(">i", bad, 16, 1000)  # body length past the message
    with pytest.raises(CorruptDataError, match="body length 1000"):
        decode_batch(bytes(bad))
    bad = bytearray(body)
    struct.pack_into(">h", bad, 23, 3)  # properties length short of TOTALSIZE
    with pytest.raises(CorruptDataError, match="properties length 3"):
        decode_batch(bytes(bad))


def _reference_decode_binary(data: bytes) -> tuple[int, int, int, int, int, str | None, dict[str, str]]:
    """The binary header read field by field, straight from REMOTING.md §1.4 (the codec's
    unrolled reading must agree with it on every input)."""
    code, language, version, opaque, flag_value, remark_len = struct.unpack_from(">hbhiii", data, 0)
    pos = 17
    remark = data[pos : pos + remark_len].decode() if remark_len else None
    pos += remark_len
    (ext_len,) = struct.unpack_from(">i", data, pos)
    pos += 4
    end = pos + ext_len
    fields = {}
    while pos < end:
        (klen,) = struct.unpack_from(">h", data, pos)
        key = data[pos + 2 : pos + 2 + klen].decode()
        pos += 2 + klen
        (vlen,) = struct.unpack_from(">i", data, pos)
        value = data[pos + 4 : pos + 4 + vlen].decode()
        pos += 4 + vlen
        if key and value:
            fields[key] = value
    return code, language, version, opaque, flag_value, remark, fields


def _send_request_header() -> bytes:
    header = SendMessageHeader(
        producer_group="pg",
        topic="Tópic",
        default_topic="TBW102",
        default_topic_queue_nums=4,
        queue_id=3,
        sys_flag=0,
        born_timestamp=1700000000000,
        flag=0,
        properties="UNIQ_KEY\x01abc\x02WAIT\x01true\x02",
        reconsume_times=0,
        unit_mode=False,
        max_reconsume_times=16,
        batch=False,
        broker_name="broker-a",
    )
    cmd = RemotingCommand(
        code=310, opaque=9, remark="rémark", ext_fields=header.to_ext(), serialize_type=SERIALIZE_ROCKETMQ
    )
    return frame(cmd)[8:]


def test_binary_header_decoding_agrees_with_the_field_by_field_reading_on_damaged_headers() -> None:
    good = _send_request_header()
    damaged = [good[:cut] for cut in range(len(good))]
    for i in range(len(good)):
        for byte in (0x00, 0x7F, 0x80, 0xFF, good[i] ^ 0x01):
            damaged.append(good[:i] + bytes([byte]) + good[i + 1 :])
    decoded = refused = 0
    for header in [good, *damaged]:
        try:
            cmd = decode_command(struct.pack(">i", (SERIALIZE_ROCKETMQ << 24) | len(header)) + header)
        except CorruptDataError as exc:
            assert str(exc).startswith("binary header")  # never an IndexError or struct.error
            refused += 1
            continue
        decoded += 1
        code, language, *rest = _reference_decode_binary(header)
        assert (cmd.code, cmd.version, cmd.opaque, cmd.flag, cmd.remark, cmd.ext_fields) == (code, *rest)
        assert cmd.language == (LANGUAGES[language] if 0 <= language < len(LANGUAGES) else "OTHER")
    assert decoded > 100 and refused > 100


def test_binary_header_encoding_is_the_field_by_field_writing() -> None:
    ext = {"msgId": "AC11000100002A9F0000000000001234", "queueId": "3", "ключ": "значение", "e": ""}
    cmd = RemotingCommand(code=0, opaque=5, flag=FLAG_RESPONSE, ext_fields=ext, remark="r", serialize_type=1)
    entries = b"".join(
        struct.pack(">h", len(k.encode())) + k.encode() + struct.pack(">i", len(v.encode())) + v.encode()
        for k, v in ext.items()
    )
    expected = struct.pack(">hbhiii", 0, 0, 409, 5, FLAG_RESPONSE, 1) + b"r" + struct.pack(">i", len(entries))
    for _ in range(2):  # the second time from the encoded-key cache
        assert frame(cmd)[8:] == expected + entries


@pytest.mark.parametrize("v2", [True, False])
def test_send_header_reading_agrees_with_the_field_by_field_reading(v2: bool) -> None:
    good = SendMessageHeader(
        "pg", "T", "TBW102", 4, 1, 0, 1700000000000, 0, "WAIT\x01true", 2, True, 16, False, "broker-a"
    ).to_ext(v2=v2)
    variants = [good]
    for key in good:
        for value in (None, "", "x", " 7 ", "-1", "TRUE", "1.5"):
            ext = dict(good)
            if value is None:
                del ext[key]
            else:
                ext[key] = value
            variants.append(ext)
    for ext in variants:
        try:
            expected: object = SendMessageHeader._from_ext_by_field(ext, v2=v2)
        except RequestRefused as exc:
            expected = (exc.code, exc.remark)
        try:
            got: object = SendMessageHeader.from_ext(ext, v2=v2)
        except RequestRefused as exc:
            got = (exc.code, exc.remark)
        assert got == expected, ext
