"""``python -m rocketstore.warm`` loads (or compiles) every kernel the package defines, so no
command, broker request or Spark read of a fresh install compiles one on first use (a first
batch send that compiled the batch encoder took 3.6 s: its client had given up after 3).

One process imports every module of the package (which registers every ``@kernel`` with
``rocketstore.jit``), defines one kernel more that nothing runs, runs ``warm()``, and reports
each kernel warm did not reach: neither run from Python (numba's dispatcher counts a cache hit
or miss for each signature it loads or compiles) nor named by a kernel that was (numba compiles
a kernel's callees into it, and loads them from its cache with it). Then it serves a store over
the remoting protocol, sends a batch, a message, pulls and queries, and reports every signature
compiled after warm: none may be.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent

_CHILD = r"""
import importlib, json, pkgutil, sys, tempfile, types
from pathlib import Path

import rocketstore
from rocketstore import jit

for module in pkgutil.walk_packages(rocketstore.__path__, "rocketstore."):
    if module.name.endswith(".__main__"):
        continue
    try:
        importlib.import_module(module.name)
    except ModuleNotFoundError as exc:  # an optional dependency (pyarrow, pyspark): no kernels
        if exc.name and exc.name.split(".")[0] in ("rocketstore", "tests"):
            raise


@jit.kernel(cache=False)
def forgotten_on_purpose(x):  # defined after the package, run by nothing: must be reported
    return x + 1


from rocketstore.warm import warm

warm(lambda line: None)


def names(code):
    found = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            found |= names(const)
    return found


def lazy(value):
    return value if isinstance(value, jit._Kernel) else jit._made.get(id(value))


def ran(k):
    d = k._compiled
    return d is not None and sum(d.stats.cache_hits.values()) + sum(d.stats.cache_misses.values()) > 0


reached = {k for k in jit._kernels if ran(k)}
todo = list(reached)
while todo:
    k = todo.pop()
    for name in names(k.py_func.__code__):
        callee = lazy(k.py_func.__globals__.get(name))
        if isinstance(callee, jit._Kernel) and callee not in reached:
            reached.add(callee)
            todo.append(callee)
missed = sorted(f"{k.py_func.__module__}.{k.py_func.__qualname__}" for k in jit._kernels if k not in reached)


def signatures():
    return {name: len(d.signatures) if d is not None else 0 for name, d in jit.kernels()}


before = signatures()
from rocketstore import MessageStore, StoreConfig
from rocketstore.broker import Broker, BrokerConfig
from rocketstore.broker.remoting.codes import RequestCode
from rocketstore.broker.remoting.command import SERIALIZE_ROCKETMQ
from rocketstore.broker.remoting.endpoint import bind_listener
from rocketstore.codec.message_batch import BatchEntry, encode_batch_body
from rocketstore.codec.properties import encode_properties
from rocketstore.warm import scratch_config
from tests.broker.remoting.client import RawClient
from tests.broker.remoting.test_bulk_sends import frame, props_of, send_cmd
from tests.broker.remoting.test_consumer_requests import pull_ext
from tests.broker.remoting.test_producer import send

answers = []
with tempfile.TemporaryDirectory() as tmp:
    sock = bind_listener("127.0.0.1:0")
    port = sock.getsockname()[1]
    store = MessageStore.open(Path(tmp) / "s", scratch_config().replace(store_host=f"127.0.0.1:{port}"))
    broker = Broker(store, BrokerConfig(listen=None, remoting="127.0.0.1:0"))
    broker.start_in_thread(remoting_socket=sock)
    try:
        with RawClient(port) as c:
            props = [{"TAGS": "t", "KEYS": f"k{i}", "UNIQ_KEY": f"{i:032X}"} for i in range(5)]
            entries = [BatchEntry(0, b"b%d" % i, encode_properties(p)) for i, p in enumerate(props)]
            body = encode_batch_body(entries)
            batch = dict(code=RequestCode.SEND_BATCH_MESSAGE, kind=SERIALIZE_ROCKETMQ, batch=True)
            answers.append(send(c, "Batched", body, {"WAIT": "true"}, **batch).code)
            answers.append(send(c, "Batched", b"one", {"TAGS": "t", "KEYS": "a b", "WAIT": "true"}).code)
            # a read of many sends: taken apart and stored in bulk, both header encodings
            bulk = [send_cmd("Batched", b"m", props_of(i), 100 + i, kind=i % 2) for i in range(16)]
            c.send_raw(b"".join(frame(x) for x in bulk))
            answers.append(sorted({c.response_to(x.opaque).code for x in bulk}))
            store.wait_dispatched()
            answers.append(c.call(RequestCode.PULL_MESSAGE, pull_ext("Batched", 0)).code)
            query = {"topic": "Batched", "key": "k1", "maxNum": "32", "beginTimestamp": "0"}
            query["endTimestamp"] = str(1 << 62)
            answers.append(c.call(RequestCode.QUERY_MESSAGE, query).code)
    finally:
        broker.stop_in_thread()
        store.close()
