"""Turning messages into encoded records, outside the append lock.

Everything that does not depend on a record's place in the log is done here: validation, the
delay-level rewrite to ``SCHEDULE_TOPIC_XXXX``, the properties string, the UNIQ_KEY, the body
CRC and the whole byte image. Under the lock only the queue offset, physical offset and store
timestamp are patched in (``codec.commitlog_record.patch_positions``).

Two shapes come out: a ``PreparedMessage`` per message (single puts, small or irregular
batches) and a columnar ``PreparedBatch`` (one blob, numpy offsets) for batches of plain
messages, which the commitlog appends and the dispatcher indexes without per-record objects.

Validation (STORE.md §2.2) rejects with ``InvalidMessageError`` before anything is written:
topics of 1..127 characters of ``[A-Za-z0-9_%|-]`` (so no topic can name a path outside the
store), reserved system topics, bodies over ``max_message_size``, properties over 32767 bytes,
keys with spaces, and properties that cannot be read back.
"""

from __future__ import annotations

import operator
import struct
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, NamedTuple, cast

import numpy as np
import numpy.typing as npt

from rocketstore.clock import Clock
from rocketstore.codec.commitlog_record import (
    END_FILE_MIN_BLANK_LENGTH,
    MAX_PROPERTIES_BYTES,
    SYSFLAG_BORNHOST_V6,
    SYSFLAG_CONTENT,
    SYSFLAG_STOREHOST_V6,
    SYSFLAG_TX_MASK,
    TX_COMMIT,
    TX_NOT,
    RecordTemplate,
    encode_batch,
    encode_message,
    store_timestamp_position,
    write_record,
)
from rocketstore.codec.crc import crc32_function
from rocketstore.codec.host import parse_host
from rocketstore.codec.java_hash import java_hash_utf8, signed32, tags_code
from rocketstore.codec.message_batch import EncodedBatch, EncodedColumns, inner_message, problem_text
from rocketstore.codec.message_id import UniqKeyGenerator
from rocketstore.codec.properties import (
    encode_plain_properties,
    encode_properties,
    is_name,
    last_values,
    property_entry,
    validate_property,
)
from rocketstore.codec.text_column import TextColumn
from rocketstore.config import StoreConfig
from rocketstore.errors import InvalidMessageError
from rocketstore.jit import kernel
from rocketstore.limits import MAX_QUEUE_ID
from rocketstore.message import (
    PROPERTY_DELAY,
    PROPERTY_KEYS,
    PROPERTY_REAL_QUEUE_ID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_KEY,
    RESERVED_PROPERTIES,
    SCHEDULE_TOPIC,
    TIMER_TOPIC,
    TOPIC_PATTERN,
    Message,
)
from rocketstore.results import PutStatus
from rocketstore.system_topics import reserved_by_store
from rocketstore.timer.request import ASKING, DELIVERY_HEADROOM, TimerRules, deliver_at_ms

__all__ = [
    "MessageColumns",
    "MessageEncoder",
    "PreparedBatch",
    "PreparedMessage",
    "body_buffer",
    "check_messages",
    "column_length",
    "stored_properties",
    "tag_column",
    "validate_topic",
]

_USER_SYSFLAG_BITS: Final = SYSFLAG_CONTENT | SYSFLAG_TX_MASK
_ILLEGAL = PutStatus.MESSAGE_ILLEGAL
# Below this many messages the columnar path's numpy overhead costs more than it saves.
MIN_COLUMNAR_BATCH: Final = 16
_BODY_TYPES: Final = frozenset((bytes, bytearray, memoryview))
_NONE: Final = type(None)
_STR_OR_NONE: Final = frozenset((str, _NONE))
_INT_OR_NONE: Final = frozenset((int, _NONE))
_NO_PROPERTIES: Final = frozenset((dict, _NONE))
_KEYS_TYPES: Final = frozenset((list, tuple, str, _NONE))
_INT64_MIN: Final = -(1 << 63)
_INT64_MAX: Final = (1 << 63) - 1
_TAGS_CACHE_SIZE: Final = 4096
# properties a producer's batch may not carry: the store sets them (a batch is never delayed)
_NOT_IN_A_BATCH: Final = (PROPERTY_DELAY, PROPERTY_REAL_TOPIC, PROPERTY_REAL_QUEUE_ID)
# ... nor the batch's own properties (which every message of it gets): these are each message's
_EACH_MESSAGE_OWN: Final = (PROPERTY_TAGS, PROPERTY_KEYS, PROPERTY_UNIQ_KEY)
_BATCH_NAMES_TEXT: Final = (*_NOT_IN_A_BATCH, *_EACH_MESSAGE_OWN)
_BATCH_NAMES_ENCODED: Final = [n.encode() for n in _BATCH_NAMES_TEXT]
_BATCH_NAMES: Final = np.frombuffer(b"".join(_BATCH_NAMES_ENCODED), dtype=np.uint8)
_BATCH_NAME_OFFSETS: Final = np.cumsum([0, *map(len, _BATCH_NAMES_ENCODED)]).astype(np.int64)
_N_REFUSED: Final = len(_NOT_IN_A_BATCH)
_V_TAGS, _V_KEYS, _V_UNIQ = range(3)  # rows of _encode_batches' value spans
# _encode_batches' problem codes beside inner_message's
_EMPTY_BATCH, _NAMED, _BODY_TOO_BIG, _PROPERTIES_TOO_BIG, _RECORD_TOO_BIG, _BATCH_NAMED, _BATCH_PROPERTY = (
    range(100, 107)
)
# what the batch path reads of every message, in one C-level pass (columns 9.. decide the path)
_MESSAGE_FIELDS: Final = operator.attrgetter(
    "topic", "body", "tags", "keys", "properties", "queue_id", "flag", "born_timestamp", "uniq_key",
    "delay_level", "sys_flag", "born_host", "reconsume_times", "deliver_at",
)  # fmt: skip


def _why_not(name: str) -> str:
    """Why a batch may not carry property ``name``."""
    if name == PROPERTY_DELAY:
        return "batch messages cannot be delayed"
    if name in _EACH_MESSAGE_OWN:
        return "each message of a batch carries its own"
    return "the store sets it"


def _topic_name(batch: object) -> str:
    topic = getattr(batch, "topic", None)
    return f"topic {topic!r}" if isinstance(topic, str) else "no topic"


def validate_topic(topic: object, *, allow_system: bool = False) -> str:
    """Return ``topic`` if it may be stored (and used as a directory name), else raise."""
    if not isinstance(topic, str) or not TOPIC_PATTERN.fullmatch(topic):
        raise InvalidMessageError(
            f"invalid topic {topic!r}: topics are 1-127 characters of letters, digits, '_', '-', '%', '|'",
            _ILLEGAL,
        )
    if not allow_system and reserved_by_store(topic):  # TIMER_TOPIC (rmq_sys_wheel_timer) among them
        raise InvalidMessageError(f"topic {topic!r} is reserved for the store itself", _ILLEGAL)
    return topic


@dataclass(slots=True)
class PreparedMessage:
    """A message encoded and ready to append; ``record`` lacks only the three lock-time fields."""

    record: bytearray
    topic: str
    queue_id: int
    sys_flag: int
    tags_code: int
    delay_ms: int  # > 0 for SCHEDULE_TOPIC_XXXX: tagsCode is then store time + delay_ms
    keys: str | None
    uniq_key: str | None
    timestamp_position: int  # where STORETIMESTAMP sits in the record


