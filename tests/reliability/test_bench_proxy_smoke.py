"""bench/bench_proxy.py still runs: every measure at a tiny size, checking shapes, never timings."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import ModuleType

import pytest

BENCH_DIR = Path(__file__).resolve().parents[2] / "bench"


@pytest.fixture
def bench(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.syspath_prepend(str(BENCH_DIR))
    sys.modules.pop("bench_proxy", None)
    return importlib.import_module("bench_proxy")


@pytest.mark.slow
def test_throughput_counts_requests_direct_and_proxied(bench: ModuleType) -> None:
    result = bench.measure_throughput(4, delay=0.01, seconds=0.5, rounds=1)
    assert result["direct_rps"] > 0 and result["proxied_rps"] > 0
    assert result["ratio"] == pytest.approx(result["proxied_rps"] / result["direct_rps"], rel=0.01)
    assert result["proxy_cpu_ms_per_request"] > 0


@pytest.mark.slow
def test_memory_samples_the_proxy_at_each_checkpoint(bench: ModuleType) -> None:
    pytest.importorskip("psutil")
    result = bench.measure_memory(requests=60, checkpoints=(30, 60), body_bytes=8 * 1024)
    assert result["statuses"] == {200: result["requests"]} and result["requests"] >= 60
    assert set(result["rss_mb"]) == {"0", "30", "60"}


@pytest.mark.slow
def test_slow_clients_are_cut_and_normal_clients_answered(bench: ModuleType) -> None:
    quick = ("--head-timeout", "1", "--body-timeout", "1")
    result = bench.measure_slow_clients(seconds=4, slow=4, extra=quick)
    assert result["normal_statuses"].get(200, 0) > 0
    assert result["slow_cut"] == 4


def test_synthetic_requests_have_their_exact_size(bench: ModuleType) -> None:
    assert len(bench.chat_body(4096)) == 4096
    assert bench._request(b"{}").endswith(b"content-length: 2\r\n\r\n{}")
