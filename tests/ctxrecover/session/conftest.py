"""Every session test runs through both drivers of the turn engine.

``driver`` (a fixture, parametrised ``sync``/``async``) replaces the ``Session`` name of the test
module by :class:`BlockingAsyncSession` on the async run: the same test body then drives
:class:`~ctxrecover.session.AsyncSession` through ``asyncio.run``, its sender called as an
``AsyncSender`` (a coroutine ``send``) and its ``sleep`` awaited. A decision written twice, or an
async driver that carries an action out differently, makes one of the two runs fail.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable
from typing import Any

import pytest

from ctxrecover.compaction import CompactionReport
from ctxrecover.messages import Message
from ctxrecover.session import AsyncSession
from ctxrecover.summarize import CancelToken
from ctxrecover.transport import ChatRequest, ChatResponse


class AsyncSending:
    """A blocking sender seen as an ``AsyncSender``: its ``send`` awaited, on the loop's thread."""

    def __init__(self, sender: Any) -> None:
        self.sender = sender
        self.wire_format = sender.wire_format
        self.model = getattr(sender, "model", "")

    async def send(self, request: ChatRequest) -> ChatResponse:
        return self.sender.send(request)  # type: ignore[no-any-return]

    def __getattr__(self, name: str) -> Any:
        return getattr(self.sender, name)


def awaited(sleep: Callable[[float], object]) -> Callable[[float], Any]:
    async def sleeping(seconds: float) -> None:
        sleep(seconds)

    return sleeping


class BlockingAsyncSession(AsyncSession):
    """An :class:`AsyncSession` with the blocking ``Session`` interface, driven by ``asyncio.run``."""

    def __init__(self, sender: Any, **options: Any) -> None:
        if not inspect.iscoroutinefunction(getattr(sender, "send", None)):
            sender = AsyncSending(sender)
        sleep = options.pop("sleep", None)
        if sleep is not None and not inspect.iscoroutinefunction(sleep):
            sleep = awaited(sleep)
        if sleep is not None:
            options["sleep"] = sleep
        super().__init__(sender, **options)

    def complete(self, *, max_tokens: int | None = None, cancel: CancelToken | None = None) -> Message:  # type: ignore[override]
        return asyncio.run(AsyncSession.complete(self, max_tokens=max_tokens, cancel=cancel))

    def compact(  # type: ignore[override]
        self, instruction: str | None = None, *, cancel: CancelToken | None = None
    ) -> CompactionReport:
        return asyncio.run(AsyncSession.compact(self, instruction, cancel=cancel))


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Each test of a module that drives ``Session`` runs once per driver."""
    if "driver" in metafunc.fixturenames and hasattr(metafunc.module, "Session"):
        metafunc.parametrize("driver", ["sync", "async"], indirect=True)


@pytest.fixture(autouse=True)
def driver(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """The driver this run of the test uses (see the module docstring)."""
    name = str(getattr(request, "param", "sync"))
    if name == "async":
        monkeypatch.setattr(request.module, "Session", BlockingAsyncSession)
    return name