@dataclass(slots=True)
class PreparedBatch:
    """Plain messages (no delay, no transaction, store host as born host) encoded back to back.

    ``blob[starts[i] : starts[i] + lengths[i]]`` is record i, of topic ``topics[topic_ids[i]]``;
    ``sys_flags[i]`` is its sysflag. ``keys`` holds each record's KEYS text and ``uniq_keys``
    its UNIQ_KEY (empty: none), for the index.
    """

    blob: npt.NDArray[np.uint8]
    starts: npt.NDArray[np.int64]
    lengths: npt.NDArray[np.int64]
    topics: list[str]
    topic_ids: npt.NDArray[np.int64]
    queue_ids: npt.NDArray[np.int64]
    tags_codes: npt.NDArray[np.int64]
    keys: TextColumn
    uniq_keys: TextColumn
    sys_flags: npt.NDArray[np.int64]

    def __len__(self) -> int:
        return len(self.starts)


@dataclass(frozen=True, slots=True)
class MessageColumns:
    """Messages of one topic as columns: message i has body ``bodies[i]``, queue ``queue_ids[i]``,
    tags ``tags[tag_ids[i]]``, KEYS text ``keys[i]`` (keys separated by single spaces), flag
    ``flags[i]`` and born time ``born_timestamps[i]``; born at the store host, no other property."""

    topic: str
    bodies: Sequence[bytes | bytearray | memoryview]
    queue_ids: npt.NDArray[np.int64]
    tags: Sequence[str | None]
    tag_ids: npt.NDArray[np.int64]
    keys: TextColumn
    flags: npt.NDArray[np.int64]
    born_timestamps: npt.NDArray[np.int64]


