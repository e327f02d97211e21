"""A streamed answer accumulated into the document the same answer has unstreamed, with no I/O.

An accumulator takes a stream's events in order — ``feed(name, data)``, the event's
name (SSE ``event:``, Bedrock ``:event-type``; None when it has none) and its JSON
object — and returns the text each one adds; :meth:`Accumulator.raw` is then the
provider's non-streamed response document, which
:func:`~ctxrecover.wire.parse_response` reads as it reads any answer: one parser, so a
streamed answer gives the same message, tool calls, stop reason and usage.
``complete`` says whether the event that settles the answer arrived.

================  =========================================================  ==================
format            accumulated                                                complete once
================  =========================================================  ==================
openai-chat       chunk fields; per choice the deltas merged (strings        a ``finish_reason``
                  joined, tool calls by ``index``); the usage chunk
openai-responses  the ``response`` of the final event (the streamed          ``response.completed``
                  ``output_item.done`` items when it lists none)             / ``.incomplete``
anthropic         ``message_start``'s message, blocks by index (text,        a ``stop_reason``
                  thinking, tool input JSON), ``message_delta`` merged in    (``message_stop``)
gemini            chunks merged: parts appended (adjacent texts joined),     a ``finishReason``
                  the last ``finishReason``, ``usageMetadata``               or a blocked prompt
bedrock-converse  blocks by ``contentBlockIndex``, ``messageStop``,          ``messageStop``
                  ``metadata`` (usage, metrics)
================  =========================================================  ==================

Sources: openai-python ``lib/streaming/_deltas.py`` (``accumulate_delta``: ``index`` and
``type`` replaced, strings joined, indexed lists merged) and
``lib/streaming/responses/_responses.py``; anthropic-sdk-python
``lib/streaming/_messages.py`` (``accumulate_event``); the Gemini REST reference for
``streamGenerateContent``; the Bedrock ``ConverseStream`` API reference. Text is kept as
its pieces and joined once in :meth:`raw`, so a long answer costs linear time. A field
of the wrong shape is skipped (the parser then names what is missing); tool input that is
not JSON raises :class:`~ctxrecover.transport.base.MalformedStream`.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

from ctxrecover.transport.base import MalformedStream
from ctxrecover.wire import WireFormat

__all__ = [
    "ACCUMULATORS",
    "Accumulator",
    "AnthropicAccumulator",
    "BedrockAccumulator",
    "ChatAccumulator",
    "GeminiAccumulator",
    "ResponsesAccumulator",
]

# Keys whose later values replace the first instead of joining it (a repeated role must not double).
IDENTITY_KEYS = frozenset({"index", "type", "role", "id"})
# Fields only a stream's events carry, never the answer: OpenAI's padding against size side channels
# (``stream_options.include_obfuscation``, on by default).
STREAM_ONLY_FIELDS = frozenset({"obfuscation"})
RESPONSES_FINAL_EVENTS = frozenset({"response.completed", "response.incomplete"})
RESPONSES_TEXT_EVENTS = frozenset({"response.output_text.delta", "response.refusal.delta"})


class _Pieces(list[str]):
    """A string still streaming, kept as its pieces and joined once by :func:`_joined`."""


def _joined(value: Any) -> Any:
    """``value`` with every :class:`_Pieces` joined into its string (dicts and lists walked)."""
    if isinstance(value, _Pieces):
        return "".join(value)
    if isinstance(value, dict):
        return {key: _joined(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_joined(item) for item in value]
    return value


def _append(target: dict[str, Any], key: str, text: str) -> None:
    current = target.get(key)
    if isinstance(current, _Pieces):
        current.append(text)
    else:
        target[key] = _Pieces([current, text] if isinstance(current, str) else [text])


def _object(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _objects(value: Any) -> list[dict[str, Any]]:
    return [item for item in value if isinstance(item, dict)] if isinstance(value, list) else []


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _index(value: Any, default: int) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else default


def _merge(target: dict[str, Any], delta: Mapping[str, Any]) -> None:
    """Merge one delta into ``target``: strings join, dicts merge, lists of ``index``-ed objects merge
    entry by entry, other lists extend; identity keys and other values replace (a None never does)."""
    for key, value in delta.items():
        current = target.get(key)
        if isinstance(value, list) and value and all(isinstance(e, dict) and "index" in e for e in value):
            entries = current if isinstance(current, list) else []
            target[key] = entries
            for entry in value:
                same = next((e for e in entries if e.get("index") == entry["index"]), None)
                if same is None:
                    same = {}
                    entries.append(same)
                _merge(same, entry)
        elif key in IDENTITY_KEYS or current is None:
            if value is not None or key not in target:
                target[key] = (
                    _Pieces([value]) if isinstance(value, str) and key not in IDENTITY_KEYS else value
                )
        elif isinstance(value, str) and isinstance(current, str | _Pieces):
            _append(target, key, value)
        elif isinstance(value, dict) and isinstance(current, dict):
            _merge(current, value)
        elif isinstance(value, list) and isinstance(current, list):
            current.extend(value)
        elif value is not None:
            target[key] = value


def _json_input(pieces: list[str], what: str) -> Any:
    try:
        return json.loads("".join(pieces))
    except ValueError as exc:
        raise MalformedStream(f"{what} is not JSON ({exc})", data="".join(pieces)[:2000]) from exc


class Accumulator(ABC):
    """The events of one streamed answer in, its non-streamed document out (see the module docstring)."""

    def __init__(self) -> None:
        self.complete = False

    @abstractmethod
    def feed(self, name: str | None, data: Mapping[str, Any]) -> str:
        """Take the next event; return the text it adds to the message ("" for none)."""

    @abstractmethod
    def raw(self) -> dict[str, Any]:
        """The document of the answer so far, shaped as the provider's non-streamed response."""


