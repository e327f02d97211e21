"""Floor shrinkers: keep the non-compactable base small (SPEC §3.5).

The system prompt is never compacted, so whatever is injected into it must
stay small. Three tools:

- :func:`tool_catalog_index` — a system-prompt index of tool definitions, one
  line per tool (``- name: first sentence``) plus a line telling the model
  that full schemas come on demand through the *caller's* ``describe_tool``
  tool (:func:`describe_tool` renders its answer).
- :class:`SkillInjector` — per-run state that wraps knowledge blocks
  ("skills") in ``<skill name="...">…</skill>`` envelopes within a per-turn
  budget (``CHATCLI_SKILL_INJECT_BUDGET``, 24 000 chars) and a run cap of
  2× that budget.
- :func:`age_skill_blocks` — a pure pass: an injected block whose message is
  ``age_turns`` (``CHATCLI_SKILL_AGE_TURNS``, 6) or more assistant messages
  old becomes an archived stub with a recall marker.

>>> from ctxrecover.archive import MemoryArchive
>>> from ctxrecover.messages import Message
>>> block = SkillBlock("git", "Always rebase. " * 100)
>>> h = [Message.system("base"), Message.user(block.envelope)] + [Message.assistant("ok")] * 6
>>> out, report = age_skill_blocks(h, archive=MemoryArchive())
>>> report.notice
'skill aging: 1 block(s) archived, 1.4 KB freed (recoverable via @recall)'
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ctxrecover.archive import Archive, MemoryArchive, extract_keys, marker
from ctxrecover.errors import ConfigError
from ctxrecover.messages import Message
from ctxrecover.passes.history_index import PositionWatch, TurnState
from ctxrecover.passes.microcompact import message_ages
from ctxrecover.passes.truncate import leading_system_count, truncate_head_tail
from ctxrecover.sizes import format_payload_size, weight

__all__ = [
    "AGING_NOTICE_TEXT",
    "CATALOG_FOOTER_TEXT",
    "DEFAULT_DESCRIPTION_CHARS",
    "DEFAULT_SKILL_AGE_TURNS",
    "DEFAULT_SKILL_BUDGET_MULTIPLE",
    "DEFAULT_SKILL_INJECT_BUDGET",
    "InjectionResult",
    "RUN_CAP_REASON_TEXT",
    "SKILL_BLOCK_RE",
    "SKILL_CUT_TEXT",
    "SKILL_ENVELOPE_TEXT",
    "SKILL_STUB_TEXT",
    "SkillAgingReport",
    "SkillBlock",
    "SkillInjector",
    "TOO_LARGE_REASON_TEXT",
    "UNKNOWN_TOOL_TEXT",
    "age_skill_blocks",
    "age_skills_step",
    "describe_tool",
    "one_line_description",
    "tool_catalog_index",
]

DEFAULT_SKILL_INJECT_BUDGET = 24_000  # CHATCLI_SKILL_INJECT_BUDGET; 0 = unlimited (no run cap either)
DEFAULT_SKILL_BUDGET_MULTIPLE = 2  # the run cap is this many per-turn budgets
DEFAULT_SKILL_AGE_TURNS = 6  # CHATCLI_SKILL_AGE_TURNS
DEFAULT_DESCRIPTION_CHARS = 120
DEFAULT_DESCRIBE_TOOL = "describe_tool"

CATALOG_LINE_TEXT = "- {name}: {description}"
CATALOG_BARE_LINE_TEXT = "- {name}"
CATALOG_FOOTER_TEXT = (
    'Full parameter schemas are available on demand: call {tool} with {{"name": "<tool name>"}} '
    "to get a tool's complete definition before using it."
)
UNKNOWN_TOOL_TEXT = 'unknown tool "{name}" — known tools: {known}'
ELLIPSIS = "…"
# A period after one of these does not end the first sentence.
ABBREVIATIONS: tuple[str, ...] = ("e.g.", "i.e.", "etc.", "vs.", "cf.", "approx.", "incl.")

# Where tool shapes keep their fields (first match wins).
TOOL_WRAPPER_KEYS: tuple[str, ...] = ("function", "toolSpec")  # OpenAI chat, Bedrock Converse
TOOL_LIST_KEYS: tuple[str, ...] = ("functionDeclarations", "function_declarations")  # Gemini
TOOL_SCHEMA_KEYS: tuple[str, ...] = ("parameters", "input_schema", "inputSchema")

SKILL_ENVELOPE_TEXT = '<skill name="{name}">\n{body}\n</skill>'
SKILL_STUB_TEXT = (
    '<skill name="{name}" archived>[skill body archived — recoverable via @recall {markers}]</skill>'
)
SKILL_CUT_TEXT = (
    "\n\n... [%d chars of this skill omitted — full body recoverable via @recall {marker}] ...\n\n"
)
SKILL_JOINER = "\n\n"
SKILL_CUT_HEAD_RATIO = 0.8  # a skill's overview and rules sit at the top
MIN_CUT_KEPT_CHARS = 400  # below this a cut skill is useless: defer or refuse it instead
SKILL_CLOSE_TAG = "</skill>"
FORBIDDEN_NAME_CHARS = frozenset('"<>\n\r')

RUN_CAP_REASON_TEXT = (
    "skill injection refused for {count} block(s): the run cap of {cap} "
    "({multiple:g}× the {budget} per-turn budget) is spent"
)
TOO_LARGE_REASON_TEXT = (
    "skill injection refused for {count} block(s): too large for the {budget} per-turn budget, "
    "even as a preview"
)
AGING_NOTICE_TEXT = "skill aging: %d block(s) archived, %s freed (recoverable via @recall)"

# A live (not yet archived) envelope; the body is group 2, exactly as injected.
SKILL_BLOCK_RE = re.compile(r'<skill name="([^"<>\n\r]*)">\n?(.*?)\n?</skill>', re.DOTALL)
_SENTENCE_END_RE = re.compile(r"[.!?](?= |$)")
_PARAGRAPH_BREAK_RE = re.compile(r"\n[ \t]*\n")


# -- tool catalogue -------------------------------------------------------


def one_line_description(text: str | None, limit: int = DEFAULT_DESCRIPTION_CHARS) -> str:
    """The first sentence of ``text`` on one line, at most ``limit`` chars.

    The first paragraph is taken, whitespace collapsed, and cut after the
    first ``.``/``!``/``?`` followed by a space (not after ``e.g.``-style
    abbreviations). Longer than ``limit``, it is cut at a word boundary and
    ends with ``…``.
    """
    if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
        raise ConfigError(f"one_line_description needs limit >= 1 (chars), got {limit!r}")
    if not text:
        return ""
    paragraph = _PARAGRAPH_BREAK_RE.split(text.strip(), maxsplit=1)[0]
    line = " ".join(paragraph.split())
    for end in _SENTENCE_END_RE.finditer(line):
        last_word = line[: end.end()].rsplit(" ", 1)[-1].lower()
        if last_word not in ABBREVIATIONS:
            line = line[: end.end()]
            break
    if len(line) <= limit:
        return line
    cut = line[: limit - len(ELLIPSIS)]
    space = cut.rfind(" ")
    if line[len(cut)] != " " and space > len(cut) // 2:  # do not end inside a word
        cut = cut[:space]
    return cut.rstrip(" ,;:-") + ELLIPSIS


@dataclass(frozen=True, slots=True)
class _ToolEntry:
    name: str
    description: str
    schema: Any


def _field(tool: object, key: str) -> Any:
    if isinstance(tool, Mapping):
        return tool.get(key)
    return getattr(tool, key, None)


def _entries(tool: object, where: str) -> Iterable[_ToolEntry]:
    for key in TOOL_LIST_KEYS:
        declarations = _field(tool, key)
        if isinstance(declarations, Sequence) and not isinstance(declarations, str):
            for n, declaration in enumerate(declarations):
                yield from _entries(declaration, f"{where}.{key}[{n}]")
            return
    for key in TOOL_WRAPPER_KEYS:
        inner = _field(tool, key)
        if isinstance(inner, Mapping):
            tool, where = inner, f"{where}.{key}"
            break
    name = _field(tool, "name")
    if not name and _field(tool, "type") != "function":
        name = _field(tool, "type")  # a hosted tool such as {"type": "web_search"}
    if not isinstance(name, str) or not name.strip():
        raise ConfigError(
            f"{where} has no tool name; expected an OpenAI definition "
            '{"type": "function", "function": {"name": ...}}, an Anthropic one {"name": ..., '
            '"input_schema": ...}, or an object with a .name attribute'
        )
    description = _field(tool, "description")
    schema = next((s for key in TOOL_SCHEMA_KEYS if (s := _field(tool, key)) is not None), None)
    yield _ToolEntry(" ".join(name.split()), description if isinstance(description, str) else "", schema)


def _tool_entries(tools: Iterable[object]) -> list[_ToolEntry]:
    entries: list[_ToolEntry] = []
    seen: set[str] = set()
    for n, tool in enumerate(tools):
        for entry in _entries(tool, f"tools[{n}]"):
            if entry.name in seen:
                raise ConfigError(
                    f"tools[{n}]: duplicate tool name {entry.name!r}; providers reject duplicate "
                    "names — prefix tools with their server name"
                )
            seen.add(entry.name)
            entries.append(entry)
    return entries


def tool_catalog_index(
    tools: Iterable[object],
    *,
    describe_tool_name: str = DEFAULT_DESCRIBE_TOOL,
    description_chars: int = DEFAULT_DESCRIPTION_CHARS,
) -> str:
    """A compact system-prompt index of tool definitions: one line per tool, then a footer.

    Accepts OpenAI (``{"type": "function", "function": {...}}``), Anthropic
    / OpenAI Responses / MCP (``{"name", "description", ...}``), Bedrock
    (``{"toolSpec": {...}}``), Gemini (``{"functionDeclarations": [...]}``)
    and objects with ``name``/``description`` attributes. The footer tells
    the model to call ``describe_tool_name`` — a tool the *caller* provides,
    answered with :func:`describe_tool`. No tools give ``""``.

    >>> tool_catalog_index([{"name": "ls", "description": "List files. Hidden ones too."}]).splitlines()[0]
    '- ls: List files.'
    """
    if not isinstance(describe_tool_name, str) or not describe_tool_name.strip():
        raise ConfigError("tool_catalog_index needs describe_tool_name: the name of your schema-lookup tool")
    lines = []
    for entry in _tool_entries(tools):
        description = one_line_description(entry.description, description_chars)
        template = CATALOG_LINE_TEXT if description else CATALOG_BARE_LINE_TEXT
        lines.append(template.format(name=entry.name, description=description))
    if not lines:
        return ""
    lines.append(CATALOG_FOOTER_TEXT.format(tool=describe_tool_name))
    return "\n".join(lines)


def describe_tool(tools: Iterable[object], name: str) -> str:
    """The answer to the model's on-demand schema lookup: the full definition of tool ``name`` as JSON.

    The JSON has ``name``, ``description`` and ``parameters`` (the schema in
    whichever shape the definition used). An unknown name gives a line that
    lists the known tools, never an exception.
    """
    entries = _tool_entries(tools)
    for entry in entries:
        if entry.name == name.strip():
            definition = {"name": entry.name, "description": entry.description, "parameters": entry.schema}
            return json.dumps(definition, ensure_ascii=False, default=str)
    return UNKNOWN_TOOL_TEXT.format(name=name, known=", ".join(e.name for e in entries) or "(none)")


# -- skill injection ------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SkillBlock:
    """One knowledge block to inject: a ``name`` and its ``body`` text.

    The name must fit the envelope's attribute (no ``"``, ``<``, ``>`` or
    line breaks) and the body must not contain ``</skill>``, or the aging
    pass could not find where the block ends.
    """

    name: str
    body: str

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name or FORBIDDEN_NAME_CHARS & set(self.name):
            raise ConfigError(
                f"SkillBlock.name must be a non-empty one-line name without quotes or angle brackets, "
                f"got {self.name!r}"
            )
        if not isinstance(self.body, str):
            raise ConfigError(f"SkillBlock {self.name!r}: body must be str, got {type(self.body).__name__}")
        if SKILL_CLOSE_TAG in self.body:
            raise ConfigError(
                f"SkillBlock {self.name!r}: the body contains {SKILL_CLOSE_TAG!r}, which would end its "
                "envelope early — escape or remove it in the skill's source"
            )

    @property
    def envelope(self) -> str:
        """The injected text: ``<skill name="NAME">\\nBODY\\n</skill>``."""
        return SKILL_ENVELOPE_TEXT.format(name=self.name, body=self.body)


@dataclass(frozen=True, slots=True)
class InjectionResult:
    """What one :meth:`SkillInjector.inject` call produced.

    ``text`` is the envelopes to inject, joined by blank lines, ``chars`` its
    length. ``injected`` names every injected block, ``cut`` the subset
    injected as a head/tail preview (full body archived); ``deferred`` holds
    the blocks to offer again next turn; ``refused`` names blocks turned
    away because the run cap is spent, and ``reason`` says so.
    """

    text: str = ""
    injected: tuple[str, ...] = ()
    deferred: tuple[SkillBlock, ...] = ()
    chars: int = 0
    cut: tuple[str, ...] = ()
    refused: tuple[str, ...] = ()
    reason: str | None = None


def _positive_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and value > 0


class SkillInjector:
    """Per-run skill injection within a per-turn budget and a run cap (SPEC §3.5).

    Call :meth:`inject` once per turn with that turn's blocks, in priority
    order. For each block:

    - it fits the room left (this turn's budget and the run cap) → injected whole;
    - it could never fit whole (longer than the budget or the run's remaining
      cap) and at least :data:`MIN_CUT_KEPT_CHARS` of it fit → injected as a
      head/tail preview; the full body is archived first and the preview
      carries its ``<<ccr:KEY>>`` marker;
    - no later turn could take it, whole or cut (the run cap is nearly spent,
      or the budget is too small even for a preview) → refused, with ``reason``;
    - otherwise → deferred: a later turn takes it whole (a whole skill beats
      a cut one) or, when this turn's room is too small, as a preview.

    Later, smaller blocks still fill the room a deferred one left.
    ``budget_chars=0`` means unlimited (no per-turn budget and no run cap),
    as ``CHATCLI_SKILL_INJECT_BUDGET=0`` does. One instance per run; the
    caller decides which skills to offer (a skill offered twice costs twice).

    >>> injector = SkillInjector(budget_chars=1_000)
    >>> result = injector.inject([SkillBlock("a", "x" * 600), SkillBlock("b", "y" * 600)])
    >>> result.injected, [b.name for b in result.deferred], result.chars <= 1_000
    (('a',), ['b'], True)
    """

    def __init__(
        self,
        budget_chars: int = DEFAULT_SKILL_INJECT_BUDGET,
        max_budget_multiple: float = DEFAULT_SKILL_BUDGET_MULTIPLE,
        *,
        archive: Archive | None = None,
    ) -> None:
        if not isinstance(budget_chars, int) or isinstance(budget_chars, bool) or budget_chars < 0:
            raise ConfigError(
                f"SkillInjector needs budget_chars >= 0 (chars per turn; 0 = unlimited), got {budget_chars!r}"
            )
        if not _positive_number(max_budget_multiple):
            raise ConfigError(
                f"SkillInjector needs max_budget_multiple > 0 (the run cap in per-turn budgets), "
                f"got {max_budget_multiple!r}"
            )
        self.budget_chars = budget_chars
        self.max_budget_multiple = max_budget_multiple
        self.archive: Archive = archive if archive is not None else MemoryArchive()
        self._used = 0

    @property
    def run_cap(self) -> int | None:
        """Chars the whole run may inject (``None`` when unlimited)."""
        return int(self.budget_chars * self.max_budget_multiple) if self.budget_chars else None

    @property
    def used_chars(self) -> int:
        """Chars injected so far in this run."""
        return self._used

    @property
    def remaining_chars(self) -> int | None:
        """Chars the run may still inject (``None`` when unlimited)."""
        cap = self.run_cap
        return None if cap is None else max(0, cap - self._used)

    @staticmethod
    def _can_cut(block: SkillBlock, room: int) -> bool:
        """True when a preview of ``block`` keeping at least :data:`MIN_CUT_KEPT_CHARS` fits ``room``."""
        overhead = len(SKILL_ENVELOPE_TEXT.format(name=block.name, body=""))
        widest_separator = SKILL_CUT_TEXT.format(marker=marker("0" * 16)).replace("%d", str(len(block.body)))
        return room - overhead - len(widest_separator) >= MIN_CUT_KEPT_CHARS

    def _cut(self, block: SkillBlock, room: int) -> str | None:
        """``block``'s envelope cut to ``room`` chars (body archived first), or None when too little fits."""
        if not self._can_cut(block, room):
            return None
        key = self.archive.put(block.body)
        separator = SKILL_CUT_TEXT.format(marker=marker(key))
        body_room = room - len(SKILL_ENVELOPE_TEXT.format(name=block.name, body=""))
        body = truncate_head_tail(block.body, body_room, head_ratio=SKILL_CUT_HEAD_RATIO, separator=separator)
        return SKILL_ENVELOPE_TEXT.format(name=block.name, body=body)

    def inject(self, blocks: Sequence[SkillBlock]) -> InjectionResult:
        """This turn's injection: envelopes within the per-turn budget and the run cap."""
        pieces: list[str] = []
        injected: list[str] = []
        cut: list[str] = []
        deferred: list[SkillBlock] = []
        refused: list[str] = []
        refused_by_cap = 0
        used = 0
        for block in blocks:
            if not isinstance(block, SkillBlock):
                raise ConfigError(f"SkillInjector.inject takes SkillBlock values, got {type(block).__name__}")
            joiner = len(SKILL_JOINER) if pieces else 0
            envelope = block.envelope
            run_room = self.remaining_chars
            if run_room is None:
                pieces.append(envelope)
                injected.append(block.name)
                continue
            run_room -= used
            turn_room = self.budget_chars - used
            room = min(turn_room, run_room) - joiner
            fits_later = len(envelope) <= min(self.budget_chars, run_room)
            piece: str | None = None
            if len(envelope) <= room:
                piece = envelope
            elif not fits_later:
                piece = self._cut(block, room)
                if piece is not None:
                    cut.append(block.name)
            if piece is not None:
                pieces.append(piece)
                injected.append(block.name)
                used += joiner + len(piece)
            elif not fits_later and (
                run_room <= turn_room or not self._can_cut(block, min(self.budget_chars, run_room))
            ):  # no later turn can take it, whole or cut
                refused.append(block.name)
                refused_by_cap += run_room < self.budget_chars
            else:
                deferred.append(block)
        text = SKILL_JOINER.join(pieces)
        self._used += len(text)
        reasons = []
        if refused_by_cap:
            reasons.append(
                RUN_CAP_REASON_TEXT.format(
                    count=refused_by_cap,
                    cap=format_payload_size(self.run_cap or 0),
                    multiple=self.max_budget_multiple,
                    budget=format_payload_size(self.budget_chars),
                )
            )
        if len(refused) > refused_by_cap:
            reasons.append(
                TOO_LARGE_REASON_TEXT.format(
                    count=len(refused) - refused_by_cap, budget=format_payload_size(self.budget_chars)
                )
            )
        return InjectionResult(
            text=text,
            injected=tuple(injected),
            deferred=tuple(deferred),
            chars=len(text),
            cut=tuple(cut),
            refused=tuple(refused),
            reason="; ".join(reasons) or None,
        )


# -- skill aging ----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SkillAgingReport:
    """What :func:`age_skill_blocks` did: blocks archived, chars freed, names of the archived skills."""

    blocks_archived: int = 0
    chars_freed: int = 0
    skills: tuple[str, ...] = ()

    @property
    def changed(self) -> bool:
        """True when any block was archived."""
        return bool(self.blocks_archived)

    @property
    def notice(self) -> str:
        """The status line ``skill aging: %d block(s) archived, %s freed (recoverable via @recall)``."""
        return AGING_NOTICE_TEXT % (self.blocks_archived, format_payload_size(self.chars_freed))


def _age_text(text: str, archive: Archive) -> tuple[str, list[str]]:
    """``text`` with every live envelope stubbed (bodies archived first), and the archived skills' names."""
    names: list[str] = []

    def stub(match: re.Match[str]) -> str:
        name, body = match.group(1), match.group(2)
        keys = [archive.put(body), *extract_keys(body)]
        markers = " ".join(marker(key) for key in dict.fromkeys(keys))
        replacement = SKILL_STUB_TEXT.format(name=name, markers=markers)
        if len(replacement) >= len(match.group(0)):
            return match.group(0)  # a stub would not be smaller: keep the block
        names.append(name)
        return replacement

    if "<skill name=" not in text:
        return text, names
    return SKILL_BLOCK_RE.sub(stub, text), names


def _aged(msg: Message, archive: Archive) -> tuple[Message, list[str]] | None:
    """``msg`` with its live skill blocks archived and the names of those it shows, or None (unchanged)."""
    if "<skill name=" not in msg.content and not any("<skill name=" in p for p in msg.system_parts):
        return None
    content, content_skills = _age_text(msg.content, archive)
    aged_parts = [_age_text(part, archive) for part in msg.system_parts]
    parts = tuple(part for part, _ in aged_parts)
    if content == msg.content and parts == msg.system_parts:
        return None
    # system_parts, when present, are what goes on the wire: count their blocks.
    visible_skills = [n for _, names in aged_parts for n in names] if parts else content_skills
    return msg.replace(content=content, system_parts=parts), visible_skills


def _check_age_turns(age_turns: object) -> None:
    if not isinstance(age_turns, int) or isinstance(age_turns, bool) or age_turns < 1:
        raise ConfigError(f"age_skill_blocks needs age_turns >= 1 (assistant messages), got {age_turns!r}")


def age_skill_blocks(
    history: list[Message],
    *,
    archive: Archive,
    age_turns: int = DEFAULT_SKILL_AGE_TURNS,
) -> tuple[list[Message], SkillAgingReport]:
    """Archive injected skill blocks that are ``age_turns`` or more assistant messages old (SPEC §3.5).

    Candidates are ``user`` and ``system`` messages after the leading system
    prefix (the floor, never touched); ``preserve_verbatim`` messages are
    skipped. Each live ``<skill name="...">…</skill>`` block becomes
    :data:`SKILL_STUB_TEXT`, its body archived first (markers the body
    carried are repeated in the stub); a block smaller than its stub is
    kept. Structured ``system_parts`` are aged like the content. Idempotent;
    the input is never mutated and is returned itself when nothing ages.
    """
    _check_age_turns(age_turns)
    ages = message_ages(history)
    aged = {
        i: found
        for i in range(leading_system_count(history), len(history))
        if ages[i] >= age_turns
        and history[i].role in ("user", "system")
        and not history[i].preserve_verbatim
        and (found := _aged(history[i], archive)) is not None
    }
    return _applied(history, aged)


def _applied(
    history: list[Message], aged: dict[int, tuple[Message, list[str]]]
) -> tuple[list[Message], SkillAgingReport]:
    if not aged:
        return history, SkillAgingReport()
    out = list(history)
    skills: list[str] = []
    freed = 0
    for i, (msg, names) in aged.items():
        skills += names
        freed += weight(history[i]) - weight(msg)
        out[i] = msg
    return out, SkillAgingReport(blocks_archived=len(skills), chars_freed=freed, skills=tuple(skills))


# -- the incremental pass ------------------------------------------------------------------------
SKILLS_LISTENER = "skills"


def _holds_live_skill(msg: Message) -> bool:
    """A user or system message holding a skill block skill aging may still archive."""
    return (
        msg.role in ("user", "system")
        and not msg.preserve_verbatim
        and any(
            "<skill name=" in text and SKILL_BLOCK_RE.search(text)
            for text in (msg.content, *msg.system_parts)
        )
    )


def age_skills_step(
    history: list[Message],
    state: TurnState,
    *,
    archive: Archive,
    age_turns: int = DEFAULT_SKILL_AGE_TURNS,
) -> tuple[list[Message], SkillAgingReport, TurnState]:
    """:func:`age_skill_blocks` at the cost of what changed: the same history and report, and the
    successor of ``state``. Only messages that still hold a live skill block are looked at."""
    _check_age_turns(age_turns)
    index = state.begin(history)
    watch = index.listener(SKILLS_LISTENER, None, lambda: PositionWatch(_holds_live_skill))
    aged: dict[int, tuple[Message, list[str]]] = {}
    for i in sorted(watch.positions):
        if i >= index.leading and index.age(i) >= age_turns:
            found = _aged(index.messages[i], archive)
            if found is not None:
                aged[i] = found
    out, report = _applied(history, aged)
    for i, (msg, _) in aged.items():
        index.replace(i, msg)
    return out, report, state.successor()
