"""Acceptance: official Python client against `rocketstore serve` (normal, FIFO, delay, tx, receive/ack, redelivery, push)."""
import sys, time, threading, uuid
from rocketmq.v5.client import ClientConfiguration, Credentials
from rocketmq.v5.consumer import SimpleConsumer, PushConsumer, MessageListener, ConsumeResult
from rocketmq.v5.model import FilterExpression, Message
from rocketmq.v5.producer import Producer, TransactionChecker
from rocketmq.grpc_protocol import TransactionResolution

EP = sys.argv[1]
RUN = uuid.uuid4().hex[:6]
RESULTS = []

def check(name, ok, detail=""):
    RESULTS.append((name, ok))
    print(("PASS " if ok else "FAIL ") + name + (" :: " + str(detail) if detail else ""), flush=True)

def conf():
    return ClientConfiguration(EP, Credentials())

def msg(topic, body, tag=None, keys=(), group=None, at=None, props=None):
    m = Message(); m.topic = topic; m.body = body
    if tag: m.tag = tag
    for k in keys: m.keys = k
    if group: m.message_group = group
    if at: m.delivery_timestamp = at
    for k, v in (props or {}).items(): m.add_property(k, v)
    return m

def consumer(group, topic, await_s=3):
    c = SimpleConsumer(conf(), group, {topic: FilterExpression("*")}, await_s)
    c.startup()
    c.receive(32, 10)  # start the group at the queues' ends before anything is sent
    return c

def drain(c, want, timeout, invisible=10, ack=True):
    got = []
    end = time.time() + timeout
    while len(got) < want and time.time() < end:
        for m in c.receive(32, invisible):
            got.append(m)
            if ack: c.ack(m)
    return got

T_N, T_F, T_D, T_T, T_P = (f"acc_{x}_{RUN}" for x in ("normal", "fifo", "delay", "tx", "push"))

class Checker(TransactionChecker):
    def __init__(self): self.asked = []
    def check(self, message):
        self.asked.append(message.body)
        return TransactionResolution.COMMIT

checker = Checker()
c_n = consumer(f"G_n_{RUN}", T_N); c_f = consumer(f"G_f_{RUN}", T_F)
c_d = consumer(f"G_d_{RUN}", T_D); c_t = consumer(f"G_t_{RUN}", T_T)
p = Producer(conf(), (T_N, T_F, T_D, T_T, T_P), checker); p.startup()

# ---- normal
receipts = [p.send(msg(T_N, f"n{i}".encode(), tag="A" if i % 2 else "B", keys=(f"k{i}",), props={"p": str(i)})) for i in range(10)]
check("normal send: 10 receipts with message ids", all(r.message_id for r in receipts), [r.message_id for r in receipts[:2]])
got = drain(c_n, 10, 15, ack=False)
bodies = sorted(m.body for m in got)
check("normal receive: all 10 bodies", bodies == sorted(f"n{i}".encode() for i in range(10)), bodies)
byb = {m.body: m for m in got}
m3 = byb.get(b"n3")
check("normal receive: tag/keys/property/id kept", m3 is not None and m3.tag == "A" and "k3" in (m3.keys or []) and m3.properties.get("p") == "3"
      and m3.message_id == receipts[3].message_id, m3 and (m3.tag, m3.keys, m3.properties, m3.message_id))
check("normal receive: delivery_attempt 1", all(m.delivery_attempt == 1 for m in got), [m.delivery_attempt for m in got])
unacked = {b"n0", b"n1"}
t_recv = time.time()
for m in got:
    if m.body not in unacked: c_n.ack(m)
again = drain(c_n, 2, 30, ack=False)
dt = time.time() - t_recv
check("redelivery: the 2 unacked come back, nothing acked", sorted(m.body for m in again) == sorted(unacked), (sorted(m.body for m in again), f"{dt:.1f}s"))
check("redelivery: delivery_attempt 2, original topic", all(m.delivery_attempt == 2 and m.topic == T_N for m in again), [(m.delivery_attempt, m.topic) for m in again])
for m in again: c_n.ack(m)
more = drain(c_n, 1, 14, ack=False)
check("redelivery: acked retries do not come back", not more, [m.body for m in more])

# ---- FIFO
for i in range(5):
    for g in ("g0", "g1", "g2"):
        p.send(msg(T_F, f"{g}-{i}".encode(), group=g))
order = {"g0": [], "g1": [], "g2": []}
held = None
end = time.time() + 40
while sum(len(v) for v in order.values()) < 16 and time.time() < end:
    for m in c_f.receive(1, 10):
        g, i = m.body.decode().split("-")
        order[g].append((int(i), m.delivery_attempt, m.message_group))
        if g == "g0" and i == "0" and m.delivery_attempt == 1:
            held = time.time()  # leave g0-0 un-acked: it must come back before g0-1
            continue
        c_f.ack(m)
check("FIFO: every group in send order (g0-0 unacked once comes back first)",
      [i for i, _, _ in order["g0"]] == [0, 0, 1, 2, 3, 4] and all([i for i, _, _ in order[g]] == list(range(5)) for g in ("g1", "g2")), order)
check("FIFO: message_group on received", all(mg == g for g in order for _, _, mg in order[g]), None)

# ---- delay
at = int(time.time()) + 3
r = p.send(msg(T_D, b"delayed", at=at))
t0 = time.time()
got = drain(c_d, 1, 25)
check("delay: delivered not before the requested time", got and time.time() >= at and got[0].delivery_timestamp is not None,
      got and (f"after {time.time()-t0:.1f}s", got[0].delivery_timestamp, at))

# ---- transactions
tx = p.begin_transaction(); p.send(msg(T_T, b"tx-commit"), tx); tx.commit()
tx = p.begin_transaction(); p.send(msg(T_T, b"tx-rollback"), tx); tx.rollback()
tx = p.begin_transaction(); p.send(msg(T_T, b"tx-unknown"), tx)   # never resolved: the broker must ask the checker
got = drain(c_t, 2, 45)
bodies = sorted(m.body for m in got)
check("tx: commit delivered, rollback not, unknown committed via orphan check", bodies == [b"tx-commit", b"tx-unknown"], (bodies, checker.asked))
check("tx: checker asked about the unknown one", b"tx-unknown" in checker.asked, checker.asked)

# ---- push consumer
seen = []
class L(MessageListener):
    def consume(self, message):
        seen.append((message.body, message.delivery_attempt))
        return ConsumeResult.FAILURE if message.body == b"push-fail" and message.delivery_attempt == 1 else ConsumeResult.SUCCESS
pc = PushConsumer(conf(), f"G_p_{RUN}", L(), {T_P: FilterExpression("*")})
pc.startup()
time.sleep(5)
for i in range(5): p.send(msg(T_P, f"push{i}".encode()))
p.send(msg(T_P, b"push-fail"))
end = time.time() + 60
while time.time() < end and not (len({b for b, _ in seen}) >= 6 and (b"push-fail", 2) in seen):
    time.sleep(0.5)
check("push: all 5 consumed", {f"push{i}".encode() for i in range(5)} <= {b for b, _ in seen}, seen)
check("push: a FAILURE comes back with attempt 2", (b"push-fail", 2) in seen, seen)
pc.shutdown()

for c in (c_n, c_f, c_d, c_t): c.shutdown()
p.shutdown()
print("RUN", RUN, "topics", T_N, T_F, T_D, T_T, T_P)
print("SUMMARY", sum(ok for _, ok in RESULTS), "/", len(RESULTS))
