"""Pulls in bulk (``bulk_pulls``, ``command.encode_pull_answers``): pipelined pulls from several
connections read by one store call and answered byte for byte as their handler answers them,
refusals and parked pulls included."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rocketstore import Message
from rocketstore.broker.remoting.codes import RequestCode, ResponseCode
from rocketstore.broker.remoting.command import (
    FLAG_ONEWAY,
    SERIALIZE_JSON,
    SERIALIZE_ROCKETMQ,
    RemotingCommand,
    encode_command,
    encode_pull_answers,
)
from rocketstore.broker.remoting.headers import to_ext
from rocketstore.broker.remoting.pull import response_code
from rocketstore.results import GetStatus, RecordRead, RecordsResult

from .client import RawClient
from .conftest import Remoting, StartRemoting
from .test_bulk_sends import send_cmd
from .test_consumer_requests import bodies, pull_ext, wait_for

STATUSES = list(GetStatus)


def frame(cmd: RemotingCommand) -> bytes:
    return b"".join(bytes(p) for p in encode_command(cmd))


answer_rows = st.lists(
    st.tuples(
        st.sampled_from([SERIALIZE_JSON, SERIALIZE_ROCKETMQ]),
        st.integers(0, 2**31 - 1),
        st.sampled_from([0, 19, 20, 21, 1, 17]),
        st.tuples(st.just(0), st.integers(0, 2**62), st.integers(0, 2**40), st.integers(0, 2**62)),
        st.integers(-1, len(STATUSES) - 1),
        st.binary(max_size=300),
    ),
    max_size=20,
)


@settings(max_examples=200, deadline=None)
@given(answer_rows)
def test_pull_answers_are_encode_commands_bytes(rows: list[tuple]) -> None:
    remarks = "".join(s.value for s in STATUSES).encode()
    remark_at = np.cumsum([0] + [len(s.value) for s in STATUSES], dtype=np.int64)
    expected, records, record_at = b"", b"", []
    for kind, opaque, code, numbers, remark, body in rows:
        header = to_ext(
            suggestWhichBrokerId=numbers[0],
            nextBeginOffset=numbers[1],
            minOffset=numbers[2],
            maxOffset=numbers[3],
        )
        request = RemotingCommand(RequestCode.PULL_MESSAGE, opaque, serialize_type=kind)
        answer = request.response(
            code, remark=STATUSES[remark].value if remark >= 0 else None, ext_fields=header, body=body
        )
        expected += frame(answer)
        record_at.append(len(records))
        records += body
    # the bodies in another order in the records buffer: each answer finds its own
    starts = np.array(record_at, dtype=np.int64)
    ends = starts + np.array([len(r[5]) for r in rows], dtype=np.int64)
    column = np.array  # (the kernel takes int64 columns)
    frames, at = encode_pull_answers(
        column([r[0] for r in rows], dtype=np.int64),
        column([r[1] for r in rows], dtype=np.int64),
        column([r[2] for r in rows], dtype=np.int64),
        column([r[3] for r in rows], dtype=np.int64).reshape(len(rows), 4).T.copy(),
        column([r[4] for r in rows], dtype=np.int64),
        np.frombuffer(remarks, dtype=np.uint8).copy(),
        remark_at,
        np.frombuffer(bytearray(records), dtype=np.uint8),
        starts,
        ends,
    )
    assert frames.tobytes() == expected
    assert at[0] == 0 and at[-1] == len(expected) and len(at) == len(rows) + 1


def fill(r: Remoting) -> None:
    r.store.create_topic("T", 2)
    for i in range(40):
        assert r.store.put_message(Message("T", f"m{i}".encode(), tags=f"t{i % 2}", queue_id=i % 2)).ok
    r.store.wait_dispatched()


def expected_answer(r: Remoting, cmd: RemotingCommand) -> tuple[int, str | None, dict[str, str], bytes]:
    """What the handler answers: code, remark, header and the records as stored."""
    ext = cmd.ext_fields
    offset = int(ext["queueOffset"])
    tags = None if ext["subscription"] == "*" else ext["subscription"]
    got = r.store.get_message("g", ext["topic"], int(ext["queueId"]), offset, int(ext["maxMsgNums"]), tags)
    header = to_ext(
        suggestWhichBrokerId=0,
        nextBeginOffset=got.next_begin_offset,
        minOffset=got.min_offset,
        maxOffset=got.max_offset,
    )
    code = response_code(got.status, offset)
    remark = None if code == ResponseCode.SUCCESS else got.status.value
    return code, remark, header, b"".join(bytes(m.record_view) for m in got.messages)


@pytest.mark.parametrize("memory", [None, 2500], ids=["in-memory", "half-on-disk"])
def test_pipelined_pulls_of_many_connections_are_answered_in_bulk(
    start_remoting: StartRemoting, monkeypatch: pytest.MonkeyPatch, memory: int | None
) -> None:
    """Read on the loop, or (``memory``: as on a machine whose memory holds only the log's last
    2,500 bytes) the older records on the store's thread: the same answers."""
    import rocketstore.read_path

    if memory is not None:
        monkeypatch.setattr(rocketstore.read_path, "in_memory_bytes", lambda: memory)
    r = start_remoting()
    fill(r)
    pulls = r.broker.remoting.broker.pulls
    assert pulls is not None
    before = pulls.answered
    reads = "rocketstore_broker_pull_reads_total"
    reads_before = r.broker.metrics.registry.get_sample_value(reads) or 0.0
    calls: list[tuple[bool, int]] = []  # (in_memory_only, reads not done)
    get_records = r.store.get_records

    def recorded(reads: list[RecordRead], *, in_memory_only: bool = False) -> RecordsResult:
        found = get_records(reads, in_memory_only=in_memory_only)
        calls.append((in_memory_only, found.statuses.count(None)))
        return found

    monkeypatch.setattr(r.store, "get_records", recorded)
    variants = [
        pull_ext("T", 0),
        pull_ext("T", 3, queueId=1, maxMsgNums=5),
        pull_ext("T", 2, sub="t0 || t1"),
        pull_ext("T", 0, sub="t1"),  # queue 0 holds t0 only: nothing matches
        pull_ext("T", 20),  # the end of the queue, not suspended
        pull_ext("T", 90),  # far past it: OFFSET_MOVED
        pull_ext("T", 19, queueId=1),
    ]
    with RawClient(r.port) as a, RawClient(r.port) as b:
        sent: dict[RawClient, list[RemotingCommand]] = {a: [], b: []}
        for c, kind in ((a, SERIALIZE_JSON), (b, SERIALIZE_ROCKETMQ)):
            for i, ext in enumerate(variants * 3):
                cmd = RemotingCommand(
                    RequestCode.PULL_MESSAGE, opaque=1000 + i, ext_fields=ext, serialize_type=kind
                )
                sent[c].append(cmd)
            refused = RemotingCommand(
                RequestCode.PULL_MESSAGE, opaque=5000, ext_fields=pull_ext("Nope", 0), serialize_type=kind
            )
            oneway = RemotingCommand(
                RequestCode.PULL_MESSAGE, opaque=6000, flag=FLAG_ONEWAY, ext_fields=pull_ext("T", 0)
            )
            c.send_raw(b"".join(frame(cmd) for cmd in [*sent[c], refused, oneway]))
        for c, kind in ((a, SERIALIZE_JSON), (b, SERIALIZE_ROCKETMQ)):
            for cmd in sent[c]:
                got = c.response_to(cmd.opaque)
                want = expected_answer(r, cmd)
                assert (got.code, got.remark, got.ext_fields, got.body) == want, cmd.ext_fields
                assert got.serialize_type == kind and got.is_response
            nope = c.response_to(5000)
            assert nope.code == ResponseCode.TOPIC_NOT_EXIST
            assert nope.remark == "topic[Nope] not exist, apply first please!"
            # nothing answers the oneway pull: the next answer is to the next request
            assert c.call(RequestCode.PULL_MESSAGE, pull_ext("T", 1)).opaque != 6000
    assert pulls.answered - before >= 2 * 3 * len(variants)
    assert r.broker.metrics.registry.get_sample_value(reads) == reads_before + len(calls)  # each counted
    left = sum(n for in_memory_only, n in calls if in_memory_only)  # by the loop, for the thread
    on_thread = [n for in_memory_only, n in calls if not in_memory_only]
    if memory is None:
        assert calls and left == 0 and not on_thread
    else:
        assert left > 0 and on_thread and not any(on_thread)  # the thread did every read left


