"""Loaders for the foreign transcript formats: OpenAI chat, tau-bench, SWE-agent, Anthropic, Claude Code.

Each turns one parsed document (or, for Claude Code, the JSONL lines of its
:class:`~simulator.transcripts.model.Source`) into a
:class:`~simulator.transcripts.model.Transcript`. Content is kept exactly as
recorded; an Anthropic ``tool_result`` block becomes its own ``tool`` message, and
Claude Code's per-block assistant events of one API message are merged back.
"""

from __future__ import annotations

import dataclasses
import json
import re
from typing import Any, cast

from ctxrecover.messages import IMAGE_DETAILS, Image, Message, Role, ToolCall
from simulator.transcripts.model import (
    MESSAGE_ROLES,
    Loc,
    Source,
    Transcript,
    describe,
    finish,
    json_lines,
    one_of,
)

__all__ = ["load_anthropic", "load_claude_code", "load_openai", "load_swe_agent", "tau_run", "tau_runs"]

OPENAI_ROLE_ALIASES: dict[str, str] = {"developer": "system"}
ANTHROPIC_ROLES: tuple[str, ...] = ("assistant", "user")

# Content-part types and the key holding their text.
OPENAI_TEXT_PARTS: dict[str, str] = {
    "input_text": "text",
    "output_text": "text",
    "refusal": "refusal",
    "text": "text",
}
OPENAI_IMAGE_PARTS: tuple[str, ...] = ("image_url", "input_image")
# Membership tables are tuples: untrusted values may be unhashable (a list as "type").
ANTHROPIC_SKIPPED_BLOCKS: tuple[str, ...] = ("redacted_thinking", "thinking")
TEXT_BLOCK_SEPARATOR = "\n\n"
MESSAGES_SHAPE = 'a JSON array of messages or {"messages": [...]}'
IMAGE_SOURCE_SHAPE = '{"type": "base64", "media_type", "data"} or {"type": "url", "url"}'
DATA_URL_RE = re.compile(r"data:(?P<media_type>[\w.+/-]+);base64,(?P<data>.*)", re.DOTALL)

CLAUDE_CODE_MESSAGE_EVENTS: tuple[str, ...] = ("assistant", "user")
SWE_AGENT_DEMO_FLAG = "is_demo"  # demonstrations are task text, not observations


# -- OpenAI chat (also tau-bench and SWE-agent) --------------------------------


def load_openai(doc: Any, source: Source) -> Transcript:
    """An OpenAI chat transcript: a list of messages or ``{"messages": [...]}``."""
    if isinstance(doc, dict):
        raw_messages, loc = doc.get("messages"), source.at("messages")
        metadata = {"model": doc["model"]} if isinstance(doc.get("model"), str) else {}
    else:
        raw_messages, loc, metadata = doc, source.at(), {}
    if not isinstance(raw_messages, list):
        raise source.error(f"expected {MESSAGES_SHAPE}, got {describe(doc)}")
    messages = [_openai_message(raw, loc.child(i)) for i, raw in enumerate(raw_messages)]
    return finish(source, "openai-chat", messages, metadata=metadata)


def _openai_message(raw: Any, loc: Loc) -> Message:
    if not isinstance(raw, dict):
        raise loc.error(f"expected a message object, got {describe(raw)}")
    role = raw.get("role")
    role = OPENAI_ROLE_ALIASES.get(role, role) if isinstance(role, str) else role
    if role not in MESSAGE_ROLES:
        raise loc.bad_field("role", one_of(MESSAGE_ROLES), raw.get("role"))
    text, images = _openai_content(raw.get("content"), loc)
    name = raw.get("name") if isinstance(raw.get("name"), str) else None
    if role == "assistant":
        calls = _openai_tool_calls(raw.get("tool_calls"), loc.child("tool_calls"))
        return Message.assistant(text, calls, images=images, name=name)
    if role == "tool":
        return Message("tool", text, tool_call_id=_tool_call_id(raw, loc), images=images, name=name)
    return Message(cast(Role, role), text, images=images, name=name)