class MessageEncoder:
    """Validates and encodes messages for one store. Thread-safe (caches only grow; ids are locked)."""

    def __init__(self, config: StoreConfig, clock: Clock) -> None:
        self._clock = clock
        self._store_addr, self._store_port = parse_host(config.store_host)
        self._store_v6 = SYSFLAG_STOREHOST_V6 if len(self._store_addr) == 16 else 0
        # a plain batch is born at the store host: its records share these
        self._store_host_bytes = self._store_addr + self._store_port.to_bytes(4, "big")
        self._plain_sys_flag = (SYSFLAG_BORNHOST_V6 | SYSFLAG_STOREHOST_V6) if self._store_v6 else 0
        self._max_body = config.max_message_size
        self._max_record = min(
            config.max_message_size, config.commitlog_segment_size - END_FILE_MIN_BLANK_LENGTH
        )
        self._delay_levels = config.delay_levels_ms
        self._timer = TimerRules(
            config.timer_wheel_enable, config.timer_precision_ms, config.timer_max_delay_sec * 1000
        )
        self._uniq = UniqKeyGenerator() if config.generate_uniq_key else None
        self._topics: dict[str, bytes] = {}
        self._system_topics: dict[str, bytes] = {}
        self._templates: dict[str, RecordTemplate] = {}
        self._tags_texts: dict[str | None, str] = {}  # tags value -> its validated TAGS entry
        self._batch_props: dict[tuple[tuple[str, str], ...], bytes] = {}
        self._born_hosts: dict[str, bytes] = {}  # host:port -> address + big-endian int port
        # a columnar call's topics and born hosts -> their record fields (a broker's rounds
        # name the same few again and again)
        self._names: dict[tuple[tuple[str, ...], tuple[str, ...]], _RecordNames] = {}

    # --- batches -------------------------------------------------------------------------
    def prepare_batch(
        self, msgs: Sequence[Message], queue_ids: Sequence[int] | None = None
    ) -> PreparedBatch | None:
        """The columnar form of a batch of messages born here, without delay or transaction; None
        when the batch is small or has any other message (use ``prepare_many`` then).
        ``queue_ids``, when given, are the queues the messages go to (the store's picks for
        those that named none)."""
        n = len(msgs)
        if n < MIN_COLUMNAR_BATCH or set(map(type, msgs)) != {Message}:
            return None
        columns = list(zip(*map(_MESSAGE_FIELDS, msgs)))
        if queue_ids is not None:
            columns[5] = tuple(queue_ids)
        delays, sys_flags, born_hosts, reconsumes, deliver_ats = columns[9:]
        if (
            any(delays)
            or any(sys_flags)
            or any(reconsumes)
            or born_hosts.count(None) != n
            or deliver_ats.count(None) != n
        ):
            return None
        if {*map(type, delays), *map(type, sys_flags), *map(type, reconsumes)} != {
            int
        }:  # 0.0, "", False: prepare names them
            return None
        plain = self._prepare_plain(msgs, columns)
        if plain is not None:
            return plain
        prepared = self.prepare_many(msgs, queue_ids)
        lengths = np.fromiter((len(p.record) for p in prepared), dtype=np.int64, count=n)
        starts = np.zeros(n, dtype=np.int64)
        np.cumsum(lengths[:-1], out=starts[1:])
        topic_index: dict[str, int] = {}
        topic_ids = [topic_index.setdefault(p.topic, len(topic_index)) for p in prepared]
        return PreparedBatch(
            np.frombuffer(bytearray().join(p.record for p in prepared), dtype=np.uint8),
            starts,
            lengths,
            list(topic_index),
            np.array(topic_ids, dtype=np.int64),
            np.array([p.queue_id for p in prepared], dtype=np.int64),
            np.array([p.tags_code for p in prepared], dtype=np.int64),
            TextColumn.from_texts([p.keys for p in prepared]),
            TextColumn.from_texts([p.uniq_key for p in prepared]),
            np.full(n, self._plain_sys_flag, dtype=np.int64),
        )

    def _prepare_plain(
        self, msgs: Sequence[Message], columns: list[tuple[Any, ...]] | None = None
    ) -> PreparedBatch | None:
        """The common batch (one topic; tags and keys but no other properties, no caller-given
        UNIQ_KEY) as columns for ``prepare_columns``, read in C-level passes over ``columns``
        (``_MESSAGE_FIELDS`` of every message). None when the batch is anything else, or
        anything about it is invalid: the general path then encodes it, or names the bad one."""
        n = len(msgs)
        if columns is None:
            columns = list(zip(*map(_MESSAGE_FIELDS, msgs)))
        topics, bodies, tags, keys, properties, queue_ids, flags, borns, uniqs = columns[:9]
        topic = topics[0]
        if topics.count(topic) != n or any(properties) or uniqs.count(None) != n:
            return None
        if set(map(type, queue_ids)) != {int} or set(map(type, flags)) != {int}:
            return None
        # anything of another type goes to the general path, which names it
        if not (
            set(map(type, tags)) <= _STR_OR_NONE
            and set(map(type, borns)) <= _INT_OR_NONE
            and set(map(type, properties)) <= _NO_PROPERTIES
            and set(map(type, keys)) <= _KEYS_TYPES
        ):
            return None
        tag_index = {t: i for i, t in enumerate(dict.fromkeys(tags))}
        keys_texts: list[str | None] = [None] * n
        spaces = 0  # how many spaces the KEYS texts hold when no key has one
        if any(keys):
            if set(map(type, keys)) <= {list, tuple}:
                # a key with a space (refused) shows as one space too many: counted below
                try:
                    keys_texts = [" ".join(k) if k else None for k in keys]
                except TypeError:  # a key that is not a str
                    return None
                spaces = sum(map(len, keys)) - (n - keys_texts.count(None))
                if "" in keys_texts:  # keys=[""]: an empty key
                    return None
            else:
                for i, k in enumerate(keys):
                    if k:
                        if isinstance(k, str):
                            k = (k,)
                        for key in k:
                            if type(key) is not str or not key or " " in key:
                                return None
                        keys_texts[i] = " ".join(k)
                        spaces += len(k) - 1
        try:
            key_column = TextColumn.from_texts(keys_texts)
            if key_column.data.count(b" ") != spaces:
                return None
            now = self._clock.now_ms()
            born = (
                np.full(n, now, dtype=np.int64)
                if borns.count(None) == n
                else np.array([now if b is None else b for b in borns], dtype=np.int64)
            )
            return self.prepare_columns(
                MessageColumns(
                    topic,
                    bodies,
                    np.array(queue_ids, dtype=np.int64),
                    list(tag_index),
                    np.fromiter(map(tag_index.__getitem__, tags), dtype=np.int64, count=n),
                    key_column,
                    np.array(flags, dtype=np.int64),
                    born,
                )
            )
        except (InvalidMessageError, OverflowError, TypeError, UnicodeEncodeError):
            return None

    def prepare_columns(self, columns: MessageColumns) -> PreparedBatch:
        """Validate and encode messages given as columns: bulk checks, a generated UNIQ_KEY
        block, and one compiled loop for every record. Raises InvalidMessageError naming the
        first bad message, with the words ``put_messages`` would use for it; nothing is kept."""
        try:
            return self._encode_columns(columns)
        except _BadRow as exc:
            # The checks go column by column: an earlier message may be bad in another way.
            c = columns
            for i in range(exc.row + 1):
                keys_text = c.keys[i]
                try:
                    self.prepare(
                        Message(
                            c.topic,
                            cast("bytes", c.bodies[i]),  # as given: prepare names a wrong type
                            c.tags[int(c.tag_ids[i])],
                            keys_text.split(" ") if keys_text is not None else (),
                            queue_id=int(c.queue_ids[i]),
                            flag=int(c.flags[i]),
                            born_timestamp=int(c.born_timestamps[i]),
                        )
                    )
                except InvalidMessageError as first:
                    raise InvalidMessageError(f"message {i} of the batch: {first}", first.status) from None
            raise

    def _encode_columns(self, columns: MessageColumns) -> PreparedBatch:
        """``prepare_columns``; a bad message raises _BadRow, for the first bad row of a check."""
        topic, bodies, queue_ids, tags = columns.topic, columns.bodies, columns.queue_ids, columns.tags
        tag_ids, keys, flags = columns.tag_ids, columns.keys, columns.flags
        n = len(bodies)
        topic_bytes = self._topic_bytes(topic)
        body_types = set(map(type, bodies))
        if not body_types <= {bytes, bytearray}:  # memoryviews (by nbytes), subclasses, wrong types
            flat = []
            for i, b in enumerate(bodies):
                try:
                    flat.append(b if type(b) is bytes else body_buffer(b))
                except InvalidMessageError as exc:
                    raise _bad_row(i, str(exc)) from None
            bodies = flat
        body_lens = np.fromiter(map(len, bodies), dtype=np.int64, count=n)
        _first_bad(
            body_lens > self._max_body,
            lambda i: f"body of {body_lens[i]} bytes exceeds max_message_size {self._max_body}",
        )
        _first_bad(
            (queue_ids < 0) | (queue_ids > MAX_QUEUE_ID),
            lambda i: f"queue_id must be an int in 0..{MAX_QUEUE_ID}, not {queue_ids[i]}",
        )
        _first_bad(
            (flags < -0x80000000) | (flags > 0x7FFFFFFF),
            lambda i: f"flag must be a 32-bit int, not {flags[i]}",
        )
        for t in tags:
            if t is not None:
                try:
                    _check_property(PROPERTY_TAGS, t)
                    t.encode()
                except (InvalidMessageError, UnicodeEncodeError) as exc:
                    raise _bad_row(int(np.argmax(tag_ids == tags.index(t))), str(exc)) from None
        _check_keys(keys)
        uniqs = self._uniq.take_column(n) if self._uniq is not None else TextColumn.empty(n)
        tag_column = TextColumn.from_texts(tags)
        present = tag_ids if None not in tags else np.where(tag_ids == tags.index(None), -1, tag_ids)
        props, props_lens = encode_plain_properties(keys, tag_column, present, uniqs)
        _first_bad(
            props_lens > MAX_PROPERTIES_BYTES,
            lambda i: f"properties take {props_lens[i]} bytes, more than {MAX_PROPERTIES_BYTES}",
            PutStatus.PROPERTIES_SIZE_EXCEEDED,
        )
        blob, starts, lengths = encode_batch(
            topic_bytes,
            self._store_host_bytes,
            b"".join(bodies),
            body_lens,
            props,
            props_lens,
            queue_ids,
            flags,
            columns.born_timestamps,
        )
        _first_bad(
            lengths > self._max_record,
            lambda i: (
                f"record of {lengths[i]} bytes exceeds the limit of {self._max_record} "
                "(max_message_size, and a commitlog segment less 8 bytes)"
            ),
            PutStatus.MESSAGE_SIZE_EXCEEDED,
        )
        codes = np.array([tags_code(t) for t in tags], dtype=np.int64)
        return PreparedBatch(
            blob,
            starts,
            lengths,
            [topic],
            np.zeros(n, dtype=np.int64),
            queue_ids,
            codes[tag_ids] if len(codes) else np.zeros(n, dtype=np.int64),
            keys,
            uniqs,
            np.full(n, self._plain_sys_flag, dtype=np.int64),
        )

    def prepare_encoded(self, batches: Sequence[EncodedBatch]) -> tuple[PreparedBatch, list[int]]:
        """Validate and encode producers' batches (RocketMQ's batch encoding) as one columnar
        batch (``prepare_encoded_columns`` on their columns). Also returns how many messages each
        batch holds (their records follow one another in order)."""
        prepared, counts = self.prepare_encoded_columns(self.encoded_columns(batches))
        return prepared, counts.tolist()

    def encoded_columns(self, batches: Sequence[EncodedBatch]) -> EncodedColumns:
        """The columns of ``batches``, each checked (InvalidMessageError names the first bad one)."""
        extras: list[bytes] = []
        for b, batch in enumerate(batches):
            try:
                extras.append(self._check_batch(batch))
            except InvalidMessageError as exc:
                raise InvalidMessageError(f"batch {b} ({_topic_name(batch)}): {exc}", exc.status) from None
        return EncodedColumns.of(batches, extras)

    def prepare_encoded_columns(self, columns: EncodedColumns) -> tuple[PreparedBatch, npt.NDArray[np.int64]]:
        """Validate and encode producers' batches given as columns as one columnar batch, in one
        compiled pass over all of them: each inner message keeps its flag, body and properties
        bytes, its batch's properties added, as RocketMQ's ``MessageExtBatchEncoder`` stores
        them; TAGS, KEYS and UNIQ_KEY are read from the messages' properties for the queues and
        the index. Also returns how many messages each batch holds. Raises InvalidMessageError
        naming the batch and message (nothing kept): a column of the wrong shape or range, a
        damaged encoding, an empty batch, a DELAY or another property the store sets, sizes over
        the limits."""
        c = columns
        nb = len(c)
        data, data_at = _bytes_column("data", c.data, c.data_offsets, nb)
        extras, extra_at = _bytes_column("properties", c.properties, c.properties_offsets, nb)
        topic_ids = _int64_column("topic_ids", c.topic_ids, nb)
        host_ids = _int64_column("born_host_ids", c.born_host_ids, nb)
        queue_ids = _int64_column("queue_ids", c.queue_ids, nb)
        sys_flags = _int64_column("sys_flags", c.sys_flags, nb)
        reconsume = _int64_column("reconsume_times", c.reconsume_times, nb)
        born = _int64_column("born_timestamps", c.born_timestamps, nb)
        # the ranges in one pass (a broker's round of a few sends pays no per-column numpy calls)
        which, b = _out_of_range(
            data_at,
            extra_at,
            topic_ids,
            len(c.topics),
            host_ids,
            len(c.born_hosts),
            queue_ids,
            sys_flags,
            reconsume,
        )
        if which < -1:
            raise _offsets_refused(*(("data", len(data)) if which == -3 else ("properties", len(extras))))
        if which >= 0:
            name, column, allowed = (
                ("topic_ids", topic_ids, f"0..{len(c.topics) - 1}"),
                ("born_host_ids", host_ids, f"0..{len(c.born_hosts) - 1}"),
                ("queue_ids", queue_ids, f"0..{MAX_QUEUE_ID}"),
                ("sys_flags", sys_flags, f"the body's bits ({SYSFLAG_CONTENT:#x}): no transaction"),
                ("reconsume_times", reconsume, "0..2147483647"),
            )[which]
            raise InvalidMessageError(f"batch {b}: {name} {int(column[b])} is outside {allowed}", _ILLEGAL)
        names = self._record_names(c.topics, c.born_hosts)
        if names.v6 is not None:
            sys_flags = sys_flags | np.where(names.v6[host_ids], SYSFLAG_BORNHOST_V6, 0) | self._store_v6
        (
            problem, bad_batch, bad_message, where,
            blob, starts, lengths, counts, tags_codes, slow_tags, value_at, value_len, of_message,
        ) = _encode_batches(
            data,
            data_at,
            topic_ids,
            names.tails,
            names.tail_lengths,
            queue_ids,
            sys_flags,
            born,
            reconsume,
            names.hosts,
            names.host_lengths,
            host_ids,
            extras,
            extra_at,
            np.frombuffer(self._store_host_bytes, dtype=np.uint8),
            _BATCH_NAMES,
            _BATCH_NAME_OFFSETS,
            self._max_body,
            self._max_record,
            crc32_function(),
        )  # fmt: skip
        if problem:
            raise self._batch_problem(c, data, data_at, problem, bad_batch, bad_message, where)
        for row in np.flatnonzero(slow_tags).tolist():
            a, n = int(value_at[_V_TAGS, row]), int(value_len[_V_TAGS, row])
            tags_codes[row] = tags_code(bytes(data[a : a + n]).decode("utf-8", "replace"))
        prepared = PreparedBatch(
            blob,
            starts,
            lengths,
            list(c.topics),
            of_message[0],
            of_message[1],
            tags_codes,
            TextColumn.from_spans(data, value_at[_V_KEYS], value_len[_V_KEYS]),
            TextColumn.from_spans(data, value_at[_V_UNIQ], value_len[_V_UNIQ]),
            of_message[2],
        )
        return prepared, counts

    def _record_names(self, topics: Sequence[str], born_hosts: Sequence[str]) -> _RecordNames:
        """The records' TOPICLENGTH and TOPIC of each of ``topics``, and the BORNHOST of each of
        ``born_hosts``, joined for the encoding pass (each validated; cached)."""
        try:
            key = (tuple(topics), tuple(born_hosts))
            names = self._names.get(key)
        except TypeError:  # something unhashable: named by the checks below
            key, names = None, None
        if names is not None:
            return names
        tails = [self._topic_tail(b, topic) for b, topic in enumerate(topics)]
        hosts = [self._born_host(host) for host in born_hosts]
        v6 = None
        if self._store_v6 or any(len(h) == 20 for h in hosts):
            v6 = np.fromiter((len(h) == 20 for h in hosts), dtype=np.bool_, count=len(hosts))
        names = _RecordNames(
            np.frombuffer(b"".join(tails), dtype=np.uint8),
            np.fromiter(map(len, tails), dtype=np.int64, count=len(tails)),
            np.frombuffer(b"".join(hosts), dtype=np.uint8),
            np.fromiter(map(len, hosts), dtype=np.int64, count=len(hosts)),
            v6,
        )
        if key is not None:
            if len(self._names) >= _TAGS_CACHE_SIZE:
                self._names.clear()
            self._names[key] = names
        return names

    def _topic_tail(self, b: int, topic: object) -> bytes:
        """TOPICLENGTH and TOPIC of a batch's record, the topic validated."""
        try:
            topic_bytes = self._topic_bytes(topic)
        except InvalidMessageError as exc:
            raise InvalidMessageError(f"topic {b}: {exc}", exc.status) from None
        return bytes((len(topic_bytes),)) + topic_bytes

    def _topic_bytes(self, topic: object, *, internal: bool = False) -> bytes:
        """A topic's UTF-8 bytes, once it is validated (``validate_topic``; cached)."""
        cache = self._system_topics if internal else self._topics
        topic_bytes = cache.get(topic) if type(topic) is str else None
        if topic_bytes is None:
            name = validate_topic(topic, allow_system=internal)
            topic_bytes = cache[name] = name.encode()
        return topic_bytes

    def _born_host(self, host: object) -> bytes:
        """A born host ``ip:port`` as a record holds it (address, big-endian int port)."""
        if type(host) is not str:
            raise InvalidMessageError(f"born_host must be a str 'ip:port', not {host!r}", _ILLEGAL)
        born_host = self._born_hosts.get(host)
        if born_host is None:
            try:
                addr, port = parse_host(host)
            except ValueError as exc:
                raise InvalidMessageError(f"born_host: {exc}", _ILLEGAL) from None
            if len(self._born_hosts) >= _TAGS_CACHE_SIZE:
                self._born_hosts.clear()
            born_host = self._born_hosts[host] = addr + port.to_bytes(4, "big")
        return born_host

    def _batch_problem(
        self,
        columns: EncodedColumns,
        data: npt.NDArray[np.uint8],
        data_at: npt.NDArray[np.int64],
        problem: int,
        b: int,
        message: int,
        where: int,
    ) -> InvalidMessageError:
        """The error for ``_encode_batches``' problem with message ``message`` of batch ``b``."""
        status = _ILLEGAL
        if problem == _EMPTY_BATCH:
            why = "the batch holds no message"
        elif problem == _NAMED:
            name = _BATCH_NAMES_TEXT[where]
            why = f"message {message} of the batch: property {name!r}: {_why_not(name)}"
        elif problem == _BATCH_NAMED:
            name = _BATCH_NAMES_TEXT[where]
            why = f"property {name!r} of the batch: {_why_not(name)}"
        elif problem == _BATCH_PROPERTY:
            why = f"the batch's properties: entry at byte {where} has no name or no value"
        elif problem == _BODY_TOO_BIG:
            why = f"message {message} of the batch: body of {where} bytes exceeds max_message_size "
            why += str(self._max_body)
        elif problem == _PROPERTIES_TOO_BIG:
            status = PutStatus.PROPERTIES_SIZE_EXCEEDED
            why = f"message {message} of the batch: properties take {where} bytes, more than "
            why += str(MAX_PROPERTIES_BYTES)
        elif problem == _RECORD_TOO_BIG:
            status = PutStatus.MESSAGE_SIZE_EXCEEDED
            why = (
                f"message {message} of the batch: record of {where} bytes exceeds the limit of "
                f"{self._max_record} (max_message_size, and a commitlog segment less 8 bytes)"
            )
        else:
            own = bytes(data[data_at[b] : data_at[b + 1]])
            where -= int(data_at[b])
            text = problem_text(own, problem, where)
            why = f"the encoding is damaged: batch message {message} at byte {where}: {text}"
        topic = columns.topics[int(columns.topic_ids[b])]
        return InvalidMessageError(f"batch {b} (topic {topic!r}): {why}", status)

    def _check_batch(self, batch: EncodedBatch) -> bytes:
        """The batch's properties bytes of a batch whose fields are valid; InvalidMessageError
        names the first that is not (topic and born host are checked with the columns)."""
        if not isinstance(batch, EncodedBatch):
            raise InvalidMessageError(f"expected an EncodedBatch, got {type(batch).__name__}", _ILLEGAL)
        self._topic_tail(0, batch.topic)
        queue_id, sys_flag, reconsume = batch.queue_id, batch.sys_flag, batch.reconsume_times
        if type(queue_id) is not int or not 0 <= queue_id <= MAX_QUEUE_ID:
            raise InvalidMessageError(
                f"queue_id must be an int in 0..{MAX_QUEUE_ID}, not {queue_id!r}", _ILLEGAL
            )
        if type(sys_flag) is not int or sys_flag & ~SYSFLAG_CONTENT:
            raise InvalidMessageError(
                f"sys_flag {sys_flag!r}: a batch takes only the body's bits ({SYSFLAG_CONTENT:#x}), "
                "no transaction",
                _ILLEGAL,
            )
        if type(reconsume) is not int or not 0 <= reconsume <= 0x7FFFFFFF:
            raise InvalidMessageError(
                f"reconsume_times must be a 32-bit int >= 0, not {reconsume!r}", _ILLEGAL
            )
        born_ts = batch.born_timestamp
        if type(born_ts) is not int or not _INT64_MIN <= born_ts <= _INT64_MAX:
            raise InvalidMessageError(f"born_timestamp must be a 64-bit int, not {born_ts!r}", _ILLEGAL)
        self._born_host(batch.born_host)
        if type(batch.data) is not bytes:
            raise InvalidMessageError(f"data must be bytes, not {type(batch.data).__name__}", _ILLEGAL)
        return self._batch_properties(batch.properties)

    def _batch_properties(self, props: Mapping[str, str]) -> bytes:
        """A batch's own properties as the bytes added to each of its messages' (cached: a
        broker adds the same few to every batch)."""
        if not isinstance(props, Mapping):
            raise InvalidMessageError(f"properties must be a mapping, not {type(props).__name__}", _ILLEGAL)
        key = tuple(props.items())
        try:
            encoded = self._batch_props.get(key)
        except TypeError:  # an unhashable value: named below
            encoded = None
        if encoded is None:
            for name, value in key:
                _check_property(name, value)
                if name in _NOT_IN_A_BATCH or name in _EACH_MESSAGE_OWN:
                    raise InvalidMessageError(f"property {name!r} of the batch: {_why_not(name)}", _ILLEGAL)
            encoded = _properties_bytes(encode_properties(props)) if props else b""
            if len(self._batch_props) >= _TAGS_CACHE_SIZE:
                self._batch_props.clear()
            self._batch_props[key] = encoded
        return encoded

    def prepare_many(
        self, msgs: Sequence[Message], queue_ids: Sequence[int] | None = None, *, internal: bool = False
    ) -> list[PreparedMessage]:
        """Every message prepared, or an InvalidMessageError for the first bad one (nothing kept).
        ``queue_ids`` as for ``prepare_batch``; ``internal`` as for ``prepare``."""
        out = []
        for i, m in enumerate(msgs):
            try:
                out.append(
                    self.prepare(
                        m, internal=internal, queue_id=queue_ids[i] if queue_ids is not None else None
                    )
                )
            except InvalidMessageError as exc:
                raise InvalidMessageError(f"message {i} of the batch: {exc}", exc.status) from None
        return out

    # --- one message -----------------------------------------------------------------------
    def prepare(
        self, msg: Message, *, internal: bool = False, queue_id: int | None = None
    ) -> PreparedMessage:
        """Encode one message, to ``queue_id`` when given (the store's pick for a message that
        names none). ``internal`` allows system topics and properties (store use only)."""
        topic, topic_bytes, body, queue_id, sys_flag = self._check(
            msg, msg.queue_id if queue_id is None else queue_id, internal=internal
        )
        uniq = msg.uniq_key
        if uniq is None and not internal and self._uniq is not None:
            uniq = self._uniq.next()
        if not (
            msg.delay_level
            or sys_flag
            or msg.reconsume_times
            or msg.born_host is not None
            or msg.properties
            or internal
            or msg.deliver_at is not None
        ):
            return self._prepare_plain_one(msg, topic, topic_bytes, body, queue_id, uniq)
        props, keys_text = stored_properties(msg, uniq, internal=internal)
        if msg.deliver_at is not None:
            if any(name in props for name in ASKING):
                raise InvalidMessageError(
                    f"deliver_at and a {'/'.join(ASKING)} property: give one of them", _ILLEGAL
                )
            props[ASKING[2]] = str(deliver_at_ms(msg.deliver_at))

        delay_ms = 0
        headroom = -1  # >= 0 for a timer: what its delivery adds to the record beyond its properties
        level = msg.delay_level
        if (sys_flag & SYSFLAG_TX_MASK) not in (TX_NOT, TX_COMMIT):
            pass  # a prepared half (or rollback) is never delayed: its commit is
        elif level:
            for name in ASKING:  # a delay level wins over a timer (RocketMQ 5's HookUtils)
                props.pop(name, None)
        elif props and self._timer.rewrite(props, topic, queue_id, self._clock.now_ms()):
            # delivered, the record names its real topic instead of the timer topic
            headroom = max(0, len(topic_bytes) - len(TIMER_TOPIC))
            topic, queue_id = TIMER_TOPIC, 0
            topic_bytes = topic.encode()
        if level and (sys_flag & SYSFLAG_TX_MASK) in (TX_NOT, TX_COMMIT):
            level = min(level, len(self._delay_levels))
            props[PROPERTY_REAL_TOPIC] = topic
            props[PROPERTY_REAL_QUEUE_ID] = str(queue_id)
            props[PROPERTY_DELAY] = str(level)
            topic, queue_id = SCHEDULE_TOPIC, level - 1
            topic_bytes = topic.encode()
            delay_ms = self._delay_levels[level - 1]

        props_room = DELIVERY_HEADROOM if headroom >= 0 else 0
        props_bytes = _properties_bytes(encode_properties(props), props_room) if props else b""
        headroom = max(0, headroom) + props_room
        if msg.born_host is None:
            born_addr, born_port = self._store_addr, self._store_port
        else:
            try:
                born_addr, born_port = parse_host(msg.born_host)
            except ValueError as exc:
                raise InvalidMessageError(f"born_host: {exc}", _ILLEGAL) from None
        sys_flag |= self._store_v6 | (SYSFLAG_BORNHOST_V6 if len(born_addr) == 16 else 0)
        born_ts = self._clock.now_ms() if msg.born_timestamp is None else msg.born_timestamp
        try:
            record = encode_message(
                body=body,
                topic=topic_bytes,
                properties=props_bytes,
                queue_id=queue_id,
                flag=msg.flag,
                sys_flag=sys_flag,
                born_timestamp=born_ts,
                born_addr=born_addr,
                born_port=born_port,
                store_addr=self._store_addr,
                store_port=self._store_port,
                prepared_transaction_offset=msg.prepared_transaction_offset,
                reconsume_times=msg.reconsume_times,
            )
        except struct.error as exc:
            raise InvalidMessageError(f"a field is out of range: {exc}", _ILLEGAL) from None
        self._check_record_length(len(record) + headroom, headroom)
        return PreparedMessage(
            record,
            topic,
            queue_id,
            sys_flag,
            0 if delay_ms else tags_code(msg.tags),
            delay_ms,
            keys_text,
            uniq,
            store_timestamp_position(sys_flag),
        )

    def _prepare_plain_one(
        self,
        msg: Message,
        topic: str,
        topic_bytes: bytes,
        body: bytes | bytearray | memoryview,
        queue_id: int,
        uniq: str | None,
    ) -> PreparedMessage:
        """``prepare`` of a message born here with at most KEYS, TAGS and UNIQ_KEY: the same
        bytes, with the per-topic header template and the TAGS text validated once per value."""
        template = self._templates.get(topic)
        if template is None:
            template = self._templates[topic] = RecordTemplate(
                topic_bytes, self._store_addr, self._store_port, self._store_addr, self._store_port
            )
        tags = msg.tags
        text = self._tags_texts.get(tags)
        if text is None:
            if tags is not None:
                _check_property(PROPERTY_TAGS, tags)
            if len(self._tags_texts) >= _TAGS_CACHE_SIZE:
                self._tags_texts.clear()
            text = self._tags_texts[tags] = f"{PROPERTY_TAGS}\x01{tags}\x02" if tags is not None else ""
        keys_text = _keys_text(msg.keys)
        if keys_text is not None:
            text = f"{PROPERTY_KEYS}\x01{keys_text}\x02{text}"
        if uniq is not None:
            _check_property(PROPERTY_UNIQ_KEY, uniq)
            text = f"{text}{PROPERTY_UNIQ_KEY}\x01{uniq}"
        elif text:
            text = text[:-1]
        props_bytes = _properties_bytes(text)
        born_ts = self._clock.now_ms() if msg.born_timestamp is None else msg.born_timestamp
        try:
            record, sys_flag = template.encode(body, props_bytes, queue_id, msg.flag, 0, born_ts)
        except struct.error as exc:
            raise InvalidMessageError(f"a field is out of range: {exc}", _ILLEGAL) from None
        self._check_record_length(len(record))
        return PreparedMessage(
            record,
            topic,
            queue_id,
            sys_flag,
            tags_code(tags),
            0,
            keys_text,
            uniq,
            template.timestamp_position,
        )

    # --- shared checks -----------------------------------------------------------------------
    def _check(
        self, msg: Message, queue_id: int | None, *, internal: bool
    ) -> tuple[str, bytes, bytes | bytearray | memoryview, int, int]:
        """Validate the fields every path needs: (topic, topic bytes, body, queue id, sysflag)."""
        if not isinstance(msg, Message):
            raise InvalidMessageError(f"expected a Message, got {type(msg).__name__}", _ILLEGAL)
        topic = msg.topic
        topic_bytes = self._topic_bytes(topic, internal=internal)
        body: bytes | bytearray | memoryview = msg.body
        if type(body) is not bytes:
            body = body_buffer(body)
        if len(body) > self._max_body:
            raise InvalidMessageError(
                f"body of {len(body)} bytes exceeds max_message_size {self._max_body}", _ILLEGAL
            )
        if type(queue_id) is not int or not 0 <= queue_id <= MAX_QUEUE_ID:
            raise InvalidMessageError(
                f"queue_id must be an int in 0..{MAX_QUEUE_ID}, not {queue_id!r}", _ILLEGAL
            )
        sys_flag = msg.sys_flag
        if type(sys_flag) is not int or sys_flag & ~_USER_SYSFLAG_BITS:
            raise InvalidMessageError(
                f"sys_flag {sys_flag!r}: only the compressed (0x1), multi-tags (0x2), transaction (0xC) "
                "and compression type (0x700) bits can be set",
                _ILLEGAL,
            )
        prepared = msg.prepared_transaction_offset
        if prepared and (
            type(prepared) is not int or prepared < 0 or sys_flag & SYSFLAG_TX_MASK != TX_COMMIT
        ):
            raise InvalidMessageError(
                f"prepared_transaction_offset {prepared!r}: a non-negative int, on a COMMIT "
                "(sys_flag 0x8) only",
                _ILLEGAL,
            )
        flag = msg.flag
        if type(flag) is not int or not -0x80000000 <= flag <= 0x7FFFFFFF:
            raise InvalidMessageError(f"flag must be a 32-bit int, not {flag!r}", _ILLEGAL)
        _check_types(msg)
        return topic, topic_bytes, body, queue_id, sys_flag

    def _check_record_length(self, length: int, headroom: int = 0) -> None:
        if length > self._max_record:
            room = f" (with the {headroom} bytes its timer's delivery may add)" if headroom else ""
            raise InvalidMessageError(
                f"record of {length - headroom} bytes{room} exceeds the limit of {self._max_record} "
                "(max_message_size, and a commitlog segment less 8 bytes)",
                PutStatus.MESSAGE_SIZE_EXCEEDED,
            )


