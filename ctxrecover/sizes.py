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

import base64
import binascii
import math
import struct
from collections.abc import Iterable

from ctxrecover.messages import Image, Message

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

IMAGE_MAX_EDGE = 1568
IMAGE_PIXELS_PER_TOKEN = 750
IMAGE_MIN_TOKENS = 85
IMAGE_UNDECODABLE_CHARS_PER_TOKEN = 2048

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


def _image_dimensions(raw: bytes) -> tuple[int, int] | None:
    """Width and height from a PNG, GIF, JPEG or WebP header, or None."""
    if raw[:8] == b"\x89PNG\r\n\x1a\n" and len(raw) >= 24:
        return struct.unpack(">II", raw[16:24])
    if raw[:6] in (b"GIF87a", b"GIF89a") and len(raw) >= 10:
        return struct.unpack("<HH", raw[6:10])
    if raw[:4] == b"RIFF" and raw[8:12] == b"WEBP" and len(raw) >= 30:
        chunk = raw[12:16]
        if chunk == b"VP8X":
            w = int.from_bytes(raw[24:27], "little") + 1
            h = int.from_bytes(raw[27:30], "little") + 1
            return w, h
        if chunk == b"VP8 ":
            w, h = struct.unpack("<HH", raw[26:30])
            return w & 0x3FFF, h & 0x3FFF
        if chunk == b"VP8L" and len(raw) >= 25:
            bits = int.from_bytes(raw[21:25], "little")
            return (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
        return None
    if raw[:2] == b"\xff\xd8":
        i = 2
        while i + 9 < len(raw):
            if raw[i] != 0xFF:
                i += 1
                continue
            marker = raw[i + 1]
            if marker in (0xD8, 0x01) or 0xD0 <= marker <= 0xD7:
                i += 2
                continue
            (length,) = struct.unpack(">H", raw[i + 2 : i + 4])
            if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):
                h, w = struct.unpack(">HH", raw[i + 5 : i + 9])
                return w, h
            i += 2 + length
    return None


def estimate_image_tokens(image: Image) -> int:
    """Tokens an image costs: pixels/750 after scaling to ≤1568 px, floor 85.

    Undecodable data costs ``len/2048`` tokens when that exceeds 85; a URL-only
    image costs 85.
    """
    if image.data is None:
        return IMAGE_MIN_TOKENS
    dims = None
    try:
        raw = base64.b64decode(image.data[:65536].encode("ascii"), validate=False)
        dims = _image_dimensions(raw)
    except (binascii.Error, ValueError, UnicodeEncodeError, struct.error):
        dims = None
    if not dims or dims[0] <= 0 or dims[1] <= 0:
        estimate = len(image.data) // IMAGE_UNDECODABLE_CHARS_PER_TOKEN
        return estimate if estimate > IMAGE_MIN_TOKENS else IMAGE_MIN_TOKENS
    w, h = dims
    longest = max(w, h)
    if longest > IMAGE_MAX_EDGE:
        scale = IMAGE_MAX_EDGE / longest
        w, h = int(w * scale), int(h * scale)
    return max(IMAGE_MIN_TOKENS, (w * h) // IMAGE_PIXELS_PER_TOKEN)


def image_chars(msg: Message) -> int:
    """Characters ``msg``'s images put on the wire: base64 data and media type, or the URL.

    Base64 is ASCII, so these are bytes too (JSON framing aside).
    """
    return sum(
        len(image.data) + len(image.media_type) if image.data is not None else len(image.url or "")
        for image in msg.images
    )


def image_tokens(msg: Message) -> int:
    """Tokens ``msg``'s images cost the model: :func:`estimate_image_tokens` summed, cached on the message."""
    if not msg.images:
        return 0
    cached = msg._cache.get(IMAGE_TOKENS_CACHE)
    if cached is None:
        cached = msg._cache[IMAGE_TOKENS_CACHE] = sum(estimate_image_tokens(image) for image in msg.images)
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
    and ``sum(map(image_tokens, …))`` of the messages added and not removed.
    """

    __slots__ = ("image_chars", "image_tokens", "weight")

    def __init__(self, history: Iterable[Message] = ()) -> None:
        self.weight = self.image_chars = self.image_tokens = 0
        for msg in history:
            self.add(msg)

    def add(self, msg: Message, sign: int = 1) -> None:
        """Count ``msg`` (``sign=-1``: stop counting it)."""
        self.weight += sign * weight(msg)
        if msg.images:
            self.image_chars += sign * image_chars(msg)
            self.image_tokens += sign * image_tokens(msg)

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