def test_a_pull_that_finds_nothing_parks_and_the_others_are_answered_meanwhile(
    start_remoting: StartRemoting,
) -> None:
    r = start_remoting()
    fill(r)
    with RawClient(r.port) as c:
        parked = RemotingCommand(
            RequestCode.PULL_MESSAGE, opaque=1, ext_fields=pull_ext("T", 20, sys_flag=0x6, suspend=20000)
        )
        quick = RemotingCommand(RequestCode.PULL_MESSAGE, opaque=2, ext_fields=pull_ext("T", 0))
        c.send_raw(frame(parked) + frame(quick))
        first = c.read()
        assert first.opaque == 2 and first.code == ResponseCode.SUCCESS
        assert r.store.put_message(Message("T", b"late", queue_id=0)).ok
        late = c.response_to(1)
        assert late.code == ResponseCode.SUCCESS and late.ext_fields["nextBeginOffset"] == "21"
        assert bodies(late.body) == [(20, b"late")]


def test_a_reads_pull_is_answered_before_the_round_of_sends_it_came_with(
    start_remoting: StartRemoting,
) -> None:
    """One read with a round's worth of sends and a pull: the pull is read and answered in the
    turn that read it, before the sends' round (at the next turn) stores and answers them."""
    r = start_remoting()
    fill(r)
    bulk = r.broker.remoting.broker.bulk
    assert bulk is not None
    before = bulk.requests
    sends = [send_cmd("T", f"s{i}".encode(), {"UNIQ_KEY": f"U{i}"}, 100 + i, queue_id=1) for i in range(16)]
    pull = RemotingCommand(RequestCode.PULL_MESSAGE, opaque=7, ext_fields=pull_ext("T", 0, maxMsgNums=3))
    with RawClient(r.port) as c:
        c.send_raw(b"".join(frame(cmd) for cmd in sends) + frame(pull))
        first = c.read()
        assert first.opaque == 7 and first.code == ResponseCode.SUCCESS
        assert bodies(first.body) == [(0, b"m0"), (1, b"m2"), (2, b"m4")]
        rest = [c.read() for _ in sends]
    assert sorted(a.opaque for a in rest) == [cmd.opaque for cmd in sends]
    assert {a.code for a in rest} == {ResponseCode.SUCCESS}
    assert bulk.requests - before == len(sends)  # the sends went in bulk, as one round


