"""Compiled kernels that load numba only when one first runs.

Importing numba costs about half a second, and its compiler as much again before the first kernel
loads from numba's on-disk cache: a command that runs no kernel (``--version``, ``decode-id``,
``status`` of a small store) pays none of that. ``@kernel(...)`` takes ``numba.njit``'s options
and leaves the function as written until it is first called; then numba is imported, and the
kernel and every kernel it reaches through its module's globals become numba dispatchers (loaded
from the cache, or compiled into it the first time: see ``rocketstore.warm``).

``small(kernel, items, *args)`` runs a kernel's own Python code instead, with the kernels it calls
also as Python, while numba is not loaded and the process has done fewer than
``INTERPRETED_ITEMS`` items that way: a small store opens and reads without the compiler, and a
process that goes on to do more loads it once the interpreted work adds up to what loading costs.
It is the same code either way (the kernels use explicit numpy integer types, so Python runs them
with numba's arithmetic); tests run both (``interpret``) and compare.
"""

from __future__ import annotations

import functools
import sys
import threading
import types
from collections.abc import Callable
from typing import Any, Final, TypeVar, cast

__all__ = [
    "INTERPRETED_ITEMS",
    "interpret",
    "interpreted",
    "intrinsic",
    "kernel",
    "kernels",
    "loaded",
    "small",
]

F = TypeVar("F", bound=Callable[..., Any])
R = TypeVar("R")

# Records (or entries) a process may handle as Python before it loads numba: at 15 us (the
# recovery walk) to 70 us (gathering a read batch) of CPU each that is at most ~0.3 s, against
# ~1 s to import numba and load a kernel. Kernels with more work per record (the Spark source's
# column builder: 1.4 ms) always run compiled.
INTERPRETED_ITEMS: Final = 4096

_lock = threading.RLock()
_budget = [INTERPRETED_ITEMS]
_made: dict[int, _Lazy] = {}  # id of numba's object -> the lazy one it was made from
_as_python: dict[Callable[..., Any], Callable[..., Any]] = {}
_kernels: list[_Kernel] = []  # every one defined so far (in modules imported so far)


class _Lazy:
    """A numba object (dispatcher, intrinsic) made on first use, and what it replaces."""

    def __init__(self, py_func: Callable[..., Any]) -> None:
        self.py_func = py_func
        self._compiled: Any = None  # published once the globals it needs are numba's too
        self._making: Any = None
        functools.update_wrapper(self, py_func)

    def _make(self) -> Any:
        raise NotImplementedError

    def compiled(self) -> Any:
        """The numba object; made (with every lazy one its globals name) on first call."""
        done = self._compiled
        if done is not None:
            return done
        with _lock:
            if self._compiled is not None:
                return self._compiled
            if self._making is not None:
                return self._making  # asked again further down this same call: kernels that call each other
            made = self._making = self._make()
            _made[id(made)] = self
            # numba resolves the names a kernel uses in its module's globals when it compiles:
            # every kernel (or intrinsic) there must be numba's object before any thread calls it.
            scope = self.py_func.__globals__
            for name, value in list(scope.items()):
                if isinstance(value, _Lazy):
                    scope[name] = value.compiled()
            self._compiled = made
            return made

    def __reduce__(self) -> tuple[Callable[[str, str], Any], tuple[str, str]]:
        # pickled by name (into Spark's workers): the worker's own module has it
        return _by_name, (self.py_func.__module__, self.py_func.__qualname__)

    def __call__(self, *args: Any) -> Any:
        return self.compiled()(*args)


class _Kernel(_Lazy):
    def __init__(self, py_func: Callable[..., Any], options: dict[str, Any]) -> None:
        super().__init__(py_func)
        self._options = options
        _kernels.append(self)

    def _make(self) -> Any:
        import numba

        return numba.njit(**self._options)(self.py_func)


class _Intrinsic(_Lazy):
    def __init__(self, typer: Callable[..., Any], interpreted: Callable[..., Any]) -> None:
        super().__init__(interpreted)
        self._typer = typer

    def _make(self) -> Any:
        from numba.extending import intrinsic as numba_intrinsic

        return numba_intrinsic(self._typer)


def _by_name(module: str, name: str) -> Any:
    import importlib

    return getattr(importlib.import_module(module), name)


def kernel(**options: Any) -> Callable[[F], F]:
    """``numba.njit(**options)``, applied when the function is first called."""

    def wrap(fn: F) -> F:
        return cast(F, _Kernel(fn, options))

    return wrap


def intrinsic(typer: Callable[..., Any], interpreted: Callable[..., Any]) -> Any:
    """``numba.extending.intrinsic(typer)``, made when a kernel using it compiles;
    ``interpreted`` does the same in Python, for kernels run as Python."""
    return _Intrinsic(typer, interpreted)


def kernels() -> list[tuple[str, Any]]:
    """(module.name, numba's dispatcher or None when not made yet) of every kernel defined in
    the modules imported so far."""
    return [(f"{k.py_func.__module__}.{k.py_func.__qualname__}", k._compiled) for k in _kernels]


def loaded() -> bool:
    """Whether numba is imported in this process."""
    return "numba" in sys.modules


def interpreted(items: int) -> bool:
    """Whether work of ``items`` (records, entries) should run as Python: numba is not loaded
    and the process's interpreted budget has that much left (then it is taken from it)."""
    if loaded():
        return False
    with _lock:
        if items > _budget[0]:
            return False
        _budget[0] -= items
        return True


def _python(fn: Callable[..., Any]) -> Callable[..., Any]:
    """A kernel's Python function, run with every kernel it names also as Python (a copy of its
    code over a copy of its module's globals, so numba's objects there stay as they are)."""
    lazy = fn if isinstance(fn, _Lazy) else _made.get(id(fn))
    if lazy is None:
        return fn
    with _lock:
        done = _as_python.get(lazy.py_func)
        if done is not None:
            return done
        py = lazy.py_func
        scope = dict(py.__globals__)
        copy = types.FunctionType(py.__code__, scope, py.__name__, py.__defaults__, py.__closure__)
        _as_python[py] = copy  # before the names it uses: kernels may call each other
        for name, value in scope.items():
            if isinstance(value, _Lazy) or id(value) in _made:
                scope[name] = _python(value)
        return copy


def interpret(fn: Callable[..., R], *args: Any) -> R:
    """``fn(*args)`` run as Python, whether or not numba has compiled it."""
    return cast(R, _python(fn)(*args))


def small(fn: Callable[..., R], items: int, *args: Any) -> R:
    """``fn(*args)``, as Python while numba is not loaded and the interpreted budget lasts
    (``items`` is the work this call does: records, entries); compiled otherwise."""
    not_made = isinstance(fn, _Lazy) and fn._compiled is None
    if not_made and interpreted(items):
        return interpret(fn, *args)
    return fn(*args)
