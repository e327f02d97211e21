"""Seeded synthetic agent sessions: realistic shapes, tagged facts, byte-identical per seed.

A session is a system prompt and ``turns`` user turns. In a tool turn the
assistant works in steps (one or several parallel tool calls each), then
answers at length. A replay counts *assistant replies* instead (one request, one
``session.complete()`` each, :func:`~simulator.workloads.split_turns`): one user turn is
several of them, so ``replies=`` asks for a session of exactly that many replay turns
(what ``ctxsim generate --turns`` writes). Along the way the generator plants what the
compaction passes and retention probes need:

- big file reads in the numbered format the dedup pass parses, and repeated
  reads of the same file (same, wider or narrower range);
- ``agent_feedback`` user messages (hook/linter output) and ``@recall``
  results (``preserve_verbatim`` user messages holding an earlier result);
- screenshots (real PNGs, built with zlib and struct: flat colour bands, small; with
  ``image_detail`` part of each row is pixel detail that does not compress, so they
  weigh what real screenshots weigh);
- :class:`~simulator.transcripts.loaders.Fact` values: unique paths, ticket ids,
  error strings, identifiers and decisions, each recorded with the index of
  the message whose content holds it.

File-read results (``read_file`` with arguments ``{"path"}`` or
``{"path", "start_line", "end_line"}``) are one header line then numbered
lines, numbered from ``start_line`` for a ranged read::

    <<< FILE: src/billing/invoice_sync.py >>>
         1\timport os
         2\tfrom billing.models import Invoice

that is ``FILE_HEADER.format(path=...)`` and ``NUMBERED_LINE.format(lineno=..., text=...)``.

Randomness comes only from ``random.Random(seed)`` and ``Faker().seed_instance(seed)``;
the same seed gives byte-identical JSONL with the same Faker version (commit
generated fixtures, Faker output changes between versions).

>>> t = generate_session(seed=7, turns=3)
>>> t == generate_session(seed=7, turns=3)
True
"""

from __future__ import annotations

import base64
import dataclasses
import json
import random
import struct
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ctxrecover.archive import archive_key, marker
from ctxrecover.messages import Image, Message, ToolCall
from simulator.transcripts.loaders import Fact, Transcript, write_jsonl

__all__ = [
    "FACT_KINDS",
    "FILE_HEADER",
    "NUMBERED_LINE",
    "generate_session",
    "generate_to_file",
    "make_png",
    "numbered_read",
]


