"""What a scenario replays: transcripts found by name, shaped by the scenario's workload, split into turns.

Without a transcript, the scenario's own ``[workload]`` transcript is replayed
(:func:`workload_transcript`), always a bundled fixture: the synthetic sessions of
``fixtures/transcripts/`` or the format fixtures of ``fixtures/transcripts/formats/``
(one per supported foreign format), so a replay gives the same result on every
checkout and install. The workload also shapes any transcript: it pads
the system prompt to ``system_prompt_bytes`` and every recorded reply to
``reply_tokens`` (deterministic filler), and puts ``plant_text`` at the head of the
newest message fed before turn ``plant_turn`` (content a gateway's content rule
matches: an SQL fragment in a tool result, say); a replay first fits the scenario to the transcript
(:meth:`~simulator.proxy.scenario.Scenario.fitted`: a planted turn beyond it moves to its last turn,
said in the run's notes). Assistant messages with neither text nor
tool calls are skipped (no provider accepts them in a history); an assistant
message right after another one is appended to the previous turn rather than
requested (a request may not end with an assistant message).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

from ctxrecover.messages import Message
from ctxrecover.sizes import total_weight
from simulator.proxy.scenario import Scenario
from simulator.resources import data_dir
from simulator.transcripts.generator import generate_session
from simulator.transcripts.loaders import Transcript, TranscriptError, load_transcript

__all__ = [
    "DEFAULT_TRANSCRIPT",
    "FIXTURE_TRANSCRIPTS_DIR",
    "FORMAT_FIXTURES_DIR",
    "GENERATED_TRANSCRIPT",
    "ReplayError",
    "Turn",
    "bundled_transcripts",
    "find_transcript",
    "load_named_transcript",
    "shape_transcript",
    "split_turns",
    "workload_transcript",
]


# The bundled transcripts: the synthetic sessions (our JSONL) and, in formats/, one file per foreign format.
FIXTURE_TRANSCRIPTS_DIR = data_dir("transcripts")
FORMAT_FIXTURES_DIR = FIXTURE_TRANSCRIPTS_DIR / "formats"
BUNDLED_DIRS: tuple[Path, ...] = (FIXTURE_TRANSCRIPTS_DIR, FORMAT_FIXTURES_DIR)
# The transcript a workload replays when it names none (and is not "generated" to a size).
DEFAULT_TRANSCRIPT = "coding-120k"
# A workload "generated" to history_bytes: a chat-only fixture, whose request bytes grow turn after turn
# (microcompact shrinks old tool results, never answers), which is what body-size faults need.
GENERATED = "generated"
GENERATED_TRANSCRIPT = "chat-long-answers-600k"
# A generated workload larger than GENERATED_TRANSCRIPT: a seeded chat-only session of long answers.
GENERATED_OPTIONS: Mapping[str, Any] = MappingProxyType(
    {"tool_turn_ratio": 0.0, "answer_chars": 8000, "recall_every": 0, "feedback_every": 0}
)
GENERATED_CHARS_PER_TURN = 8000
# Deterministic filler for workload shaping (system prompt bytes, reply tokens).
SYSTEM_FILLER_HEADER = "\n\n# Tool documentation (MCP servers, skills, personas)\n"
SYSTEM_FILLER_LINE = "- tool {index:05d}: parameters, usage notes and examples for this MCP tool.\n"
REPLY_FILLER_HEADER = "\n\nDetails:\n"
REPLY_FILLER_LINE = "- note {index:04d}: what was checked, what it showed and what comes next.\n"
PLANT_SEPARATOR = "\n"
TRANSCRIPT_SUFFIXES: tuple[str, ...] = ("", ".jsonl", ".json", ".traj")
CHARS_PER_TOKEN = 4  # the mock providers' estimate (simulator.providers.mock.estimate_tokens)


class ReplayError(ValueError):
    """A replay cannot start: bad transport, a transcript with nothing to replay, …"""


@dataclass(frozen=True, slots=True)
class Turn:
    """One turn: messages fed before it, the recorded reply, and assistant messages right after it."""

    inputs: tuple[Message, ...]
    reply: Message
    followers: tuple[Message, ...] = ()


def bundled_transcripts() -> list[str]:
    """Names of every bundled transcript (synthetic sessions and format fixtures), smallest first."""
    files = [
        p
        for directory in BUNDLED_DIRS
        if directory.is_dir()
        for p in directory.iterdir()
        if p.is_file() and p.suffix in TRANSCRIPT_SUFFIXES
    ]
    return [p.stem for p in sorted(files, key=lambda p: (p.stat().st_size, p.name))]


def find_transcript(name: str | Path) -> Path:
    """A transcript path: ``name`` itself when it is a file, else the bundled transcript of that name.

    Bundled names may omit the suffix (``chat-50k``, ``swe-agent-fc-ledgerline``).
    Raises :class:`ReplayError` listing the bundled names.
    """
    path = Path(name)
    if path.is_file():
        return path
    for directory in BUNDLED_DIRS:
        for suffix in TRANSCRIPT_SUFFIXES:
            candidate = directory / f"{name}{suffix}"
            if candidate.is_file():
                return candidate
    raise ReplayError(
        f"{name}: no such transcript file, and no bundled transcript of that name "
        f"(bundled: {', '.join(bundled_transcripts())})"
    )


def load_named_transcript(name: str | Path) -> Transcript:
    """Load a transcript by path or bundled name (:func:`find_transcript`); tau-bench files give run 0."""
    path = find_transcript(name)
    try:
        return load_transcript(path)
    except TranscriptError as exc:  # a multi-run tau-bench file: replay its first run
        if "tau-bench runs" not in str(exc):
            raise
        return load_transcript(path, run=0)


def _prefix(transcript: Transcript, history_bytes: int) -> Transcript:
    """The transcript cut before the first user message at which the history reaches ``history_bytes``."""
    messages = transcript.messages
    weight = 0
    for index, msg in enumerate(messages):
        if msg.role == "user" and weight >= history_bytes:
            facts = tuple(f for f in transcript.facts if f.message_index < index)
            name = f"{transcript.name}[:{index}]"
            return dataclasses.replace(transcript, name=name, messages=messages[:index], facts=facts)
        weight += total_weight((msg,))
    return transcript


def workload_transcript(scenario: Scenario) -> Transcript:
    """The transcript the scenario's ``[workload]`` asks for, from the bundled data only.

    A named transcript is looked up with :func:`find_transcript` (a name that is not
    bundled is a :class:`ReplayError` naming the scenario). ``generated`` with
    ``history_bytes`` takes :data:`GENERATED_TRANSCRIPT` — or, when that is smaller, a
    chat session of long answers generated with the scenario's seed — cut before the
    user turn at which the history reaches that size; no name at all,
    :data:`DEFAULT_TRANSCRIPT`.
    """
    workload = scenario.workload
    if workload.transcript and workload.transcript != GENERATED:
        try:
            return load_named_transcript(workload.transcript)
        except ReplayError as exc:
            raise ReplayError(f"scenario {scenario.name!r}: [workload] transcript {exc}") from None
    if not workload.history_bytes:
        return load_named_transcript(DEFAULT_TRANSCRIPT)
    bundled = load_named_transcript(GENERATED_TRANSCRIPT)
    if total_weight(bundled.messages) < workload.history_bytes:
        turns = workload.history_bytes // GENERATED_CHARS_PER_TURN + 2
        bundled = generate_session(seed=scenario.seed, turns=turns, name=GENERATED, **GENERATED_OPTIONS)
    return _prefix(bundled, workload.history_bytes)


def _filler(header: str, line: str, chars: int) -> str:
    """Deterministic filler of at least ``chars`` characters."""
    parts = [header]
    size = len(header)
    index = 0
    while size < chars:
        index += 1
        text = line.format(index=index)
        parts.append(text)
        size += len(text)
    return "".join(parts)


def _output_chars(msg: Message) -> int:
    return len(msg.content) + sum(len(c.name) + len(c.arguments or "") for c in msg.tool_calls)


def shape_transcript(transcript: Transcript, scenario: Scenario) -> Transcript:
    """The transcript as the scenario's workload shapes it (the same transcript when nothing changes).

    ``system_prompt_bytes`` pads the leading system message (inserted when absent)
    until its UTF-8 content is that large; ``reply_tokens`` pads every assistant
    reply with text until its output is about that many tokens; ``plant_text`` goes at
    the head of the last message before the ``plant_turn``-th reply (1-based), on a line
    of its own. A ``plant_turn`` the transcript does not reach is a :class:`ReplayError` (fit the
    scenario to the transcript first, as :func:`simulator.replay.replay` does).
    """
    workload = scenario.workload
    messages = list(transcript.messages)
    changed = False
    if workload.plant_text:
        index = _plant_index(messages, workload.plant_turn or 1, scenario.name)
        planted = messages[index]
        messages[index] = planted.with_content(workload.plant_text + PLANT_SEPARATOR + planted.content)
        changed = True
    if workload.system_prompt_bytes:
        has_system = bool(messages) and messages[0].role == "system"
        system = messages[0] if has_system else Message.system("You are a helpful agent.")
        missing = workload.system_prompt_bytes - len(system.content.encode("utf-8"))
        if missing > 0:
            padded = system.content + _filler(SYSTEM_FILLER_HEADER, SYSTEM_FILLER_LINE, missing)
            system = system.replace(content=padded, system_parts=())
        if has_system:
            messages[0] = system
        else:
            messages.insert(0, system)
        changed = True
    if workload.reply_tokens:
        target = workload.reply_tokens * CHARS_PER_TOKEN
        for index, msg in enumerate(messages):
            missing = target - _output_chars(msg)
            if msg.role == "assistant" and missing > 0:
                filler = _filler(REPLY_FILLER_HEADER, REPLY_FILLER_LINE, missing)
                messages[index] = msg.with_content(msg.content + filler)
                changed = True
    if not changed:
        return transcript
    offset = len(messages) - len(transcript.messages)
    facts = tuple(dataclasses.replace(f, message_index=f.message_index + offset) for f in transcript.facts)
    return dataclasses.replace(transcript, messages=tuple(messages), facts=facts)


def _plant_index(messages: Sequence[Message], turn: int, scenario: str) -> int:
    """The index of the newest message fed before the ``turn``-th reply (as :func:`split_turns` counts)."""
    turns, _ = split_turns(messages)
    if turn > len(turns):
        raise ReplayError(
            f"scenario {scenario!r}: [workload] plant_turn {turn} is beyond the transcript's "
            f"{len(turns)} turns"
        )
    newest = turns[turn - 1].inputs[-1]
    return max(i for i, msg in enumerate(messages) if msg is newest)


def _speaks(msg: Message) -> bool:
    return bool(msg.content or msg.tool_calls)


def split_turns(messages: Sequence[Message]) -> tuple[list[Turn], tuple[Message, ...]]:
    """The turns of a conversation and the messages after its last reply.

    A turn's ``inputs`` are the messages fed since the previous turn; its ``reply``
    is the assistant message the session must produce. Assistant messages that
    directly follow a reply are its ``followers`` (fed, not requested); leading
    assistant messages are inputs; empty assistant messages are skipped.
    """
    turns: list[Turn] = []
    pending: list[Message] = []
    for msg in messages:
        if msg.role != "assistant":
            pending.append(msg)
            continue
        if not _speaks(msg):
            continue
        if not any(m.role != "system" for m in pending) and not turns:
            pending.append(msg)
        elif not pending and turns:
            last = turns[-1]
            turns[-1] = dataclasses.replace(last, followers=(*last.followers, msg))
        else:
            turns.append(Turn(tuple(pending), msg))
            pending = []
    return turns, tuple(pending)
