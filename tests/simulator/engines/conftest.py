"""Real engines for the tests: one mock upstream and each configured engine started once per session.

On a machine without an engine's Debian packages, the tests that need it skip, naming them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from simulator.engines import Engine, engine_class
from simulator.providers.service import MockService
from simulator.proxy.loopback import LoopbackServer

StartEngine = Callable[..., Engine]


def skip_unless_installed(name: str) -> None:
    """Skip the test when engine ``name`` is not installed (the reason names its Debian packages)."""
    cls = engine_class(name)
    problem = cls.missing()
    if problem is not None:
        pytest.skip(f"needs Debian's {' '.join(cls.packages)} ({problem})")


@pytest.fixture(scope="session")
def require_engine() -> Callable[[str], None]:
    """``require_engine(name)`` skips the test unless that engine is installed."""
    return skip_unless_installed


@pytest.fixture(scope="session")
def mock_upstream() -> Iterator[str]:
    """A mock OpenAI provider on loopback (bodies up to 64 MB), for the whole session."""
    service = MockService.for_host("openai", context_window=128_000, seed=0)
    with LoopbackServer(service, max_body_bytes=64 * 1024 * 1024) as server:
        yield server.base_url


@pytest.fixture(scope="session")
def start_engine(mock_upstream: str) -> Iterator[StartEngine]:
    """``start_engine(name, **knobs)``: that engine in front of the mock, started once per session."""
    running: dict[tuple[str, str], Engine] = {}

    def start(name: str, **knobs: Any) -> Engine:
        key = (name, repr(sorted(knobs.items())))
        if key not in running:
            skip_unless_installed(name)
            running[key] = engine_class(name)(upstream=mock_upstream, **knobs).start()
        return running[key]

    try:
        yield start
    finally:
        for engine in running.values():
            engine.stop()
