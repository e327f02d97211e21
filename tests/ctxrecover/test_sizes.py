"""SPEC §1.1–1.3: human-friendly sizes, weights and the char budget (images by wire size, SPEC §11)."""

from __future__ import annotations

import base64
import struct
import zlib

import pytest

from ctxrecover.messages import Image, Message, ToolCall
from ctxrecover.sizes import (
    char_budget,
    estimate_image_tokens,
    format_payload_size,
    image_chars,
    image_tokens,
    needs_compaction,
    parse_payload_size,
    total_weight,
    weight,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("5MB", 5_242_880),
        ("5mb", 5_242_880),
        ("5 MB", 5_242_880),
        ("5M", 5_242_880),
        ("5", 5_242_880),
        ("512KB", 524_288),
        ("512K", 524_288),
        ("2.5MB", 2_621_440),
        ("1GB", 1_073_741_824),
        ("1G", 1_073_741_824),
        ("1024B", 1024),
        ("0", 0),
        ("", 0),
        ("garbage", 0),
        ("-5", 0),
        ("  128kb  ", 131_072),
        ("nan", 0),
        ("inf", 0),
        (None, 0),
    ],
)
def test_parse_payload_size_table(text: str | None, expected: int) -> None:
    assert parse_payload_size(text) == expected


@pytest.mark.parametrize(
    ("n", "expected"),
    [
        (512, "512 B"),
        (2048, "2.0 KB"),
        (5 * 1024 * 1024, "5.0 MB"),
        (129_434, "126.4 KB"),
        (97_075, "94.8 KB"),
        (1024**3, "1.0 GB"),
        (0, "0 B"),
    ],
)
def test_format_payload_size_table(n: int, expected: str) -> None:
    assert format_payload_size(n) == expected


def _png(width: int, height: int) -> str:
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    raw = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IEND", b"")
    return base64.b64encode(raw).decode()


def test_image_tokens_from_decodable_png_scale_longest_edge() -> None:
    # 3136x1568 scales to 1568x784 → 1568*784/750 = 1639
    assert estimate_image_tokens(Image(data=_png(3136, 1568))) == 1568 * 784 // 750


def test_image_tokens_small_image_floors_at_85() -> None:
    assert estimate_image_tokens(Image(data=_png(10, 10))) == 85


def test_image_tokens_undecodable_uses_length() -> None:
    assert estimate_image_tokens(Image(data="!" * 100)) == 85
    assert estimate_image_tokens(Image(data="A" * 2048 * 200)) == 200


def test_image_tokens_url_only_is_85() -> None:
    assert estimate_image_tokens(Image(url="https://example.com/a.png")) == 85


def test_weight_counts_content_tool_calls_images_and_system_parts() -> None:
    assistant = Message.assistant(
        "abc", tool_calls=[ToolCall("c1", "read", '{"path":"x"}'), ToolCall("c2", "ls", "")]
    )
    assert weight(assistant) == 3 + len("read") + len('{"path":"x"}') + len("ls") + len("{}")
    with_image = Message.user("hi", images=(Image(url="https://e/x.png"),))
    assert weight(with_image) == 2 + len("https://e/x.png")  # a URL image travels as its URL
    system = Message.system("ab", system_parts=("abcd", "efgh"))
    assert weight(system) == 2 + (8 - 2)
    assert total_weight([assistant, with_image, system]) == sum(map(weight, [assistant, with_image, system]))


def test_weight_is_cached_per_message() -> None:
    msg = Message.user("x" * 10)
    assert weight(msg) == 10
    assert msg._cache["weight"] == 10
    assert weight(msg.with_content("y")) == 1


def test_needs_compaction_is_strict() -> None:
    history = [Message.user("x" * 100)]
    assert not needs_compaction(history, 100)
    assert needs_compaction(history, 99)


def test_char_budget_ratio_and_chars_per_token() -> None:
    assert char_budget(200_000, 0.6) == 480_000
    assert char_budget(128_000, 0.75, chars_per_token=3.5) == int(128_000 * 0.75 * 3.5)


def test_char_budget_reserved_chars_floored_at_a_quarter() -> None:
    assert char_budget(100_000, 0.5, reserved_chars=50_000) == 150_000
    assert char_budget(100_000, 0.5, reserved_chars=10**9) == 200_000 // 4


def test_char_budget_payload_cap_clamp_leaves_30_percent_headroom() -> None:
    assert char_budget(200_000, 0.6, payload_cap=131_072) == int(131_072 * 0.7)
    assert char_budget(1000, 0.6, payload_cap=10**9) == 2400


def test_an_inline_image_weighs_its_wire_size_not_its_token_estimate() -> None:
    # SPEC §11 amends §1.2: the 266 668-char base64 screenshot used to weigh 543.
    data = "A" * 266_668
    shot = Message.user("look", images=(Image(data=data, media_type="image/jpeg"),))
    assert image_chars(shot) == 266_668 + len("image/jpeg")
    assert weight(shot) == 4 + 266_668 + len("image/jpeg")
    assert total_weight([shot, Message.user("x")]) == weight(shot) + 1
    # the token estimate stays what the model is charged (used for calibration and output room)
    assert image_tokens(shot) == estimate_image_tokens(shot.images[0]) == 266_668 // 2048


def test_a_message_without_images_has_no_image_chars_or_tokens() -> None:
    assert image_chars(Message.user("text")) == 0
    assert image_tokens(Message.user("text")) == 0