def stored_properties(
    msg: Message, uniq: str | None, *, internal: bool = False
) -> tuple[dict[str, str], str | None]:
    """The properties ``msg`` is stored with (before any delay rewrite), in the order the store
    writes them (KEYS, TAGS, the message's own, UNIQ_KEY ``uniq``), and its KEYS. Raises
    InvalidMessageError naming a property the store refuses (one it sets itself, unless
    ``internal``)."""
    props: dict[str, str] = {}
    keys_text = _keys_text(msg.keys)
    if keys_text is not None:
        props[PROPERTY_KEYS] = keys_text
    if msg.tags is not None:
        _check_property(PROPERTY_TAGS, msg.tags)
        props[PROPERTY_TAGS] = msg.tags
    if msg.properties:
        for name, value in msg.properties.items():
            _check_property(name, value)
            if name in RESERVED_PROPERTIES and not internal:
                raise InvalidMessageError(
                    f"property {name!r} is set by the store from the Message fields", _ILLEGAL
                )
            props[name] = value
    if uniq is not None:
        _check_property(PROPERTY_UNIQ_KEY, uniq)
        props[PROPERTY_UNIQ_KEY] = uniq
    return props, keys_text


def tag_column(
    tags: str | Sequence[str | None] | None, n: int
) -> tuple[list[str | None], npt.NDArray[np.int64]]:
    """put_batch's tags as (distinct values, index of each message's value)."""
    if tags is None or isinstance(tags, str):
        return [tags], np.zeros(n, dtype=np.int64)
    if column_length("tags", tags) != n:
        raise InvalidMessageError(f"{len(tags)} tags for {n} bodies", _ILLEGAL)
    index: dict[str | None, int] = {}
    try:
        ids = [index.setdefault(t, len(index)) for t in tags]
    except (TypeError, ValueError):  # unhashable, or a writable memoryview
        raise InvalidMessageError("tags must be strings or None", _ILLEGAL) from None
    for t in index:
        if t is not None and type(t) is not str:
            raise InvalidMessageError(f"tags must be strings or None, not {t!r}", _ILLEGAL)
    return list(index), np.array(ids, dtype=np.int64)


