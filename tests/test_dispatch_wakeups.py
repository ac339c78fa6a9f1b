"""Dispatch runs when bytes become readable, not on a timer: with the dispatcher's fallback
interval set to an hour, a put, a transient-pool commit and a replica's frames must each still
make their messages visible (a path that forgot to wake the dispatcher fails here by timeout)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from rocketstore import Message, MessageStore, StoreConfig
from rocketstore.dispatch import DispatchService

WAIT = 30.0
GEOMETRY = StoreConfig(
    commitlog_segment_size=1 << 20,
    consume_queue_entries=4096,
    index_hash_slots=256,
    index_max_entries=1024,
)


@pytest.fixture(autouse=True)
def no_fallback_rounds(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(DispatchService, "FALLBACK_INTERVAL", 3600.0)


def test_a_put_wakes_the_dispatcher(tmp_path: Path) -> None:
    with MessageStore.open(tmp_path / "s", GEOMETRY) as store:
        for i in range(3):
            assert store.put_message(Message("T", f"m{i}".encode(), queue_id=0)).ok
            assert store.wait_for_message("T", 0, i, WAIT)
        assert [m.body for m in store.get_message("g", "T", 0, 0).messages] == [b"m0", b"m1", b"m2"]


def test_a_transient_pool_commit_wakes_the_dispatcher(tmp_path: Path) -> None:
    # the put's own wake-up finds nothing readable (too few pages to wake the committer); the
    # committer's timed round, up to 50 ms later, commits it and must wake the dispatcher
    cfg = GEOMETRY.replace(
        transient_store_pool_enable=True,
        commit_interval=50,
        commit_least_pages=1000,
        commit_thorough_interval=50,
    )
    with MessageStore.open(tmp_path / "s", cfg) as store:
        assert store.put_message(Message("T", b"pooled", queue_id=0)).ok
        assert store.wait_for_message("T", 0, 0, WAIT)
        assert [m.body for m in store.get_message("g", "T", 0, 0).messages] == [b"pooled"]


def test_a_replica_wakes_its_dispatcher_for_every_step(tmp_path: Path) -> None:
    """12 MiB in one burst: the slave parses 4 MiB a dispatch round, so the rounds after the
    first are woken by the dispatcher itself."""
    ha = GEOMETRY.replace(commitlog_segment_size=64 << 20, ha_listen_host="127.0.0.1")
    body = os.urandom(1000)
    n = 12_000
    master_cfg = ha.replace(broker_role="ASYNC_MASTER", ha_listen_port=0)
    with MessageStore.open(tmp_path / "m", master_cfg) as master:
        slave_cfg = ha.replace(broker_role="SLAVE", ha_master_address=f"127.0.0.1:{master.ha_port}")
        with MessageStore.open(tmp_path / "s", slave_cfg) as slave:
            assert master.put_batch("T", [body] * n, queue_ids=0).ok
            assert slave.wait_for_message("T", 0, n - 1, WAIT)
            deadline = time.monotonic() + WAIT  # the master's own consume queue, for comparison
            while master.max_offset_in_queue("T", 0) < n and time.monotonic() < deadline:
                time.sleep(0.01)
            assert slave.max_offset_in_queue("T", 0) == master.max_offset_in_queue("T", 0) == n
            last = slave.get_message("g", "T", 0, n - 1).messages
            assert [m.body for m in last] == [body]
