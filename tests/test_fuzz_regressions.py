"""Inputs the fuzz targets (fuzz/) or their first probes broke the codecs with, kept inline:
each once escaped as something other than the codec's documented CorruptDataError, or was
accepted when it should not have been."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from rocketstore.codec import checkpoint as cp_codec
from rocketstore.codec import config_json
from rocketstore.codec import consume_queue_entry as cq
from rocketstore.codec import index_layout as ix
from rocketstore.codec.java_hash import index_key_hash
from rocketstore.errors import CorruptDataError
from rocketstore.index import IndexFile


# --- config_json (fuzz/target_config_json.py) -----------------------------------------------
@pytest.mark.parametrize(
    ("decode", "text", "words"),
    [
        # int('²') raised ValueError: str.isdigit() takes digits of every script
        (config_json.decode_delay_offsets, '{"offsetTable":{"²":1}}', "delay level '²' is not an integer"),
        # and int('٣') was 3: an Arabic-Indic digit read as queue id 3
        (config_json.decode_offsets, '{"offsetTable":{"T@g":{"٣":1}}}', "queue id '٣' is not an integer"),
        (
            config_json.decode_delay_offsets,
            '{"offsetTable":{"--5":1}}',
            "delay level '--5' is not an integer",
        ),
        (config_json.decode_delay_offsets, '{"offsetTable":{"1":' + "9" * 5000 + "}}", "not valid JSON"),
        (config_json.decode_delay_offsets, "[" * 100_000, "not valid JSON"),  # RecursionError
        (config_json.decode_delay_offsets, '{"offsetTable":{"99999999999999999999":1}}', "not an integer"),
        (config_json.decode_delay_offsets, '{"offsetTable":{"1":99999999999999999999}}', "out of range"),
        (config_json.decode_offsets, '{"offsetTable":{"T@g":{"0":-9223372036854775809}}}', "out of range"),
        (
            config_json.decode_topics,
            '{"topicConfigTable":{"T":{"readQueueNums":-5}}}',
            "T.readQueueNums: -5 is out of range",
        ),
        (
            config_json.decode_topics,
            '{"topicConfigTable":{"T":{"writeQueueNums":70000}}}',
            "T.writeQueueNums: 70000 is out of range",
        ),
    ],
)
def test_config_json_names_what_is_wrong(decode: object, text: str, words: str) -> None:
    with pytest.raises(CorruptDataError, match=words.replace("(", r"\(")):
        decode(text)  # type: ignore[operator]


def test_config_json_still_reads_what_rocketmq_writes() -> None:
    assert config_json.decode_delay_offsets('{"offsetTable":{3:12,-1:0}}') == ({3: 12, -1: 0}, 0)
    assert config_json.decode_offsets('{"offsetTable":{"T@g":{0:9223372036854775807}}}') == {
        ("T", "g"): {0: (1 << 63) - 1}
    }


# --- fixed-layout decoders: short or out-of-range buffers are CorruptDataError, not ValueError
# or struct.error (fuzz/target_checkpoint.py, target_index_file.py, target_consume_queue.py) --
def test_short_checkpoint_is_corrupt_data() -> None:
    with pytest.raises(CorruptDataError, match="a checkpoint needs 24 bytes, got 23"):
        cp_codec.decode_checkpoint(bytes(23))


def test_short_index_header_is_corrupt_data() -> None:
    with pytest.raises(CorruptDataError, match="an index header needs 40 bytes, got 39"):
        ix.decode_header(bytes(39))


@pytest.mark.parametrize(("slot", "size"), [(14, ix.file_size(4, 2)), (-1, ix.file_size(4, 2)), (0, 43)])
def test_index_slot_outside_the_file_is_corrupt_data(slot: int, size: int) -> None:
    with pytest.raises(CorruptDataError, match=f"index slot {slot} lies outside"):
        ix.decode_slot(bytes(size), slot)


@pytest.mark.parametrize("number", [2, -1, 1 << 40])
def test_index_entry_outside_the_file_is_corrupt_data(number: int) -> None:
    with pytest.raises(CorruptDataError, match=f"index entry {number} lies outside"):
        ix.decode_entry(bytes(ix.file_size(4, 2)), 4, number)


def test_consume_queue_entry_outside_the_buffer_is_corrupt_data() -> None:
    with pytest.raises(CorruptDataError, match="needs 20 bytes at position 21"):
        cq.decode_entry(bytes(40), 21)


# --- the index reader (fuzz/target_index_file.py) ---------------------------------------------
def test_index_lookup_of_a_slot_naming_index_count_reads_nothing(tmp_path: Path) -> None:
    """A slot holding indexCount (one past the newest entry; with a full file, one past the end
    of the file) sent lookup to read an entry outside the mapping: struct.error."""
    slots, entries = 4, 8
    raw = bytearray(ix.file_size(slots, entries))
    raw[: ix.HEADER_SIZE] = ix.encode_header(ix.IndexHeader(index_count=entries))
    key = "T#k"
    struct.pack_into(">i", raw, ix.slot_position(index_key_hash(key) % slots), entries)
    path = tmp_path / "20240101000000000"
    path.write_bytes(raw)
    f = IndexFile(path, slots, entries, readonly=True)
    try:
        assert list(f.lookup(key, 0, 1 << 62)) == []
    finally:
        f.close()


# --- remoting frames (fuzz/target_remoting_frames.py) -------------------------------------------
_PULL_JSON = (
    '{"code":11,"extFields":{"consumerGroup":"cg","topic":"T","queueId":"1","queueOffset":"0",'
    '"maxMsgNums":"32","sysFlag":"0"},"flag":0,"language":"JAVA","opaque":%s,'
    '"serializeTypeCurrentRPC":"JSON","version":%s}'
)


def _json_frame(header: str, body: bytes = b"") -> bytes:
    raw = header.encode()
    return struct.pack(">ii", 4 + len(raw) + len(body), len(raw)) + raw + body


@pytest.mark.parametrize(
    ("opaque", "version"),
    [
        ("05", "409"),  # a leading zero: json.loads refuses it, the compiled reader took it
        ("5", "40y"),  # an unread field's value that is no JSON: taken, as a token of letters
        ("5", "tru"),
        ("5", "1."),
    ],
)
def test_the_compiled_readers_take_no_header_decode_command_refuses(opaque: str, version: str) -> None:
    import numpy as np

    from rocketstore.broker.remoting.command import (
        SCAN_HOT,
        decode_command,
        scan_consumer_request,
        scan_frames,
    )

    data = _json_frame(_PULL_JSON % (opaque, version))
    u8 = np.frombuffer(data, dtype=np.uint8)
    with pytest.raises(CorruptDataError, match="JSON header does not parse"):
        decode_command(data[4:])
    assert not scan_consumer_request(u8, 4, len(data) - 4)[0]
    status, end, cols, *_ = scan_frames(u8, 1 << 16, 1 << 16, np.zeros(0, dtype=np.uint8))
    assert (status, end, cols.shape[1], int(cols[SCAN_HOT, 0])) == (0, len(data), 1, 0)  # not taken
    fine = _json_frame(_PULL_JSON % ("5", "409"))
    assert scan_consumer_request(np.frombuffer(fine, dtype=np.uint8), 4, len(fine) - 4)[0]


def test_the_frame_readers_python_twins_read_numbers_as_the_compiled_ones() -> None:
    """Run as Python (``jit.interpret``), the readers' digit loops added a numpy uint8 to the
    value, so NumPy 2 kept the sum a uint8: a born timestamp of 1700000000000 came out 0."""
    import numpy as np

    from rocketstore import jit
    from rocketstore.broker.remoting.command import SCAN_BORN, RemotingCommand, encode_command, scan_frames
    from rocketstore.broker.remoting.headers import SendMessageHeader

    header = SendMessageHeader(
        "pg", "T", "TBW102", 4, 2, 0, 1_700_000_000_000, 0, "UNIQ_KEY\x01A", 0, False, 16, False, None
    )
    cmd = RemotingCommand(310, 7, ext_fields=header.to_ext(v2=True), body=b"hello", serialize_type=1)
    u8 = np.frombuffer(b"".join(bytes(p) for p in encode_command(cmd)), dtype=np.uint8)
    cluster = np.zeros(0, dtype=np.uint8)
    compiled = scan_frames(u8, 1 << 16, 1 << 16, cluster)
    python = jit.interpret(scan_frames, u8, 1 << 16, 1 << 16, cluster)
    assert int(compiled[2][SCAN_BORN, 0]) == 1_700_000_000_000
    for a, b in zip(compiled, python):
        assert np.array_equal(np.asarray(a), np.asarray(b))


def test_a_send_naming_wait_twice_stores_neither() -> None:
    """The compiled pass dropped only the last WAIT of a single send's properties; its handler,
    reading them into a dict, drops every one (as RocketMQ does)."""
    import numpy as np

    from rocketstore.broker.remoting.command import (
        SCAN_DATA_AT,
        SCAN_DATA_LEN,
        SCAN_HOT,
        RemotingCommand,
        encode_command,
        scan_frames,
    )
    from rocketstore.broker.remoting.headers import SendMessageHeader
    from rocketstore.codec.message_batch import decode_batch

    props = "WAIT\x01true\x02UNIQ_KEY\x01A\x02n\x01v\x02WAIT\x01TRUE"
    header = SendMessageHeader("pg", "T", "TBW102", 4, 2, 0, 1, 0, props, 0, False, 16, False, None)
    cmd = RemotingCommand(310, 7, ext_fields=header.to_ext(v2=True), body=b"hi", serialize_type=0)
    u8 = np.frombuffer(b"".join(bytes(p) for p in encode_command(cmd)), dtype=np.uint8)
    _, _, cols, _, data, _, _ = scan_frames(u8, 1 << 16, 1 << 16, np.zeros(0, dtype=np.uint8))
    assert cols[SCAN_HOT, 0]
    at, n = int(cols[SCAN_DATA_AT, 0]), int(cols[SCAN_DATA_LEN, 0])
    [entry] = decode_batch(data[at : at + n].tobytes())
    assert (entry.body, entry.properties) == (b"hi", "UNIQ_KEY\x01A\x02n\x01v")