# The generator name recorded in a transcript's metadata. The committed fixtures were made when
# the generator was the module simulator.generate; the label stays so they regenerate byte for byte.
GENERATOR_LABEL = "simulator.generate"
FILE_HEADER = "<<< FILE: {path} >>>"
NUMBERED_LINE = "{lineno:>6}\t{text}"
FACT_KINDS: tuple[str, ...] = ("decision", "error", "identifier", "path", "policy", "ticket")
DEFAULT_OPTIONS: dict[str, Any] = {
    "system_prompt_chars": 3_000,
    "tool_turn_ratio": 0.75,
    "steps_per_turn": (1, 4),
    "max_parallel_calls": 3,
    "parallel_ratio": 0.35,
    "big_read_chars": 12_000,
    "reread_ratio": 0.35,
    "small_result_chars": 600,
    "answer_chars": 1_500,
    "image_every": 0,
    "recall_every": 6,
    "feedback_every": 4,
}
TOOL_DESCRIPTIONS: dict[str, str] = {
    "read_file": "read a file (optionally start_line..end_line); returns numbered lines",
    "run_command": "run a shell command in the repository and return its output",
    "search": "search the repository for a regular expression",
    "list_dir": "list the files under a directory",
    "write_file": "replace a file with new content",
}
TOOL_WEIGHTS: dict[str, int] = {
    "read_file": 45,
    "run_command": 25,
    "search": 15,
    "list_dir": 5,
    "write_file": 10,
}
FILE_KINDS: tuple[tuple[str, int], ...] = ((".py", 6), (".ts", 2), (".md", 2))
COMMANDS: tuple[str, ...] = (
    "pytest {test} -q",
    "git status --short",
    "git diff --stat",
    "make lint",
    "python -m mypy {dir}",
    "npm test -- {dir}",
)
STEP_OPENERS: tuple[str, ...] = (
    "Let me look at the relevant code first.",
    "I'll check how this is wired before changing anything.",
    "Reading the files involved in parallel.",
    "Running the checks to see where we stand.",
    "I need more context on this module.",
)
FEEDBACK_HEADER = "Stop hook feedback:\n[hooks/stop.sh]: quality gate found {count} issue(s)\n"
RECALL_REQUEST = "That earlier output was cleared from my context; recalling it: @recall {marker}"
REASONING_TEMPLATE = "<reasoning>{text}</reasoning>\n\n"
SCREENSHOT_SIZES: tuple[tuple[int, int], ...] = ((320, 200), (640, 360), (800, 600))
# Full-screen captures (large_screenshots): what a real desktop or laptop screen sends.
LARGE_SCREENSHOT_SIZES: tuple[tuple[int, int], ...] = ((1366, 768), (1920, 1080), (2560, 1440))
# Token-dense text (dense_text): prose in these Faker locales, emoji, base64 payloads, minified code.
DENSE_LOCALES: tuple[str, ...] = ("zh_CN", "ja_JP")  # Faker locales whose prose is CJK (ko_KR's is Latin)
EMOJI: tuple[str, ...] = ("✅", "🚀", "🔥", "⚠️", "🐛", "📦", "🎉", "❌", "👀", "💡")
BASE64_COMMAND = "base64 -w0 {path}"
BASE64_BYTES = (1_500, 6_000)  # raw bytes of a base64 payload printed by a tool
MINIFIED_SUFFIX = ".min.js"
MINIFIED_LINE_CHARS = 2_000
CODE_TEMPLATES: tuple[str, ...] = (
    "import {a}",
    "from {a}.{b} import {c}",
    "",
    "class {A}{B}:",
    '    """{A} {b} {c}."""',
    "    def {a}_{b}(self, {c}):",
    "        {a} = self.{b}({c})",
    "        if {a} is None:",
    '            raise ValueError("{a} {b} {c}")',
    "        return {a}",
    "def {a}_{b}({c}, {d}):",
    "    # {A} {b} {c} {d}",
    "    {a}.{b} = {c}",
    "    for {a} in {b}:",
    "        yield {a}, {c}",
)
RECALL_MIN_CHARS = 2_000  # only big results are worth recalling
FEEDBACK_LINE_CHARS = 60
MIN_FILE_LINES = 12
APPROX_LINE_CHARS = 34


