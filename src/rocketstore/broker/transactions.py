"""Transactional messages on a 4.9 store, as RocketMQ keeps them (BROKER.md §8).

* A half message is stored in ``RMQ_SYS_TRANS_HALF_TOPIC`` queue 0 with ``REAL_TOPIC`` and
  ``REAL_QID`` and sysflag TRANSACTION_NOT_TYPE: consumers of the real topic do not see it.
* The transaction id the producer gets is the half's offsetMsgId: it names the half's commitlog
  offset, so an EndTransaction finds the half after a restart too.
* Commit: a new record in ``REAL_TOPIC``/``REAL_QID`` (``REAL_*`` removed) with sysflag COMMIT and
  preparedTransactionOffset = the half's commitlog offset, then an op record. Rollback: the op
  record only. Op record: ``RMQ_SYS_TRANS_OP_HALF_TOPIC``, the half's queue id, tag ``d``, body =
  the half's queue offset in decimal. Both records of a commit are one store put (all or none).
* A half with no op record after ``transaction_timeout_ms`` (or its
  ``CHECK_IMMUNITY_TIME_IN_SECONDS``) is an orphan: every check interval it is offered to a
  producer whose Telemetry settings list its topic (``recover_orphaned_transaction_command``),
  at most ``transaction_check_max`` times; then it is moved to ``TRANS_CHECK_MAX_TIME_TOPIC``.
* Progress over the half queue is the consumer offset of ``CID_SYS_RMQ_TRANS`` (RocketMQ's name):
  the first half not yet resolved. The resolved ones are read back from the op queue at start.
  Check counts are kept in memory (a restart starts them again).

Thread safety: ``load``, ``orphans`` and ``resolve`` touch the store and run on a worker thread;
the ``_done``/``_pending`` sets are only changed on the event loop (``mark_*``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Final

from rocketstore.broker.group_commit import GroupCommit, PutOutcome
from rocketstore.codec.commitlog_record import SYSFLAG_CONTENT, SYSFLAG_TX_MASK, TX_COMMIT
from rocketstore.codec.java_number import parse_java_long
from rocketstore.codec.message_id import decode_offset_msg_id
from rocketstore.errors import CorruptDataError, Refusal, RequestRefusedError
from rocketstore.message import (
    PROPERTY_REAL_QUEUE_ID,
    PROPERTY_REAL_TOPIC,
    RESERVED_PROPERTIES,
    Message,
    MessageExt,
)
from rocketstore.results import PutMessageResult
from rocketstore.store import MessageStore
from rocketstore.system_topics import HALF_TOPIC, OP_TOPIC, TRANS_CHECK_MAX_TIME_TOPIC

__all__ = [
    "CHECK_MAX_TOPIC",
    "HALF_TOPIC",
    "OP_TOPIC",
    "PROPERTY_CHECK_IMMUNITY",
    "PROPERTY_CHECK_TIMES",
    "PROPERTY_PRODUCER_GROUP",
    "PROPERTY_TRANSACTION",
    "Orphan",
    "TransactionLog",
    "end_transaction",
    "immunity_ms",
    "put_halves",
    "transaction_id",
]

log = logging.getLogger(__name__)

CHECK_MAX_TOPIC: Final = TRANS_CHECK_MAX_TIME_TOPIC
TRANS_GROUP: Final = "CID_SYS_RMQ_TRANS"
OP_TAG: Final = "d"
PROPERTY_CHECK_TIMES: Final = "TRANSACTION_CHECK_TIMES"
# what a sent transactional message carries (RocketMQ's MessageConst names)
PROPERTY_TRANSACTION: Final = "TRAN_MSG"
PROPERTY_PRODUCER_GROUP: Final = "PGROUP"
PROPERTY_CHECK_IMMUNITY: Final = "CHECK_IMMUNITY_TIME_IN_SECONDS"
# halves this broker stored, remembered by commitlog offset until they end (the oldest forgotten
# first): an end right after its send comes before the half's queue entry is dispatched
_MAX_NOTED: Final = 65_536


def transaction_id(result: PutMessageResult) -> str:
    """The id of the transaction whose half ``result`` stored: the half's offsetMsgId."""
    return f"{result.id_prefix}{result.physical_offset:016X}"


