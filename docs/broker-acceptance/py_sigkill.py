"""Acceptance: SIGKILL `rocketstore serve` mid send+consume stream, restart on the same store.
Checks: every send answered OK is received after the restart; nothing whose ack was answered OK is received again."""
import os, signal, subprocess, sys, threading, time, uuid
from rocketmq.v5.client import ClientConfiguration, Credentials
from rocketmq.v5.consumer import SimpleConsumer
from rocketmq.v5.model import FilterExpression, Message
from rocketmq.v5.producer import Producer

STORE, PORT = sys.argv[1], int(sys.argv[2])
N = int(sys.argv[3]) if len(sys.argv) > 3 else 400
EP = f"127.0.0.1:{PORT}"
T, G = f"kill_{uuid.uuid4().hex[:6]}", f"G_kill_{uuid.uuid4().hex[:6]}"
SERVE = [os.path.join(os.path.dirname(os.path.abspath(__file__)), "serve.sh"), STORE, str(PORT)]

def start():
    log = open(STORE + ".log", "a")
    p = subprocess.Popen(SERVE, stdout=log, stderr=subprocess.STDOUT)
    end = time.time() + 30
    while time.time() < end:
        if "serving" in open(STORE + ".log").read().split("=== start")[-1]: return p
        time.sleep(0.2)
    raise SystemExit("server did not start")

def mark(text):
    with open(STORE + ".log", "a") as f: f.write(f"=== start {text}\n")

mark("1"); server = start()
conf = ClientConfiguration(EP, Credentials())
c = SimpleConsumer(conf, G, {T: FilterExpression("*")}, 3); c.startup(); c.receive(32, 10)
p = Producer(conf, (T,)); p.startup()

sent_ok, send_err, acked, ack_err = set(), [], {}, []
received = []   # (time, body, attempt)
stop = threading.Event()

def produce():
    for i in range(N):
        m = Message(); m.topic = T; m.body = f"m{i}".encode()
        try:
            p.send(m); sent_ok.add(m.body)
        except Exception as e:
            send_err.append((i, type(e).__name__, str(e)[:120])); time.sleep(0.2)
        time.sleep(0.01)

def consume():
    while not stop.is_set():
        try:
            msgs = c.receive(16, 10)
        except Exception as e:
            ack_err.append(("receive", type(e).__name__, str(e)[:120])); time.sleep(0.5); continue
        for m in msgs:
            received.append((time.time(), m.body, m.delivery_attempt))
            try:
                c.ack(m); acked.setdefault(m.body, time.time())
            except Exception as e:
                ack_err.append(("ack", m.body, type(e).__name__, str(e)[:120]))

tp = threading.Thread(target=produce); tc = threading.Thread(target=consume)
tp.start(); tc.start()
time.sleep(4)
print("killing at", len(sent_ok), "sent,", len(acked), "acked", flush=True)
os.kill(server.pid, signal.SIGKILL); server.wait()
acked_before_kill = dict(acked)
time.sleep(2)
mark("2 (after SIGKILL)"); server = start()
print("restarted", flush=True)
tp.join()
# drain: until everything sent OK was acked, or 60 s of nothing new
last = time.time()
while time.time() - last < 40 and not sent_ok <= set(acked):
    n = len(acked); time.sleep(1)
    if len(acked) != n: last = time.time()
stop.set(); tc.join()
lost = sorted(sent_ok - set(acked), key=lambda b: int(b[1:]))
again = [(b, a) for t, b, a in received if b in acked and t > acked[b] + 0.001]
again_after_kill = [(b, a) for t, b, a in received if b in acked_before_kill and t > acked_before_kill[b] + 0.001]
print(f"sent_ok={len(sent_ok)} send_errors={len(send_err)} acked={len(acked)} receives={len(received)}")
print("send errors:", send_err[:5])
print("receive/ack errors:", ack_err[:5], len(ack_err))
print(("PASS" if not lost else "FAIL") + " no acknowledged send lost :: lost=", lost[:20], len(lost))
print(("PASS" if not again_after_kill else "FAIL") + " nothing acked before the kill redelivered :: ", again_after_kill[:20], len(again_after_kill))
print(("PASS" if not again else "FAIL") + " nothing acked redelivered at all :: ", again[:20], len(again))
c.shutdown(); p.shutdown()
server.send_signal(signal.SIGTERM); server.wait(30)
print("topic", T, "group", G)
