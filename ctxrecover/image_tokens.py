"""What an image costs the model in tokens: its dimensions from the file header, each provider's formula.

:func:`image_dimensions` reads width and height from a PNG, GIF, JPEG or WebP header
inside the base64 data (the first bytes only: nothing is decoded into pixels). Each
provider counts an image from those dimensions by its own published rule
(:data:`IMAGE_TOKEN_RULES`, one row per rule with its source): Anthropic by area
after scaling, OpenAI by 512-px tiles (``detail: low`` a fixed count), Gemini 2.x by
768-px tiles and Gemini 3 a fixed count per image. :func:`image_token_cost` picks the
rule for a wire format and model; an image whose format is unknown, a URL-only image
and a provider without a rule keep SPEC §1.2's estimate (:func:`estimate_image_tokens`).

>>> from ctxrecover.messages import Image
>>> header = b"\\x89PNG\\r\\n\\x1a\\n" + bytes(4) + b"IHDR" + struct.pack(">II", 1024, 1024)
>>> png = Image(data=base64.b64encode(header).decode())
>>> [image_token_cost(png, fmt) for fmt in ("anthropic", "openai-chat", "gemini")]
[1399, 765, 1032]
>>> low = Image(data=png.data, detail="low")
>>> image_token_cost(png, "gemini", "gemini-3-pro-preview"), image_token_cost(low, "openai-chat")
(1120, 85)
"""

from __future__ import annotations

import base64
import binascii
import math
import struct
from dataclasses import dataclass
from typing import Literal

from ctxrecover.messages import Image

__all__ = [
    "IMAGE_TOKEN_RULES",
    "ImageTokenRule",
    "estimate_image_tokens",
    "image_dimensions",
    "image_token_cost",
    "image_token_rule",
]

# SPEC §1.2: the estimate without a provider's rule.
IMAGE_MAX_EDGE = 1568
IMAGE_PIXELS_PER_TOKEN = 750
IMAGE_MIN_TOKENS = 85
IMAGE_UNDECODABLE_CHARS_PER_TOKEN = 2048
HEADER_BASE64_CHARS = 65536  # enough of the data to hold any of the four headers (JPEG's SOF may be late)

RuleKind = Literal["area", "tiles", "grid", "fixed"]


@dataclass(frozen=True, slots=True)
class ImageTokenRule:
    """One provider's published way of counting an image, from its width and height.

    ``kind`` says which: ``area`` (scale the long edge to ``max_edge`` and the area to
    ``max_tokens × pixels_per_token``, then ``w × h / pixels_per_token``), ``tiles``
    (fit in ``fit`` × ``fit``, scale the short side down to ``short_side``, then ``base`` +
    ``per_tile`` per ``tile``-px square; ``low`` for ``detail: low``), ``grid`` (``per_tile``
    for an image within ``small_edge`` on both sides, else ``per_tile`` per ``tile``-px
    square) or ``fixed`` (``base`` per image). ``family`` is the provider it belongs to,
    ``models`` the model-name prefixes it is for (empty: every model of the family, after
    the rows that name models); ``source`` the page it comes from.
    """

    name: str
    family: str
    kind: RuleKind
    source: str
    models: tuple[str, ...] = ()
    base: int = 0
    per_tile: int = 0
    tile: int = 0
    low: int = 0
    fit: int = 0
    short_side: int = 0
    small_edge: int = 0
    max_edge: int = 0
    max_tokens: int = 0
    pixels_per_token: int = 0

    def tokens(self, width: int, height: int, detail: str | None = None) -> int:
        """The tokens an image of ``width`` × ``height`` px costs under this rule."""
        if self.kind == "fixed":
            return self.base
        if self.kind == "area":
            return _area_tokens(self, width, height)
        if self.kind == "grid":
            if width <= self.small_edge and height <= self.small_edge:
                return self.per_tile
            return math.ceil(width / self.tile) * math.ceil(height / self.tile) * self.per_tile
        if detail == "low":
            return self.low
        return _tile_tokens(self, width, height)