def half_message(msg: Message, queue_id: int) -> Message:
    """The half of ``msg`` (a transactional message bound for queue ``queue_id`` of its topic)."""
    props = dict(msg.properties or {})
    props[PROPERTY_REAL_TOPIC] = msg.topic
    props[PROPERTY_REAL_QUEUE_ID] = str(queue_id)
    return Message(
        topic=HALF_TOPIC,
        body=msg.body,
        tags=msg.tags,
        keys=msg.keys,
        properties=props,
        queue_id=0,
        flag=msg.flag,
        uniq_key=msg.uniq_key,
        born_timestamp=msg.born_timestamp,
        born_host=msg.born_host,
        sys_flag=msg.sys_flag & ~SYSFLAG_TX_MASK,
        reconsume_times=msg.reconsume_times,
    )


def _op_record(half: MessageExt) -> Message:
    return Message(
        topic=OP_TOPIC,
        body=str(half.queue_offset).encode(),
        tags=OP_TAG,
        queue_id=half.queue_id,
        uniq_key=None,
    )


def _copy(
    half: MessageExt, topic: str, queue_id: int, *, drop: frozenset[str] = frozenset(), **changes: object
) -> Message:
    props = {k: v for k, v in half.properties.items() if k not in RESERVED_PROPERTIES and k not in drop}
    msg = Message(
        topic=topic,
        body=half.body,
        tags=half.tags,
        keys=half.keys,
        properties=props,
        queue_id=queue_id,
        flag=half.flag,
        uniq_key=half.uniq_key,
        born_timestamp=half.born_timestamp,
        born_host=half.born_host,
        sys_flag=half.sys_flag & SYSFLAG_CONTENT,
    )
    for name, value in changes.items():
        setattr(msg, name, value)
    return msg


@dataclass(frozen=True)
class Orphan:
    half: MessageExt
    topic: str
    transaction_id: str
    checks: int