class ChatAccumulator(Accumulator):
    """OpenAI Chat Completions chunks (``chat.completion.chunk``) into a ``chat.completion``."""

    def __init__(self) -> None:
        super().__init__()
        self._document: dict[str, Any] = {}
        self._choices: dict[int, dict[str, Any]] = {}

    def feed(self, name: str | None, data: Mapping[str, Any]) -> str:
        for key, value in data.items():
            if key == "object" and isinstance(value, str):
                self._document[key] = value.removesuffix(".chunk")
            elif key not in ("choices", *STREAM_ONLY_FIELDS) and (
                value is not None or key not in self._document
            ):
                self._document[key] = value
        text = ""
        for position, choice in enumerate(_objects(data.get("choices"))):
            index = _index(choice.get("index"), position)
            snapshot = self._choices.setdefault(index, {"index": index, "message": {}})
            delta = {k: v for k, v in _object(choice.get("delta")).items() if k not in STREAM_ONLY_FIELDS}
            _merge(snapshot["message"], delta)
            for key, value in choice.items():
                if key == "logprobs" and isinstance(value, dict) and isinstance(snapshot.get(key), dict):
                    _merge(snapshot[key], value)
                elif key not in ("delta", "index") and (value is not None or key not in snapshot):
                    snapshot[key] = value
            self.complete = self.complete or choice.get("finish_reason") is not None
            if index == 0:
                text += _text(delta.get("content")) + _text(delta.get("refusal"))
        return text

    def raw(self) -> dict[str, Any]:
        choices = []
        for index in sorted(self._choices):
            choice = _joined(self._choices[index])
            calls = choice["message"].get("tool_calls")
            if isinstance(calls, list):  # an answer's tool calls carry no stream index
                ordered = sorted(_objects(calls), key=lambda call: _index(call.get("index"), 0))
                choice["message"]["tool_calls"] = [
                    {k: v for k, v in call.items() if k != "index"} for call in ordered
                ]
            choices.append(choice)
        return {**self._document, "choices": choices}