def _area_tokens(rule: ImageTokenRule, width: int, height: int) -> int:
    scale = min(1.0, rule.max_edge / max(width, height))
    area_limit = rule.max_tokens * rule.pixels_per_token
    if width * height * scale * scale > area_limit:
        scale = math.sqrt(area_limit / (width * height))
    w, h = max(1, int(width * scale)), max(1, int(height * scale))
    return max(1, math.ceil(w * h / rule.pixels_per_token))


def _tile_tokens(rule: ImageTokenRule, width: int, height: int) -> int:
    w, h = float(width), float(height)
    if max(w, h) > rule.fit:
        w, h = w * rule.fit / max(w, h), h * rule.fit / max(w, h)
    if min(w, h) > rule.short_side:
        w, h = w * rule.short_side / min(w, h), h * rule.short_side / min(w, h)
    return rule.base + rule.per_tile * math.ceil(w / rule.tile) * math.ceil(h / rule.tile)


ANTHROPIC_VISION = "https://docs.anthropic.com/en/docs/build-with-claude/vision (Evaluate image size)"
OPENAI_VISION = "https://platform.openai.com/docs/guides/images-vision (Calculating costs)"
GEMINI_TOKENS = "https://ai.google.dev/gemini-api/docs/tokens (Multimodal tokens: images)"
GEMINI_MEDIA_RESOLUTION = "https://ai.google.dev/gemini-api/docs/media-resolution (Token counts)"

#: The published rules, most specific first: a row naming models wins over its family's default row.
IMAGE_TOKEN_RULES: tuple[ImageTokenRule, ...] = (
    # tokens = (width × height) / 750, after a long edge over 1568 px or an image over ~1,600 tokens is
    # scaled down with its aspect ratio kept
    ImageTokenRule(
        "anthropic",
        "anthropic",
        "area",
        ANTHROPIC_VISION,
        max_edge=1568,
        max_tokens=1600,
        pixels_per_token=750,
    ),
    # gpt-4o-mini: the tile rule with a base of 2,833 and 5,667 per tile (low detail: 2,833)
    ImageTokenRule(
        "openai-4o-mini",
        "openai",
        "tiles",
        OPENAI_VISION,
        models=("gpt-4o-mini",),
        base=2833,
        per_tile=5667,
        tile=512,
        low=2833,
        fit=2048,
        short_side=768,
    ),
    # detail high/auto: fit in 2048 × 2048, short side to 768, 170 per 512-px square + 85; detail low: 85
    ImageTokenRule(
        "openai",
        "openai",
        "tiles",
        OPENAI_VISION,
        base=85,
        per_tile=170,
        tile=512,
        low=85,
        fit=2048,
        short_side=768,
    ),
    # Gemini 3: media_resolution defaults to high for images, 1,120 tokens whatever the size
    ImageTokenRule("gemini-3", "gemini", "fixed", GEMINI_MEDIA_RESOLUTION, models=("gemini-3",), base=1120),
    # Gemini 2.x: 258 when both sides are within 384 px, else 258 per 768 × 768 tile
    ImageTokenRule("gemini", "gemini", "grid", GEMINI_TOKENS, per_tile=258, tile=768, small_edge=384),
)

# The provider family whose rules price a wire format's images; on Bedrock, the family of the model it serves.
FORMAT_FAMILIES: dict[str, str] = {
    "openai-chat": "openai",
    "openai-responses": "openai",
    "anthropic": "anthropic",
    "gemini": "gemini",
}
BEDROCK_MODEL_FAMILIES: tuple[tuple[str, str], ...] = (("claude", "anthropic"),)  # a word of the model id


def image_token_rule(wire_format: str, model: str = "") -> ImageTokenRule | None:
    """The rule that prices images sent in ``wire_format`` to ``model``, or None (SPEC §1.2 applies)."""
    name = model.lower()
    family = FORMAT_FAMILIES.get(str(wire_format))
    if family is None and str(wire_format) == "bedrock-converse":
        family = next((fam for word, fam in BEDROCK_MODEL_FAMILIES if word in name), None)
    rows = [rule for rule in IMAGE_TOKEN_RULES if rule.family == family]
    bare = name.rsplit("/", 1)[-1]
    specific = next((rule for rule in rows if any(bare.startswith(prefix) for prefix in rule.models)), None)
    return specific or next((rule for rule in rows if not rule.models), None)


