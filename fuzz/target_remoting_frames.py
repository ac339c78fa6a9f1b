"""Fuzz target: the remoting door's frame readers, over a connection's hostile bytes.

    python fuzz/target_remoting_frames.py [libFuzzer options] [corpus dir]

Contract: ``scan_frames`` (the compiled pass over a read) and ``scan_consumer_request`` return the
same as their own code run as Python (``jit.interpret``, which is also what atheris instruments:
the compiled loops count no edges); the frames ``scan_frames`` calls whole tile the buffer up to
where it stopped, and it stops with a status exactly at a length outside 4..max_frame;
``decode_command`` raises nothing but CorruptDataError on any frame; a send the pass takes is
one the handler would read the same (``SendMessageHeader.from_ext``: topic, queue, flags, born
time, reconsume times, body, properties), and a consumer request ``scan_consumer_request`` takes
is read as its handler reads the decoded extFields.
"""

from __future__ import annotations

import dataclasses
import types
from collections.abc import Callable
from typing import Any

import numpy as np

import _harness
from rocketstore import jit
from rocketstore.broker.remoting import command, headers
from rocketstore.broker.remoting.codes import RequestCode
from rocketstore.broker.remoting.command import (
    CONSUMER_CODE,
    FLAG_RESPONSE,
    HOT_BATCH,
    HOT_SINGLE,
    SCAN_AT,
    SCAN_BORN,
    SCAN_DATA_AT,
    SCAN_DATA_LEN,
    SCAN_EXTRA_AT,
    SCAN_EXTRA_LEN,
    SCAN_FLAG,
    SCAN_HOT,
    SCAN_KIND,
    SCAN_LEN,
    SCAN_OPAQUE,
    SCAN_QUEUE,
    SCAN_RECONSUME,
    SCAN_SYS_FLAG,
    SCAN_TOPIC,
    SCAN_TOPIC_AT,
    SCAN_TOPIC_LEN,
    RemotingCommand,
    decode_command,
    encode_command,
    scan_consumer_request,
    scan_frames,
)
from rocketstore.broker.remoting.headers import SendMessageHeader, number, optional_number, text
from rocketstore.broker.remoting.refusal import RequestRefused
from rocketstore.broker.remoting.server import _consumer_request
from rocketstore.codec.message_batch import BatchEntry, decode_batch, encode_batch_body
from rocketstore.codec.properties import decode_properties
from rocketstore.errors import CorruptDataError

_harness.instrument(command, headers)
atheris = _harness.atheris

CLUSTER = np.frombuffer(b"CLUSTER\x01DefaultCluster", dtype=np.uint8)
MAX_BODY = 4096
CONSUMER_CODES = (
    RequestCode.PULL_MESSAGE,
    RequestCode.QUERY_CONSUMER_OFFSET,
    RequestCode.UPDATE_CONSUMER_OFFSET,
)


def _instrumented(kernel: Any) -> Callable[..., Any]:
    """``kernel``'s Python twin (``jit.interpret``'s), it and every kernel it calls instrumented."""
    twin = jit._python(kernel)
    seen: set[int] = set()

    def walk(fn: types.FunctionType) -> None:
        if id(fn) in seen:
            return
        seen.add(id(fn))
        for name in fn.__code__.co_names:
            value = fn.__globals__.get(name)
            if isinstance(value, types.FunctionType) and value.__module__.startswith("rocketstore"):
                walk(value)
        atheris.instrument_func(fn)

    assert isinstance(twin, types.FunctionType)
    walk(twin)
    return twin


_scan_frames_py = _instrumented(scan_frames)
_scan_consumer_py = _instrumented(scan_consumer_request)


