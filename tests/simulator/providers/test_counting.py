"""The mock providers count images and token-dense text as the providers do, and as the library budgets them.

Images: each wire format's image blocks are priced by the provider's published rule from the
image's header (:mod:`ctxrecover.image_tokens`) — the same table the library's budget reads,
so a request's image tokens are the same number on both sides (issue 26 item 3). Text: English
at 4 chars a token as before; CJK, emoji, base64 and minified code at their real density
(:mod:`simulator.providers.tokens`, issue 26 item 6).
"""

from __future__ import annotations

import base64
import json
import random
import struct
import zlib

import httpx
import pytest

from ctxrecover.archive import MemoryArchive
from ctxrecover.image_tokens import image_token_cost
from ctxrecover.messages import Image, Message
from ctxrecover.passes.turn import TurnPasses
from ctxrecover.policy import DEFAULT_POLICY
from ctxrecover.wire.render import render_request, request_path
from simulator.providers.mock import MockProvider
from simulator.providers.tokens import TokenCounter, dense_tokens

MODELS = {
    "openai-chat": "gpt-4o",
    "openai-responses": "gpt-4o-mini",
    "anthropic": "claude-sonnet-4-20250514",
    "gemini": "gemini-2.5-pro",
    "bedrock-converse": "anthropic.claude-3-5-sonnet-20241022-v2:0",
}


def png(width: int, height: int) -> str:
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    chunk = struct.pack(">I", 13) + b"IHDR" + ihdr + struct.pack(">I", zlib.crc32(b"IHDR" + ihdr))
    return base64.b64encode(b"\x89PNG\r\n\x1a\n" + chunk + bytes(48)).decode()


def input_tokens(fmt: str, history: list[Message]) -> int:
    provider = MockProvider(fmt, context_window=10_000_000, script=["ok"])
    model = MODELS[fmt]
    body = render_request(history, fmt, model=model, max_tokens=64)
    with httpx.Client(transport=httpx.MockTransport(provider), base_url="http://mock") as client:
        response = client.post(request_path(fmt, model), content=json.dumps(body).encode())
    assert response.status_code == 200, response.text
    return provider.last_call.input_tokens


@pytest.mark.parametrize("fmt", sorted(MODELS))
def test_each_mock_counts_an_image_as_its_provider_and_the_library_do(fmt: str) -> None:
    shot = Image(data=png(1920, 1080))
    text = [Message.user("what is on this screen?")]
    with_image = [Message.user("what is on this screen?", images=(shot,))]
    counted = input_tokens(fmt, with_image) - input_tokens(fmt, text)
    assert counted == image_token_cost(shot, fmt, MODELS[fmt])
    passes = TurnPasses(DEFAULT_POLICY, MemoryArchive(), fmt, model=MODELS[fmt])
    assert passes.request_weights(with_image).image_tokens == counted  # the budget's own count


def test_openai_detail_low_is_counted_at_85() -> None:
    base = [Message.user("look")]
    low = [Message.user("look", images=(Image(data=png(4096, 4096), detail="low"),))]
    assert input_tokens("openai-chat", low) - input_tokens("openai-chat", base) == 85


def test_english_counts_at_four_chars_a_token_as_before() -> None:
    prose = "The deployment failed because the config file was missing a required key. " * 40
    counter = TokenCounter()
    counter.add(prose)
    assert counter.tokens == -(-len(prose) // 4)


def test_token_dense_text_counts_far_more_tokens_per_char() -> None:
    rng = random.Random(7)
    samples = {
        "cjk": "数据库连接失败，请检查配置文件中的主机名和端口。" * 20,
        "emoji": "🚀✅🔥🎉🙂" * 60,
        "base64": base64.b64encode(rng.randbytes(1500)).decode(),
        "minified": "function(a,b){return a.c(b,{d:1,e:[2,3]})};var x=f(g,h);" * 20,
    }
    for name, text in samples.items():
        counter = TokenCounter()
        counter.add(text)
        assert counter.tokens >= len(text) / 2.8, (name, counter.tokens, len(text))
        assert counter.tokens == pytest.approx(dense_tokens(text), abs=1)
    assert input_tokens("anthropic", [Message.user(samples["cjk"])]) >= len(samples["cjk"])


def test_a_mock_window_rejects_token_dense_text_that_fits_at_four_chars_a_token() -> None:
    text = "数据库连接失败，请检查配置文件中的主机名和端口。" * 300  # 7,200 chars ≈ 1,800 tokens at 4 chars
    provider = MockProvider("openai-chat", context_window=4000, script=["ok"])
    body = render_request([Message.user(text)], "openai-chat", model="gpt-4o")
    with httpx.Client(transport=httpx.MockTransport(provider), base_url="http://mock") as client:
        response = client.post(request_path("openai-chat", "gpt-4o"), content=json.dumps(body).encode())
    assert response.status_code == 400 and "maximum context length" in response.text