class ResponsesAccumulator(Accumulator):
    """OpenAI Responses events into the ``response`` object they end with."""

    def __init__(self) -> None:
        super().__init__()
        self._response: dict[str, Any] = {}
        self._items: dict[int, dict[str, Any]] = {}

    def feed(self, name: str | None, data: Mapping[str, Any]) -> str:
        kind = _text(data.get("type")) or name
        if kind in RESPONSES_TEXT_EVENTS:
            return _text(data.get("delta"))
        if kind == "response.output_item.done":
            self._items[_index(data.get("output_index"), len(self._items))] = _object(data.get("item"))
        elif kind in RESPONSES_FINAL_EVENTS:
            self._response = dict(_object(data.get("response")))
            self.complete = True
        return ""

    def raw(self) -> dict[str, Any]:
        response = dict(self._response)
        if not response.get("output") and self._items:
            response["output"] = [self._items[index] for index in sorted(self._items)]
        return response


class AnthropicAccumulator(Accumulator):
    """Anthropic Messages events (``message_start`` … ``message_stop``) into a ``message``."""

    def __init__(self) -> None:
        super().__init__()
        self._message: dict[str, Any] = {}
        self._blocks: dict[int, dict[str, Any]] = {}
        self._inputs: dict[int, list[str]] = {}  # each tool block's input JSON, as its pieces

    def feed(self, name: str | None, data: Mapping[str, Any]) -> str:
        kind = _text(data.get("type")) or name
        index = _index(data.get("index"), len(self._blocks))
        if kind == "message_start":
            self._message = dict(_object(data.get("message")))
            self._blocks = dict(enumerate(_objects(self._message.pop("content", None))))
        elif kind == "content_block_start":
            self._blocks[index] = dict(_object(data.get("content_block")))
        elif kind == "content_block_delta":
            return self._delta(self._blocks.setdefault(index, {}), index, _object(data.get("delta")))
        elif kind == "content_block_stop":
            self._close(index)
        elif kind == "message_delta":
            for key, value in data.items():
                if key == "delta":
                    self._message.update(_object(value))
                elif key == "usage":
                    usage = {k: v for k, v in _object(value).items() if v is not None}
                    self._message["usage"] = {**_object(self._message.get("usage")), **usage}
                elif key != "type":  # context_management reports, …
                    self._message[key] = value
            self.complete = self.complete or self._message.get("stop_reason") is not None
        elif kind == "message_stop":
            self.complete = True
        return ""

    def _delta(self, block: dict[str, Any], index: int, delta: dict[str, Any]) -> str:
        kind = delta.get("type")
        if kind == "text_delta":
            text = _text(delta.get("text"))
            _append(block, "text", text)
            return text
        if kind == "input_json_delta":
            self._inputs.setdefault(index, []).append(_text(delta.get("partial_json")))
        elif kind == "thinking_delta":
            _append(block, "thinking", _text(delta.get("thinking")))
        elif kind == "signature_delta":
            block["signature"] = _text(delta.get("signature"))
        elif kind == "citations_delta":
            block.setdefault("citations", []).append(delta.get("citation"))
        return ""

    def _close(self, index: int) -> None:
        pieces = self._inputs.pop(index, None)
        if pieces is not None and "".join(pieces).strip():
            self._blocks.setdefault(index, {})["input"] = _json_input(pieces, f"tool input of block {index}")

    def raw(self) -> dict[str, Any]:
        for index in list(self._inputs):
            self._close(index)
        blocks = [_joined(self._blocks[index]) for index in sorted(self._blocks)]
        return {**self._message, "content": blocks}


def _add_part(parts: list[dict[str, Any]], part: dict[str, Any]) -> None:
    """Append a Gemini part; a text part joins the text part before it (same ``thought`` flag)."""
    last = parts[-1] if parts else None
    plain = set(part) <= {"text", "thought"} and isinstance(part.get("text"), str)
    if last is not None and plain and set(last) == set(part) and last.get("thought") == part.get("thought"):
        _append(last, "text", part["text"])
    else:
        parts.append(dict(part))


