"""Sends in bulk (``bulk_sends``, ``command.scan_frames``): pipelined sends of every kind stored
by one store call and answered as their handler answers them; what needs the handler's
judgement still gets it; hostile frames on the compiled decoder."""

from __future__ import annotations

import asyncio
import itertools
import select
import socket
import struct
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from rocketstore import Message, MessageStore, StoreConfig
from rocketstore.broker.remoting.bulk_sends import _DEFERRED_TURNS, _DeferredDispatch
from rocketstore.broker.remoting.codes import RequestCode, ResponseCode
from rocketstore.broker.remoting.command import (
    FLAG_ONEWAY,
    SERIALIZE_JSON,
    SERIALIZE_ROCKETMQ,
    RemotingCommand,
    encode_command,
)
from rocketstore.codec.message_batch import BatchEntry, encode_batch_body
from rocketstore.codec.message_id import decode_offset_msg_id
from rocketstore.codec.properties import encode_properties
from tests.conftest import held_syncs

from ..conftest import SMALL
from .client import RawClient
from .conftest import Remoting, StartRemoting
from .test_producer import header, stored


def frame(cmd: RemotingCommand) -> bytes:
    return b"".join(bytes(p) for p in encode_command(cmd))


def send_cmd(
    topic: str,
    body: bytes,
    props: dict[str, str],
    opaque: int,
    *,
    code: int = RequestCode.SEND_MESSAGE_V2,
    kind: int = SERIALIZE_JSON,
    oneway: bool = False,
    **changes: object,
) -> RemotingCommand:
    h = header(topic, props, **changes)
    return RemotingCommand(
        code,
        opaque=opaque,
        flag=FLAG_ONEWAY if oneway else 0,
        ext_fields=h.to_ext(v2=code != RequestCode.SEND_MESSAGE),
        body=body,
        serialize_type=kind,
    )


def answers(c: RawClient, opaques: list[int]) -> dict[int, RemotingCommand]:
    return {o: c.response_to(o) for o in opaques}


def bulk_requests(r: Remoting) -> int:
    bulk = r.broker.remoting.broker.bulk
    assert bulk is not None
    return bulk.requests


def props_of(i: int, **more: str) -> dict[str, str]:
    return {
        "TAGS": f"T{i % 3}",
        "KEYS": f"k{i}",
        "UNIQ_KEY": f"U{i:04d}",
        "WAIT": "true",
        "n": str(i),
        **more,
    }


def test_pipelined_sends_of_every_kind_are_stored_in_bulk(start_remoting: StartRemoting) -> None:
    r = start_remoting()
    r.store.create_topic("Bulk", 4)
    kinds = [
        (RequestCode.SEND_MESSAGE_V2, SERIALIZE_JSON),
        (RequestCode.SEND_MESSAGE_V2, SERIALIZE_ROCKETMQ),
        (RequestCode.SEND_MESSAGE, SERIALIZE_JSON),
        (RequestCode.SEND_MESSAGE, SERIALIZE_ROCKETMQ),
    ]
    cmds = [
        send_cmd("Bulk", f"body-{i}".encode(), props_of(i), 1000 + i, code=kinds[i % 4][0],
                 kind=kinds[i % 4][1], queue_id=i % 4, flag=i, sys_flag=0x1 if i % 5 == 0 else 0)
        for i in range(64)
    ]  # fmt: skip
    before = bulk_requests(r)
    with RawClient(r.port) as c:
        c.send_raw(b"".join(frame(cmd) for cmd in cmds))
        got = answers(c, [cmd.opaque for cmd in cmds])
        local_port = c.sock.getsockname()[1]
    assert bulk_requests(r) - before == 64
    offsets: dict[int, list[int]] = {}
    for i, cmd in enumerate(cmds):
        resp = got[cmd.opaque]
        assert resp.code == ResponseCode.SUCCESS and resp.remark is None
        assert resp.serialize_type == cmd.serialize_type and resp.is_response
        ext = resp.ext_fields
        assert ext["queueId"] == str(i % 4)
        assert ext["MSG_REGION"] == "DefaultRegion" and ext["TRACE_ON"] == "true"
        offsets.setdefault(i % 4, []).append(int(ext["queueOffset"]))
        msg = stored(r, resp)
        assert (msg.topic, msg.queue_id, msg.flag, msg.body) == ("Bulk", i % 4, i, f"body-{i}".encode())
        assert msg.queue_offset == int(ext["queueOffset"])
        assert msg.sys_flag & 0x1 == (1 if i % 5 == 0 else 0)
        assert msg.born_timestamp == 1_700_000_000_000 and msg.born_host == f"127.0.0.1:{local_port}"
        assert msg.tags == f"T{i % 3}" and msg.keys == [f"k{i}"] and msg.uniq_key == f"U{i:04d}"
        assert msg.properties["n"] == str(i) and msg.properties["CLUSTER"] == "DefaultCluster"
        assert "WAIT" not in msg.properties
    for queue, got_offsets in offsets.items():
        assert sorted(got_offsets) == list(range(16)), queue  # each queue's offsets, none twice
    assert r.store.query_message("Bulk", "k7")[0].body == b"body-7"