def body_buffer(body: object) -> bytes | bytearray | memoryview:
    """A body as a flat buffer whose length is its size in bytes, or InvalidMessageError.

    A memoryview counts items, not bytes (``memoryview(array('I', ...))`` has 4-byte items): it is
    cast to unsigned bytes, or copied when it is not contiguous, so every length written into the
    record is ``nbytes``. bytes and bytearray (and their subclasses) are taken as they are."""
    if isinstance(body, (bytes, bytearray)):
        return body
    if isinstance(body, memoryview):
        try:
            return body.cast("B") if body.c_contiguous else body.tobytes()
        except ValueError as exc:  # a released view
            raise InvalidMessageError(f"body: {exc}", _ILLEGAL) from None
    raise InvalidMessageError(
        f"body must be bytes, bytearray or memoryview, not {type(body).__name__}", _ILLEGAL
    )


def check_messages(msgs: object) -> None:
    """InvalidMessageError unless ``msgs`` is a sequence of Messages (one C-level pass when it is)."""
    column_length("messages", msgs)
    seq = cast("Sequence[object]", msgs)
    if set(map(type, seq)) != {Message}:
        for i, m in enumerate(seq):
            if not isinstance(m, Message):
                raise InvalidMessageError(
                    f"message {i} of the batch: expected a Message, got {type(m).__name__}", _ILLEGAL
                )