class GeminiAccumulator(Accumulator):
    """Gemini ``GenerateContentResponse`` chunks into one ``GenerateContentResponse``."""

    def __init__(self) -> None:
        super().__init__()
        self._document: dict[str, Any] = {}
        self._candidates: dict[int, dict[str, Any]] = {}

    def feed(self, name: str | None, data: Mapping[str, Any]) -> str:
        for key, value in data.items():
            if key != "candidates" and value is not None:
                self._document[key] = value
        self.complete = self.complete or bool(_object(data.get("promptFeedback")).get("blockReason"))
        texts: list[str] = []
        for position, candidate in enumerate(_objects(data.get("candidates"))):
            index = _index(candidate.get("index"), position)
            snapshot = self._candidates.setdefault(index, {})
            for key, value in candidate.items():
                if key != "content":
                    if value is not None:
                        snapshot[key] = value
                    continue
                content = snapshot.setdefault("content", {})
                for field, item in _object(value).items():
                    if field != "parts":
                        content[field] = item
                        continue
                    parts = content.setdefault("parts", [])
                    for part in _objects(item):
                        _add_part(parts, part)
                        if index == 0 and not part.get("thought"):
                            texts.append(_text(part.get("text")))
            self.complete = self.complete or bool(candidate.get("finishReason"))
        return "".join(texts)

    def raw(self) -> dict[str, Any]:
        candidates = [_joined(self._candidates[index]) for index in sorted(self._candidates)]
        return {**self._document, **({"candidates": candidates} if candidates else {})}


class BedrockAccumulator(Accumulator):
    """Bedrock ``ConverseStream`` events into a ``Converse`` response."""

    def __init__(self) -> None:
        super().__init__()
        self._message: dict[str, Any] = {}
        self._document: dict[str, Any] = {}
        self._blocks: dict[int, dict[str, Any]] = {}
        self._inputs: dict[int, list[str]] = {}

    def feed(self, name: str | None, data: Mapping[str, Any]) -> str:
        index = _index(data.get("contentBlockIndex"), len(self._blocks))
        if name == "messageStart":
            self._message["role"] = data.get("role")
        elif name == "contentBlockStart":
            start = _object(data.get("start"))
            self._blocks[index] = {key: dict(_object(value)) for key, value in start.items()}
        elif name == "contentBlockDelta":
            return self._delta(self._blocks.setdefault(index, {}), index, _object(data.get("delta")))
        elif name == "contentBlockStop":
            self._close(index)
        elif name == "messageStop":
            self._document.update(data)
            self.complete = True
        elif name == "metadata":
            self._document.update(data)
        return ""

    def _delta(self, block: dict[str, Any], index: int, delta: dict[str, Any]) -> str:
        if "text" in delta:
            text = _text(delta["text"])
            _append(block, "text", text)
            return text
        if "toolUse" in delta:
            self._inputs.setdefault(index, []).append(_text(_object(delta["toolUse"]).get("input")))
        elif "reasoningContent" in delta:
            reasoning = block.setdefault("reasoningContent", {})
            for key, value in _object(delta["reasoningContent"]).items():
                if key == "redactedContent":
                    reasoning[key] = value
                elif key in ("text", "signature"):
                    _append(reasoning.setdefault("reasoningText", {}), key, _text(value))
        return ""

    def _close(self, index: int) -> None:
        pieces = self._inputs.pop(index, None)
        if pieces is None:
            return
        use = self._blocks.setdefault(index, {}).setdefault("toolUse", {})
        use["input"] = (
            _json_input(pieces, f"toolUse input of block {index}") if "".join(pieces).strip() else {}
        )

    def raw(self) -> dict[str, Any]:
        for index in list(self._inputs):
            self._close(index)
        content = [_joined(self._blocks[index]) for index in sorted(self._blocks)]
        return {"output": {"message": {**self._message, "content": content}}, **self._document}


ACCUMULATORS: Mapping[WireFormat, Callable[[], Accumulator]] = MappingProxyType(
    {
        WireFormat.OPENAI_CHAT: ChatAccumulator,
        WireFormat.OPENAI_RESPONSES: ResponsesAccumulator,
        WireFormat.ANTHROPIC: AnthropicAccumulator,
        WireFormat.GEMINI: GeminiAccumulator,
        WireFormat.BEDROCK_CONVERSE: BedrockAccumulator,
    }
)
