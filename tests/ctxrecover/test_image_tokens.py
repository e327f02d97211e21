"""Image dimensions from file headers and each provider's published token formula (issue 26 item 3)."""

from __future__ import annotations

import base64
import struct
import zlib

import pytest

from ctxrecover.errors import MessageError
from ctxrecover.image_tokens import (
    IMAGE_TOKEN_RULES,
    estimate_image_tokens,
    image_dimensions,
    image_token_cost,
    image_token_rule,
)
from ctxrecover.messages import Image, Message
from ctxrecover.sizes import WeightTotals, image_tokens


def png(width: int, height: int) -> str:
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    chunk = struct.pack(">I", 13) + b"IHDR" + ihdr + struct.pack(">I", zlib.crc32(b"IHDR" + ihdr))
    return base64.b64encode(b"\x89PNG\r\n\x1a\n" + chunk + bytes(64)).decode()


def gif(width: int, height: int) -> str:
    return base64.b64encode(b"GIF89a" + struct.pack("<HH", width, height) + bytes(32)).decode()


def jpeg(width: int, height: int) -> str:
    app0 = b"\xff\xe0" + struct.pack(">H", 16) + b"JFIF\x00" + bytes(9)
    sof = b"\xff\xc0" + struct.pack(">HBHHB", 11, 8, height, width, 1) + b"\x01\x11\x00"
    return base64.b64encode(b"\xff\xd8" + app0 + sof + bytes(32)).decode()


def webp(width: int, height: int) -> str:
    vp8x = b"VP8X" + struct.pack("<I", 10) + bytes(4)
    vp8x += (width - 1).to_bytes(3, "little") + (height - 1).to_bytes(3, "little")
    return base64.b64encode(b"RIFF" + struct.pack("<I", 30) + b"WEBP" + vp8x + bytes(8)).decode()


@pytest.mark.parametrize("encode", [png, gif, jpeg, webp])
def test_dimensions_come_from_the_header_of_each_format(encode: object) -> None:
    assert image_dimensions(encode(1366, 639)) == (1366, 639)  # type: ignore[operator]


def test_data_of_an_unknown_format_has_no_dimensions() -> None:
    assert image_dimensions(base64.b64encode(b"BM" + bytes(60)).decode()) is None  # a BMP
    assert image_dimensions("!!not base64!!") is None


# The examples the providers publish, each row: (wire format, model, width, height, detail, tokens).
PUBLISHED = [
    # Anthropic: tokens = w × h / 750; 1092 × 1092 is the largest 1:1 size kept as is (~1,590 tokens)
    ("anthropic", "claude-sonnet-4-20250514", 1092, 1092, None, 1590),
    ("anthropic", "claude-sonnet-4-20250514", 200, 200, None, 54),
    # over 1568 px on the long edge or ~1,600 tokens: scaled down, aspect ratio kept
    ("anthropic", "claude-sonnet-4-20250514", 4000, 3000, None, 1264 * 948 // 750 + 1),  # 1264 × 948 px
    ("bedrock-converse", "anthropic.claude-3-5-sonnet-20241022-v2:0", 1092, 1092, None, 1590),
    # OpenAI: 1024 × 1024 high → 765; 2048 × 4096 high → 1105; any size low → 85
    ("openai-chat", "gpt-4o", 1024, 1024, None, 765),
    ("openai-responses", "gpt-4o", 2048, 4096, "high", 1105),
    ("openai-chat", "gpt-4o", 4096, 8192, "low", 85),
    ("openai-chat", "gpt-4o-mini", 1024, 1024, None, 2833 + 4 * 5667),
    ("openai-chat", "gpt-4o-mini", 1024, 1024, "low", 2833),
    # Gemini 2.x: 258 within 384 × 384, else 258 per 768 × 768 tile; Gemini 3: 1,120 per image
    ("gemini", "gemini-2.5-pro", 384, 384, None, 258),
    ("gemini", "gemini-2.5-pro", 1024, 1024, None, 4 * 258),
    ("gemini", "models/gemini-3-pro-preview", 4000, 3000, None, 1120),
]


@pytest.mark.parametrize(("fmt", "model", "width", "height", "detail", "tokens"), PUBLISHED)
def test_each_provider_counts_an_image_by_its_published_rule(
    fmt: str, model: str, width: int, height: int, detail: str | None, tokens: int
) -> None:
    assert image_token_cost(Image(data=png(width, height), detail=detail), fmt, model) == tokens


def test_without_a_rule_or_dimensions_spec_1_2_applies() -> None:
    shot = Image(data=png(1366, 639))
    assert image_token_cost(shot, "bedrock-converse", "amazon.nova-pro-v1:0") == estimate_image_tokens(shot)
    assert image_token_cost(shot) == 1366 * 639 // 750
    assert image_token_cost(Image(url="https://example.test/a.png"), "anthropic") == 85
    unknown = Image(data="A" * 2048 * 300)  # no header: len/2048
    assert image_token_cost(unknown, "openai-chat", "gpt-4o") == 300


def test_every_rule_names_its_source_and_each_family_has_a_default() -> None:
    assert all(rule.source.startswith("https://") for rule in IMAGE_TOKEN_RULES)
    for family in {rule.family for rule in IMAGE_TOKEN_RULES}:
        assert [rule for rule in IMAGE_TOKEN_RULES if rule.family == family and not rule.models]
    assert image_token_rule("openai-chat", "gpt-4o-mini-2024-07-18").name == "openai-4o-mini"  # type: ignore[union-attr]
    assert image_token_rule("anthropic", "").name == "anthropic"  # type: ignore[union-attr]


def test_message_image_tokens_follow_the_provider_and_are_cached_per_rule() -> None:
    msg = Message.user("look", images=(Image(data=png(1024, 1024)), Image(url="https://example.test/b.png")))
    assert image_tokens(msg) == 1024 * 1024 // 750 + 85  # SPEC §1.2 without a provider
    assert image_tokens(msg, "openai-chat", "gpt-4o") == 765 + 85
    assert image_tokens(msg, "gemini", "gemini-2.5-flash") == 4 * 258 + 85
    totals = WeightTotals([msg, Message.assistant("seen")], wire_format="openai-chat", model="gpt-4o")
    assert totals.image_tokens == 765 + 85


def test_detail_is_validated_and_travels_with_the_image() -> None:
    with pytest.raises(MessageError, match="Image.detail must be one of low, high, auto or None, got 'tiny'"):
        Image(data=png(10, 10), detail="tiny")
    msg = Message.user("x", images=(Image(data=png(10, 10), detail="low"),))
    assert Message.from_dict(msg.to_dict()) == msg