def column_length(name: str, column: object) -> int:
    """How many entries a put_batch column (a list, tuple, 1-d array or other sequence) holds;
    InvalidMessageError, naming ``name``, for anything else (a str, bytes, a mapping, a set, a
    scalar, an iterator)."""
    if type(column) is list or type(column) is tuple:
        return len(column)
    if isinstance(column, np.ndarray) and column.ndim == 1:
        return len(column)
    if isinstance(column, Sequence) and not isinstance(column, (str, bytes, bytearray, memoryview)):
        return len(column)
    raise InvalidMessageError(
        f"{name} must be a list or tuple with one entry per message, not {type(column).__name__}", _ILLEGAL
    )


def _check_types(msg: Message) -> None:
    """The types of the optional fields of a Message (those ``_check`` does not read itself)."""
    tags = msg.tags
    if tags is not None and not isinstance(tags, str):
        raise InvalidMessageError(f"tags must be a str or None, not {type(tags).__name__}", _ILLEGAL)
    props = msg.properties
    if props is not None and type(props) is not dict and not isinstance(props, Mapping):
        raise InvalidMessageError(
            f"properties must be a mapping of str to str or None, not {type(props).__name__}", _ILLEGAL
        )
    born = msg.born_timestamp
    if born is not None and (type(born) is not int or not _INT64_MIN <= born <= _INT64_MAX):
        raise InvalidMessageError(f"born_timestamp must be a 64-bit int or None, not {born!r}", _ILLEGAL)
    host = msg.born_host
    if host is not None and not isinstance(host, str):
        raise InvalidMessageError(
            f"born_host must be an 'ip:port' str or None, not {type(host).__name__}", _ILLEGAL
        )
    uniq = msg.uniq_key
    if uniq is not None and not isinstance(uniq, str):
        raise InvalidMessageError(f"uniq_key must be a str or None, not {type(uniq).__name__}", _ILLEGAL)
    level = msg.delay_level
    if type(level) is not int or level < 0:
        raise InvalidMessageError(f"delay_level must be a non-negative int, not {level!r}", _ILLEGAL)
    reconsume = msg.reconsume_times
    if type(reconsume) is not int or not 0 <= reconsume <= 0x7FFFFFFF:
        raise InvalidMessageError(
            f"reconsume_times must be an int from 0 to 2**31-1, not {reconsume!r}", _ILLEGAL
        )


