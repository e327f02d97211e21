"""How responsive an asyncio program stays, measured with the standard library only.

- :class:`LoopLag`: a task that sleeps a few milliseconds over and over and records how late each
  wake-up is — what any coroutine waiting on a timer or a socket meets.
- :class:`Steps`: the longest stretch a coroutine ran without yielding to the loop (each resumption
  until its next ``await``), with and without the garbage collector's pauses inside it — which
  coroutine blocks the loop, and for how long.
- :class:`GcPauses`: every collection of CPython's cyclic garbage collector while it is installed
  (``gc.callbacks``), by generation.
- :func:`status_kb`: a line of ``/proc/self/status`` (``VmRSS``, ``VmHWM``), in KB.
"""

from __future__ import annotations

import asyncio
import gc
import statistics
import time
from collections.abc import Coroutine, Generator
from types import TracebackType
from typing import Any, TypeVar

__all__ = ["GcPauses", "LoopLag", "Steps", "status_kb"]

_T = TypeVar("_T")


class LoopLag:
    """Sleeps ``interval`` seconds until :meth:`stop` and records how late each wake-up is."""

    def __init__(self, interval: float, *, threshold: float) -> None:
        self.interval, self.threshold = interval, threshold
        self.lags: list[float] = []
        self._running = True

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        while self._running:
            due = loop.time() + self.interval
            await asyncio.sleep(self.interval)
            self.lags.append(loop.time() - due)

    def stop(self) -> None:
        self._running = False

    def summary(self) -> dict[str, Any]:
        """Wake-ups, the latest, the 99th percentile, the median (ms) and how many were over ``threshold``."""
        lags = sorted(self.lags) or [0.0]
        return {
            "wakeups": len(self.lags),
            "max_ms": lags[-1] * 1e3,
            "p99_ms": lags[int(0.99 * (len(lags) - 1))] * 1e3,
            "median_ms": statistics.median(lags) * 1e3,
            "over_threshold": sum(lag > self.threshold for lag in lags),
        }


class GcPauses:
    """The cyclic collector's pauses while entered: ``with GcPauses() as pauses: ...``."""

    def __init__(self) -> None:
        self.pauses: list[tuple[int, float]] = []  # (generation, seconds)
        self.total = 0.0  # seconds paused so far
        self._started = 0.0

    def _callback(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
            return
        pause = time.perf_counter() - self._started
        self.pauses.append((info["generation"], pause))
        self.total += pause

    def __enter__(self) -> GcPauses:
        gc.callbacks.append(self._callback)
        return self

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        gc.callbacks.remove(self._callback)

    def summary(self) -> dict[str, Any]:
        """Collections, their total and longest pause (ms), and the full (generation 2) ones."""
        full = [pause for generation, pause in self.pauses if generation == 2]
        return {
            "collections": len(self.pauses),
            "total_ms": self.total * 1e3,
            "longest_ms": max((pause for _, pause in self.pauses), default=0.0) * 1e3,
            "full_collections": len(full),
            "longest_full_ms": max(full, default=0.0) * 1e3,
        }


class Steps:
    """The longest stretch any coroutine run through :meth:`timed` held the loop; ``gc`` (optional) lets
    :attr:`longest_without_gc` leave out the collector's pauses inside a stretch."""

    def __init__(self, gc_pauses: GcPauses | None = None) -> None:
        self.gc = gc_pauses
        self.longest = 0.0
        self.longest_without_gc = 0.0
        self.count = 0

    async def timed(self, coro: Coroutine[Any, Any, _T]) -> _T:
        """Await ``coro``, timing each of its stretches."""
        return await _Timed(coro, self)  # type: ignore[no-any-return]

    def _record(self, seconds: float, paused: float) -> None:
        self.count += 1
        self.longest = max(self.longest, seconds)
        self.longest_without_gc = max(self.longest_without_gc, seconds - paused)

    def summary(self) -> dict[str, Any]:
        return {
            "stretches": self.count,
            "longest_ms": self.longest * 1e3,
            "longest_without_gc_ms": self.longest_without_gc * 1e3,
        }


class _Timed:
    """Drives a coroutine for the task awaiting it, one ``send`` per stretch, and times each."""

    __slots__ = ("_coro", "_steps")

    def __init__(self, coro: Coroutine[Any, Any, Any], steps: Steps) -> None:
        self._coro, self._steps = coro, steps

    def __await__(self) -> Generator[Any, Any, Any]:
        coro, steps, pauses = self._coro, self._steps, self._steps.gc
        value: Any = None
        error: BaseException | None = None
        while True:
            started, paused = time.perf_counter(), pauses.total if pauses else 0.0
            try:
                yielded = coro.send(value) if error is None else coro.throw(error)
            except StopIteration as done:
                steps._record(time.perf_counter() - started, (pauses.total if pauses else 0.0) - paused)
                return done.value
            steps._record(time.perf_counter() - started, (pauses.total if pauses else 0.0) - paused)
            try:
                value, error = (yield yielded), None
            except BaseException as exc:  # a cancellation or a future's error goes on to the coroutine
                value, error = None, exc


def status_kb(field: str) -> int:
    """The ``field`` line of ``/proc/self/status`` (``VmRSS``, ``VmHWM``: Linux), in KB."""
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise LookupError(f"/proc/self/status has no {field} line")