weird_number = st.sampled_from(
    ["", "+5", "-0", "007", "1_0", " 1", "--3", "x", "9" * 20, "٣", "2147483648", "-2147483649"]
)
FIELDS = (
    "consumerGroup", "topic", "queueId", "queueOffset", "maxMsgNums", "sysFlag", "commitOffset",
    "suspendTimeoutMillis", "subscription", "subVersion", "expressionType",
)  # fmt: skip


@st.composite
def pull_fields(draw: st.DrawFn) -> dict[str, str]:
    """A pull's extFields: mostly what a client sends, some fields dropped or made odd."""
    ext = {
        "consumerGroup": draw(st.sampled_from(["g", "cg-1", "", "é"])),
        "topic": draw(st.sampled_from(["T", "%RETRY%g", "", "a b"])),
        "queueId": str(draw(st.integers(-(2**31), 2**31 - 1))),
        "queueOffset": str(draw(st.integers(-(2**63), 2**63 - 1))),
        "maxMsgNums": str(draw(st.integers(-5, 100))),
        "sysFlag": str(draw(st.integers(0, 15))),
        "commitOffset": str(draw(st.integers(-(2**63), 2**63 - 1))),
        "suspendTimeoutMillis": str(draw(st.integers(-5, 10**6))),
        "subscription": draw(st.sampled_from(["*", "a || b", "", "é"])),
        "subVersion": str(draw(st.integers(-(2**63), 2**63 - 1))),
        "expressionType": draw(st.sampled_from(["TAG", "SQL92", ""])),
    }
    for name in draw(st.lists(st.sampled_from(FIELDS), max_size=2)):
        if draw(st.booleans()):
            ext.pop(name, None)
        else:
            ext[name] = draw(weird_number)
    if draw(st.booleans()):
        ext["other"] = draw(st.text(max_size=5))
    return ext