class TransactionLog:
    """The half messages of a store and what became of them (see the module docstring)."""

    def __init__(self, store: MessageStore, *, timeout_ms: int, check_max: int) -> None:
        self._store = store
        self._timeout_ms = timeout_ms
        self._check_max = check_max
        self._done: set[int] = set()  # half queue offsets with an op record
        self._pending: set[int] = set()  # half queue offsets whose op record is being put
        self._checks: dict[int, int] = {}
        self._progress = 0
        self._noted: dict[int, int] = {}  # commitlog offset -> half queue offset (note_stored)

    def reconfigure(self, *, timeout_ms: int, check_max: int) -> None:
        """New settings for the next check (mqadmin updateBrokerConfig)."""
        self._timeout_ms = timeout_ms
        self._check_max = check_max

    def load(self) -> None:
        """Read the op queue (what is resolved) and where the half queue's checks stand."""
        store = self._store
        for queue_id in store.topics().get(OP_TOPIC, []):
            offset = store.min_offset_in_queue(OP_TOPIC, queue_id)
            end = store.max_offset_in_queue(OP_TOPIC, queue_id)
            while offset < end:
                res = store.get_message(TRANS_GROUP, OP_TOPIC, queue_id, offset, 256)
                if not res.messages:
                    offset = max(offset + 1, res.next_begin_offset)
                    continue
                for op in res.messages:
                    done = parse_java_long(op.body.decode("ascii", "replace")) if op.tags == OP_TAG else None
                    if done is not None:
                        self._done.add(done)
                offset = res.next_begin_offset
        committed = store.query_offset(TRANS_GROUP, HALF_TOPIC, 0)
        self._progress = max(committed, store.min_offset_in_queue(HALF_TOPIC, 0))

    def _queued_half(self, physical_offset: int, queue_offset: int) -> MessageExt | None:
        """The half that the half queue (queue 0, where every half is) holds at
        ``queue_offset`` when its record starts at ``physical_offset``, else None: a record
        found by an offset alone may be one planted inside another message's body, consistent
        as it is; only an entry of the half queue points at a real half, or, before dispatch
        made that entry, this broker's note of the half it stored there."""
        store = self._store
        if self._noted.get(physical_offset) == queue_offset:
            # stored by this broker as a half, perhaps not dispatched yet
            half = store.look_message_by_offset(physical_offset)
            if half is None or half.topic != HALF_TOPIC or half.queue_offset != queue_offset:
                return None
            return half
        if not 0 <= queue_offset < store.max_offset_in_queue(HALF_TOPIC, 0):
            return None
        res = store.get_message(TRANS_GROUP, HALF_TOPIC, 0, queue_offset, 1, transfer_limits=False)
        if not res.messages:
            return None
        half = res.messages[0]
        if half.queue_offset != queue_offset or half.physical_offset != physical_offset:
            return None
        return half

    def half_of(self, txid: str, message_id: str, topic: str) -> MessageExt:
        """The unresolved half a transaction id names; RequestRefusedError UNKNOWN_TRANSACTION if
        none."""
        try:
            _, _, offset = decode_offset_msg_id(txid)
        except CorruptDataError:
            raise RequestRefusedError(
                Refusal.UNKNOWN_TRANSACTION, f"transaction id {txid!r} is malformed"
            ) from None
        try:
            record = self._store.look_message_by_offset(offset)
        except CorruptDataError:
            record = None
        half = None
        if record is not None and record.topic == HALF_TOPIC:
            half = self._queued_half(offset, record.queue_offset)
        if (
            half is None
            or (message_id and half.uniq_key != message_id)
            or (topic and half.properties.get(PROPERTY_REAL_TOPIC) != topic)
        ):
            raise RequestRefusedError(
                Refusal.UNKNOWN_TRANSACTION, f"no transaction {txid!r} of message {message_id!r}"
            )
        if half.queue_offset in self._done or half.queue_offset in self._pending:
            raise RequestRefusedError(Refusal.UNKNOWN_TRANSACTION, f"transaction {txid!r} has already ended")
        return half

    def half_at(
        self,
        physical_offset: int,
        queue_offset: int,
        producer_group: str,
        message_id: str,
        transaction_id: str | None = None,
    ) -> MessageExt:
        """The unresolved half RocketMQ 4.9's END_TRANSACTION names: its record starts at
        ``physical_offset`` and is the half queue's entry ``queue_offset``, its producer group
        (PGROUP) is ``producer_group``, and ``message_id`` (and ``transaction_id`` when given)
        is its UNIQ_KEY or its offset message id (what RocketMQ's clients send). Else
        RequestRefusedError UNKNOWN_TRANSACTION naming what does not match."""
        half = self._queued_half(physical_offset, queue_offset)
        if half is None:
            raise RequestRefusedError(
                Refusal.UNKNOWN_TRANSACTION,
                f"no transaction half message at commitlog offset {physical_offset} "
                f"(transaction state table offset {queue_offset})",
            )
        group = half.properties.get(PROPERTY_PRODUCER_GROUP)
        if group != producer_group:
            raise RequestRefusedError(
                Refusal.UNKNOWN_TRANSACTION,
                f"the producer group {producer_group} is not the half message's {group}",
            )
        names = {half.msg_id, half.uniq_key}
        for field, value in (("msgId", message_id), ("transactionId", transaction_id)):
            if value is not None and value not in names:
                raise RequestRefusedError(
                    Refusal.UNKNOWN_TRANSACTION,
                    f"{field} {value!r:.80} is not the half message's ({half.uniq_key or half.msg_id})",
                )
        if half.queue_offset in self._done or half.queue_offset in self._pending:
            raise RequestRefusedError(
                Refusal.UNKNOWN_TRANSACTION,
                f"the transaction of message {message_id!r:.80} has already ended",
            )
        return half

    def resolution(self, half: MessageExt, commit: bool) -> list[Message]:
        """The records that end ``half``'s transaction (one store put)."""
        records = []
        if commit:
            props = half.properties
            records.append(
                _copy(
                    half,
                    props[PROPERTY_REAL_TOPIC],
                    int(props.get(PROPERTY_REAL_QUEUE_ID, "0")),
                    # a committed message is an ordinary one: RocketMQ clears TRAN_MSG on it too
                    # (EndTransactionProcessor), so readers do not take it for a half
                    drop=frozenset({PROPERTY_TRANSACTION}),
                    sys_flag=(half.sys_flag & SYSFLAG_CONTENT) | TX_COMMIT,
                    prepared_transaction_offset=half.physical_offset,
                )
            )
        records.append(_op_record(half))
        return records

    def give_up(self, half: MessageExt) -> list[Message]:
        """The records that move a half checked too often to TRANS_CHECK_MAX_TIME_TOPIC."""
        return [_copy(half, CHECK_MAX_TOPIC, 0), _op_record(half)]

    def mark_pending(self, half: MessageExt) -> bool:
        """Take ``half`` to be ended; False when it is being ended or has ended already (two
        requests for one half both passed their lookups: only the first ends it)."""
        qo = half.queue_offset
        if qo in self._pending or qo in self._done:
            return False
        self._pending.add(qo)
        return True

    def mark_done(self, half: MessageExt, ok: bool) -> None:
        self._pending.discard(half.queue_offset)
        if ok:
            self._done.add(half.queue_offset)
            self._checks.pop(half.queue_offset, None)
            self._noted.pop(half.physical_offset, None)

    def note_stored(self, results: list[PutMessageResult]) -> None:
        """Remember where halves just stored lie (``put_halves``), so that their ends find them
        before dispatch gives them their queue entries. On the event loop."""
        noted = self._noted
        for r in results:
            noted[r.physical_offset] = r.queue_offset
        while len(noted) > _MAX_NOTED:
            del noted[next(iter(noted))]

    def orphans(self, now_ms: int) -> tuple[list[Orphan], list[MessageExt]]:
        """Halves due for a check now, and halves checked ``check_max`` times (to give up on).
        Moves the saved progress past the resolved prefix of the half queue."""
        store = self._store
        if HALF_TOPIC not in store.topics():
            return [], []
        offset = self._progress
        end = store.max_offset_in_queue(HALF_TOPIC, 0)
        due: list[Orphan] = []
        expired: list[MessageExt] = []
        prefix_resolved = True
        while offset < end:
            res = store.get_message(TRANS_GROUP, HALF_TOPIC, 0, offset, 256)
            if not res.messages:
                offset = max(offset + 1, res.next_begin_offset)
                continue
            for half in res.messages:
                qo = half.queue_offset
                if qo in self._done:
                    if prefix_resolved:
                        self._progress = qo + 1
                    continue
                prefix_resolved = False
                if qo in self._pending:
                    continue
                wait = immunity_ms(half.properties.get(PROPERTY_CHECK_IMMUNITY), self._timeout_ms)
                if now_ms - half.store_timestamp < wait:
                    continue
                checks = self._checks.get(qo, 0)
                if checks >= self._check_max:
                    expired.append(half)
                else:
                    topic = half.properties.get(PROPERTY_REAL_TOPIC, "")
                    due.append(Orphan(half, topic, f"{store_id(half)}", checks))
            offset = res.next_begin_offset
        store.commit_offset(TRANS_GROUP, HALF_TOPIC, 0, self._progress)
        return due, expired

    def checked(self, half: MessageExt) -> None:
        self._checks[half.queue_offset] = self._checks.get(half.queue_offset, 0) + 1