after = signatures()
compiled = {name: after[name] - before.get(name, 0) for name in after if after[name] != before.get(name, 0)}
print(json.dumps({"missed": missed, "answers": answers, "compiled_after_warm": compiled}))
"""


@pytest.fixture(scope="module")
def warmed() -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-c", _CHILD], cwd=ROOT, capture_output=True, text=True, timeout=1200
    )
    assert done.returncode == 0, done.stderr[-4000:]
    result: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    return result


def test_warm_reaches_every_kernel_the_package_defines(warmed: dict[str, Any]) -> None:
    # the kernel defined on purpose and run by nothing is the only one missed: the check works
    assert warmed["missed"] == ["__main__.forgotten_on_purpose"]


def test_serving_after_warm_compiles_nothing(warmed: dict[str, Any]) -> None:
    """The remoting broker's sends (batch, single, and many in one read: in bulk), pull and
    query find every kernel they run, with the argument types they pass, already loaded."""
    assert warmed["answers"] == [0, 0, [0], 0, 0]
    assert warmed["compiled_after_warm"] == {}


def test_preload_loads_the_batch_encoder_without_a_store(tmp_path: Path) -> None:
    """What `rocketstore serve` runs on a thread as it starts: numba and the batch encoder loaded
    into the process, no file written (the working directory stays empty)."""
    child = (
        "import json, sys; from rocketstore import jit; from rocketstore.warm import preload; "
        "before = 'numba' in sys.modules; preload(); "
        "print(json.dumps([before, {n: len(d.signatures) for n, d in jit.kernels() if d is not None}]))"
    )
    done = subprocess.run(
        [sys.executable, "-c", child], cwd=tmp_path, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-4000:]
    numba_before, loaded = json.loads(done.stdout.splitlines()[-1])
    assert not numba_before
    assert loaded["rocketstore.prepare._encode_batches"] == 1
    assert list(tmp_path.iterdir()) == []


def test_preload_reads_loads_what_a_following_consumer_reads_with(tmp_path: Path) -> None:
    """A process that follows a writer loads the read kernels first: its polls (columns and
    messages, from a read-only map) then run them compiled with the types preload_reads gave."""
    from rocketstore import MessageStore
    from rocketstore.warm import scratch_config

    with MessageStore.open(tmp_path / "s", scratch_config()) as store:
        for queue_id in range(2):
            store.put_batch("Load", [b"x" * 50] * 40, queue_ids=queue_id)
    child = (
        "import json, sys; from rocketstore import jit; from rocketstore.warm import preload_reads; "
        "from rocketstore.consumer import open_consumer; "
        "before = 'numba' in sys.modules; preload_reads(); "
        "sigs = lambda: {n: len(d.signatures) for n, d in jit.kernels() "
        "if d is not None and 'commitlog_scan' in n}; "
        "loaded = sigs(); "
        "c = open_consumer(sys.argv[1], 'g', 'Load', start='earliest', auto_commit=False); "
        "n = sum(len(b.queue_offsets) for b in c.poll_batch(timeout=5)); c.seek('Load', 0, 0); "
        "m = len(c.poll(256, timeout=5)); c.close(); "
        "print(json.dumps([before, loaded, sigs(), n, m]))"
    )
    done = subprocess.run(
        [sys.executable, "-c", child, str(tmp_path / "s")], capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-4000:]
    numba_before, preloaded, after_reads, columns, messages = json.loads(done.stdout.splitlines()[-1])
    assert not numba_before
    assert (columns, messages) == (80, 40)
    kernels = "rocketstore.codec.commitlog_scan._gather", "rocketstore.codec.commitlog_scan._copy_spans"
    assert all(preloaded.get(k, 0) >= 1 for k in kernels), preloaded
    assert {k: after_reads[k] for k in kernels} == {k: preloaded[k] for k in kernels}
