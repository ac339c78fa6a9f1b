"""One phase of tests/test_many_queues.py, in a process of its own with the descriptor limit
lowered as ``ulimit -n`` would. Prints a JSON object: what it read, and the descriptors and
mappings it held at each step.

    python many_queues_child.py {create|reopen} ROOT QUEUES NOFILE MAX_MAPPED_FILES
"""

from __future__ import annotations

import json
import os
import resource
import sys
from pathlib import Path

from rocketstore import MessageStore, StoreConfig

PER_TOPIC = 100
ROUNDS = 3  # messages per queue at creation: two queue files each


def name(q: int) -> tuple[str, int]:
    return f"T{q // PER_TOPIC}", q % PER_TOPIC


def body(q: int, n: int) -> str:
    topic, qid = name(q)
    return f"{topic}/{qid}/{n}"


def put_round(store: MessageStore, queues: int, n: int) -> None:
    for t in range((queues + PER_TOPIC - 1) // PER_TOPIC):
        qs = range(t * PER_TOPIC, min(queues, (t + 1) * PER_TOPIC))
        store.put_batch(
            f"T{t}",
            [body(q, n).encode() for q in qs],
            queue_ids=[name(q)[1] for q in qs],
            keys=[f"k{body(q, n)}" for q in qs],
        )
    assert store.wait_dispatched(timeout=300), store.failure


def held(root: Path) -> dict[str, int]:
    maps = [line for line in Path("/proc/self/maps").read_text().splitlines() if str(root) in line]
    return {
        "fds": len(os.listdir("/proc/self/fd")),
        "queue_maps": sum("/consumequeue/" in line or "/index/" in line for line in maps),
        "maps": len(maps),
    }


def read_queue(store: MessageStore, q: int) -> list[str]:
    got: list[str] = []
    while r := store.get_message("g", *name(q), len(got), 32).messages:
        got += [m.body.decode() for m in r]
    return got


def main() -> None:
    phase, root = sys.argv[1], Path(sys.argv[2])
    queues, nofile, cap = (int(a) for a in sys.argv[3:6])
    resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))
    cfg = StoreConfig(
        commitlog_segment_size=16 << 20,
        consume_queue_entries=2,
        index_hash_slots=4096,
        index_max_entries=40_000,
        max_mapped_files=cap,
        disk_max_used_space_ratio=100,
        disk_clean_forcibly_ratio=100,
        disk_warning_ratio=100,
    )
    out: dict[str, object] = {}
    with MessageStore.open(root, cfg) as store:
        out["open"] = held(root)
        if phase == "create":
            for n in range(ROUNDS):
                put_round(store, queues, n)
        else:
            wrong = [
                (q, got)
                for q in range(queues)
                if (got := read_queue(store, q)) != [body(q, n) for n in range(ROUNDS)]
            ]
            out["wrong"] = wrong[:5]
            out["read"] = held(root)
            put_round(store, queues, ROUNDS)
            out["put"] = held(root)
            missing = [
                q
                for q in range(0, queues, 7)
                if [m.body.decode() for m in store.query_message(name(q)[0], f"k{body(q, ROUNDS)}")]
                != [body(q, ROUNDS)]
            ]
            out["missing_keys"] = missing[:5]
            out["max_offsets"] = sorted({store.max_offset_in_queue(*name(q)) for q in range(queues)})
        out["end"] = held(root)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