async def put_halves(txlog: TransactionLog, puts: GroupCommit, halves: list[Message]) -> list[PutOutcome]:
    """Store transaction halves (one put through ``puts``, a group commit of internal puts),
    noting where the stored ones lie (``TransactionLog.note_stored``)."""
    outcomes = await puts.put(halves)
    txlog.note_stored([o for o in outcomes if isinstance(o, PutMessageResult) and o.physical_offset >= 0])
    return outcomes


async def end_transaction(
    txlog: TransactionLog, puts: GroupCommit, half: MessageExt, commit: bool
) -> PutOutcome | None:
    """Commit or roll back ``half`` (one store put of ``txlog.resolution``, through ``puts``, a
    group commit of internal puts); None when it is done, else the outcome that failed.
    RequestRefusedError UNKNOWN_TRANSACTION when it is being ended or has ended already."""
    if not txlog.mark_pending(half):
        raise RequestRefusedError(
            Refusal.UNKNOWN_TRANSACTION, f"the transaction of message {half.uniq_key!r} has already ended"
        )
    ok = False
    try:
        outcomes = await puts.put(txlog.resolution(half, commit))
        failed = next((o for o in outcomes if not (isinstance(o, PutMessageResult) and o.ok)), None)
        ok = failed is None
        return failed
    finally:
        txlog.mark_done(half, ok)


def immunity_ms(seconds: str | None, timeout_ms: int) -> int:
    """How long after it is stored a half is left unchecked: its producer's
    CHECK_IMMUNITY_TIME_IN_SECONDS as RocketMQ's TransactionalMessageServiceImpl reads it, or
    ``timeout_ms`` when it is absent, -1 or not a Java long (a producer's text must not stop the
    checks of every half after it)."""
    value = parse_java_long(seconds) if seconds is not None else None
    return timeout_ms if value is None or value == -1 else value * 1000


def store_id(half: MessageExt) -> str:
    """The transaction id of a stored half (its offsetMsgId)."""
    return half.msg_id