def test_one_round_stores_the_sends_of_several_connections(start_remoting: StartRemoting) -> None:
    """Sends that two connections' reads bring in one turn of the loop (held busy while both
    arrive) form one round: each stored with its own connection's born host and topic, and
    each connection answered its own."""
    r = start_remoting()
    r.store.create_topic("Left", 2)
    r.store.create_topic("Right", 2)
    loop, bulk = r.broker._loop, r.broker.remoting.broker.bulk
    assert loop is not None and bulk is not None
    rounds: list[int] = []  # how many connections' reads each round took
    columns = bulk._columns
    bulk._columns = lambda offers, cols: rounds.append(len(offers)) or columns(offers, cols)  # type: ignore[method-assign]
    before = bulk_requests(r)
    with RawClient(r.port) as a, RawClient(r.port) as b:
        sends = {
            a: [send_cmd("Left", f"a-{i}".encode(), props_of(i), 10 + i, queue_id=i % 2) for i in range(3)],
            b: [send_cmd("Right", f"b-{i}".encode(), props_of(i), 20 + i, queue_id=1) for i in range(2)],
        }
        for n, client in enumerate(sends):  # each connection's reader is running
            client.send_raw(frame(send_cmd("Right", b"first", props_of(n), 30 + n, queue_id=0)))
            assert answers(client, [30 + n])[30 + n].code == ResponseCode.SUCCESS
        held = threading.Event()
        loop.call_soon_threadsafe(lambda: held.wait(10))  # the loop's turn waits for both writes
        try:
            for client, cmds in sends.items():
                client.send_raw(b"".join(frame(cmd) for cmd in cmds))
            time.sleep(0.2)  # (both reads are in the sockets before the loop looks)
        finally:
            held.set()
        got = {client: answers(client, [cmd.opaque for cmd in cmds]) for client, cmds in sends.items()}
        ports = {client: client.sock.getsockname()[1] for client in sends}
    assert bulk_requests(r) - before == 7
    assert rounds == [1, 1, 2]  # the two first sends' rounds, then one of both reads
    for client, cmds in sends.items():
        for cmd in cmds:
            resp = got[client][cmd.opaque]
            assert resp.code == ResponseCode.SUCCESS
            msg = stored(r, resp)
            assert msg.body == cmd.body and msg.born_host == f"127.0.0.1:{ports[client]}"
            want = ("Left", int(msg.body[2:]) % 2) if client is a else ("Right", 1)
            assert (msg.topic, msg.queue_id) == want
    assert r.store.max_offset_in_queue("Right", 1) == 2
    assert r.store.max_offset_in_queue("Left", 0) + r.store.max_offset_in_queue("Left", 1) == 3


