"""RocketMQ 5's gRPC protocol (``apache.rocketmq.v2.MessagingService``): ``rocketstore serve`` for
the official RocketMQ 5 clients (facts: BROKER.md of the project's spec; user guide:
docs/broker.md). A thin adapter over the broker's protocol-free core (``rocketstore.broker``:
sends, transactions, pop, access, the client registry), as ``remoting/`` is for RocketMQ 4.x.

Modules:

====================  =============================================================================
``endpoint``          the grpc.aio server: message-size and stream limits, TLS, the servicer on it
``messaging_service`` the servicer: each RPC checked, answered with a Status, turned into core calls
``sent_message``      a sent protobuf ``Message`` as a rocketstore ``Message``, checked field by field
``received_message``  a stored message as the protobuf ``Message`` a consumer or a check receives
``status``            the protocol's codes, ``StatusError``, and the codes of the core's answers
                      (a ``PutStatus``, a ``RequestRefusedError``'s reason)
====================  =============================================================================

Of the broker, only this package imports ``grpc`` and the generated ``rocketstore.protocol``
modules; the core refuses with ``RequestRefusedError`` (``rocketstore.errors``), which
``status`` maps to a Code.
"""