def _openai_content(value: Any, loc: Loc) -> tuple[str, tuple[Image, ...]]:
    if value is None:
        return "", ()
    if isinstance(value, str):
        return value, ()
    if not isinstance(value, list):
        raise loc.bad_field("content", "a string, a list of content parts or null", value)
    texts: list[str] = []
    images: list[Image] = []
    for i, part in enumerate(value):
        part_loc = loc.child("content").child(i)
        kind = part.get("type") if isinstance(part, dict) else None
        if isinstance(kind, str) and kind in OPENAI_TEXT_PARTS:
            text = part.get(OPENAI_TEXT_PARTS[kind])
            if not isinstance(text, str):
                raise part_loc.bad_field(OPENAI_TEXT_PARTS[kind], "a string", text)
            texts.append(text)
        elif kind in OPENAI_IMAGE_PARTS:
            url = part.get(kind)
            detail = url.get("detail") if isinstance(url, dict) else part.get("detail")
            url = url.get("url") if isinstance(url, dict) else url
            if not isinstance(url, str):
                raise part_loc.bad_field(kind, 'an image URL (a string or {"url": ...})', url)
            if detail is not None and detail not in IMAGE_DETAILS:
                raise part_loc.bad_field("detail", one_of(list(IMAGE_DETAILS)), detail)
            images.append(dataclasses.replace(_image_from_url(url), detail=detail))
        else:
            known = sorted([*OPENAI_TEXT_PARTS, *OPENAI_IMAGE_PARTS])
            raise part_loc.bad_field("type", one_of(known), kind if isinstance(part, dict) else part)
    return TEXT_BLOCK_SEPARATOR.join(texts), tuple(images)


def _image_from_url(url: str) -> Image:
    match = DATA_URL_RE.fullmatch(url)
    if match:
        return Image(data=match["data"], media_type=match["media_type"])
    return Image(url=url)