def test_parked_pulls_are_bounded_woken_together_and_expire(start_remoting: StartRemoting) -> None:
    r = start_remoting()
    fill(r)
    pulls = r.broker.remoting.broker.pulls
    assert pulls is not None
    processor = r.broker.remoting.broker._handlers[RequestCode.PULL_MESSAGE].__self__  # type: ignore[union-attr, attr-defined]
    processor.max_suspended = 3
    with RawClient(r.port) as a, RawClient(r.port) as b:
        parked = [
            RemotingCommand(
                RequestCode.PULL_MESSAGE,
                opaque=10 + i,
                ext_fields=pull_ext("T", 20, sys_flag=0x6, suspend=20000),
            )
            for i in range(3)
        ]
        a.send_raw(b"".join(frame(cmd) for cmd in parked))
        wait_for(lambda: pulls.parked == 3 and processor.suspended == 3, "three parked pulls")
        # a fourth is past the bound: SYSTEM_BUSY, which the client retries later
        busy = b.call(RequestCode.PULL_MESSAGE, pull_ext("T", 20, sys_flag=0x6, suspend=20000))
        assert busy.code == ResponseCode.SYSTEM_BUSY and "3 pulls are suspended" in (busy.remark or "")
        # one message wakes all three (same queue, same offset)
        assert r.store.put_message(Message("T", b"wake", queue_id=0)).ok
        for cmd in parked:
            got = a.response_to(cmd.opaque)
            assert got.code == ResponseCode.SUCCESS and bodies(got.body) == [(20, b"wake")]
        assert pulls.parked == 0 and processor.suspended == 0
        # nothing comes for another queue: answered NOT_FOUND when its time is over
        quiet = b.call(RequestCode.PULL_MESSAGE, pull_ext("T", 20, queueId=1, sys_flag=0x6, suspend=200))
        assert quiet.code == ResponseCode.PULL_NOT_FOUND and quiet.ext_fields["nextBeginOffset"] == "20"
        # a parked pull whose connection closes is let go
        with RawClient(r.port) as gone:
            gone.send(
                RemotingCommand(
                    RequestCode.PULL_MESSAGE,
                    ext_fields=pull_ext("T", 20, queueId=1, sys_flag=0x6, suspend=20000),
                )
            )
            wait_for(lambda: pulls.parked == 1, "the pull to be parked")
        assert r.store.put_message(Message("T", b"late", queue_id=1)).ok
        wait_for(lambda: pulls.parked == 0 and processor.suspended == 0, "the closed connection's pull to go")


def python_header(ext: dict[str, str]) -> tuple[object, ...] | None:
    """What the handler reads of a pull's extFields, or None where it refuses or would raise."""
    from rocketstore.broker.remoting.headers import number, optional_number
    from rocketstore.broker.remoting.refusal import RequestRefused

    try:
        sys_flag = number(ext, "sysFlag")
        version = optional_number(ext, "subVersion") or 0
        values = (
            ext.get("consumerGroup"),
            ext.get("topic"),
            number(ext, "queueId", java_int=True),
            number(ext, "queueOffset"),
            number(ext, "maxMsgNums"),
            sys_flag,
            number(ext, "commitOffset") if sys_flag & 1 else optional_number(ext, "nothing"),
            number(ext, "suspendTimeoutMillis") if sys_flag & 2 else optional_number(ext, "nothing"),
            version,
            ext.get("subscription") or None,
            ext.get("expressionType") or None,
        )
    except RequestRefused:
        return None
    return None if values[0] is None or values[1] is None else values


@settings(max_examples=400, deadline=None)
@given(pull_fields(), st.sampled_from([SERIALIZE_JSON, SERIALIZE_ROCKETMQ]), st.integers(0, 2**31 - 1))
def test_the_compiled_pull_reader_reads_what_the_handler_reads(
    ext: dict[str, str], kind: int, opaque: int
) -> None:
    from rocketstore.broker.remoting.command import decode_command, scan_consumer_request
    from rocketstore.broker.remoting.server import _consumer_request

    data = frame(RemotingCommand(RequestCode.PULL_MESSAGE, opaque, ext_fields=ext, serialize_type=kind))
    ok, numbers, texts = scan_consumer_request(np.frombuffer(data, dtype=np.uint8), 4, len(data) - 4)
    decoded = decode_command(memoryview(data)[4:])
    want = python_header(decoded.ext_fields)
    if not ok:
        return  # the handler's way: nothing to compare
    assert want is not None, ext  # the compiled reader takes only what the handler reads whole
    cmd, header = _consumer_request(numbers.tolist(), texts.tobytes())
    assert header is not None
    assert (cmd.code, cmd.opaque, cmd.flag, cmd.serialize_type) == (
        RequestCode.PULL_MESSAGE,
        opaque,
        0,
        kind,
    )
    got = tuple(header)
    # absent commit / suspend fields are 0 to the compiled reader, None here; empty texts None
    expected = tuple(0 if (i in (6, 7) and v is None) else v for i, v in enumerate(want))
    got = got[:9] + tuple(v or None for v in got[9:])
    assert got == expected, ext


