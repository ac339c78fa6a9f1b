"""PeriodicTask: rounds at their interval, a failing round logged and the next one run, stop
cancelling a round in progress."""

from __future__ import annotations

import asyncio
import logging

import pytest

from rocketstore.broker.periodic import PeriodicTask


def test_rounds_run_a_failure_is_logged_and_stop_cancels(caplog: pytest.LogCaptureFixture) -> None:
    rounds: list[int] = []
    stopped = asyncio.Event()

    async def round_() -> None:
        rounds.append(len(rounds))
        if len(rounds) == 2:
            raise ValueError("round two breaks")
        if len(rounds) == 4:
            try:
                await asyncio.sleep(60)
            except asyncio.CancelledError:
                stopped.set()
                raise

    async def main() -> None:
        task = PeriodicTask("test-rounds", 0.01, round_, first_s=0)
        task.start()
        with pytest.raises(RuntimeError, match="already started"):
            task.start()
        while len(rounds) < 4:
            await asyncio.sleep(0.01)
        assert task.running
        await task.stop()
        assert stopped.is_set() and not task.running
        await task.stop()  # twice: nothing more

    with caplog.at_level(logging.ERROR, "rocketstore.broker"):
        asyncio.run(main())
    assert rounds == [0, 1, 2, 3]
    [failure] = caplog.records
    assert failure.getMessage() == "test-rounds: a round failed (the next one runs in 0.01 s)"
    assert failure.exc_info is not None and "round two breaks" in str(failure.exc_info[1])


def test_a_changed_interval_is_read_again_before_the_wait_ends() -> None:
    """The interval is a function read before each wait; ``changed`` set ends a wait in progress
    early enough to keep to the new interval (mqadmin shortening the transaction check)."""
    interval = [3600.0]
    changed = asyncio.Event()
    rounds: list[float] = []

    async def round_() -> None:
        rounds.append(asyncio.get_running_loop().time())

    async def main() -> float:
        task = PeriodicTask("test-interval", lambda: interval[0], round_, changed=changed)
        task.start()
        await asyncio.sleep(0.05)
        assert rounds == []  # an hour's wait
        started = asyncio.get_running_loop().time()
        interval[0] = 0.02
        changed.set()
        while len(rounds) < 3:
            await asyncio.sleep(0.01)
        await task.stop()
        return rounds[0] - started

    assert asyncio.run(asyncio.wait_for(main(), 10)) < 1.0
