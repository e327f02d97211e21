"""A fault cuts a streamed answer after N bytes: the official SDKs see the stream break mid-way."""

from __future__ import annotations

import pytest

from simulator.providers.mock import MockProvider
from simulator.providers.service import MockService
from simulator.proxy.faults import CutStream
from simulator.proxy.loopback import LoopbackServer
from simulator.proxy.middlebox import Middlebox

openai = pytest.importorskip("openai")
anthropic = pytest.importorskip("anthropic")

TEXT = "A long streamed answer that the gateway cuts before it ends. " * 10
CUT = 600  # bytes of the answer's body the client gets
# What an SDK raises for a stream broken mid-way: its own connection error or httpx2's (the anthropic
# SDK lets httpx2.RemoteProtocolError through while iterating; openai wraps it in APIConnectionError).
BROKEN_STREAM = frozenset({"APIConnectionError", "RemoteProtocolError", "ReadError"})


@pytest.fixture(autouse=True)
def no_proxy_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(name, raising=False)


def test_the_openai_sdk_sees_a_cut_chat_stream_as_a_connection_error() -> None:
    service = MockService([MockProvider("openai-chat", context_window=100_000, script=lambda r: TEXT)])
    with (
        LoopbackServer(Middlebox(service, [CutStream(n_bytes=CUT)])) as server,
        openai.OpenAI(base_url=server.base_url + "/v1", api_key="sk-test", max_retries=0) as client,
    ):
        received = []
        stream = client.chat.completions.create(
            model="gpt-4o", messages=[{"role": "user", "content": "hi"}], stream=True
        )
        with pytest.raises(Exception) as caught:
            for chunk in stream:
                received.append(chunk.choices[0].delta.content or "")
    assert type(caught.value).__name__ in BROKEN_STREAM
    text = "".join(received)
    assert text and TEXT.startswith(text) and text != TEXT
    (record,) = server.records
    assert (record.outcome, record.status, record.response_bytes, record.fault) == (
        "cut-stream",
        200,
        CUT,
        "cut-stream",
    )


def test_the_anthropic_sdk_sees_a_cut_message_stream_as_a_connection_error() -> None:
    provider = MockProvider("anthropic", context_window=100_000, script=lambda r: TEXT)
    with (
        LoopbackServer(Middlebox(provider, [CutStream(n_bytes=3 * CUT)])) as server,
        anthropic.Anthropic(base_url=server.base_url, api_key="sk-test", max_retries=0) as client,
    ):
        received = []
        messages = [{"role": "user", "content": "hi"}]
        with (
            pytest.raises(Exception) as caught,
            client.messages.stream(model="claude-sonnet-4", max_tokens=1024, messages=messages) as stream,
        ):
            for text in stream.text_stream:
                received.append(text)
    assert type(caught.value).__name__ in BROKEN_STREAM
    assert received and TEXT.startswith("".join(received)) and "".join(received) != TEXT
    assert server.records[0].outcome == "cut-stream"
