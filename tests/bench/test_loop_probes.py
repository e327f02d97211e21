"""bench/_loop_probes.py: the probes see what they are for — a coroutine holding the event loop, a
collection of the garbage collector (lower bounds a ``time.sleep`` guarantees, not timings of the
library)."""

from __future__ import annotations

import asyncio
import gc
import importlib
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

BENCH_DIR = Path(__file__).resolve().parents[2] / "bench"


@pytest.fixture
def probes(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.syspath_prepend(str(BENCH_DIR))
    return importlib.import_module("_loop_probes")


def test_they_see_a_coroutine_holding_the_loop_and_a_full_collection(probes: Any) -> None:
    async def blocking() -> None:
        await asyncio.sleep(0.01)
        time.sleep(0.05)  # holds the loop: the probe wakes late, the stretch is long
        await asyncio.sleep(0.01)

    async def main() -> tuple[Any, Any, Any]:
        with probes.GcPauses() as pauses:
            lag, steps = probes.LoopLag(0.005, threshold=0.02), probes.Steps(pauses)
            task = asyncio.create_task(lag.run())
            await steps.timed(blocking())
            gc.collect()
            lag.stop()
            await task
        return lag, steps, pauses

    lag, steps, pauses = asyncio.run(main())
    assert lag.summary()["max_ms"] >= 40 and lag.summary()["over_threshold"] >= 1
    assert steps.summary()["stretches"] == 3 and steps.summary()["longest_ms"] >= 50
    assert pauses.summary()["full_collections"] >= 1
    assert probes.status_kb("VmHWM") >= probes.status_kb("VmRSS") > 0