def test_the_compiled_pull_reader_takes_the_java_clients_pulls() -> None:
    from rocketstore.broker.remoting.command import scan_consumer_request

    for kind in (SERIALIZE_JSON, SERIALIZE_ROCKETMQ):
        ext = pull_ext("T", 7, sys_flag=0x7, suspend=15000, commitOffset=3)
        data = frame(RemotingCommand(RequestCode.PULL_MESSAGE, 9, ext_fields=ext, serialize_type=kind))
        assert scan_consumer_request(np.frombuffer(data, dtype=np.uint8), 4, len(data) - 4)[0]
        # not a pull, a response, a pull without a topic: the handler's
        for cmd in (
            RemotingCommand(RequestCode.HEART_BEAT, 1, ext_fields=ext, serialize_type=kind),
            RemotingCommand(RequestCode.PULL_MESSAGE, 1, 1, ext_fields=ext, serialize_type=kind),
            RemotingCommand(
                RequestCode.PULL_MESSAGE,
                1,
                ext_fields={k: v for k, v in ext.items() if k != "topic"},
                serialize_type=kind,
            ),
        ):
            data = frame(cmd)
            assert not scan_consumer_request(np.frombuffer(data, dtype=np.uint8), 4, len(data) - 4)[0]


OFFSET_CODES = [RequestCode.QUERY_CONSUMER_OFFSET, RequestCode.UPDATE_CONSUMER_OFFSET]
CONSUMER_CODES = [RequestCode.PULL_MESSAGE, *OFFSET_CODES]


def offset_fields(ext: dict[str, str], code: int) -> tuple[object, ...] | None:
    """What the offset handlers read of ``ext``, or None where they refuse."""
    from rocketstore.broker.remoting.headers import number, text
    from rocketstore.broker.remoting.refusal import RequestRefused

    try:
        values = (text(ext, "consumerGroup"), text(ext, "topic"), number(ext, "queueId", java_int=True))
        if code == RequestCode.UPDATE_CONSUMER_OFFSET:
            values += (number(ext, "commitOffset"),)
    except RequestRefused:
        return None
    return values


@settings(max_examples=400, deadline=None)
@given(
    pull_fields(),
    st.sampled_from(OFFSET_CODES),
    st.sampled_from([SERIALIZE_JSON, SERIALIZE_ROCKETMQ]),
    st.integers(0, 2**31 - 1),
)
def test_the_compiled_reader_reads_offset_requests_as_their_handlers_do(
    ext: dict[str, str], code: int, kind: int, opaque: int
) -> None:
    from rocketstore.broker.remoting.command import decode_command, scan_consumer_request
    from rocketstore.broker.remoting.server import _consumer_request

    data = frame(RemotingCommand(code, opaque, ext_fields=ext, serialize_type=kind))
    ok, numbers, texts = scan_consumer_request(np.frombuffer(data, dtype=np.uint8), 4, len(data) - 4)
    if not ok:
        return
    want = offset_fields(decode_command(memoryview(data)[4:]).ext_fields, code)
    assert want is not None, ext  # the compiled reader takes only what the handlers read whole
    cmd, header = _consumer_request(numbers.tolist(), texts.tobytes())
    assert header is None
    assert (cmd.code, cmd.opaque, cmd.flag, cmd.serialize_type) == (code, opaque, 0, kind)
    assert offset_fields(cmd.ext_fields, code) == want, ext