class _BadRow(InvalidMessageError):
    def __init__(self, row: int, problem: str, status: PutStatus) -> None:
        super().__init__(f"message {row} of the batch: {problem}", status)
        self.row = row


def _bad_row(i: int, problem: str, status: PutStatus = _ILLEGAL) -> _BadRow:
    return _BadRow(i, problem, status)


def _first_bad(
    bad: npt.NDArray[np.bool_], problem: Callable[[int], str], status: PutStatus = _ILLEGAL
) -> None:
    """Raise for the first message ``bad`` marks (``problem`` words it)."""
    if bad.any():
        i = int(np.argmax(bad))
        raise _bad_row(i, problem(i), status)


def _check_keys(keys: TextColumn) -> None:
    """KEYS texts are keys separated by single spaces: no empty key, no \\x01 or \\x02."""
    if not keys.data:
        return
    row, separator = _bad_keys(np.frombuffer(keys.data, dtype=np.uint8), keys.offsets)
    if row >= 0:
        if separator:
            raise _bad_row(row, "keys cannot contain \\x01 or \\x02")
        raise _bad_row(row, "keys are non-empty strings without spaces")


@kernel(cache=True)
def _bad_keys(u8: npt.NDArray[np.uint8], offsets: npt.NDArray[np.int64]) -> tuple[int, bool]:
    """(first row with a bad KEYS text or -1, whether it holds a separator)."""
    for i in range(len(offsets) - 1):
        start, end = offsets[i], offsets[i + 1]
        for p in range(start, end):
            c = u8[p]
            if c == 1 or c == 2:
                return i, True
            # a space that starts or ends the text, or follows another, leaves an empty key
            if c == 32 and (p == start or p == end - 1 or u8[p - 1] == 32):
                return i, False
    return -1, False


def _properties_bytes(properties: str, headroom: int = 0) -> bytes:
    """The properties string as stored: UTF-8, at most 32767 bytes (less ``headroom``, the
    bytes a timer's delivery adds)."""
    try:
        encoded = properties.encode()
    except UnicodeEncodeError as exc:
        raise InvalidMessageError(f"properties are not valid text: {exc}", _ILLEGAL) from None
    if len(encoded) + headroom > MAX_PROPERTIES_BYTES:
        room = f" and a timer's delivery adds up to {headroom}" if headroom else ""
        raise InvalidMessageError(
            f"properties take {len(encoded)} bytes{room}, more than {MAX_PROPERTIES_BYTES}",
            PutStatus.PROPERTIES_SIZE_EXCEEDED,
        )
    return encoded


def _keys_text(keys: str | Sequence[str] | None) -> str | None:
    """A message's KEYS property (its keys joined by spaces), None for no keys."""
    if type(keys) is not tuple and type(keys) is not list:
        if keys is None:
            return None
        if isinstance(keys, str):
            keys = [keys] if keys else ()
        elif not isinstance(keys, (list, tuple)):
            raise InvalidMessageError(
                f"keys must be a str or a list or tuple of str, not {type(keys).__name__}", _ILLEGAL
            )
    if not keys:
        return None
    for k in keys:
        if not isinstance(k, str) or not k or " " in k or "\x01" in k or "\x02" in k:
            raise InvalidMessageError(
                f"key {k!r}: keys are non-empty strings without spaces or \\x01/\\x02", _ILLEGAL
            )
    return " ".join(keys)


def _check_property(name: str, value: str) -> None:
    try:
        validate_property(name, value)
    except ValueError as exc:
        raise InvalidMessageError(str(exc), _ILLEGAL) from None


class _RecordNames(NamedTuple):
    """``MessageEncoder._record_names``: topics' and born hosts' record fields, joined."""

    tails: npt.NDArray[np.uint8]
    tail_lengths: npt.NDArray[np.int64]
    hosts: npt.NDArray[np.uint8]
    host_lengths: npt.NDArray[np.int64]
    v6: npt.NDArray[np.bool_] | None  # each host an IPv6 one; None when none is, nor the store's


def _int64_column(name: str, column: object, n: int) -> npt.NDArray[np.int64]:
    if type(column) is np.ndarray and column.dtype == np.int64 and column.shape == (n,):
        return column if column.flags.c_contiguous else np.ascontiguousarray(column)
    array = np.asarray(column)
    if array.shape != (n,) or (n and array.dtype.kind not in "iu"):
        raise InvalidMessageError(
            f"{name} must be {n} integers, not {array.dtype} of shape {array.shape}", _ILLEGAL
        )
    return np.ascontiguousarray(array, dtype=np.int64)


# (holds the GIL: a broker's round of a few sends would wait longer to take it back than this runs)
@kernel(cache=True)
def _out_of_range(
    data_at: npt.NDArray[np.int64],
    extra_at: npt.NDArray[np.int64],
    topic_ids: npt.NDArray[np.int64],
    topics: int,
    host_ids: npt.NDArray[np.int64],
    hosts: int,
    queue_ids: npt.NDArray[np.int64],
    sys_flags: npt.NDArray[np.int64],
    reconsume: npt.NDArray[np.int64],
) -> tuple[int, int]:
    """The first column (in ``prepare_encoded_columns``' order; -1: none) with a value out of
    its range, and its row: -3 and -2 for offsets (``data_at``, ``extra_at``) that fall."""
    for b in range(1, len(data_at)):
        if data_at[b] < data_at[b - 1]:
            return -3, b
    for b in range(1, len(extra_at)):
        if extra_at[b] < extra_at[b - 1]:
            return -2, b
    for b in range(len(topic_ids)):
        if not 0 <= topic_ids[b] < topics:
            return 0, b
        if not 0 <= host_ids[b] < hosts:
            return 1, b
        if not 0 <= queue_ids[b] <= MAX_QUEUE_ID:
            return 2, b
        if sys_flags[b] & ~SYSFLAG_CONTENT:
            return 3, b
        if not 0 <= reconsume[b] <= 0x7FFFFFFF:
            return 4, b
    return -1, 0


def _bytes_column(
    name: str, data: object, offsets: object, n: int
) -> tuple[npt.NDArray[np.uint8], npt.NDArray[np.int64]]:
    """A bytes column of ``n`` parts: the uint8 array and its offsets (0 first, its length last;
    that they never fall is ``_out_of_range``'s to check)."""
    array = np.asarray(data)
    if array.ndim != 1 or array.dtype != np.uint8:
        raise InvalidMessageError(
            f"{name} must be a uint8 array, not {array.dtype} of shape {array.shape}", _ILLEGAL
        )
    at = _int64_column(f"{name}_offsets", offsets, n + 1)
    if at[0] != 0 or at[-1] != len(array):
        raise _offsets_refused(name, len(array))
    if array.flags.writeable:  # the kernels see one kind of array, whoever made it (one compiled form)
        array = array.view()
        array.flags.writeable = False
    return np.ascontiguousarray(array), at


