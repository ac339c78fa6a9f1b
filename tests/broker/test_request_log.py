"""The refusal and slow-request lines (request_log) and `rocketstore serve`'s log file
(broker.serve.configure_logging)."""

from __future__ import annotations

import contextvars
import logging
from collections.abc import Iterator
from logging.handlers import RotatingFileHandler
from pathlib import Path

import pytest

from rocketstore.broker import BrokerConfig
from rocketstore.broker.request_log import RequestLog, parked
from rocketstore.broker.serve import LOG_FILE_BACKUPS, LOG_FILE_BYTES, configure_logging, log_file_of

LOGGER = "rocketstore.test.requests"


def lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == LOGGER]


def test_slow_requests_count_parked_time_out(caplog: pytest.LogCaptureFixture) -> None:
    requests = RequestLog(logging.getLogger(LOGGER), "door", slow_ms=100)
    assert requests.slow_s == 0.1
    assert RequestLog(logging.getLogger(LOGGER), "door", slow_ms=0).slow_s == float("inf")

    def request(elapsed: float, waited: float) -> None:
        if waited:
            parked(waited)
        requests.slow(elapsed, f"PULL_MESSAGE ({waited})", "SUCCESS", "1.2.3.4:5")

    with caplog.at_level(logging.WARNING, LOGGER):
        contextvars.copy_context().run(request, 15.0, 14.95)  # a long poll that answered at once
        contextvars.copy_context().run(request, 15.0, 14.5)  # 0.5 s of it was not waiting
    assert lines(caplog) == [
        "door: slow request: PULL_MESSAGE (14.5) from 1.2.3.4:5 answered SUCCESS after 500 ms"
        " (threshold 100 ms)"
    ]


def test_refusals_are_rate_limited_on_their_codes_before_a_line_is_made(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A flood of refusals (a busy broker's) costs a look-up each: the labels are made only for
    the lines written."""
    made: list[int] = []

    def label(code: int) -> str:
        made.append(code)
        return f"CODE{code}"

    requests = RequestLog(logging.getLogger(LOGGER), "door", request_label=label, code_label=label)
    with caplog.at_level(logging.WARNING, LOGGER):
        for _ in range(1000):
            requests.refused(10, 1, "1.2.3.4:5", "no")
        requests.refused(11, 1, "1.2.3.4:5", "x" * 1000)
        for _ in range(1000):
            requests.slow(5.0, 10, 0, "1.2.3.4:5")
    assert made == [10, 1, 11, 1, 10, 0]
    assert lines(caplog) == [
        "door: refused CODE10 from 1.2.3.4:5: CODE1 no",
        f"door: refused CODE11 from 1.2.3.4:5: CODE1 {'x' * 200}",
        "door: slow request: CODE10 from 1.2.3.4:5 answered CODE0 after 5000 ms (threshold 1000 ms)",
    ]


@pytest.fixture
def root_handlers() -> Iterator[None]:
    root = logging.getLogger()
    saved, level = root.handlers[:], root.level
    yield
    for handler in root.handlers:
        if handler not in saved:
            handler.close()
    root.handlers[:] = saved
    root.setLevel(level)


def test_serve_logs_to_a_rotated_file_in_the_store(tmp_path: Path, root_handlers: None) -> None:
    store = tmp_path / "store"
    path = log_file_of(store, BrokerConfig())
    assert path == store / "logs" / "rocketstore.log"
    assert (
        log_file_of(store, BrokerConfig.from_mapping({"log_file": str(tmp_path / "b.log")}))
        == tmp_path / "b.log"
    )
    configure_logging(False, log_file=path)
    logging.getLogger("rocketstore.broker").warning("a line for the file")
    files = [h for h in logging.getLogger().handlers if isinstance(h, RotatingFileHandler)]
    assert len(files) == 1
    assert (files[0].maxBytes, files[0].backupCount) == (LOG_FILE_BYTES, LOG_FILE_BACKUPS) == (16 << 20, 4)
    files[0].flush()
    assert "WARNING rocketstore.broker: a line for the file" in path.read_text()
    # bounded: past maxBytes the file rolls over, at most backupCount old ones are kept
    files[0].maxBytes = 200
    for i in range(50):
        logging.getLogger("rocketstore.broker").warning("line %d of a long run", i)
    kept = sorted(p.name for p in path.parent.iterdir())
    assert kept == ["rocketstore.log", *(f"rocketstore.log.{i}" for i in range(1, LOG_FILE_BACKUPS + 1))]
    assert all(p.stat().st_size <= 200 for p in path.parent.iterdir())
    # called again (a second serve in one process): one file handler, the old one closed
    configure_logging(True, log_file=path)
    assert sum(isinstance(h, RotatingFileHandler) for h in logging.getLogger().handlers) == 1
    assert files[0].stream is None
