"""EndTransaction over gRPC ends only a real half (issue 29, item 3, the core remoting shares): a
transaction id naming a consistent half record planted inside another message's body is
INVALID_TRANSACTION_ID, and nothing reaches the topic."""

from __future__ import annotations

from typing import Any

from rocketstore import Message
from rocketstore.broker.transactions import HALF_TOPIC
from rocketstore.protocol import definition_pb2 as pb
from rocketstore.protocol import service_pb2 as rpc

from .conftest import CLIENT, StartBroker
from .remoting.test_transaction_halves import PLANTED_UNIQ, planted_half
from .test_hostile import half_of
from .test_requests import Stub


def test_end_transaction_naming_a_half_planted_in_a_body_is_refused(
    start_broker: StartBroker, stub_for: Stub
) -> None:
    _, store, port = start_broker()
    stub = stub_for(port)
    real = half_of(stub, "Tx", CLIENT)
    # the carrier's body is a half record whose fields say where it lies: a probe put first
    # tells where the next carrier's body will be
    probe = store.put_message(Message("Carrier", planted_half(0, 0), queue_id=0, uniq_key="C" * 28))
    body_start = store.look_message_by_offset(probe.physical_offset).record.body_start
    at = store.max_phy_offset()
    planted = at + body_start
    carrier = store.put_message(Message("Carrier", planted_half(planted, 0), queue_id=0, uniq_key="C" * 28))
    assert carrier.physical_offset == at
    record = store.look_message_by_offset(planted)
    assert record is not None and record.topic == HALF_TOPIC and record.uniq_key == PLANTED_UNIQ

    def end(transaction_id: str, message_id: str) -> Any:
        return stub.EndTransaction(
            rpc.EndTransactionRequest(
                topic=pb.Resource(name="Tx"),
                message_id=message_id,
                transaction_id=transaction_id,
                resolution=pb.TransactionResolution.COMMIT,
                source=pb.TransactionSource.SOURCE_CLIENT,
            ),
            metadata=CLIENT,
        )

    forged = real.transaction_id[:-16] + f"{planted:016X}"
    refused = end(forged, PLANTED_UNIQ)
    assert refused.status.code == pb.Code.INVALID_TRANSACTION_ID, refused
    assert store.wait_dispatched(30)
    assert sum(store.max_offset_in_queue("Tx", q) for q in store.topics().get("Tx", [])) == 0
    assert end(real.transaction_id, real.message_id).status.code == pb.Code.OK
    assert store.wait_dispatched(30)
    assert sum(store.max_offset_in_queue("Tx", q) for q in store.topics()["Tx"]) == 1