def _offsets_refused(name: str, size: int) -> InvalidMessageError:
    return InvalidMessageError(f"{name}_offsets must rise from 0 to {size}", _ILLEGAL)


@kernel(cache=True, nogil=True, inline="always")
def _offsets(lengths: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """Where each of parts of these lengths starts when they are joined, and the end."""
    out = np.zeros(len(lengths) + 1, dtype=np.int64)
    for i in range(len(lengths)):
        out[i + 1] = out[i] + lengths[i]
    return out


@kernel(cache=True, nogil=True)
def _encode_batches(
    data: npt.NDArray[np.uint8],
    batch_at: npt.NDArray[np.int64],
    batch_topic: npt.NDArray[np.int64],
    tails: npt.NDArray[np.uint8],
    tail_lengths: npt.NDArray[np.int64],
    queue_ids: npt.NDArray[np.int64],
    sys_flags: npt.NDArray[np.int64],
    born: npt.NDArray[np.int64],
    reconsume: npt.NDArray[np.int64],
    hosts: npt.NDArray[np.uint8],
    host_lengths: npt.NDArray[np.int64],
    host_ids: npt.NDArray[np.int64],
    extras: npt.NDArray[np.uint8],
    extra_at: npt.NDArray[np.int64],
    store_host: npt.NDArray[np.uint8],
    names: npt.NDArray[np.uint8],
    name_offsets: npt.NDArray[np.int64],
    max_body: int,
    max_record: int,
    crc_fn: npt.NDArray[np.int64],
) -> tuple[
    int, int, int, int,
    npt.NDArray[np.uint8], npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.int64],
    npt.NDArray[np.int64], npt.NDArray[np.bool_], npt.NDArray[np.int64], npt.NDArray[np.int64],
    npt.NDArray[np.int64],
]:  # fmt: skip
    """``prepare_encoded_columns``' pass: batch b is ``data[batch_at[b]:batch_at[b + 1]]``, with
    topic tail ``batch_topic[b]`` of ``tails``, born host ``host_ids[b]`` of ``hosts`` and extra
    properties ``extras[extra_at[b]:extra_at[b + 1]]`` (checked: every entry a name and a value,
    none of ``names``). Returns (a problem (0: none), its batch, its message, its position,
    name or size; the records, their starts and lengths, how many each batch holds, their tags
    codes, which tags are not strict UTF-8, the value spans of TAGS, KEYS and UNIQ_KEY, and the
    rows topic, queue and sysflag of each message)."""
    nb = len(batch_topic)
    tail_at = _offsets(tail_lengths)
    host_at = _offsets(host_lengths)
    cap = len(data) // 22 + 1
    batch_of = np.empty(cap, dtype=np.int64)
    flags = np.empty(cap, dtype=np.int64)
    body_len = np.empty(cap, dtype=np.int64)
    props_at = np.empty(cap, dtype=np.int64)
    props_len = np.empty(cap, dtype=np.int64)
    separate = np.zeros(cap, dtype=np.bool_)
    starts = np.empty(cap, dtype=np.int64)
    lengths = np.empty(cap, dtype=np.int64)
    counts = np.zeros(nb, dtype=np.int64)
    # the value spans of every name of ``names``: the refused ones, then TAGS, KEYS, UNIQ_KEY
    value_at = np.full((len(name_offsets) - 1, cap), -1, dtype=np.int64)
    value_len = np.zeros((len(name_offsets) - 1, cap), dtype=np.int64)
    tags_codes = np.zeros(cap, dtype=np.int64)
    slow = np.zeros(cap, dtype=np.bool_)
    problem = 0
    bad_batch = 0
    where = 0
    m = 0
    n = 0
    total = 0
    for b in range(nb):
        pos = batch_at[b]
        end = batch_at[b + 1]
        if pos == end:
            problem = _EMPTY_BATCH
            bad_batch = b
            m = 0
            break
        e = extra_at[b + 1] - extra_at[b]
        p = extra_at[b]
        while p < extra_at[b + 1]:
            sep, stop = property_entry(extras, p, extra_at[b + 1])
            if not p < sep < stop - 1:
                problem, where = _BATCH_PROPERTY, p - extra_at[b]
                break
            for j in range(len(name_offsets) - 1):
                if is_name(extras, p, sep - p, names, name_offsets, j):
                    problem, where = _BATCH_NAMED, j
            if problem:
                break
            p = stop + 1
        if problem:
            bad_batch = b
            m = 0
            break
        hb = host_ids[b]
        head = 72 + (host_at[hb + 1] - host_at[hb]) + len(store_host)
        tail = tail_at[batch_topic[b] + 1] - tail_at[batch_topic[b]]
        m = 0
        while pos < end:
            problem, size, flag, blen, pat, plen = inner_message(data, pos, end)
            where = pos
            if not problem:
                pend = pat + plen
                last_values(data, pat, pend, names, name_offsets, value_at, value_len, n)
                refused = -1  # the refused name that comes first, if any
                for j in range(_N_REFUSED):
                    if value_at[j, n] >= 0 and (refused < 0 or value_at[j, n] < value_at[refused, n]):
                        refused = j
                stored = plen
                if e > 0:
                    separate[n] = plen > 0 and data[pend - 1] != 2
                    stored += e + (1 if separate[n] else 0)
                length = head + blen + tail + 2 + stored
                if blen > max_body:
                    problem, where = _BODY_TOO_BIG, blen
                elif refused >= 0:
                    problem, where = _NAMED, refused
                elif stored > MAX_PROPERTIES_BYTES:
                    problem, where = _PROPERTIES_TOO_BIG, stored
                elif length > max_record:
                    problem, where = _RECORD_TOO_BIG, length
            if problem:
                bad_batch = b
                break
            batch_of[n] = b
            flags[n] = flag
            body_len[n] = blen
            props_at[n] = pat
            props_len[n] = plen
            starts[n] = total
            lengths[n] = length
            total += length
            tags = value_at[_N_REFUSED + _V_TAGS, n]
            if tags >= 0:
                h, ok = java_hash_utf8(data, tags, tags + value_len[_N_REFUSED + _V_TAGS, n], 0)
                if ok:
                    tags_codes[n] = signed32(h)
                else:
                    slow[n] = True
            n += 1
            m += 1
            pos += size
        if problem:
            break
        counts[b] = m
    wanted_at = value_at[_N_REFUSED:, :n]
    wanted_len = value_len[_N_REFUSED:, :n]
    if problem:
        none = np.zeros(0, dtype=np.uint8)
        return (
            problem,
            bad_batch,
            m,
            where,
            none,
            starts,
            lengths,
            counts,
            tags_codes,
            slow,
            wanted_at,
            wanted_len,
            np.zeros((3, 0), dtype=np.int64),
        )
    out = np.zeros(total, dtype=np.uint8)
    of_message = np.empty((3, n), dtype=np.int64)  # each message's topic, queue and sysflag
    for i in range(n):
        b = batch_of[i]
        t = batch_topic[b]
        hb = host_ids[b]
        of_message[0, i] = t
        of_message[1, i] = queue_ids[b]
        of_message[2, i] = sys_flags[b]
        write_record(
            out, starts[i], lengths[i], data, props_at[i] - 2 - body_len[i], body_len[i], data, props_at[i],
            props_len[i], extras, extra_at[b], extra_at[b + 1] - extra_at[b], separate[i],
            tails, tail_at[t], tail_at[t + 1] - tail_at[t], queue_ids[b], flags[i], sys_flags[b], born[b],
            hosts, host_at[hb], host_at[hb + 1] - host_at[hb], store_host, reconsume[b], crc_fn,
        )  # fmt: skip
    return (
        0, 0, 0, 0, out, starts[:n], lengths[:n], counts, tags_codes[:n], slow[:n], wanted_at, wanted_len,
        of_message,
    )  # fmt: skip
