"""RocketMQ 4.x's own TCP protocol ("remoting"): ``rocketstore serve`` as a name server and a
broker for the Java client 4.x, mqadmin and RocketMQ's benchmark (facts: REMOTING.md of the
project's spec; user guide: docs/remoting.md).

Modules:

==================  ===============================================================================
``command``         the frame and both header encodings (JSON, ROCKETMQ binary): the only module
                    that packs or unpacks a RemotingCommand
``codes``           request, response and language codes
``headers``         custom headers <-> extFields (typed reading, Java-style writing, SEND_V2 names)
``refusal``         ``RequestRefused(code, remark)``: how a handler answers anything but SUCCESS
``server``          asyncio TCP server: connections, dispatch, oneway, server requests, limits
``acl``             RocketMQ 4.9's plain ACL (AccessKey/Signature) against the broker's ACL file
``broker_topics``   what the broker serves: its topics as routes and registrations list them, HA address
``client_ids``      client ids bound to the connection and account that used them first
``context``         ``RemotingContext``: what every processor works with
``endpoint``        the two listeners and their handler tables; transaction checks over remoting
``namesrv``         name-server requests (routes, cluster, topic lists, brokers' registrations, KV
                    config); ``NameServer``, one name-server listener
``registration``    REGISTER_BROKER (body, checksum, result), QUERY_DATA_VERSION, UNREGISTER_BROKER
``registration_service``  a broker's registrations with its name servers (``namesrvAddr``)
``slave_sync``      a slave's copies of its master's topics and offsets, and the master's answers
``client``          one outgoing connection (the broker's requests to name servers)
``heartbeat``       HEART_BEAT, UNREGISTER_CLIENT (producer groups -> ``producers``)
``producers``       producer groups and their connections (for CHECK_TRANSACTION_STATE)
``producer``        SEND_MESSAGE(_V2), SEND_BATCH_MESSAGE (its body: ``codec.message_batch``, stored
                    by ``MessageStore.put_encoded_batches``), END_TRANSACTION
==================  ===============================================================================

Adding a processor
------------------
1. A module named after what it serves (``consumer.py``, ``admin.py``), with a class built from
   the context that lists its handlers::

       class ConsumerProcessor:
           def __init__(self, ctx: RemotingContext) -> None:
               self.ctx = ctx

           def handlers(self) -> dict[int, Handler]:
               return {RequestCode.PULL_MESSAGE: self.pull, ...}

           async def pull(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand | None:
               topic = headers.text(cmd.ext_fields, "topic")          # required: SYSTEM_ERROR if absent
               queue_id = headers.number(cmd.ext_fields, "queueId")
               ...
               result = await self.ctx.run(self.ctx.store.get_message, ...)   # disk work: workers
               return cmd.response(ext_fields=headers.to_ext(nextBeginOffset=..., ...), body=...)

2. Add the class to ``BROKER_PROCESSORS`` in ``endpoint.py`` (name-server requests belong to
   ``namesrv.NameServerProcessor``). That tuple is the one registration table: a code claimed by
   two processors fails at start.

Rules a handler follows:

* Return ``cmd.response(code, remark, ext_fields, body)``: it carries the request's opaque, the
  response flag and the request's header encoding. For a oneway request (``cmd.is_oneway``) the
  server sends nothing whatever the handler returns. Return None only to answer nothing.
* Refuse with ``raise RequestRefused(ResponseCode.X, "remark")``; any other exception becomes
  SYSTEM_ERROR with its text and a log line (the connection lives on).
* Never block the loop: anything touching the disk goes through ``await ctx.run(fn, *args)``;
  a handler may await as long as it needs (a parked pull) without holding up the connection's
  other requests, up to ``max_requests_per_connection`` in progress.
* Server -> client requests: ``await conn.oneway(cmd)`` (NOTIFY_CONSUMER_IDS_CHANGED,
  CHECK_TRANSACTION_STATE) or ``await conn.invoke(cmd, timeout_s)`` (GET_CONSUMER_RUNNING_INFO);
  the opaque is the server's own; pending answers are bounded per connection.
* The ACL check runs before the handler (``acl.py``) on the topics and groups the header names
  (``RemotingAcl._resources``). What a handler reaches otherwise (through a body, a stored
  record) it checks itself: ``if ctx.acl: ctx.acl.require(cmd, topics, groups)`` or
  ``ctx.acl.require_record(cmd, msg)``. A client id a request names goes through
  ``ctx.claim_client_id(client_id, cmd, conn)``.
* State of a connection: ``conn.attributes`` (``client_id``, ``language``, ``version`` after a
  heartbeat); ``conn.when_closed(callback)`` to forget it when it closes.
* Shared state between processors lives on the context (``ctx.producers``; a new registry goes
  into ``ctx.extensions[name]`` or a new field of ``RemotingContext``). HEART_BEAT and
  UNREGISTER_CLIENT belong to ``heartbeat.py``; another registry learns of them through
  ``ctx.heartbeat_hooks`` / ``ctx.unregister_hooks`` (append one in the processor's __init__).
  Shared, protocol-free logic (sends, transactions, offsets) belongs in ``rocketstore.broker``.
* JSON bodies: ``codec.json_body.json_body(value)`` writes them as fastjson does (sorted keys, no spaces);
  ``heartbeat.parse_json_body(cmd, what)`` reads one or refuses the request.
"""