def test_frames_cut_anywhere_or_joined_are_each_taken_once_in_order(start_remoting: StartRemoting) -> None:
    """A connection's bytes are one buffer whatever the reads: frames cut at any byte (a read
    each) and frames joined in one read are each taken once, in the order sent; the sends before
    a bad length are stored, then the connection closes; a one-way send whose client shuts its
    side at once is stored."""
    r = start_remoting()
    r.store.create_topic("Bulk", 1)
    cmds = [send_cmd("Bulk", f"piece-{i}".encode() * 40, props_of(i), 1 + i, queue_id=0) for i in range(6)]
    data = b"".join(frame(cmd) for cmd in cmds)
    first = len(frame(cmds[0]))
    cuts = sorted({0, 1, 3, 4, 5, first - 1, first, first + 2, 2 * first + 7, len(data) - 1, len(data)})
    with RawClient(r.port) as c:
        c.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        warm = send_cmd("Bulk", b"warm", props_of(0), 99, queue_id=0)  # (the kernels made before)
        c.send_raw(frame(warm))
        assert answers(c, [99])[99].code == ResponseCode.SUCCESS
        for a, b in itertools.pairwise(cuts):
            c.send_raw(data[a:b])
            time.sleep(0.02)  # (a read each)
        got = answers(c, [cmd.opaque for cmd in cmds])
    offsets = [int(got[cmd.opaque].ext_fields["queueOffset"]) for cmd in cmds]
    assert offsets == list(range(1, 7)) and {got[cmd.opaque].code for cmd in cmds} == {ResponseCode.SUCCESS}
    assert [stored(r, got[cmd.opaque]).body for cmd in cmds] == [cmd.body for cmd in cmds]

    good = [send_cmd("Bulk", b"before-bad", props_of(i), 50 + i, queue_id=0) for i in range(2)]
    with RawClient(r.port, timeout=10) as c:
        c.send_raw(b"".join(frame(cmd) for cmd in good) + struct.pack(">i", 2) + b"xx")
        with pytest.raises(ConnectionError):
            while True:
                c.read()  # (the answers may or may not leave before it closes)
    oneway = send_cmd("Bulk", b"then-eof", props_of(9), 60, queue_id=0, oneway=True)
    loop, server = r.broker._loop, r.broker.remoting.broker
    assert loop is not None
    with socket.create_connection(("127.0.0.1", r.port), timeout=10) as s:
        deadline = time.monotonic() + 10
        while len(server.connections) < 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        [conn] = server.connections

        def one_read() -> None:  # the send and the client's end in one read, as a large read has them
            reading = conn.writer.transport.get_protocol()
            reading.data_received(frame(oneway))
            reading.eof_received()

        loop.call_soon_threadsafe(one_read)
        assert s.recv(100) == b""  # the server closes its side in turn
    deadline = time.monotonic() + 10
    while r.store.max_offset_in_queue("Bulk", 0) < 10 and time.monotonic() < deadline:
        time.sleep(0.02)
    r.store.wait_dispatched()
    bodies = [m.body for m in r.store.get_message("g", "Bulk", 0, 7, 10).messages]
    assert bodies == [b"before-bad", b"before-bad", b"then-eof"]


