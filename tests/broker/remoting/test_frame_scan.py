"""``command.scan_frames`` against the one-by-one decoder: for any frames, every send the compiled
pass takes is the send ``decode_command`` and ``SendMessageHeader`` read (topic, queue, sysflag,
born time, flag, reconsume times, body, properties less WAIT=true), and its answer frames are
``encode_command``'s bytes; what it does not take is left whole to the handlers."""

from __future__ import annotations

import json

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rocketstore.broker.remoting.codes import RequestCode
from rocketstore.broker.remoting.command import (
    FLAG_ONEWAY,
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
    RemotingCommand,
    decode_command,
    encode_command,
    encode_send_answers,
    scan_frames,
)
from rocketstore.broker.remoting.headers import SendMessageHeader
from rocketstore.codec.message_batch import BatchEntry, decode_batch, encode_batch_body
from rocketstore.codec.properties import decode_properties

CLUSTER = b"CLUSTER\x01c1"
text = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12)
plain = st.text("abcXYZ019_-%|", min_size=1, max_size=10)
prop_name = st.sampled_from(
    ["TAGS", "KEYS", "UNIQ_KEY", "WAIT", "DELAY", "n", "é", "TIMER_DELAY_MS", "CLUSTER"]
)
prop_value = st.one_of(st.sampled_from(["true", "false", "1", "x y"]), text)


@st.composite
def send_frames(draw: st.DrawFn) -> RemotingCommand:
    """A send frame: mostly one the compiled pass may take, else anything near it."""
    fit = draw(st.integers(0, 3)) > 0
    batch = draw(st.booleans())
    value = st.text("abcxyz019 _-=", min_size=1, max_size=8) if fit else prop_value
    names = (["n", "WAIT"] if batch else ["TAGS", "KEYS", "n", "WAIT"]) if fit else prop_name
    props = draw(st.dictionaries(st.sampled_from(names) if fit else prop_name, value, max_size=4))
    if fit:
        if not batch:
            props["UNIQ_KEY"] = draw(plain)
        if "WAIT" in props:
            props["WAIT"] = "true"
    ending = draw(st.sampled_from(["", "\x02"]))
    raw_props = "\x02".join(f"{k}\x01{v}" for k, v in props.items()) + ending
    codes = [RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2, 320] + ([] if fit else [34])
    code = draw(st.sampled_from(codes))
    number = st.integers(-(2**31), 2**31 - 1) if fit else st.integers(-(2**33), 2**33)
    header = SendMessageHeader(
        draw(plain),
        draw(plain if fit else st.one_of(plain, text, st.just("%RETRY%g"))),
        "TBW102",
        4,
        draw(number),
        draw(st.sampled_from([0, 1, 0x101] if fit else [0, 1, 4, 8, 0x101])),
        draw(st.integers(-(2**63), 2**63 - 1)),
        draw(number),
        raw_props,
        draw(st.integers(0, 20)),
        False,
        draw(st.one_of(st.none(), st.integers(0, 20))),
        batch,
        None,
    )
    entries = [BatchEntry(0, b"m", "UNIQ_KEY\x01B")] if batch else []
    body = encode_batch_body(entries) if batch else draw(st.binary(max_size=20))
    return RemotingCommand(
        code,
        opaque=draw(st.integers(0, 2**31 - 1)),
        flag=draw(st.sampled_from([0, 2] if fit else [0, 2, FLAG_RESPONSE])),
        ext_fields=header.to_ext(v2=code != RequestCode.SEND_MESSAGE),
        body=body,
        serialize_type=draw(st.sampled_from([0, 1])),
    )


def frame_bytes(cmd: RemotingCommand) -> bytes:
    return b"".join(bytes(p) for p in encode_command(cmd))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(send_frames(), min_size=1, max_size=6))
