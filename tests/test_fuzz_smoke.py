"""The fuzz targets in fuzz/ run (a short CI run of what ``make fuzz`` runs for minutes): each
target, started as ``make fuzz`` starts it, executes a fixed number of inputs, its seed corpus
first, and exits 0, which libFuzzer does only when no input crashed, hung or broke the target's
contract (see fuzz/_harness.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

FUZZ = Path(__file__).resolve().parents[1] / "fuzz"
TARGETS = sorted(p.stem for p in FUZZ.glob("target_*.py"))
# the whole-store target starts a Python process per input: a few inputs are its smoke run
RUNS = {"target_store_open": 3}

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module", autouse=True)
def _atheris() -> None:
    try:
        import atheris  # noqa: F401
    except ImportError:
        if os.environ.get("CI"):
            pytest.fail("the fuzz smoke tests need atheris (`make test` installs the fuzz extra)")
        pytest.skip("atheris is not installed (pip install -e '.[fuzz]')")


def test_every_target_is_smoke_tested() -> None:
    assert len(TARGETS) >= 8, TARGETS


@pytest.mark.parametrize("target", TARGETS)
def test_fuzz_target_runs_clean(target: str, tmp_path: Path) -> None:
    corpus = tmp_path / "corpus"
    result = subprocess.run(
        [
            sys.executable,
            str(FUZZ / f"{target}.py"),
            f"-runs={RUNS.get(target, 500)}",
            "-seed=1",
            "-timeout=300",
            f"-artifact_prefix={tmp_path}/",
            str(corpus),
        ],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-6000:]
    assert "DONE" in result.stderr, result.stderr[-3000:]
    assert any(corpus.iterdir()), "the seed corpus was not written"
    assert not list(tmp_path.glob("crash-*")) and not list(tmp_path.glob("timeout-*"))
