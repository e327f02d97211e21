"""Human-friendly sizes, message weights and the char budget (SPEC §1.1–1.3).

The *weight* of a message is the budget's measure: its text plus tool-call
arguments, images and every other non-text part by the characters they put on
the wire (SPEC §11 amends §1.2: a 266 668-char base64 screenshot weighs 266 678,
not 543), and the excess of structured system parts. It is cached on the
message, so ``total_weight`` of a long history is a sum of cached integers.

>>> parse_payload_size("512KB")
524288
>>> format_payload_size(129_434)
'126.4 KB'
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from ctxrecover.image_tokens import estimate_image_tokens, image_token_cost, image_token_rule
from ctxrecover.messages import Message

__all__ = [
    "WeightTotals",
    "char_budget",
    "estimate_image_tokens",
    "format_payload_size",
    "image_chars",
    "image_tokens",
    "needs_compaction",
    "parse_payload_size",
    "total_weight",
    "weight",
]

KIB = 1024
MIB = 1024 * KIB
GIB = 1024 * MIB

# Checked in this order: the two-letter suffixes before their one-letter forms.
SIZE_SUFFIXES: tuple[tuple[str, int], ...] = (
    ("GB", GIB),
    ("MB", MIB),
    ("KB", KIB),
    ("G", GIB),
    ("M", MIB),
    ("K", KIB),
    ("B", 1),
)
BARE_NUMBER_UNIT = MIB  # "5" means 5 MB, as CHATCLI_MAX_PAYLOAD=5 does

IMAGE_TOKENS_CACHE = "image-tokens"  # msg._cache entry
WEIGHT_CACHE = "weight"

PAYLOAD_CAP_HEADROOM = 0.7  # 30% of the cap is left for system prompt, tools and JSON framing


def parse_payload_size(text: str | None) -> int:
    """Parse ``"5MB"``, ``"512k"``, ``"2.5 MB"`` or ``"5"`` (MB) into bytes.

    Empty, invalid, zero or negative input gives 0, meaning "no cap".
    """
    if text is None:
        return 0
    s = str(text).strip().upper()
    if not s:
        return 0
    unit = BARE_NUMBER_UNIT
    for suffix, multiplier in SIZE_SUFFIXES:
        if s.endswith(suffix):
            s = s[: -len(suffix)].strip()
            unit = multiplier
            break
    try:
        value = float(s)
    except ValueError:
        return 0
    size = value * unit  # "1e308GB" overflows to inf: not a size either
    if not math.isfinite(size) or size <= 0:
        return 0
    return int(size)


def format_payload_size(n: int | float) -> str:
    """Format a byte count: ``512 B``, ``2.0 KB``, ``5.0 MB``, ``1.0 GB``."""
    if n >= GIB:
        return f"{n / GIB:.1f} GB"
    if n >= MIB:
        return f"{n / MIB:.1f} MB"
    if n >= KIB:
        return f"{n / KIB:.1f} KB"
    return f"{int(n)} B"


# -- images ---------------------------------------------------------------


def image_chars(msg: Message) -> int:
    """Characters ``msg``'s images put on the wire: base64 data and media type, or the URL.

    Base64 is ASCII, so these are bytes too (JSON framing aside).
    """
    return sum(
        len(image.data) + len(image.media_type) if image.data is not None else len(image.url or "")
        for image in msg.images
    )


def image_tokens(msg: Message, wire_format: str | None = None, model: str = "") -> int:
    """Tokens ``msg``'s images cost the model they are sent to: each image priced by the provider's
    rule for ``wire_format`` and ``model`` (:func:`~ctxrecover.image_tokens.image_token_cost`; SPEC
    §1.2's :func:`estimate_image_tokens` without one), summed, cached on the message per rule."""
    if not msg.images:
        return 0
    rule = image_token_rule(wire_format, model) if wire_format is not None else None
    key = IMAGE_TOKENS_CACHE if rule is None else f"{IMAGE_TOKENS_CACHE}:{rule.name}"
    cached = msg._cache.get(key)
    if cached is None:
        priced = wire_format if rule is not None else None
        cached = msg._cache[key] = sum(image_token_cost(image, priced, model) for image in msg.images)
    return cached


# -- weights --------------------------------------------------------------


def _compute_weight(msg: Message) -> int:
    total = len(msg.content) + image_chars(msg)
    for call in msg.tool_calls:
        total += len(call.name) + len(call.arguments or "{}")
    if msg.system_parts:
        total += max(0, sum(len(p) for p in msg.system_parts) - len(msg.content))
    return total


def weight(msg: Message) -> int:
    """The budget weight of one message (cached on the message).

    ``len(content)`` + tool calls (name + arguments JSON) + :func:`image_chars` + the
    excess of ``system_parts`` over the content.
    """
    cached = msg._cache.get(WEIGHT_CACHE)
    if cached is None:
        cached = msg._cache[WEIGHT_CACHE] = _compute_weight(msg)
    return cached


def total_weight(history: Iterable[Message]) -> int:
    """Sum of :func:`weight` over a history."""
    return sum(weight(m) for m in history)


class WeightTotals:
    """Running sums over a history that changes a few messages at a time: weight, image chars, image tokens.

    ``add``/``remove`` cost O(1) per message (weights are cached on the
    messages); the sums equal :func:`total_weight`, ``sum(map(image_chars, …))``
    and the :func:`image_tokens` (priced for ``wire_format`` and ``model``) of the
    messages added and not removed.
    """

    __slots__ = ("image_chars", "image_tokens", "model", "weight", "wire_format")

    def __init__(
        self, history: Iterable[Message] = (), *, wire_format: str | None = None, model: str = ""
    ) -> None:
        self.weight = self.image_chars = self.image_tokens = 0
        self.wire_format = wire_format
        self.model = model
        for msg in history:
            self.add(msg)

    def add(self, msg: Message, sign: int = 1) -> None:
        """Count ``msg`` (``sign=-1``: stop counting it)."""
        self.weight += sign * weight(msg)
        if msg.images:
            self.image_chars += sign * image_chars(msg)
            self.image_tokens += sign * image_tokens(msg, self.wire_format, self.model)

    def remove(self, msg: Message) -> None:
        """Stop counting ``msg``."""
        self.add(msg, -1)


def char_budget(
    context_window: int,
    budget_ratio: float,
    *,
    chars_per_token: float = 4.0,
    reserved_chars: int = 0,
    payload_cap: int = 0,
) -> int:
    """The char budget a history must fit (SPEC §1.3).

    ``int(window × ratio × chars_per_token)``, minus ``reserved_chars`` (tool
    definitions) but never below a quarter of that; with a payload cap, at most
    ``int(cap × 0.7)``.
    """
    budget = int(context_window * budget_ratio * chars_per_token)
    budget = max(budget - max(0, reserved_chars), budget // 4)
    if payload_cap > 0:
        budget = min(budget, int(payload_cap * PAYLOAD_CAP_HEADROOM))
    return budget


def needs_compaction(history: Iterable[Message], budget: int) -> bool:
    """True when the history's total weight is strictly over ``budget``."""
    return total_weight(history) > budget