def test_offset_requests_in_either_encoding_on_the_compiled_path(start_remoting: StartRemoting) -> None:
    """The Java client's UPDATE_CONSUMER_OFFSET and QUERY_CONSUMER_OFFSET, as the compiled reader
    takes them, stored and answered as their handlers store and answer them."""
    from rocketstore.broker.remoting.command import scan_consumer_request

    r = start_remoting()
    fill(r)
    assert r.broker.remoting.broker.pulls is not None  # the server reads with the compiled reader
    with RawClient(r.port) as c:
        for kind, (queue, offset) in zip((SERIALIZE_JSON, SERIALIZE_ROCKETMQ), ((0, 7), (1, 20))):
            ext = {"consumerGroup": "g", "topic": "T", "queueId": str(queue)}
            update = {**ext, "commitOffset": str(offset)}
            for code, fields in (
                (RequestCode.QUERY_CONSUMER_OFFSET, ext),
                (RequestCode.UPDATE_CONSUMER_OFFSET, update),
            ):
                data = frame(RemotingCommand(code, ext_fields=fields, serialize_type=kind))
                assert scan_consumer_request(np.frombuffer(data, dtype=np.uint8), 4, len(data) - 4)[0]
            # nothing committed, the queue from 0 and in memory: from 0 (RocketMQ's rule)
            first = c.call(RequestCode.QUERY_CONSUMER_OFFSET, ext, serialize_type=kind)
            assert (first.code, first.ext_fields) == (0, {"offset": "0"}), kind
            assert c.call(RequestCode.UPDATE_CONSUMER_OFFSET, update, serialize_type=kind).code == 0
            found = c.call(RequestCode.QUERY_CONSUMER_OFFSET, ext, serialize_type=kind)
            assert (found.code, found.serialize_type, found.ext_fields) == (0, kind, {"offset": str(offset)})
            # refusals keep their handler's code and remark
            past = c.call(
                RequestCode.UPDATE_CONSUMER_OFFSET, {**ext, "commitOffset": "99"}, serialize_type=kind
            )
            assert past.code == ResponseCode.SYSTEM_ERROR
            assert "commitOffset 99 is out of" in (past.remark or "")
    assert r.store.consumer_offsets()[("T", "g")] == {0: 7, 1: 20}


@settings(max_examples=600, deadline=None)
@given(
    pull_fields(),
    st.sampled_from(CONSUMER_CODES),
    st.sampled_from([SERIALIZE_JSON, SERIALIZE_ROCKETMQ]),
    st.lists(st.tuples(st.integers(0, 400), st.integers(0, 255)), max_size=6),
    st.integers(0, 400),
)
def test_the_compiled_consumer_reader_survives_damaged_frames(
    ext: dict[str, str], code: int, kind: int, flips: list[tuple[int, int]], cut: int
) -> None:
    """Bytes changed and frames cut short: the reader says no or reads what the decoder reads,
    and never fails or reads outside the frame."""
    from rocketstore.broker.remoting.command import CONSUMER_CODE, decode_command, scan_consumer_request
    from rocketstore.broker.remoting.server import _consumer_request

    data = bytearray(frame(RemotingCommand(code, 5, ext_fields=ext, serialize_type=kind)))
    for at, value in flips:
        data[4 + at % (len(data) - 4)] = value
    body = bytes(data[4 : max(4, len(data) - cut)])
    # the frame sits inside a larger buffer: nothing past its end may be read
    buffer = np.frombuffer(b"\x00" * 3 + body + b"\xff" * 16, dtype=np.uint8)
    ok, numbers, texts = scan_consumer_request(buffer, 3, len(body))
    if not ok:
        return
    decoded = decode_command(body)  # what the compiled reader takes, the decoder takes too
    assert decoded.code in CONSUMER_CODES and not decoded.is_response
    assert numbers[CONSUMER_CODE] == decoded.code
    assert numbers[0] == decoded.serialize_type and numbers[1] == decoded.opaque
    cmd, header = _consumer_request(numbers.tolist(), texts.tobytes())
    if decoded.code != RequestCode.PULL_MESSAGE:
        want_offsets = offset_fields(decoded.ext_fields, decoded.code)
        assert want_offsets is not None and offset_fields(cmd.ext_fields, decoded.code) == want_offsets
        return
    want = python_header(decoded.ext_fields)
    assert want is not None and header is not None
    got = tuple(header)
    expected = tuple(0 if (i in (6, 7) and v is None) else v for i, v in enumerate(want))
    assert got[:9] + tuple(v or None for v in got[9:]) == expected