def test_a_rounds_answers_leave_before_its_dispatch_pass(
    start_remoting: StartRemoting, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under ASYNC_FLUSH a round is answered inside ``dispatch_deferred``: when the pass that
    writes its queue entries begins, the client can read its answers already (as RocketMQ
    answers before its ReputMessageService dispatches); a read after the answer finds them."""
    r = start_remoting()
    r.store.create_topic("Early", 1)
    events = r.store.dispatch_events
    seen: list[tuple[bool, bool]] = []  # at the pass: (answers readable, dispatched already)
    deferred = r.store.dispatch_deferred
    with RawClient(r.port) as c:

        @contextmanager
        def watched() -> Iterator[None]:
            with deferred():
                before = events.position()
                yield
                readable = select.select([c.sock], [], [], 0)[0]
                seen.append((bool(readable), events.position() != before))

        monkeypatch.setattr(r.store, "dispatch_deferred", watched)
        cmds = [send_cmd("Early", f"e{i}".encode(), props_of(i), 40 + i, queue_id=0) for i in range(3)]
        c.send_raw(b"".join(frame(cmd) for cmd in cmds))
        # the pass comes a turn or two after the round: until then the answers stay unread in
        # the socket, and nothing here reads the store (which would run the pass itself)
        deadline = time.monotonic() + 10
        while not seen and time.monotonic() < deadline:
            time.sleep(0.001)
        got = answers(c, [cmd.opaque for cmd in cmds])
        assert r.store.max_offset_in_queue("Early", 0) == 3
    assert all(resp.code == ResponseCode.SUCCESS for resp in got.values())
    assert seen and all(at_pass == (True, False) for at_pass in seen)
    assert [m.body for m in r.store.get_message("g", "Early", 0, 0).messages] == [b"e0", b"e1", b"e2"]


def test_small_rounds_share_one_dispatch_pass_while_sends_wait(tmp_path: Path) -> None:
    """The pass of small rounds waits while the loop runs a round a turn or finds sends waiting
    for one, for at most ``_DEFERRED_TURNS`` turns; it comes at the second check after the last
    round when none wait, at the next turn while a receive waits for messages. While rounds wait
    to be durable it waits for their answers, however many turns go by idle. A read of the
    process in between sees every put (it dispatches first)."""
    store = MessageStore.open(tmp_path / "store", StoreConfig())  # (ASYNC_FLUSH)
    sends_wait = receives_wait = durable_wait = False
    position = store.dispatch_events.position

    def put(body: bytes) -> int:
        """Where the put's record ends."""
        result = store.put_message(Message("Deferred", body, queue_id=0))
        return result.physical_offset + result.wrote_bytes

    async def turns(rounds: int, idle: int) -> list[tuple[int, int]]:
        """A small round a turn, then turns without: (where the last put ended, the dispatch
        position) after each turn. What is still owed is dispatched at the end (as the server's
        stop does): the next loop starts with nothing deferred."""
        deferred = _DeferredDispatch(store, lambda: sends_wait, lambda: receives_wait, lambda: durable_wait)
        seen = []
        end = 0
        try:
            for turn in range(rounds + idle):
                if turn < rounds:
                    deferred.open()
                    end = put(f"m{turn}".encode())
                await asyncio.sleep(0)  # the loop's next turn, its check run
                seen.append((end, position()))
        finally:
            deferred.close()
        return seen

    async def read_between() -> tuple[int, int]:
        deferred = _DeferredDispatch(store, lambda: sends_wait, lambda: receives_wait, lambda: durable_wait)
        deferred.open()
        put(b"read")
        try:
            return position(), store.max_offset_in_queue("Deferred", 0)
        finally:
            deferred.close()

    try:
        start = position()
        busy = asyncio.run(turns(_DEFERRED_TURNS + 1, 0))
        assert [at for _, at in busy[: _DEFERRED_TURNS - 1]] == [start] * (_DEFERRED_TURNS - 1)
        assert busy[_DEFERRED_TURNS - 1] == (busy[_DEFERRED_TURNS - 1][0],) * 2  # the bound: one pass
        assert busy[-1][1] == busy[-2][1]  # the next round waits for the next pass
        assert position() == busy[-1][0]  # which closing the deferral ran

        sends_wait = True
        waited = asyncio.run(turns(2, 3))  # two rounds, then three turns of sends still to come
        assert [at for _, at in waited] == [waited[0][1]] * 5 and waited[0][1] < waited[-1][0]

        sends_wait = False
        idle = asyncio.run(turns(2, 2))
        end = idle[-1][0]
        # dispatched at the second check after the last round
        assert [at == end for _, at in idle] == [False, False, True, True]

        receives_wait = True  # a parked pull: each round's pass at the next turn
        parked = asyncio.run(turns(3, 0))
        assert all(end == at for end, at in parked)
        durable_wait = True  # ... even while rounds wait to be durable
        parked = asyncio.run(turns(2, 1))
        assert all(end == at for end, at in parked)
        receives_wait = False

        async def answered_after(idle: int, answers: int) -> list[tuple[int, int]]:
            """Two small rounds waiting to be durable, ``idle`` turns, then ``answers`` turns
            each with a round's answer while others still wait, then the last answer."""
            nonlocal durable_wait
            durable_wait = True
            deferred = _DeferredDispatch(store, lambda: False, lambda: False, lambda: durable_wait)
            seen = []
            end = 0
            try:
                for turn in range(2 + idle + answers + 1):
                    if turn < 2:
                        deferred.open()
                        end = put(f"d{turn}".encode())
                    if turn >= 2 + idle:
                        durable_wait = turn < 2 + idle + answers
                        deferred.answered()
                    await asyncio.sleep(0)
                    seen.append((end, position()))
            finally:
                deferred.close()
            return seen

        durable = asyncio.run(answered_after(_DEFERRED_TURNS + 4, 0))  # idle turns are not counted
        end = durable[-1][0]
        assert [at == end for _, at in durable] == [False] * (len(durable) - 1) + [True]
        # answers with rounds still waiting are: the bound holds under a steady SYNC_FLUSH load
        bounded = asyncio.run(answered_after(3, _DEFERRED_TURNS + 4))
        end = bounded[-1][0]
        # a check after each round's turn and at the first idle one, none at the next two, then
        # one an answer from turn 5: the pass at the 16th check, after turn 17
        first = [at == end for _, at in bounded].index(True)
        assert first == 2 + 3 + _DEFERRED_TURNS - 4
        durable_wait = False

        before_read, readable = asyncio.run(read_between())
        assert before_read == bounded[-1][0]
        assert readable == _DEFERRED_TURNS + 1 + 2 + 2 + 3 + 2 + 2 + 2 + 1
        assert position() > before_read
    finally:
        store.close()


def test_a_batch_and_oneway_sends_in_bulk(start_remoting: StartRemoting) -> None:
    r = start_remoting()
    r.store.create_topic("Bulk", 2)
    entries = [
        BatchEntry(0, f"m{i}".encode(), encode_properties({"UNIQ_KEY": f"B{i}", "KEYS": f"b{i}"}))
        for i in range(3)
    ]
    batch = send_cmd("Bulk", encode_batch_body(entries), {"WAIT": "true"}, 7,
                     code=RequestCode.SEND_BATCH_MESSAGE, kind=SERIALIZE_ROCKETMQ, queue_id=1,
                     batch=True)  # fmt: skip
    oneway = send_cmd("Bulk", b"quiet", props_of(1), 8, oneway=True, queue_id=0)
    last = send_cmd("Bulk", b"last", props_of(2), 9, queue_id=0)
    more = [send_cmd("Bulk", b"more", props_of(i), 20 + i, queue_id=1) for i in range(5)]  # a round's worth
    before = bulk_requests(r)
    with RawClient(r.port) as c:
        c.send_raw(b"".join(frame(x) for x in [batch, oneway, last, *more]))
        got = answers(c, [7, 9, *(x.opaque for x in more)])
    assert bulk_requests(r) - before == 8
    ext = got[7].ext_fields
    assert got[7].code == ResponseCode.SUCCESS and ext["queueId"] == "1" and ext["queueOffset"] == "0"
    ids = ext["msgId"].split(",")
    assert len(ids) == 3
    for i, msg_id in enumerate(ids):
        msg = r.store.look_message_by_offset(decode_offset_msg_id(msg_id)[2])
        assert msg is not None and msg.body == f"m{i}".encode() and msg.uniq_key == f"B{i}"
        assert msg.properties["WAIT"] == "true" and msg.properties["CLUSTER"] == "DefaultCluster"
    assert got[9].ext_fields["queueOffset"] == "1"  # after the oneway send, stored first
    assert stored(r, got[9]).body == b"last"


def test_bulk_sends_are_counted_as_their_handler_counts_them(start_remoting: StartRemoting) -> None:
    """A round of sends to two topics, single and batch, in both request codes: the metrics and
    the stats items (mqadmin statsAll's) count each topic's requests, messages and stored bytes."""
    r = start_remoting()
    r.store.create_topic("CountA", 2)
    r.store.create_topic("CountB", 2)

    def batch_of(topic: str, n: int, opaque: int) -> RemotingCommand:
        entries = [
            BatchEntry(0, b"b" * (i + 1), encode_properties({"UNIQ_KEY": f"{topic}{opaque}-{i}"}))
            for i in range(n)
        ]
        return send_cmd(
            topic,
            encode_batch_body(entries),
            {"WAIT": "true"},
            opaque,
            code=RequestCode.SEND_BATCH_MESSAGE,
            queue_id=1,
            batch=True,
        )

    cmds = [
        *(send_cmd("CountA", b"a" * (i + 1), props_of(i), 100 + i, queue_id=0) for i in range(4)),
        send_cmd("CountA", b"v1", props_of(4), 104, code=RequestCode.SEND_MESSAGE, kind=SERIALIZE_ROCKETMQ,
                 queue_id=1),
        batch_of("CountA", 3, 105),
        *(send_cmd("CountB", b"b" * (i + 1), props_of(i), 200 + i, queue_id=0) for i in range(3)),
        batch_of("CountB", 2, 203),
        send_cmd("CountB", b"quiet", props_of(9), 204, oneway=True, queue_id=1),
    ]  # fmt: skip
    registry = r.broker.metrics.registry

    def sample(name: str, **labels: str) -> float:
        return registry.get_sample_value(name, labels) or 0.0

    appends = "rocketstore_broker_put_batches_total"
    before, appended_before = bulk_requests(r), sample(appends)
    with RawClient(r.port) as c:
        c.send_raw(b"".join(frame(cmd) for cmd in cmds))
        got = answers(c, [cmd.opaque for cmd in cmds if cmd.opaque != 204])
    assert all(resp.code == ResponseCode.SUCCESS for resp in got.values())
    assert bulk_requests(r) - before == len(cmds)
    # a store append a round: one for all of them when they came in one read, at most one each
    assert 1 <= sample(appends) - appended_before <= len(cmds)
    sends = "rocketstore_broker_sends_total"
    assert sample(sends, topic="CountA", type="REMOTING", code="SUCCESS") == 5
    assert sample(sends, topic="CountA", type="REMOTING_BATCH", code="SUCCESS") == 3
    assert sample(sends, topic="CountB", type="REMOTING", code="SUCCESS") == 4
    assert sample(sends, topic="CountB", type="REMOTING_BATCH", code="SUCCESS") == 2
    requests = "rocketstore_broker_remoting_requests_total"
    for request, count in (("SEND_MESSAGE_V2", 8), ("SEND_MESSAGE", 1), ("SEND_BATCH_MESSAGE", 2)):
        assert sample(requests, listener="remoting", request=request, response="SUCCESS") == count, request
    r.store.wait_dispatched()
    stats = r.broker.metrics.stats
    for topic, messages, requests_made in (("CountA", 8, 6), ("CountB", 6, 5)):
        stored_bytes = sum(
            m.store_size
            for q in range(2)
            for m in r.store.get_message("g", topic, q, 0, 64, transfer_limits=False).messages
        )
        assert stats.counted("TOPIC_PUT_NUMS", topic) == (messages, requests_made), topic
        assert stats.counted("TOPIC_PUT_SIZE", topic) == (stored_bytes, requests_made), topic


@pytest.mark.parametrize(
    ("topic", "props", "changes", "code", "words"),
    [
        ("NewTopic", props_of(0), {}, ResponseCode.SUCCESS, None),  # created by the handler
        ("Bulk", props_of(0), {"queue_id": 9}, ResponseCode.SYSTEM_ERROR, "queueId[9] is illegal"),
        ("Bulk", props_of(0, DELAY="2"), {}, ResponseCode.SUCCESS, None),  # delayed
        ("Bulk", props_of(0, WAIT="false"), {}, ResponseCode.SUCCESS, None),
        ("SCHEDULE_TOPIC_XXXX", props_of(0), {}, ResponseCode.NO_PERMISSION, "is forbidden"),
        ("Bad Topic", props_of(0), {}, ResponseCode.SYSTEM_ERROR, "is not valid"),
        ("Bulk", {"TAGS": "a"}, {}, ResponseCode.SUCCESS, None),  # no UNIQ_KEY: the store makes one
        ("Bulk", props_of(0, REAL_TOPIC="x"), {}, ResponseCode.MESSAGE_ILLEGAL, "REAL_TOPIC"),
    ],
)
def test_what_needs_judgement_is_judged_beside_bulk_sends(
    start_remoting: StartRemoting,
    topic: str,
    props: dict[str, str],
    changes: dict[str, object],
    code: int,
    words: str | None,
) -> None:
    r = start_remoting()
    r.store.create_topic("Bulk", 4)
    odd = send_cmd(topic, b"odd", props, 1, **changes)  # type: ignore[arg-type]
    plain = [send_cmd("Bulk", b"plain", props_of(i), 10 + i, queue_id=0) for i in range(8)]
    with RawClient(r.port) as c:
        c.send_raw(b"".join(frame(x) for x in [plain[0], plain[1], odd, *plain[2:]]))
        got = answers(c, [1, *(p.opaque for p in plain)])
    assert got[1].code == code, got[1].remark
    if words is not None:
        assert words in (got[1].remark or "")
    else:
        msg = stored(r, got[1])
        assert msg.body == b"odd"
    assert sorted(int(got[p.opaque].ext_fields["queueOffset"]) for p in plain)[-1] >= 7
    for p in plain:
        assert got[p.opaque].code == ResponseCode.SUCCESS
        assert stored(r, got[p.opaque]).body == b"plain"


def test_a_round_the_store_refuses_is_answered_by_the_handler(start_remoting: StartRemoting) -> None:
    r = start_remoting()
    r.store.create_topic("Bulk", 1)
    bad_batch = send_cmd("Bulk", encode_batch_body([BatchEntry(0, b"x", "DELAY\x012")]), {}, 1,
                         code=RequestCode.SEND_BATCH_MESSAGE, batch=True)  # fmt: skip
    good = [send_cmd("Bulk", b"good", props_of(i), 2 + i) for i in range(8)]
    with RawClient(r.port) as c:
        c.send_raw(frame(bad_batch) + b"".join(frame(x) for x in good))
        got = answers(c, [1, *(x.opaque for x in good)])
    assert got[1].code == ResponseCode.MESSAGE_ILLEGAL and "DELAY" in (got[1].remark or "")
    assert all(got[x.opaque].code == ResponseCode.SUCCESS for x in good)
    assert stored(r, got[2]).body == b"good"
    r.store.wait_dispatched()
    assert r.store.max_offset_in_queue("Bulk", 0) == 8  # the refused batch stored nothing


def _json_frame(header: bytes, body: bytes = b"") -> bytes:
    return struct.pack(">ii", 4 + len(header) + len(body), len(header)) + header + body


HOSTILE_HEADERS = [
    b'{"code":310,"extFields":{"a":"pg","b":"Bulk","c":"TBW102","d":"4","e":"0","f":"0","g":"1","h":"0",'
    b'"i":"UNIQ_KEY\\u0001U"},"flag":0,"opaque":1',  # cut short
    b'{"code":310,"extFields":{"a":"pg","b":"Bulk","c":"TBW102","d":"4","e":"99999999999","f":"0","g":"1",'
    b'"h":"0","i":"UNIQ_KEY\\u0001U"},"flag":0,"opaque":2}',  # queue id past an int
    b'{"code":310,"extFields":{"a":"pg","b":"Bulk","c":"TBW102","d":"4","e":"0","f":"0","g":"1","h":"0",'
    b'"i":"UNIQ_KEY\\u0001U"},"flag":0,"opaque":3} trailing',  # extra data
    b'{"code":310,"extFields":{"a":"pg","b":"Bulk","c":"TBW102","d":"4","e":"0","f":"0","g":"1","h":"0",'
    b'"i":"UNIQ_KEY\\u0001U\\u0002\\u0002x"},"flag":0,"opaque":4}',  # an empty property entry
    b'{"code":310,"extFields":{"a":"pg","b":"Bulk","c":"TBW102","d":"4","e":"0","f":"0","g":"1","h":"0",'
    b'"i":"UNIQ_KEY\\u0001\\u00e9"},"flag":0,"opaque":5}',  # not ASCII
    b'{"code":310,"extFields":{"a":"pg","b":"Bulk","c":"TBW102","d":"4","e":"0","f":"0","g":"1","h":"x",'
    b'"i":"UNIQ_KEY\\u0001U"},"flag":0,"opaque":6}',  # flag not a number
    b'{"code":310,"extFields":[1,2],"flag":0,"opaque":7}',
    b'{"code":"310","extFields":{},"flag":0,"opaque":8}',
]


def test_hostile_frames_store_nothing_refused_and_stall_no_one(start_remoting: StartRemoting) -> None:
    r = start_remoting()
    r.store.create_topic("Bulk", 1)
    successes = 0
    for raw in HOSTILE_HEADERS:  # each stored only when answered so, as the handler judges it
        with RawClient(r.port, timeout=10) as c:
            c.send_raw(_json_frame(raw, b"x"))
            try:
                resp = c.read()
            except (TimeoutError, ConnectionError, OSError):
                resp = None
            if resp is not None and resp.code == ResponseCode.SUCCESS:
                successes += 1
                assert stored(r, resp).body == b"x"
    # a frame that claims more than it holds, then a lying length, on one connection ...
    stalled = socket.create_connection(("127.0.0.1", r.port))
    stalled.sendall(struct.pack(">i", 1 << 20) + b"{")
    liar = socket.create_connection(("127.0.0.1", r.port))
    liar.sendall(struct.pack(">i", 2) + b"xx")
    try:
        # ... while another client's sends are stored and answered
        with RawClient(r.port) as c:
            resp = c.call(RequestCode.SEND_MESSAGE_V2, header("Bulk", props_of(1)).to_ext(), b"fine")
        assert resp.code == ResponseCode.SUCCESS
        liar.settimeout(10)
        assert liar.recv(100) == b""  # closed: a length outside 4..max
    finally:
        stalled.close()
        liar.close()
    r.store.wait_dispatched()
    assert r.store.max_offset_in_queue("Bulk", 0) == successes + 1
    assert successes == 2  # the empty property entry (skipped) and the accented value


@pytest.mark.parametrize(
    "limit", [{"max_requests_per_connection": 10}, {"max_request_bytes_per_connection": 2000}]
)
def test_bulk_sends_keep_the_connection_limits(start_remoting: StartRemoting, limit: dict[str, int]) -> None:
    """Past ``max_requests_per_connection`` a read's extra sends are answered SYSTEM_BUSY (none
    stored); under a small ``max_request_bytes_per_connection`` the reader waits, and every send
    is stored and answered."""
    r = start_remoting(**limit)
    r.store.create_topic("Bulk", 1)
    cmds = [send_cmd("Bulk", b"x" * 100, props_of(i), 1 + i, queue_id=0) for i in range(16)]
    with RawClient(r.port) as c:
        c.send_raw(b"".join(frame(x) for x in cmds))
        got = answers(c, [x.opaque for x in cmds])
    codes = [got[x.opaque].code for x in cmds]
    if "max_requests_per_connection" in limit:
        assert codes.count(ResponseCode.SUCCESS) >= 10
        assert set(codes) <= {ResponseCode.SUCCESS, ResponseCode.SYSTEM_BUSY}
    else:
        assert set(codes) == {ResponseCode.SUCCESS}
    r.store.wait_dispatched()
    assert r.store.max_offset_in_queue("Bulk", 0) == codes.count(ResponseCode.SUCCESS)


@pytest.mark.parametrize("sends", [16, 1], ids=["in bulk", "by the handler"])
def test_sync_flush_sends_are_stored_on_the_loop_and_answered_once_flushed(
    start_remoting: StartRemoting, monkeypatch: pytest.MonkeyPatch, sends: int
) -> None:
    """Under SYNC_FLUSH the broker puts without the flush wait (``wait=False``) and answers each
    round once ``wait_durable`` says: SUCCESS after the flush, or, for a flush held past
    ``sync_flush_timeout``, FLUSH_DISK_TIMEOUT with "stored, but" (and the messages stay)."""

    def props(i: int) -> dict[str, str]:  # (a send without UNIQ_KEY is its handler's: it makes one)
        return props_of(i) if sends > 1 else {k: v for k, v in props_of(i).items() if k != "UNIQ_KEY"}

    r = start_remoting(store_config=SMALL.replace(flush_disk_type="SYNC_FLUSH", sync_flush_timeout=1500))
    r.store.create_topic("S", 2)
    waits: list[bool] = []
    for name in ("put_messages", "put_encoded_columns"):
        real_put = getattr(r.store, name)

        def recorded(*args: object, _put: Any = real_put, wait: bool = True, **kw: object) -> Any:
            waits.append(wait)
            return _put(*args, wait=wait, **kw)

        monkeypatch.setattr(r.store, name, recorded)
    with held_syncs() as gate, RawClient(r.port) as c:
        for round_, (hold_s, code) in enumerate(
            [(0.5, ResponseCode.SUCCESS), (3.0, ResponseCode.FLUSH_DISK_TIMEOUT)]
        ):
            gate.clear()
            cmds = [
                send_cmd("S", f"r{round_}-{i}".encode(), props(i), 100 * round_ + i, queue_id=i % 2)
                for i in range(sends)
            ]
            c.send_raw(b"".join(frame(cmd) for cmd in cmds))
            readable, _, _ = select.select([c.sock], [], [], hold_s if code == ResponseCode.SUCCESS else 0.5)
            assert not readable  # no answer while the flush is held
            if code == ResponseCode.SUCCESS:
                gate.set()
            got = answers(c, [cmd.opaque for cmd in cmds])
            gate.set()
            for i, cmd in enumerate(cmds):
                resp = got[cmd.opaque]
                assert resp.code == code, resp.remark
                assert resp.remark == (
                    None if code == ResponseCode.SUCCESS else "stored, but FLUSH_DISK_TIMEOUT"
                )
                assert stored(r, resp).body == f"r{round_}-{i}".encode()
    assert waits and not any(waits)  # every send put without its wait
    assert bulk_requests(r) == (2 * sends if sends > 1 else 0)
