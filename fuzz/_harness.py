"""What every fuzz target shares: the import path, coverage instrumentation, and the contract.

A target's contract is that decoding hostile bytes either succeeds (and, where a target says so,
agrees with a second reading of the same bytes) or raises one of the errors the code documents:
``CorruptDataError`` for bytes that break a format, ``StoreConfigError`` for files that do not
fit the configuration. Any other exception, a hang past libFuzzer's ``-timeout``, or a crash of
the interpreter is a finding: libFuzzer saves the input as ``crash-<sha1>`` (or ``timeout-``).

Coverage: rocketstore's compiled (numba) loops cannot be instrumented (numba compiles from the
function's bytecode, which atheris would rewrite), so ``instrument`` rewrites only the plain
Python functions and methods of the modules it is given; the numba loops are exercised but
count no edges.
"""

from __future__ import annotations

import inspect
import logging
import os
import shutil
import sys
import tempfile
import types
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT / "src") not in sys.path:
    sys.path.insert(0, str(ROOT / "src"))

import atheris  # noqa: E402  (after the path set-up)

__all__ = ["FIXTURE", "ROOT", "atheris", "fuzz", "instrument", "scratch"]

# recovery's warnings about the damage a target feeds it would drown libFuzzer's own lines
logging.disable(logging.CRITICAL)

FIXTURE = ROOT / "tests" / "fixtures" / "rocketmq-4.9.8" / "store-sample"


def scratch(name: str) -> Path:
    """An empty scratch directory for this process, ``<tmp>/rocketstore-fuzz-<name>-<pid>``.
    libFuzzer ends the process without Python's exit handlers, so instead each call first
    removes the directories of processes that are gone."""
    base = Path(tempfile.gettempdir())
    for old in base.glob(f"rocketstore-fuzz-{name}-*"):
        pid = old.name.rpartition("-")[2]
        if pid.isdigit() and not _alive(int(pid)):
            shutil.rmtree(old, ignore_errors=True)
    path = base / f"rocketstore-fuzz-{name}-{os.getpid()}"
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir()
    return path


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def instrument(*modules: types.ModuleType) -> None:
    """Instrument the plain Python functions and methods defined in ``modules`` (not numba's)."""
    for module in modules:
        for value in vars(module).values():
            if isinstance(value, types.FunctionType) and value.__module__ == module.__name__:
                atheris.instrument_func(value)
            elif inspect.isclass(value) and value.__module__ == module.__name__:
                for member in vars(value).values():
                    func = member.fget if isinstance(member, property) else member
                    if isinstance(func, (staticmethod, classmethod)):
                        func = func.__func__
                    if isinstance(func, types.FunctionType):
                        atheris.instrument_func(func)


def fuzz(test_one_input: Callable[[bytes], None], seeds: Callable[[], list[bytes]] = list) -> None:
    """Run libFuzzer over ``test_one_input`` with the command line's options. The corpus directory
    is the first one on the command line, or ``fuzz/corpus/<target>``; an empty one is first
    filled with ``seeds()`` (real files of the RocketMQ fixture store)."""
    argv = list(sys.argv)
    dirs = [a for a in argv[1:] if not a.startswith("-")]
    if not dirs:
        dirs = [str(ROOT / "fuzz" / "corpus" / Path(argv[0]).stem)]
        argv.append(dirs[0])
    corpus = Path(dirs[0])
    if not corpus.is_file():  # a file is an input to replay, not a corpus
        corpus.mkdir(parents=True, exist_ok=True)
        if not any(corpus.iterdir()):
            for i, seed in enumerate(seeds()):
                (corpus / f"seed-{i:03d}").write_bytes(seed)
    atheris.Setup(argv, test_one_input)
    atheris.Fuzz()
