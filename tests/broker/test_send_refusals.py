"""Sends over gRPC that the store would refuse create no topic (issue 29, item 5: refuse first,
create after), and the broker's own topics are refused in any letter case."""

from __future__ import annotations

from rocketstore.protocol import definition_pb2 as pb

from .conftest import CLIENT, StartBroker
from .test_requests import Stub, send_request

BIG = {"big": "€" * 16_000}  # under the 16384 characters gRPC checks; 48 KB stored


def test_a_send_the_store_refuses_creates_no_topic(start_broker: StartBroker, stub_for: Stub) -> None:
    _, store, port = start_broker()
    stub = stub_for(port)
    end = store.max_phy_offset()
    for message_type in (pb.MessageType.NORMAL, pb.MessageType.TRANSACTION):
        refused = stub.SendMessage(
            send_request("Fresh", user=BIG, message_type=message_type), metadata=CLIENT
        )
        assert refused.status.code == pb.Code.BAD_REQUEST, refused
        assert "propert" in refused.entries[0].status.message
        assert "Fresh" not in store.topic_configs()
    for topic in ("rmq_sys_ROCKETSTORE_POP_LOG", "rmq_sys_anything", "Rmq_Sys_X"):
        refused = stub.SendMessage(send_request(topic), metadata=CLIENT)
        assert refused.status.code == pb.Code.ILLEGAL_TOPIC, refused
        assert topic not in store.topic_configs()
    store.wait_dispatched()
    assert store.max_phy_offset() == end
    # a good message beside a bad one: the store takes none of a request, so no topic either
    request = send_request("Fresh", user=BIG)
    request.messages.append(send_request("Fresh").messages[0])
    mixed = stub.SendMessage(request, metadata=CLIENT)
    assert [e.status.code for e in mixed.entries] == [pb.Code.BAD_REQUEST, pb.Code.BAD_REQUEST], mixed
    assert "message 0 of the batch" in mixed.entries[1].status.message
    assert "Fresh" not in store.topic_configs()
    ok = stub.SendMessage(send_request("Fresh"), metadata=CLIENT)
    assert ok.status.code == pb.Code.OK and "Fresh" in store.topic_configs()