def generate_session(
    *,
    seed: int,
    turns: int | None = None,
    replies: int | None = None,
    name: str | None = None,
    system_prompt_chars: int = DEFAULT_OPTIONS["system_prompt_chars"],
    tool_turn_ratio: float = DEFAULT_OPTIONS["tool_turn_ratio"],
    steps_per_turn: tuple[int, int] = DEFAULT_OPTIONS["steps_per_turn"],
    max_parallel_calls: int = DEFAULT_OPTIONS["max_parallel_calls"],
    parallel_ratio: float = DEFAULT_OPTIONS["parallel_ratio"],
    big_read_chars: int = DEFAULT_OPTIONS["big_read_chars"],
    reread_ratio: float = DEFAULT_OPTIONS["reread_ratio"],
    small_result_chars: int = DEFAULT_OPTIONS["small_result_chars"],
    answer_chars: int = DEFAULT_OPTIONS["answer_chars"],
    image_every: int = DEFAULT_OPTIONS["image_every"],
    recall_every: int = DEFAULT_OPTIONS["recall_every"],
    feedback_every: int = DEFAULT_OPTIONS["feedback_every"],
    image_detail: float = 0.0,
    dense_text: float = 0.0,
    large_screenshots: bool = False,
) -> Transcript:
    """A synthetic agent session; the same arguments give an equal transcript.

    Give ``turns`` (user turns: a task or hook feedback, the assistant's tool steps, its
    answer) or ``replies`` (assistant replies, what a replay calls turns: the session
    ends after exactly that many, its last user turn cut short of tool steps if need be).
    ``tool_turn_ratio`` is the share of turns where the assistant uses tools
    (0 = chat only); each tool turn has ``steps_per_turn`` (min, max) steps, a
    step being parallel (2..``max_parallel_calls`` calls) with probability
    ``parallel_ratio``. A first read of a file is about ``big_read_chars``;
    ``reread_ratio`` of reads revisit a file. Every ``image_every``-th turn
    carries a screenshot, every ``recall_every``-th an ``@recall`` result and
    every ``feedback_every``-th starts with hook feedback (0 turns a feature off).
    ``image_detail`` is the share of each screenshot row drawn as pixel detail (see
    :func:`make_png`): 0 gives small PNGs of flat bands, about 0.1 PNGs as heavy as real
    screenshots of a UI (tens to hundreds of KB); ``large_screenshots`` captures whole
    screens (up to 2560 × 1440) instead of windows. ``dense_text`` is the share of texts
    written dense in tokens per char: prose in Chinese or Japanese with emoji,
    commands that print base64 payloads, reads of minified JavaScript.
    """
    options = {
        "system_prompt_chars": system_prompt_chars,
        "tool_turn_ratio": tool_turn_ratio,
        "steps_per_turn": tuple(steps_per_turn),
        "max_parallel_calls": max_parallel_calls,
        "parallel_ratio": parallel_ratio,
        "big_read_chars": big_read_chars,
        "reread_ratio": reread_ratio,
        "small_result_chars": small_result_chars,
        "answer_chars": answer_chars,
        "image_every": image_every,
        "recall_every": recall_every,
        "feedback_every": feedback_every,
    }
    # recorded only when used, so the sessions made before them regenerate byte for byte
    if image_detail:
        options["image_detail"] = image_detail
    if dense_text:
        options["dense_text"] = dense_text
    if large_screenshots:
        options["large_screenshots"] = True
    _validate(seed, turns, replies, options)
    builder = _SessionBuilder(seed, options)
    builder.system_prompt()
    if replies is None:
        for turn in range(1, (turns or 0) + 1):
            builder.turn(turn)
    else:
        turns = 0
        while builder.replies < replies:  # every user turn ends with at least its answer
            turns += 1
            builder.turn(turns, reply_budget=replies - builder.replies)
    from faker import VERSION as faker_version

    metadata: dict[str, Any] = {
        "generator": GENERATOR_LABEL,
        "seed": seed,
        "turns": turns,
        "options": {k: list(v) if isinstance(v, tuple) else v for k, v in options.items()},
        "faker_version": faker_version,
    }
    if replies is not None:  # recorded only when asked for: the committed fixtures regenerate byte for byte
        metadata["replies"] = replies
    default_name = f"synthetic-s{seed}-t{turns}" if replies is None else f"synthetic-s{seed}-r{replies}"
    return Transcript(
        name=name or default_name,
        source_path=None,
        format="synthetic",
        messages=tuple(builder.messages),
        facts=tuple(builder.facts),
        metadata=metadata,
    )


def generate_to_file(seed: int, turns: int | None, out_path: str | Path, **options: Any) -> Transcript:
    """Generate a session (``options`` as for :func:`generate_session`, e.g. ``replies=``) and write
    it as our JSONL."""
    transcript = generate_session(seed=seed, turns=turns, **options)
    write_jsonl(transcript, out_path)
    return dataclasses.replace(transcript, source_path=str(out_path), format="jsonl")


