"""RocketMQ 4.9.8's Java producer sending timer messages through user properties
(``TIMER_DELAY_SEC``, ``TIMER_DELIVER_MS``), as a 4.x application asks RocketMQ 5 for them: stored
in rmq_sys_wheel_timer, delivered to their queue at their time, never before (docs/timers.md)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from rocketstore import MessageExt, MessageStore, StoreConfig

from .conftest import StartServe
from .harness import JavaPrograms

pytestmark = pytest.mark.slow


def delivered(root: Path, topic: str) -> list[MessageExt]:
    with MessageStore.open(root, StoreConfig(), readonly=True) as store:
        out: list[MessageExt] = []
        for q in store.topics().get(topic, []):
            out += store.get_message("t", topic, q, 0, 100).messages
        return out


def test_timer_properties_of_a_4_9_client_make_timers(java: JavaPrograms, serve: StartServe) -> None:
    s = serve()
    ns = f"namesrv={s.namesrv}"
    sent_at = int(time.time() * 1000)
    delayed = java.run(
        "Produce", ns, "topic=JTimer", "count=3", "mode=sync", "queue=1", "prop.TIMER_DELAY_SEC=3"
    )
    at = sent_at + 4000
    absolute = java.run("Produce", ns, "topic=JAt", "count=2", "mode=sync", f"prop.TIMER_DELIVER_MS={at}")
    with pytest.raises(AssertionError, match="max delay"):  # beyond timer_max_delay_sec (3 days)
        # refused, so nothing is stored twice when a loaded machine's JVM times out and it runs again
        java.run(
            "Produce", ns, "topic=JFar", "count=1", "mode=sync", "prop.TIMER_DELAY_SEC=400000", attempts=3
        )
    sent = [e for e in delayed if e["event"] == "sent"]
    assert [e["status"] for e in sent] == ["SEND_OK"] * 3 and {e["queueId"] for e in sent} == {1}
    assert len([e for e in absolute if e["event"] == "sent"]) == 2
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and (
        len(delivered(s.store, "JTimer")) < 3 or len(delivered(s.store, "JAt")) < 2
    ):
        time.sleep(0.1)
    s.stop()
    timers = delivered(s.store, "JTimer")
    assert len(timers) == 3 and all(m.queue_id == 1 for m in timers)
    assert all(m.store_timestamp >= int(m.properties["TIMER_OUT_MS"]) + 100 for m in timers)
    assert all(m.store_timestamp >= m.born_timestamp + 3000 for m in timers)  # never early
    assert {m.uniq_key for m in timers} == {e["msgId"] for e in sent}
    ats = delivered(s.store, "JAt")
    assert len(ats) == 2 and all(m.store_timestamp >= at for m in ats)