def seeds() -> list[bytes]:
    def frame(cmd: RemotingCommand) -> bytes:
        return b"".join(bytes(p) for p in encode_command(cmd))

    send = SendMessageHeader(
        "pg", "TopicTest", "TBW102", 4, 2, 0, 1_700_000_000_000, 0,
        "TAGS\x01TagA\x02KEYS\x01k1\x02UNIQ_KEY\x017F0000010001\x02WAIT\x01true", 0, False, 16, False, None,
    )  # fmt: skip
    batch = dataclasses.replace(send, properties="n\x01v", batch=True)
    batch_body = encode_batch_body(
        [BatchEntry(0, b"m1", "UNIQ_KEY\x01A"), BatchEntry(0, b"m2", "UNIQ_KEY\x01B")]
    )
    pull = {
        "consumerGroup": "cg", "topic": "TopicTest", "queueId": "1", "queueOffset": "0",
        "maxMsgNums": "32", "sysFlag": "7", "commitOffset": "3", "suspendTimeoutMillis": "15000",
        "subscription": "TagA || TagB", "subVersion": "1700000000000", "expressionType": "TAG",
    }  # fmt: skip
    offsets = {"consumerGroup": "cg", "topic": "TopicTest", "queueId": "1"}
    out = []
    for kind in (0, 1):
        sends = [
            frame(
                RemotingCommand(code, 7 + j, ext_fields=header.to_ext(v2=v2), body=body, serialize_type=kind)
            )
            for j, (code, header, v2, body) in enumerate(
                (
                    (RequestCode.SEND_MESSAGE_V2, send, True, b"hello"),
                    (RequestCode.SEND_MESSAGE, send, False, b"x" * 40),
                    (RequestCode.SEND_BATCH_MESSAGE, batch, True, batch_body),
                )
            )
        ]
        consumers = [
            frame(RemotingCommand(code, 10 + j, ext_fields=ext, serialize_type=kind))
            for j, (code, ext) in enumerate(
                (
                    (RequestCode.PULL_MESSAGE, pull),
                    (RequestCode.QUERY_CONSUMER_OFFSET, offsets),
                    (RequestCode.UPDATE_CONSUMER_OFFSET, {**offsets, "commitOffset": "5"}),
                )
            )
        ]
        consumers.append(
            frame(RemotingCommand(RequestCode.HEART_BEAT, 13, body=b'{"clientID":"c"}', serialize_type=kind))
        )
        out += sends + consumers + [b"".join(sends + consumers), sends[0] + sends[2][:-5]]
    return out


def test_one_input(data: bytes) -> None:
    max_frame = 1 << 16
    u8 = np.frombuffer(data, dtype=np.uint8)
    compiled = scan_frames(u8, max_frame, MAX_BODY, CLUSTER)
    python = _scan_frames_py(u8, max_frame, MAX_BODY, CLUSTER)
    for name, a, b in zip(
        ("status", "end", "cols", "topic_rows", "data", "texts", "extras"), compiled, python
    ):
        if not np.array_equal(np.asarray(a), np.asarray(b)):
            raise AssertionError(f"scan_frames: compiled and Python disagree on {name}")
    status, end, cols, topic_rows, batch_data, texts, extras = compiled

    # the frames tile the buffer up to ``end``; a status exactly at a bad length
    pos = 0
    for i in range(cols.shape[1]):
        length = int.from_bytes(data[pos : pos + 4], "big", signed=True)
        if (int(cols[SCAN_AT, i]), int(cols[SCAN_LEN, i])) != (pos + 4, length):
            raise AssertionError(f"frame {i} is not where its length field says")
        pos += 4 + length
    if pos != end or end > len(data):
        raise AssertionError(f"scan_frames ended at {end}, its frames at {pos}")
    if len(data) - end >= 4:
        length = int.from_bytes(data[end : end + 4], "big", signed=True)
        bad = not 4 <= length <= max_frame
        if bool(status) != bad or (not bad and len(data) - end - 4 >= length):
            raise AssertionError(f"scan_frames stopped at {end} (status {status}) before a frame of {length}")
    elif status:
        raise AssertionError("scan_frames gave a status with no length left to read")

    topics = [
        texts[a : a + n].tobytes().decode()
        for a, n in zip(cols[SCAN_TOPIC_AT, topic_rows], cols[SCAN_TOPIC_LEN, topic_rows])
    ]
    for i in range(cols.shape[1]):
        at, length = int(cols[SCAN_AT, i]), int(cols[SCAN_LEN, i])
        try:
            cmd: RemotingCommand | None = decode_command(data[at : at + length])
        except CorruptDataError:
            cmd = None
        hot = int(cols[SCAN_HOT, i])
        if hot:
            if cmd is None:
                raise AssertionError(f"frame {i}: taken as a send, refused by decode_command")
            _check_send(cmd, hot, i, cols, topics, batch_data, extras)
        _check_consumer(u8, at, length, cmd)