def test_what_the_scan_takes_is_what_the_handlers_read(cmds: list[RemotingCommand]) -> None:
    buf = b"".join(frame_bytes(c) for c in cmds) + b"\x00\x00\x00"  # and a frame cut short
    status, end, cols, topic_rows, data, texts, extras = scan_frames(
        np.frombuffer(buf, dtype=np.uint8), 1 << 20, 1 << 20, np.frombuffer(CLUSTER, dtype=np.uint8)
    )
    assert status == 0 and end == len(buf) - 3 and cols.shape[1] == len(cmds)
    topics = [texts[a : a + n].tobytes().decode() for a, n in zip(cols[13, topic_rows], cols[14, topic_rows])]
    for i, sent in enumerate(cmds):
        at, length = int(cols[SCAN_AT, i]), int(cols[SCAN_LEN, i])
        cmd = decode_command(buf[at : at + length])
        assert (cmd.code, cmd.opaque) == (sent.code, sent.opaque)
        hot = int(cols[SCAN_HOT, i])
        if not hot:
            continue
        header = SendMessageHeader.from_ext(cmd.ext_fields, v2=cmd.code != RequestCode.SEND_MESSAGE)
        assert cmd.code in (RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2, 320)
        assert not cmd.flag & FLAG_RESPONSE and cols[SCAN_FLAG, i] == cmd.flag
        assert (cols[SCAN_OPAQUE, i], cols[SCAN_KIND, i]) == (cmd.opaque, cmd.serialize_type)
        assert topics[cols[SCAN_TOPIC, i]] == header.topic and not header.topic.startswith("%RETRY%")
        assert (cols[SCAN_QUEUE, i], cols[SCAN_BORN, i]) == (header.queue_id, header.born_timestamp)
        assert cols[SCAN_SYS_FLAG, i] == header.sys_flag & 0x703 and header.sys_flag & 0xC != 0x4
        assert cols[SCAN_RECONSUME, i] == header.reconsume_times
        props = decode_properties(header.properties)
        assert not {"DELAY", "TIMER_DELAY_MS", "CLUSTER"} & props.keys()
        d = data[cols[SCAN_DATA_AT, i] : cols[SCAN_DATA_AT, i] + cols[SCAN_DATA_LEN, i]].tobytes()
        extra = extras[cols[SCAN_EXTRA_AT, i] : cols[SCAN_EXTRA_AT, i] + cols[SCAN_EXTRA_LEN, i]].tobytes()
        if hot == HOT_BATCH:
            assert header.batch and d == bytes(cmd.body)
            own = header.properties.rstrip("\x02")
            assert extra == ((own + "\x02").encode() if own else b"") + CLUSTER
        else:
            assert hot == HOT_SINGLE and not header.batch and "UNIQ_KEY" in props
            assert props.get("WAIT", "true") == "true"
            [entry] = decode_batch(d)
            assert (entry.flag, entry.body) == (header.flag, bytes(cmd.body))
            assert decode_properties(entry.properties) == {k: v for k, v in props.items() if k != "WAIT"}
            assert extra == CLUSTER


@given(
    st.lists(
        st.tuples(
            st.sampled_from([0, 1]),
            st.integers(0, 2**31 - 1),
            st.integers(0, 7),
            st.integers(0, 5),
            st.sampled_from([0, 0, 0, FLAG_ONEWAY]),
        ),
        min_size=1,
        max_size=5,
    ),
    st.sampled_from([(0, ""), (10, "stored, but FLUSH_DISK_TIMEOUT")]),
)
@settings(max_examples=100, deadline=None)
def test_answers_are_encode_commands_bytes(
    rows: list[tuple[int, int, int, int, int]], status: tuple[int, str]
) -> None:
    """Each send's answer is the frame ``encode_command`` writes, its queue offset that of its
    first message; a one-way send gets none."""
    code, remark = status
    counts = [1 + r[3] % 3 for r in rows]
    ends = np.cumsum(counts)
    firsts = ends - counts
    phys = np.arange(int(ends[-1]), dtype=np.int64) * 977
    queue_offsets = np.arange(int(ends[-1]), dtype=np.int64) + 1000
    prefix = "7F00000100002A9F"
    cols = np.zeros((SCAN_EXTRA_LEN + 1, len(rows)), dtype=np.int64)
    cols[SCAN_KIND], cols[SCAN_OPAQUE], cols[SCAN_QUEUE], _, cols[SCAN_FLAG] = zip(*rows)
    out, at = encode_send_answers(
        cols, queue_offsets, phys, ends, code,
        np.frombuffer(prefix.encode(), dtype=np.uint8),
        np.frombuffer(json.dumps(remark).encode() if remark else b"", dtype=np.uint8),
        np.frombuffer(remark.encode(), dtype=np.uint8),
    )  # fmt: skip
    assert at[0] == 0 and at[-1] == len(out)
    for i, (kind, opaque, queue, _, flag) in enumerate(rows):
        if flag:
            assert at[i] == at[i + 1]
            continue
        ids = ",".join(f"{prefix}{int(p):016X}" for p in phys[firsts[i] : ends[i]])
        ext = {"msgId": ids, "queueId": str(queue), "queueOffset": str(queue_offsets[firsts[i]])}
        expected = RemotingCommand(
            code, opaque, FLAG_RESPONSE, {**ext, "MSG_REGION": "DefaultRegion", "TRACE_ON": "true"},
            remark or None, serialize_type=kind,
        )  # fmt: skip
        assert out[at[i] : at[i + 1]].tobytes() == frame_bytes(expected)