def _openai_tool_calls(value: Any, loc: Loc) -> tuple[ToolCall, ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise loc.error(f"expected an array of tool calls, got {describe(value)}")
    calls: list[ToolCall] = []
    for i, raw in enumerate(value):
        call_loc = loc.child(i)
        if not isinstance(raw, dict):
            raise call_loc.error(f"expected a tool call object, got {describe(raw)}")
        function = raw.get("function", raw)  # nested Chat Completions form, or flat {id, name, arguments}
        if not isinstance(function, dict):
            raise call_loc.bad_field("function", "an object", function)
        call_id, name, arguments = raw.get("id"), function.get("name"), function.get("arguments")
        if not isinstance(call_id, str):
            raise call_loc.bad_field("id", "a string", call_id)
        if not isinstance(name, str):
            raise call_loc.bad_field("function.name", "a string", name)
        if isinstance(arguments, dict):
            arguments = _arguments_json(arguments)
        elif arguments is None:
            arguments = "{}"
        elif not isinstance(arguments, str):
            raise call_loc.bad_field("function.arguments", "a JSON string or an object", arguments)
        calls.append(ToolCall(call_id, name, arguments))
    return tuple(calls)


def _tool_call_id(raw: dict[str, Any], loc: Loc) -> str | None:
    value = raw.get("tool_call_id")
    if value is None:
        ids = raw.get("tool_call_ids")  # SWE-agent: a list, in practice of one id
        if ids is None:
            return None
        if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
            raise loc.bad_field("tool_call_ids", "an array of strings", ids)
        return ids[0] if ids else None
    if not isinstance(value, str):
        raise loc.bad_field("tool_call_id", "a string", value)
    return value


def _arguments_json(arguments: Any) -> str:
    return json.dumps(arguments, ensure_ascii=False, separators=(",", ":"))


def tau_runs(doc: Any, source: Source) -> list[Any]:
    """The runs of a tau-bench file (a non-empty JSON array)."""
    if not isinstance(doc, list) or not doc:
        raise source.error(f"expected a non-empty JSON array of tau-bench runs, got {describe(doc)}")
    return doc


def tau_run(raw: Any, index: int, source: Source) -> Transcript:
    """Run ``index`` of a tau-bench file; its ``traj`` is OpenAI chat messages."""
    loc = source.at(f"[{index}]")
    if not isinstance(raw, dict):
        raise loc.error(f"expected a run object {{task_id, reward, info, traj, trial}}, got {describe(raw)}")
    traj = raw.get("traj")
    if not isinstance(traj, list):
        raise loc.bad_field("traj", "an array of messages", traj)
    messages = [_openai_message(m, loc.child("traj").child(i)) for i, m in enumerate(traj)]
    metadata = {"run": index, **{k: raw[k] for k in ("task_id", "trial", "reward", "info") if k in raw}}
    name = f"{source.stem}.run{index:03d}"
    return finish(source, "tau-bench", messages, name=name, metadata=metadata, where=f"[{index}]: ")


def load_swe_agent(doc: Any, source: Source) -> Transcript:
    """A SWE-agent ``.traj``: its ``history``, environment output marked ``agent_feedback``."""
    if not isinstance(doc, dict) or not isinstance(doc.get("history"), list):
        raise source.error("expected a SWE-agent trajectory object with a 'history' array")
    loc = source.at("history")
    history = doc["history"]
    messages = [_openai_message(raw, loc.child(i)) for i, raw in enumerate(history)]
    # After the first assistant turn a user message is environment output (the
    # older format's observations, format-error feedback), not the user's words.
    seen_assistant = False
    for i, (raw, msg) in enumerate(zip(history, messages, strict=True)):
        if msg.role == "assistant":
            seen_assistant = True
        elif msg.role == "user" and seen_assistant and not raw.get(SWE_AGENT_DEMO_FLAG):
            messages[i] = msg.replace(agent_feedback=True)
    info = doc.get("info")
    info = info if isinstance(info, dict) else {}
    metadata = {k: info[k] for k in ("exit_status", "submission") if k in info}
    return finish(source, "swe-agent", messages, metadata=metadata)


# -- Anthropic Messages (also Claude Code) -------------------------------------


def load_anthropic(doc: Any, source: Source) -> Transcript:
    """An Anthropic Messages transcript: ``{"system"?, "messages": [...]}`` or a list."""
    raw_messages = doc.get("messages") if isinstance(doc, dict) else doc
    if not isinstance(raw_messages, list):
        raise source.error(f"expected {MESSAGES_SHAPE}, got {describe(doc)}")
    messages: list[Message] = []
    if isinstance(doc, dict) and doc.get("system") is not None:
        messages.append(_anthropic_system(doc["system"], source.at("system")))
    loc = source.at("messages") if isinstance(doc, dict) else source.at()
    for i, raw in enumerate(raw_messages):
        msg_loc = loc.child(i)
        if not isinstance(raw, dict):
            raise msg_loc.error(f"expected a message object, got {describe(raw)}")
        messages.extend(_anthropic_message(raw.get("role"), raw.get("content"), msg_loc))
    metadata = {"model": doc["model"]} if isinstance(doc, dict) and isinstance(doc.get("model"), str) else {}
    return finish(source, "anthropic", messages, metadata=metadata)


def _anthropic_system(value: Any, loc: Loc) -> Message:
    if isinstance(value, str):
        return Message.system(value)
    if not isinstance(value, list):
        raise loc.error(f"expected a string or a list of text blocks, got {describe(value)}")
    parts: list[str] = []
    for i, block in enumerate(value):
        text = block.get("text") if isinstance(block, dict) and block.get("type") == "text" else None
        if not isinstance(text, str):
            raise loc.child(i).error('expected a text block {"type": "text", "text": ...}')
        parts.append(text)
    system_parts = tuple(parts) if len(parts) > 1 else ()
    return Message.system(TEXT_BLOCK_SEPARATOR.join(parts), system_parts=system_parts)


def _anthropic_message(role: Any, content: Any, loc: Loc, *, agent_feedback: bool = False) -> list[Message]:
    """One API message as history messages: each ``tool_result`` block becomes a ``tool`` message."""
    if role not in ANTHROPIC_ROLES:
        raise loc.bad_field("role", one_of(ANTHROPIC_ROLES), role)
    if isinstance(content, str):
        return [Message(role, content, agent_feedback=agent_feedback and role == "user")]
    if not isinstance(content, list):
        raise loc.bad_field("content", "a string or a list of content blocks", content)
    out: list[Message] = []
    texts: list[str] = []
    images: list[Image] = []
    calls: list[ToolCall] = []

    def flush() -> None:
        if texts or images or calls:
            out.append(
                Message(
                    role,
                    TEXT_BLOCK_SEPARATOR.join(texts),
                    tool_calls=tuple(calls),
                    images=tuple(images),
                    agent_feedback=agent_feedback and role == "user",
                )
            )
        texts.clear()
        images.clear()
        calls.clear()

    for i, block in enumerate(content):
        block_loc = loc.child("content").child(i)
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "text":
            texts.append(_text_field(block, "text", block_loc))
        elif kind == "image":
            images.append(_anthropic_image(block, block_loc))
        elif kind == "tool_use" and role == "assistant":
            call_id, name = block.get("id"), block.get("name")
            if not isinstance(call_id, str):
                raise block_loc.bad_field("id", "a string", call_id)
            if not isinstance(name, str):
                raise block_loc.bad_field("name", "a string", name)
            calls.append(ToolCall(call_id, name, _arguments_json(block.get("input", {}))))
        elif kind == "tool_result" and role == "user":
            flush()
            out.append(_anthropic_tool_result(block, block_loc))
        elif kind not in ANTHROPIC_SKIPPED_BLOCKS:
            allowed = ("image", "text", "tool_use" if role == "assistant" else "tool_result")
            raise block_loc.bad_field("type", f"{one_of(allowed)} in a {role} message", kind)
    flush()
    return out


def _text_field(block: dict[str, Any], key: str, loc: Loc) -> str:
    text = block.get(key)
    if not isinstance(text, str):
        raise loc.bad_field(key, "a string", text)
    return text


def _anthropic_image(block: dict[str, Any], loc: Loc) -> Image:
    source = block.get("source")
    if isinstance(source, dict) and source.get("type") == "base64" and isinstance(source.get("data"), str):
        return Image(data=source["data"], media_type=str(source.get("media_type") or "image/png"))
    if isinstance(source, dict) and source.get("type") == "url" and isinstance(source.get("url"), str):
        return Image(url=source["url"])
    raise loc.bad_field("source", IMAGE_SOURCE_SHAPE, source)


def _anthropic_tool_result(block: dict[str, Any], loc: Loc) -> Message:
    call_id = block.get("tool_use_id")
    if not isinstance(call_id, str):
        raise loc.bad_field("tool_use_id", "a string", call_id)
    content = block.get("content", "")
    images: tuple[Image, ...] = ()
    if isinstance(content, str):
        text = content
    elif isinstance(content, list):
        texts: list[str] = []
        found: list[Image] = []
        for i, part in enumerate(content):
            part_loc = loc.child("content").child(i)
            kind = part.get("type") if isinstance(part, dict) else None
            if kind == "text":
                texts.append(_text_field(part, "text", part_loc))
            elif kind == "image":
                found.append(_anthropic_image(part, part_loc))
            else:
                raise part_loc.bad_field("type", one_of(("image", "text")), kind)
        text, images = TEXT_BLOCK_SEPARATOR.join(texts), tuple(found)
    else:
        raise loc.bad_field("content", "a string or a list of text/image blocks", content)
    return Message.tool(call_id, text, images=images, is_error=bool(block.get("is_error")))


def load_claude_code(_doc: Any, source: Source) -> Transcript:
    """A Claude Code session JSONL; non-message and sidechain events are counted, not loaded."""
    messages: list[Message] = []
    assistant_at: dict[str, int] = {}  # API message id -> index of its merged message
    skipped: dict[str, int] = {}
    metadata: dict[str, Any] = {}
    for number, event in json_lines(source):
        loc = source.at(line=number)
        if not isinstance(event, dict):
            raise loc.error(f"expected a JSON object (an event), got {describe(event)}")
        kind = event.get("type")
        if kind not in CLAUDE_CODE_MESSAGE_EVENTS or event.get("isSidechain"):
            label = "sidechain" if event.get("isSidechain") else str(kind)
            skipped[label] = skipped.get(label, 0) + 1
            continue
        message = event.get("message")
        if not isinstance(message, dict):
            raise loc.bad_field("message", "an Anthropic message object", message)
        if isinstance(event.get("sessionId"), str):
            metadata.setdefault("session_id", event["sessionId"])
        if isinstance(message.get("model"), str):
            metadata.setdefault("model", message["model"])
        is_meta = bool(event.get("isMeta"))  # hook feedback and other injected user text
        converted = _anthropic_message(
            message.get("role"), message.get("content"), loc.child("message"), agent_feedback=is_meta
        )
        message_id = message.get("id")
        if kind == "assistant" and isinstance(message_id, str) and len(converted) == 1:
            # Claude Code logs one event per content block of a streamed API message.
            if message_id in assistant_at:
                index = assistant_at[message_id]
                messages[index] = _merge_assistant(messages[index], converted[0])
                continue
            assistant_at[message_id] = len(messages)
        messages.extend(converted)
    if skipped:
        metadata["skipped_events"] = skipped
    return finish(source, "claude-code", messages, metadata=metadata)


def _merge_assistant(first: Message, more: Message) -> Message:
    text = TEXT_BLOCK_SEPARATOR.join(t for t in (first.content, more.content) if t)
    return first.replace(
        content=text, tool_calls=first.tool_calls + more.tool_calls, images=first.images + more.images
    )