def _check_send(
    cmd: RemotingCommand,
    hot: int,
    i: int,
    cols: np.ndarray,
    topics: list[str],
    batch_data: np.ndarray,
    extras: np.ndarray,
) -> None:
    if cmd.code not in (
        RequestCode.SEND_MESSAGE,
        RequestCode.SEND_MESSAGE_V2,
        RequestCode.SEND_BATCH_MESSAGE,
    ):
        raise AssertionError(f"frame {i}: code {cmd.code} taken as a send")
    try:
        header = SendMessageHeader.from_ext(cmd.ext_fields, v2=cmd.code != RequestCode.SEND_MESSAGE)
    except RequestRefused as exc:
        raise AssertionError(f"frame {i}: taken as a send, its handler refuses it: {exc.remark}") from None
    rows = (SCAN_FLAG, SCAN_OPAQUE, SCAN_KIND, SCAN_QUEUE, SCAN_BORN, SCAN_SYS_FLAG, SCAN_RECONSUME)
    got = (topics[int(cols[SCAN_TOPIC, i])], *(int(cols[r, i]) for r in rows))
    want = (
        header.topic,
        cmd.flag,
        cmd.opaque,
        cmd.serialize_type,
        header.queue_id,
        header.born_timestamp,
        header.sys_flag & 0x703,
        header.reconsume_times or 0,
    )
    if cmd.flag & FLAG_RESPONSE or got != want:
        raise AssertionError(f"frame {i}: the pass read {got}, the handler {want}")
    d_at, d_len = int(cols[SCAN_DATA_AT, i]), int(cols[SCAN_DATA_LEN, i])
    stored = batch_data[d_at : d_at + d_len].tobytes()
    x_at, x_len = int(cols[SCAN_EXTRA_AT, i]), int(cols[SCAN_EXTRA_LEN, i])
    extra = extras[x_at : x_at + x_len].tobytes()
    props = decode_properties(header.properties)
    if hot == HOT_BATCH:
        if not header.batch or stored != bytes(cmd.body) or not extra.endswith(CLUSTER.tobytes()):
            raise AssertionError(f"frame {i}: a batch's body or properties differ from the handler's")
        return
    if hot != HOT_SINGLE or header.batch or "UNIQ_KEY" not in props:
        raise AssertionError(f"frame {i}: hot {hot} for a send the handler reads otherwise")
    [entry] = decode_batch(stored)
    mine = {k: v for k, v in props.items() if k != "WAIT"}  # the handler drops it too
    if (entry.flag, entry.body, decode_properties(entry.properties)) != (header.flag, bytes(cmd.body), mine):
        raise AssertionError(f"frame {i}: the message stored differs from the one sent")


def _check_consumer(u8: np.ndarray, at: int, length: int, cmd: RemotingCommand | None) -> None:
    compiled = scan_consumer_request(u8, at, length)
    python = _scan_consumer_py(u8, at, length)
    if compiled[0] != python[0] or (
        compiled[0]
        and not all(np.array_equal(np.asarray(a), np.asarray(b)) for a, b in zip(compiled[1:], python[1:]))
    ):
        raise AssertionError("scan_consumer_request: compiled and Python disagree")
    ok, numbers, texts = compiled
    if not ok:
        return
    if cmd is None or cmd.code not in CONSUMER_CODES or cmd.is_response:
        raise AssertionError("scan_consumer_request took a frame decode_command refuses or reads otherwise")
    if (int(numbers[CONSUMER_CODE]), int(numbers[0]), int(numbers[1])) != (
        cmd.code,
        cmd.serialize_type,
        cmd.opaque,
    ):
        raise AssertionError("scan_consumer_request read another code, encoding or opaque")
    read, pull = _consumer_request(numbers.tolist(), texts.tobytes())
    ext = cmd.ext_fields
    try:
        if cmd.code != RequestCode.PULL_MESSAGE:
            names = ["consumerGroup", "topic", "queueId"]
            if cmd.code == RequestCode.UPDATE_CONSUMER_OFFSET:
                names.append("commitOffset")
            want: tuple[object, ...] = (
                text(ext, "consumerGroup"),
                text(ext, "topic"),
                *(number(ext, name, java_int=name == "queueId") for name in names[2:]),
            )
            got: tuple[object, ...] = (
                read.ext_fields["consumerGroup"],
                read.ext_fields["topic"],
                *(int(read.ext_fields[name]) for name in names[2:]),
            )
        else:
            sys_flag = number(ext, "sysFlag")
            want = (
                text(ext, "consumerGroup"), text(ext, "topic"), number(ext, "queueId", java_int=True),
                number(ext, "queueOffset"), number(ext, "maxMsgNums"), sys_flag,
                number(ext, "commitOffset") if sys_flag & 1 else 0,
                number(ext, "suspendTimeoutMillis") if sys_flag & 2 else 0,
                optional_number(ext, "subVersion") or 0,
                ext.get("subscription") or None, ext.get("expressionType") or None,
            )  # fmt: skip
            assert pull is not None
            got = (*pull[:9], pull.subscription or None, pull.expression_type or None)
    except RequestRefused as exc:
        raise AssertionError(
            f"scan_consumer_request took a request its handler refuses: {exc.remark}"
        ) from None
    if got != want:
        raise AssertionError(f"scan_consumer_request read {got}, the handler {want}")


if __name__ == "__main__":
    _harness.fuzz(test_one_input, seeds)