def image_dimensions(data: str) -> tuple[int, int] | None:
    """Width and height from the PNG, GIF, JPEG or WebP header of base64 ``data``, or None."""
    try:
        raw = base64.b64decode(data[:HEADER_BASE64_CHARS].encode("ascii"), validate=False)
        dims = _header_dimensions(raw)
    except (binascii.Error, ValueError, UnicodeEncodeError, struct.error):
        return None
    if not dims or dims[0] <= 0 or dims[1] <= 0:
        return None
    return dims


def _header_dimensions(raw: bytes) -> tuple[int, int] | None:
    if raw[:8] == b"\x89PNG\r\n\x1a\n" and len(raw) >= 24:
        width, height = struct.unpack(">II", raw[16:24])
        return int(width), int(height)
    if raw[:6] in (b"GIF87a", b"GIF89a") and len(raw) >= 10:
        width, height = struct.unpack("<HH", raw[6:10])
        return int(width), int(height)
    if raw[:4] == b"RIFF" and raw[8:12] == b"WEBP" and len(raw) >= 30:
        return _webp_dimensions(raw)
    if raw[:2] == b"\xff\xd8":
        return _jpeg_dimensions(raw)
    return None


def _webp_dimensions(raw: bytes) -> tuple[int, int] | None:
    chunk = raw[12:16]
    if chunk == b"VP8X":
        return int.from_bytes(raw[24:27], "little") + 1, int.from_bytes(raw[27:30], "little") + 1
    if chunk == b"VP8 ":
        width, height = struct.unpack("<HH", raw[26:30])
        return int(width) & 0x3FFF, int(height) & 0x3FFF
    if chunk == b"VP8L" and len(raw) >= 25:
        bits = int.from_bytes(raw[21:25], "little")
        return (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
    return None


def _jpeg_dimensions(raw: bytes) -> tuple[int, int] | None:
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
            height, width = struct.unpack(">HH", raw[i + 5 : i + 9])
            return int(width), int(height)
        i += 2 + int(length)
    return None


def estimate_image_tokens(image: Image) -> int:
    """Tokens an image costs without a provider's rule (SPEC §1.2): pixels/750 after scaling the long
    edge to ≤1568 px, floor 85.

    Undecodable data costs ``len/2048`` tokens when that exceeds 85; a URL-only image costs 85.
    """
    if image.data is None:
        return IMAGE_MIN_TOKENS
    dims = image_dimensions(image.data)
    if dims is None:
        estimate = len(image.data) // IMAGE_UNDECODABLE_CHARS_PER_TOKEN
        return estimate if estimate > IMAGE_MIN_TOKENS else IMAGE_MIN_TOKENS
    w, h = dims
    longest = max(w, h)
    if longest > IMAGE_MAX_EDGE:
        scale = IMAGE_MAX_EDGE / longest
        w, h = int(w * scale), int(h * scale)
    return max(IMAGE_MIN_TOKENS, (w * h) // IMAGE_PIXELS_PER_TOKEN)


def image_token_cost(image: Image, wire_format: str | None = None, model: str = "") -> int:
    """Tokens ``image`` costs when sent in ``wire_format`` to ``model``: the provider's rule
    (:func:`image_token_rule`) on the header's dimensions and the image's ``detail``; SPEC §1.2's
    estimate for a URL-only image, data of an unknown format, or no rule."""
    rule = image_token_rule(wire_format, model) if wire_format is not None else None
    dims = image_dimensions(image.data) if rule is not None and image.data is not None else None
    if rule is None or dims is None:
        return estimate_image_tokens(image)
    return rule.tokens(dims[0], dims[1], image.detail)