def numbered_read(path: str, lines: list[str], start_line: int = 1) -> str:
    """A file-read result: the ``<<< FILE: path >>>`` header, then ``lines`` numbered from ``start_line``."""
    body = [NUMBERED_LINE.format(lineno=n, text=text) for n, text in enumerate(lines, start=start_line)]
    return "\n".join([FILE_HEADER.format(path=path), *body])


def make_png(width: int, height: int, *, seed: int = 0, detail: float = 0.0) -> bytes:
    """A real, decodable RGB PNG of coloured bands (a stand-in screenshot).

    ``detail`` (0..1) is the share of each row drawn as random pixels at a random place
    (text, icons, photos on a flat background): they do not compress, so the PNG weighs
    about ``detail × width × height × 3`` bytes, as a real screenshot does. 0 draws none.
    """
    if width < 1 or height < 1:
        raise ValueError(f"make_png needs width and height >= 1, got {width}x{height}")
    if not 0.0 <= detail <= 1.0:
        raise ValueError(f"make_png detail is a share of each row: give a value in [0, 1], got {detail}")
    rng = random.Random(seed)
    bands = [bytes(rng.randrange(256) for _ in range(3)) for _ in range(rng.randint(3, 8))]
    band_height = max(1, height // len(bands))
    span = int(width * detail)
    rows = []
    for y in range(height):
        colour = bands[min(y // band_height, len(bands) - 1)]
        row = colour * width
        if span:
            start = 3 * rng.randrange(width - span + 1)
            row = row[:start] + rng.randbytes(3 * span) + row[start + 3 * span :]
        rows.append(b"\x00" + row)  # filter byte 0, then RGB pixels

    def chunk(tag: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)  # 8-bit RGB, no interlace
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(b"".join(rows), 9))
        + chunk(b"IEND", b"")
    )


def _validate(seed: int, turns: int | None, replies: int | None, options: dict[str, Any]) -> None:
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise ValueError(f"seed must be an int, got {seed!r}")
    if (turns is None) == (replies is None):
        raise ValueError(
            "give turns (user turns) or replies (assistant replies, what a replay calls turns), "
            f"not {'both' if turns is not None else 'neither'}"
        )
    if turns is not None and turns < 1:
        raise ValueError(f"turns must be >= 1 (a session needs at least one user turn), got {turns}")
    if replies is not None and replies < 1:
        raise ValueError(f"replies must be >= 1 (a replay needs at least one reply), got {replies}")
    for name in ("tool_turn_ratio", "parallel_ratio", "reread_ratio"):
        if not 0.0 <= options[name] <= 1.0:
            raise ValueError(f"{name} is a probability: give a value in [0, 1], got {options[name]}")
    low, high = options["steps_per_turn"]
    if not 1 <= low <= high:
        raise ValueError(f"steps_per_turn must be (min, max) with 1 <= min <= max, got {(low, high)}")
    if options["max_parallel_calls"] < 1:
        raise ValueError("max_parallel_calls must be >= 1 (1 means no parallel calls)")
    for name in ("system_prompt_chars", "big_read_chars", "small_result_chars", "answer_chars"):
        if options[name] < 1:
            raise ValueError(f"{name} must be >= 1, got {options[name]}")
    for name in ("image_every", "recall_every", "feedback_every"):
        if options[name] < 0:
            raise ValueError(f"{name} must be >= 0 (0 turns the feature off), got {options[name]}")
    detail = options.get("image_detail", 0.0)
    if not 0.0 <= detail <= 1.0:
        raise ValueError(f"image_detail is a share of each row: give a value in [0, 1], got {detail}")
    dense = options.get("dense_text", 0.0)
    if not 0.0 <= dense <= 1.0:
        raise ValueError(f"dense_text is a share of texts: give a value in [0, 1], got {dense}")


@dataclass(slots=True)
class _File:
    path: str
    lines: list[str]
    identifier: str | None = None  # planted value, recorded as a fact on its first read
    identifier_line: int = 0  # 1-based
    last_range: tuple[int, int] | None = None


class _SessionBuilder:
    """Appends messages and facts; all randomness from the seeded rng and Faker instance."""

    def __init__(self, seed: int, options: dict[str, Any]) -> None:
        from faker import Faker

        self.rng = random.Random(seed)
        self.fake = Faker()
        self.fake.seed_instance(seed)
        self.dense = float(options.get("dense_text", 0.0))
        self.dense_fake = Faker(list(DENSE_LOCALES)) if self.dense else None
        if self.dense_fake is not None:
            self.dense_fake.seed_instance(seed)
        self.opt = options
        self.messages: list[Message] = []
        self.replies = 0  # assistant messages so far: each is one replay turn
        self.facts: list[Fact] = []
        self.files: dict[str, _File] = {}
        self.used: set[str] = set()
        self.recallable: list[str] = []
        self.words = list(dict.fromkeys(w.lower() for w in self.fake.words(nb=600)))
        self.dirs = [self._unique(lambda: f"src/{self._word()}") for _ in range(6)]

    # -- small helpers ----------------------------------------------------
    def _word(self) -> str:
        return self.rng.choice(self.words)

    def _unique(self, make: Callable[[], str]) -> str:
        value = make()
        while value in self.used:
            value = make()
        self.used.add(value)
        return value

    def _fact(self, kind: str, value: str) -> None:
        """Record ``value`` as planted in the next message to be appended."""
        self.facts.append(Fact(kind, value, len(self.messages)))

    def _call_id(self) -> str:
        return f"call_{self.rng.getrandbits(96):024x}"

    def _dense(self) -> bool:
        """Whether the next text is written dense in tokens (drawn only when dense_text is on)."""
        return bool(self.dense) and self.rng.random() < self.dense

    def _prose(self, chars: int) -> str:
        paragraphs: list[str] = []
        total = 0
        dense = self._dense()
        while total < chars:
            paragraph = self.fake.paragraph(nb_sentences=self.rng.randint(3, 7))
            if dense and self.dense_fake is not None:
                paragraph = self.dense_fake.paragraph(nb_sentences=self.rng.randint(3, 7))
                paragraph += " " + "".join(self.rng.choices(EMOJI, k=self.rng.randint(1, 4)))
            paragraphs.append(paragraph)
            total += len(paragraph) + 2
        return "\n\n".join(paragraphs)

    def _phrase(self) -> str:
        return self.fake.sentence(nb_words=5).rstrip(".").lower()

    def _code_line(self) -> str:
        template = self.rng.choice(CODE_TEMPLATES)
        a, b, c, d = (self._word() for _ in range(4))
        return template.format(a=a, b=b, c=c, d=d, A=a.capitalize(), B=b.capitalize())

    # -- system prompt ----------------------------------------------------
    def system_prompt(self) -> None:
        policy = self._unique(lambda: f"POLICY-{self.rng.randint(1000, 9999)}")
        tools = "\n".join(f"- {name}: {text}" for name, text in TOOL_DESCRIPTIONS.items())
        head = (
            f"You are the coding agent of {self.fake.company()}. Work in small verified steps.\n\n"
            f"## Tools\n{tools}\n\n## Rules\n- {policy}: never push directly to the release branch.\n"
            "- Quote file paths exactly.\n\n## Project handbook\n"
        )
        budget = max(0, self.opt["system_prompt_chars"] - len(head))
        body = self._prose(budget)[:budget] if budget else ""
        self._fact("policy", policy)
        self.messages.append(Message.system(head + body))

    def _reply(self, msg: Message) -> None:
        self.messages.append(msg)
        self.replies += 1

    # -- one user turn ----------------------------------------------------
    def turn(self, turn: int, *, reply_budget: int | None = None) -> None:
        """One user turn; with ``reply_budget`` it adds at most that many assistant replies
        (fewer tool steps, no recall, when there is no room for them)."""
        opt = self.opt
        feedback = bool(opt["feedback_every"]) and turn % opt["feedback_every"] == 0 and turn > 1
        if feedback:
            self._feedback()
        else:
            self._user_task(with_image=bool(opt["image_every"]) and turn % opt["image_every"] == 0)
        recall = self._recall_due(turn) and (reply_budget is None or reply_budget >= 2)
        steps = self.rng.randint(*opt["steps_per_turn"]) if self.rng.random() < opt["tool_turn_ratio"] else 0
        if reply_budget is not None:
            steps = min(steps, reply_budget - 1 - recall)  # the answer (and a recall) take the rest
        recall_step = self.rng.randrange(steps) if steps and recall else -1
        for step in range(steps):
            if step == recall_step:
                self._recall()
            self._tool_step()
        if recall and not steps:
            self._recall()
        self._answer()

    def _recall_due(self, turn: int) -> bool:
        every = self.opt["recall_every"]
        return bool(every) and turn % every == 0 and bool(self.recallable)

    def _user_task(self, *, with_image: bool) -> None:
        text = self.fake.sentence(nb_words=self.rng.randint(8, 16))
        if self.files and self.rng.random() < 0.5:
            text += f" Start from {self.rng.choice(sorted(self.files))}."
        if self.rng.random() < 0.5:
            ticket = self._unique(lambda: f"TICKET-{self.rng.randint(10000, 99999)}")
            text = f"{ticket}: {text} {self.fake.sentence()}"
            self._fact("ticket", ticket)
        images: tuple[Image, ...] = ()
        if with_image:
            width, height = self.rng.choice(
                LARGE_SCREENSHOT_SIZES if self.opt.get("large_screenshots") else SCREENSHOT_SIZES
            )
            detail = self.opt.get("image_detail", 0.0)
            png = make_png(width, height, seed=self.rng.getrandbits(32), detail=detail)
            images = (Image(data=base64.b64encode(png).decode("ascii"), media_type="image/png"),)
            text = f"Here is a screenshot of what I see. {text}"
        self.messages.append(Message.user(text, images=images))

    def _feedback(self) -> None:
        lines = []
        count = self.rng.randint(40, 90)
        known = sorted(self.files) or [f"{d}/main.py" for d in self.dirs]
        for _ in range(count):
            path = self.rng.choice(known)
            rule = f"{self.rng.choice('EFW')}{self.rng.randint(100, 999)}"
            lines.append(
                f"{path}:{self.rng.randint(1, 400)}:{self.rng.randint(1, 80)}: {rule} "
                f"{self.fake.sentence(nb_words=6)[:FEEDBACK_LINE_CHARS]}"
            )
        text = FEEDBACK_HEADER.format(count=count) + "\n".join(lines)
        self.messages.append(Message.user(text, agent_feedback=True))

    def _recall(self) -> None:
        original = self.rng.choice(self.recallable)
        request = RECALL_REQUEST.format(marker=marker(archive_key(original)))
        self._reply(Message.assistant(request))
        self.messages.append(Message.user(original, preserve_verbatim=True))

    # -- tool steps -------------------------------------------------------
    def _tool_step(self) -> None:
        opt = self.opt
        count = 1
        if opt["max_parallel_calls"] > 1 and self.rng.random() < opt["parallel_ratio"]:
            count = self.rng.randint(2, opt["max_parallel_calls"])
        names = self.rng.choices(list(TOOL_WEIGHTS), weights=list(TOOL_WEIGHTS.values()), k=count)
        planned = [self._plan_call(name) for name in names]
        calls = [ToolCall(self._call_id(), name, json.dumps(args)) for name, args, _ in planned]
        self._reply(Message.assistant(self.rng.choice(STEP_OPENERS), calls))
        for call, (_, _, result) in zip(calls, planned, strict=True):
            result(call.id)

    def _plan_call(self, name: str) -> tuple[str, dict[str, Any], Callable[[str], None]]:
        """Tool arguments and a function appending the result (called in call order)."""
        if name == "read_file":
            return self._plan_read()
        if name == "run_command":
            command = self.rng.choice(COMMANDS).format(
                test=f"tests/test_{self._word()}.py", dir=self.rng.choice(self.dirs)
            )
            return name, {"command": command}, lambda call_id: self._command_result(call_id, command)
        if name == "search":
            pattern = f"{self._word()}_{self._word()}"
            args = {"pattern": pattern, "path": "src"}
            return name, args, lambda call_id: self._search_result(call_id, pattern)
        if name == "list_dir":
            directory = self.rng.choice(self.dirs)
            return name, {"path": directory}, lambda call_id: self._list_result(call_id, directory)
        path = self._new_path()
        content = "\n".join(self._code_line() for _ in range(self.rng.randint(5, 30)))
        text = f"Wrote {len(content.encode())} bytes to {path}"
        return name, {"path": path, "content": content}, lambda call_id: self._append_tool(call_id, text)

    def _append_tool(self, call_id: str, text: str, *, is_error: bool = False) -> None:
        self.messages.append(Message.tool(call_id, text, is_error=is_error))
        if len(text) >= RECALL_MIN_CHARS:
            self.recallable.append(text)

    def _new_path(self) -> str:
        suffixes, weights = zip(*FILE_KINDS, strict=True)
        suffix = self.rng.choices(suffixes, weights=weights)[0]
        return self._unique(lambda: f"{self.rng.choice(self.dirs)}/{self._word()}_{self._word()}{suffix}")

    def _plan_read(self) -> tuple[str, dict[str, Any], Callable[[str], None]]:
        known = sorted(self.files)
        if known and self.rng.random() < self.opt["reread_ratio"]:
            file = self.files[self.rng.choice(known)]
            start, end = self._reread_range(file)
        else:
            file = self._new_file()
            start, end = 1, len(file.lines)
            if self.rng.random() < 0.4:
                start = self.rng.randint(1, len(file.lines) // 2)
                end = self.rng.randint(start + MIN_FILE_LINES // 2, len(file.lines))
        whole = (start, end) == (1, len(file.lines))
        args: dict[str, Any] = {"path": file.path}
        if not whole:
            args.update(start_line=start, end_line=end)
        first_read = file.last_range is None
        file.last_range = (start, end)

        def result(call_id: str) -> None:
            if first_read:
                self._fact("path", file.path)
            if file.identifier and start <= file.identifier_line <= end:
                self._fact("identifier", file.identifier)
                file.identifier = None  # recorded once, at its first appearance
            self._append_tool(call_id, numbered_read(file.path, file.lines[start - 1 : end], start))

        return "read_file", args, result

    def _reread_range(self, file: _File) -> tuple[int, int]:
        assert file.last_range is not None
        start, end = file.last_range
        mode = self.rng.choice(("same", "wider", "narrower"))
        if mode == "wider":
            return (1, len(file.lines)) if self.rng.random() < 0.5 else (max(1, start - 20), len(file.lines))
        if mode == "narrower" and end - start >= 4:
            new_start = self.rng.randint(start, (start + end) // 2)
            return new_start, self.rng.randint(new_start + 1, end)
        return start, end

    def _new_file(self) -> _File:
        path = self._new_path()
        target = int(self.opt["big_read_chars"] * self.rng.uniform(0.6, 1.4))
        count = max(MIN_FILE_LINES, target // APPROX_LINE_CHARS)
        if self._dense():  # a bundle as a build emits it: long lines, no spaces
            path = path.rsplit(".", 1)[0] + MINIFIED_SUFFIX
            count = max(MIN_FILE_LINES, target // MINIFIED_LINE_CHARS)
            lines = [self._minified_line(target // count) for _ in range(count)]
        elif path.endswith(".md"):
            lines = [self.fake.sentence(nb_words=self.rng.randint(4, 12)) for _ in range(count)]
        else:
            lines = [self._code_line() for _ in range(count)]
        file = _File(path, lines)
        if self.rng.random() < 0.5:
            file.identifier = self._unique(lambda: f"cfg-{self.rng.getrandbits(48):012x}")
            file.identifier_line = self.rng.randint(1, count)
            lines[file.identifier_line - 1] = f'DEPLOYMENT_ID = "{file.identifier}"'
        self.files[path] = file
        return file

    def _minified_line(self, chars: int) -> str:
        parts: list[str] = []
        while sum(map(len, parts)) < chars:
            a, b, c, d = (self._word()[:3] for _ in range(4))
            n, m = self.rng.randint(0, 99), self.rng.randint(0, 9)
            parts.append(f"function {a}{n}({b},{c}){{return {b}.{d}({c},{{x:{n},y:[{m},{n % 7}]}})}};")
        return "".join(parts)

    def _command_result(self, call_id: str, command: str) -> None:
        if self._dense():  # a payload printed as base64 (an asset, a key, a blob from an API)
            path = f"{self.rng.choice(self.dirs)}/{self._word()}.bin"
            raw = self.rng.randbytes(self.rng.randint(*BASE64_BYTES))
            command = BASE64_COMMAND.format(path=path)
            self._append_tool(call_id, f"$ {command}\n{base64.b64encode(raw).decode('ascii')}")
            return
        lines = [f"$ {command}"]
        while sum(len(line) + 1 for line in lines) < self.opt["small_result_chars"]:
            test = f"{self._word()}.py::{self._word()}_{self._word()}"
            lines.append(f"{self.rng.choice(self.dirs)}/{test} PASSED")
        failed = self.rng.random() < 0.25
        if failed:
            error = self._unique(lambda: f"E{self.rng.randint(1000, 9999)}: {self._phrase()}")
            lines.append(error)
            self._fact("error", error)
        self._append_tool(call_id, "\n".join(lines), is_error=failed)

    def _search_result(self, call_id: str, pattern: str) -> None:
        known = sorted(self.files)
        lines = []
        for _ in range(self.rng.randint(0, 12)):
            path = self.rng.choice(known) if known else f"{self.rng.choice(self.dirs)}/{self._word()}.py"
            lines.append(f"{path}:{self.rng.randint(1, 500)}:    {pattern} = {self._word()}({self._word()})")
        self._append_tool(call_id, "\n".join(lines) or f"no matches for {pattern!r}")

    def _list_result(self, call_id: str, directory: str) -> None:
        names = sorted({f"{self._word()}.py" for _ in range(self.rng.randint(3, 15))})
        self._append_tool(call_id, "\n".join(f"{directory}/{n}" for n in names))

    # -- answers ----------------------------------------------------------
    def _answer(self) -> None:
        target = int(self.opt["answer_chars"] * self.rng.uniform(0.5, 1.5))
        parts = []
        if self.rng.random() < 0.2:
            parts.append(REASONING_TEMPLATE.format(text=self.fake.paragraph(nb_sentences=4)))
        parts.append(f"## {self.fake.sentence(nb_words=5).rstrip('.')}\n\n")
        if self.rng.random() < 0.4:
            decision = self._unique(lambda: f"ADR-{self.rng.randint(100, 999)}: {self._phrase()}")
            parts.append(f"Decision: {decision}.\n\n")
            self._fact("decision", decision)
        code = "\n".join(self._code_line() for _ in range(self.rng.randint(4, 14)))
        used = sum(len(p) for p in parts) + len(code) + 12
        prose = self._prose(max(1, target - used))
        split = prose.find("\n\n", len(prose) // 2)
        split = len(prose) if split < 0 else split
        parts.append(f"{prose[:split]}\n\n```python\n{code}\n```\n{prose[split:]}")
        self._reply(Message.assistant("".join(parts)))
