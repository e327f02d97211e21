"""Cancellation of long calls: a thread-safe :class:`CancelToken` and :func:`run_bounded`.

A token also counts as cancelled once its deadline passes. :func:`run_bounded`
stops *waiting* for a call at its timeout or cancel, but cannot stop the call:
the abandoned daemon worker runs on until its own I/O timeout.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from ctxrecover.errors import CompactionCancelled

__all__ = ["CancelToken", "run_bounded"]

WORKER_POLL_S = 0.05  # how often a waiting call looks at its cancel token

T = TypeVar("T")


class CancelToken:
    """A thread-safe cancel flag with an optional deadline.

    ``cancel()`` may be called from any thread (an ESC handler, a UI); long calls
    poll ``cancelled`` or call ``raise_if_cancelled()``. A token built with
    ``deadline`` (a ``clock()`` reading) also counts as cancelled once it passes,
    one built with ``parent`` once its parent is cancelled (a task's own token
    that also follows the caller's).

    >>> t = CancelToken.after(60)
    >>> t.cancelled, t.remaining() > 59
    (False, True)
    """

    __slots__ = ("_clock", "_deadline", "_event", "_parent")

    def __init__(
        self,
        *,
        deadline: float | None = None,
        clock: Callable[[], float] = time.monotonic,
        parent: CancelToken | None = None,
    ) -> None:
        self._event = threading.Event()
        self._deadline = deadline
        self._clock = clock
        self._parent = parent

    @classmethod
    def after(cls, seconds: float, *, clock: Callable[[], float] = time.monotonic) -> CancelToken:
        """A token that cancels itself ``seconds`` from now."""
        return cls(deadline=clock() + seconds, clock=clock)

    def cancel(self) -> None:
        """Cancel every call watching this token."""
        self._event.set()

    @property
    def cancelled(self) -> bool:
        """True once ``cancel()`` was called, the deadline passed or the parent was cancelled."""
        return (
            self._event.is_set()
            or self._deadline_passed()
            or (self._parent is not None and self._parent.cancelled)
        )

    def remaining(self) -> float | None:
        """Seconds until the deadline (0 when past), or None without one."""
        if self._deadline is None:
            return None
        return max(0.0, self._deadline - self._clock())

    def raise_if_cancelled(self) -> None:
        """Raise :class:`CompactionCancelled` when cancelled."""
        if self._event.is_set():
            raise CompactionCancelled("compaction cancelled by the user")
        if self._deadline_passed():
            raise CompactionCancelled("compaction cancelled: its deadline passed")
        if self._parent is not None:
            self._parent.raise_if_cancelled()

    def _deadline_passed(self) -> bool:
        return self._deadline is not None and self._clock() >= self._deadline


def run_bounded(call: Callable[[], T], *, timeout: float | None, cancel: CancelToken | None, what: str) -> T:
    """Run ``call`` in a daemon worker; give up on timeout (TimeoutError) or cancel.

    An abandoned worker keeps running in the background until its own I/O timeout;
    the caller never waits for it.
    """
    done = threading.Event()
    outcome: dict[str, Any] = {}

    def work() -> None:
        try:
            outcome["value"] = call()
        except BaseException as exc:  # noqa: B036 - handed to the waiting thread
            outcome["error"] = exc
        finally:
            done.set()

    threading.Thread(target=work, name=f"ctxrecover-{what}", daemon=True).start()
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        wait = WORKER_POLL_S
        if deadline is not None:
            wait = min(wait, max(0.0, deadline - time.monotonic()))
        if done.wait(wait):
            break
        if cancel is not None:
            cancel.raise_if_cancelled()
        if deadline is not None and time.monotonic() >= deadline:
            raise TimeoutError(f"{what} timed out after {timeout:g}s")
    if "error" in outcome:
        raise outcome["error"]
    value: T = outcome["value"]
    return value
