"""The broker's round of transaction checks, for every protocol at once.

One ``TransactionLog`` holds the half messages of both protocols; each round takes the halves
left open past their timeout (``TransactionLog.orphans``), moves those checked too often to
TRANS_CHECK_MAX_TIME_TOPIC, and offers every other one to the protocol adapters in turn
(``senders``): the first that reaches a producer able to answer sends the check (gRPC: a
RecoverOrphanedTransactionCommand on a Telemetry stream; remoting: CHECK_TRANSACTION_STATE on a
producer group's connection) and the half counts one check more. A half no producer can be
asked about stays open for the next round.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import time
from collections.abc import Awaitable, Callable, Sequence

from rocketstore.broker.group_commit import GroupCommit
from rocketstore.broker.transactions import Orphan, TransactionLog
from rocketstore.results import PutMessageResult

__all__ = ["OrphanSender", "TransactionChecker"]

log = logging.getLogger("rocketstore.broker")

# True when it sent a check for the orphan to a producer
OrphanSender = Callable[[Orphan], Awaitable[bool]]


class TransactionChecker:
    def __init__(
        self,
        transactions: TransactionLog,
        puts: GroupCommit,
        executor: concurrent.futures.Executor,
        senders: Sequence[OrphanSender],
    ) -> None:
        self._txlog = transactions
        self._puts = puts
        self._executor = executor
        self._senders = list(senders)

    async def check_once(self) -> None:
        txlog = self._txlog
        loop = asyncio.get_running_loop()
        due, expired = await loop.run_in_executor(self._executor, txlog.orphans, int(time.time() * 1000))
        for half in expired:
            if not txlog.mark_pending(half):
                continue  # its producer is ending it now
            ok = False
            try:
                outcomes = await self._puts.put(txlog.give_up(half))
                ok = all(isinstance(o, PutMessageResult) and o.ok for o in outcomes)
            finally:
                txlog.mark_done(half, ok)
            log.warning(
                "transaction %s of %s checked too often: moved to TRANS_CHECK_MAX_TIME_TOPIC",
                half.msg_id,
                half.properties.get("REAL_TOPIC"),
            )
        for orphan in due:
            for send in self._senders:
                if await send(orphan):
                    txlog.checked(orphan.half)
                    break
