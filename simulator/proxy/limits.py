"""How much a loopback server lets its clients hold: sizes, deadlines, connections, in-flight bytes.

Every wait is bounded and no deadline restarts per byte: a request head must be complete
within ``head_timeout_s`` of its first byte; a body must keep an average rate of at least
``min_body_rate`` bytes per second after a grace of ``body_timeout_s`` (so a client sending
one byte every few seconds is cut off, a slow but honest upload is not). Request bodies
held at once across every connection are capped by ``max_inflight_body_bytes`` on top of
the per-request ``max_body_bytes`` (:class:`ByteBudget`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

__all__ = ["ByteBudget", "ServerLimits"]

MIB = 1024 * 1024


@dataclass(frozen=True, slots=True)
class ServerLimits:
    """The bounds of one loopback server (every field must be > 0)."""

    max_body_bytes: int = 64 * MIB
    max_head_bytes: int = 256 * 1024
    max_inflight_body_bytes: int = 256 * MIB
    max_connections: int = 256
    read_timeout_s: float = 30.0  # an idle keep-alive connection's wait for its next request; each write
    head_timeout_s: float = 10.0  # a request head, from its first byte to its end
    body_timeout_s: float = 10.0  # grace before min_body_rate applies to a body
    min_body_rate: int = 16 * 1024  # bytes per second, averaged over the body
    handler_timeout_s: float = 120.0  # a handler's or the upstream's answer, counted from the call
    max_fault_delay_s: float = 30.0  # the longest silence a fault may impose
    queue_timeout_s: float = 300.0  # the longest wait for a free handler worker (not handler time)

    def __post_init__(self) -> None:
        for field in fields(self):
            value = getattr(self, field.name)
            if not value > 0:
                raise ValueError(f"LoopbackServer {field.name} must be > 0, got {value}")
            if not math.isfinite(value):
                raise ValueError(f"LoopbackServer {field.name} must be finite, got {value}")

    def body_deadline(self, started: float, received: int) -> float:
        """When the body's next byte is due, given ``received`` bytes since ``started``."""
        return started + self.body_timeout_s + (received + 1) / self.min_body_rate


class ByteBudget:
    """Request body bytes held at once across connections, up to ``limit`` (used from one event loop)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0
        self.peak = 0
        self.refused = 0

    def try_reserve(self, n_bytes: int) -> bool:
        """Reserve ``n_bytes`` if they fit; False (and counted as refused) when they would not."""
        if self.used + n_bytes > self.limit:
            self.refused += 1
            return False
        self.used += n_bytes
        self.peak = max(self.peak, self.used)
        return True

    def release(self, n_bytes: int) -> None:
        """Give back ``n_bytes`` reserved earlier."""
        self.used -= n_bytes
