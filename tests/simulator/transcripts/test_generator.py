"""Synthetic sessions: determinism, contents the passes rely on, committed fixtures."""

from __future__ import annotations

import base64
import json
import random
import re
import struct
import zlib
from collections import defaultdict
from pathlib import Path

import faker
import pytest

from ctxrecover.archive import archive_key, marker
from ctxrecover.image_tokens import image_dimensions
from ctxrecover.messages import Image, Message
from ctxrecover.sizes import estimate_image_tokens
from simulator.providers.tokens import TokenCounter
from simulator.transcripts.generator import (
    FACT_KINDS,
    FILE_HEADER,
    NUMBERED_LINE,
    generate_session,
    generate_to_file,
    make_png,
    numbered_read,
)
from simulator.transcripts.loaders import Transcript, load_transcript, write_jsonl
from simulator.transcripts.recipes import FIXTURE_RECIPES, write_fixtures
from simulator.workloads import split_turns

REPO = Path(__file__).resolve().parents[3]
FIXTURES = REPO / "fixtures" / "transcripts"
NUMBERED_RE = re.compile(r"^ *(\d+)\t")

# Promised sizes of the committed fixtures (bytes, ±15%).
FIXTURE_SIZES = {
    "chat-50k.jsonl": 50_000,
    "coding-120k.jsonl": 120_000,
    "floor-system-prompt-300k.jsonl": 300_000,
    "chat-long-answers-600k.jsonl": 600_000,
    "small-tools-1m.jsonl": 1_000_000,
    "images-2m.jsonl": 2_000_000,
    "screenshots-1m.jsonl": 1_000_000,
    "dense-text-400k.jsonl": 400_000,
    "screens-600k.jsonl": 650_000,
    "big-reads-3500k.jsonl": 3_500_000,
    "marathon-5m.jsonl": 5_000_000,
}
FIXTURE_TOTAL_LIMIT = 15_000_000


@pytest.fixture(scope="module")
def session() -> Transcript:
    """A mid-size session with every feature switched on."""
    return generate_session(seed=3, turns=30, image_every=3, recall_every=4, feedback_every=5)


def reads(t: Transcript) -> list[tuple[dict, Message]]:
    """(arguments, result) of every read_file call."""
    results = {m.tool_call_id: m for m in t.messages if m.role == "tool"}
    return [
        (json.loads(c.arguments), results[c.id])
        for m in t.messages
        for c in m.tool_calls
        if c.name == "read_file"
    ]


# -- determinism -----------------------------------------------------------------


def test_same_seed_gives_byte_identical_jsonl(tmp_path):
    first, second = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    write_jsonl(generate_session(seed=11, turns=12, image_every=2), first)
    write_jsonl(generate_session(seed=11, turns=12, image_every=2), second)
    assert first.read_bytes() == second.read_bytes()


def test_different_seeds_give_different_sessions():
    assert generate_session(seed=1, turns=6).sha256 != generate_session(seed=2, turns=6).sha256


def test_generation_leaves_the_global_rng_alone():
    random.seed(1234)
    state = random.getstate()
    generate_session(seed=5, turns=4)
    assert random.getstate() == state


def test_metadata_records_how_the_session_was_made():
    t = generate_session(seed=9, turns=2, answer_chars=500)
    assert t.name == "synthetic-s9-t2"
    assert t.metadata["seed"] == 9 and t.metadata["turns"] == 2
    assert t.metadata["options"]["answer_chars"] == 500
    assert t.metadata["faker_version"] == faker.VERSION


# -- contents ----------------------------------------------------------------------


def test_every_tool_call_is_answered_right_after_its_message_in_order(session):
    ids = [c.id for m in session.messages for c in m.tool_calls]
    assert len(ids) == len(set(ids))
    for i, m in enumerate(session.messages):
        if m.tool_calls:
            results = session.messages[i + 1 : i + 1 + len(m.tool_calls)]
            assert [r.tool_call_id for r in results] == [c.id for c in m.tool_calls]


def test_roles_alternate_like_a_real_agent_loop(session):
    roles = [m.role for m in session.messages]
    assert roles[0] == "system" and roles[1] == "user" and roles[-1] == "assistant"
    for before, after in zip(roles, roles[1:], strict=False):
        assert (before, after) not in {("user", "user"), ("user", "tool"), ("system", "assistant")}


def test_sessions_have_parallel_tool_calls(session):
    assert any(len(m.tool_calls) >= 2 for m in session.messages)


def test_file_reads_use_the_numbered_format(session):
    all_reads = reads(session)
    assert all_reads
    for args, result in all_reads:
        header, *lines = result.content.split("\n")
        assert header == FILE_HEADER.format(path=args["path"]) == f"<<< FILE: {args['path']} >>>"
        numbers = [int(NUMBERED_RE.match(line).group(1)) for line in lines]
        start = args.get("start_line", 1)
        assert numbers == list(range(start, start + len(lines)))
        if "end_line" in args:
            assert numbers[-1] == args["end_line"]


def test_files_are_read_again_with_same_wider_and_narrower_ranges():
    t = generate_session(seed=4, turns=40, reread_ratio=0.6)
    ranges: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for args, result in reads(t):
        first = int(NUMBERED_RE.match(result.content.split("\n")[1]).group(1))
        last = int(NUMBERED_RE.match(result.content.rsplit("\n", 1)[1]).group(1))
        ranges[args["path"]].append((first, last))
    kinds = set()
    for seen in ranges.values():
        for (a, b), (c, d) in zip(seen, seen[1:], strict=False):
            kinds.add("same" if (a, b) == (c, d) else "wider" if c <= a and d >= b else "narrower")
    assert kinds == {"same", "wider", "narrower"}


def test_file_contents_are_stable_across_reads(session):
    lines_by_path: dict[str, dict[int, str]] = defaultdict(dict)
    for args, result in reads(session):
        for line in result.content.split("\n")[1:]:
            number, text = line.split("\t", 1)
            assert lines_by_path[args["path"]].setdefault(int(number), text) == text


def test_screenshots_are_real_pngs(session):
    images = [(i, img) for m in session.messages for i in [m] for img in m.images]
    assert images
    for message, image in images:
        assert message.role == "user" and image.media_type == "image/png"
        raw = base64.b64decode(image.data)
        width, height = struct.unpack(">II", raw[16:24])
        assert raw[:8] == b"\x89PNG\r\n\x1a\n"
        assert estimate_image_tokens(image) == max(85, width * height // 750)


def test_recall_results_are_verbatim_copies_of_earlier_results(session):
    recalled = [i for i, m in enumerate(session.messages) if m.preserve_verbatim]
    assert recalled
    for i in recalled:
        message, request = session.messages[i], session.messages[i - 1]
        assert message.role == "user"
        assert request.role == "assistant" and marker(archive_key(message.content)) in request.content
        assert "@recall" in request.content
        earlier = [m.content for m in session.messages[:i] if m.role == "tool"]
        assert message.content in earlier


def test_agent_feedback_is_long_user_output(session):
    feedback = [m for m in session.messages if m.agent_feedback]
    assert feedback
    assert all(m.role == "user" and m.content.startswith("Stop hook feedback:") for m in feedback)
    assert all(len(m.content) >= 2_000 for m in feedback)


def test_facts_sit_in_the_message_they_point_at_and_are_unique(session):
    assert {f.kind for f in session.facts} == set(FACT_KINDS)
    assert len({f.value for f in session.facts}) == len(session.facts)
    for fact in session.facts:
        assert fact.value in session.messages[fact.message_index].content


def test_fact_formats_are_recognisable(session):
    patterns = {
        "ticket": r"TICKET-\d{5}",
        "error": r"E\d{4}: .+",
        "policy": r"POLICY-\d{4}",
        "identifier": r"cfg-[0-9a-f]{12}",
        "decision": r"ADR-\d{3}: .+",
        "path": r"src/\w+/\w+\.(py|ts|md)",
    }
    for fact in session.facts:
        assert re.fullmatch(patterns[fact.kind], fact.value), fact


def test_chat_only_sessions_have_no_tools_and_long_answers():
    t = generate_session(seed=8, turns=6, tool_turn_ratio=0.0, answer_chars=6_000)
    assert not any(m.tool_calls or m.role == "tool" for m in t.messages)
    answers = [len(m.content) for m in t.messages if m.role == "assistant"]
    assert len(answers) == 6 and min(answers) >= 2_500


def test_system_prompt_has_the_requested_size():
    t = generate_session(seed=1, turns=1, system_prompt_chars=100_000)
    assert t.messages[0].role == "system" and len(t.messages[0].content) == 100_000


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"turns": 0}, "turns must be >= 1"),
        ({"tool_turn_ratio": 1.5}, r"tool_turn_ratio is a probability: give a value in \[0, 1\], got 1.5"),
        ({"steps_per_turn": (3, 1)}, r"steps_per_turn must be \(min, max\) with 1 <= min <= max"),
        ({"max_parallel_calls": 0}, "max_parallel_calls must be >= 1"),
        ({"big_read_chars": 0}, "big_read_chars must be >= 1"),
        ({"image_every": -1}, r"image_every must be >= 0 \(0 turns the feature off\)"),
        ({"seed": "7"}, "seed must be an int"),
    ],
)
def test_invalid_options_are_rejected_with_a_fix(options, message):
    kwargs = {"seed": 1, "turns": 2, **options}
    with pytest.raises(ValueError, match=message):
        generate_session(**kwargs)


def test_generate_to_file_writes_a_loadable_transcript(tmp_path):
    out = tmp_path / "gen.jsonl"
    t = generate_to_file(21, 5, out, image_every=2)
    loaded = load_transcript(out)
    assert (t.source_path, t.format) == (str(out), "jsonl")
    assert (loaded.messages, loaded.facts, loaded.sha256) == (t.messages, t.facts, t.sha256)


def test_numbered_read_format_is_exact():
    expected = "<<< FILE: a.py >>>\n     9\tx = 1\n    10\t\n    11\ty"
    assert numbered_read("a.py", ["x = 1", "", "y"], 9) == expected
    assert NUMBERED_LINE.format(lineno=123456, text="t") == "123456\tt"


def test_make_png_is_decodable():
    raw = make_png(5, 3, seed=2)
    assert struct.unpack(">II", raw[16:24]) == (5, 3)
    idat_length = struct.unpack(">I", raw[33:37])[0]
    assert raw[37:41] == b"IDAT"
    assert len(zlib.decompress(raw[41 : 41 + idat_length])) == 3 * (1 + 5 * 3)
    assert raw.endswith(b"IEND\xaeB`\x82")
    assert estimate_image_tokens(Image(data=base64.b64encode(raw).decode())) == 85
    with pytest.raises(ValueError, match="make_png needs width and height >= 1"):
        make_png(0, 3)


def test_make_png_detail_draws_incompressible_pixels_and_keeps_the_plain_png_without_it():
    plain = make_png(800, 600, seed=4)
    detailed = make_png(800, 600, seed=4, detail=0.1)
    assert make_png(800, 600, seed=4, detail=0.0) == plain
    assert len(plain) < 5_000  # flat bands compress to almost nothing
    assert 0.9 * 0.1 * 800 * 600 * 3 <= len(detailed) <= 1.1 * 0.1 * 800 * 600 * 3  # like a real screenshot
    idat_length = struct.unpack(">I", detailed[33:37])[0]
    rows = zlib.decompress(detailed[41 : 41 + idat_length])
    assert len(rows) == 600 * (1 + 800 * 3) and rows[:: 1 + 800 * 3] == b"\x00" * 600
    image = Image(data=base64.b64encode(detailed).decode(), media_type="image/png")
    assert estimate_image_tokens(image) == 800 * 600 // 750
    with pytest.raises(ValueError, match=r"make_png detail is a share of each row: give a value in \[0, 1\]"):
        make_png(4, 4, detail=1.5)


def test_image_detail_makes_heavy_screenshots_and_is_recorded_only_when_used():
    heavy = generate_session(seed=5, turns=3, image_every=1, image_detail=0.1)
    light = generate_session(seed=5, turns=3, image_every=1)
    assert heavy.metadata["options"]["image_detail"] == 0.1
    assert "image_detail" not in light.metadata["options"]  # sessions made before the option are unchanged
    sizes = [len(i.data or "") for m in heavy.messages for i in m.images]
    assert sizes and min(sizes) > 20_000
    assert [m.content for m in heavy.messages] == [m.content for m in light.messages]  # only pixels differ
    with pytest.raises(ValueError, match=r"image_detail is a share of each row: give a value in \[0, 1\]"):
        generate_session(seed=5, turns=1, image_detail=-0.1)


# -- replies: what a replay calls turns -----------------------------------------------

REPLY_SHAPES = {
    "default": {},
    "chat": {"tool_turn_ratio": 0.0, "recall_every": 0, "feedback_every": 0},
    "recalls every turn": {"recall_every": 1, "feedback_every": 2},
    "long tool turns": {"steps_per_turn": (3, 8), "max_parallel_calls": 5, "recall_every": 2},
}


@pytest.mark.parametrize("shape", list(REPLY_SHAPES))
@pytest.mark.parametrize("replies", [1, 2, 3, 7, 20, 41])
def test_replies_is_exactly_the_number_of_turns_a_replay_runs(shape: str, replies: int) -> None:
    for seed in range(4):
        t = generate_session(seed=seed, replies=replies, **REPLY_SHAPES[shape])
        turns, trailing = split_turns(t.messages)
        assert (len(turns), trailing) == (replies, ()), (shape, seed)
        assert t.messages[-1].role == "assistant" and not t.messages[-1].tool_calls  # ends on an answer
        assert t.metadata["replies"] == replies and t.metadata["turns"] >= 1
        assert t.name == f"synthetic-s{seed}-r{replies}"


def test_a_session_given_in_user_turns_is_unchanged_by_replies_existing() -> None:
    t = generate_session(seed=3, turns=5)
    assert "replies" not in t.metadata and t.name == "synthetic-s3-t5"
    assert len(split_turns(t.messages)[0]) > 5  # each user turn is several replay turns


@pytest.mark.parametrize(
    ("counts", "error"),
    [
        (
            {},
            "give turns (user turns) or replies (assistant replies, what a replay calls turns), not neither",
        ),
        ({"turns": 2, "replies": 2}, "not both"),
        ({"replies": 0}, "replies must be >= 1"),
    ],
)
def test_turns_or_replies_one_of_them_positive(counts: dict[str, int], error: str) -> None:
    with pytest.raises(ValueError, match=re.escape(error)):
        generate_session(seed=1, **counts)


# -- committed fixtures ---------------------------------------------------------------


def test_fixture_recipes_match_the_promised_files():
    assert [r.filename for r in FIXTURE_RECIPES] == list(FIXTURE_SIZES)
    assert len({r.seed for r in FIXTURE_RECIPES}) == len(FIXTURE_RECIPES)


@pytest.mark.parametrize("filename", list(FIXTURE_SIZES))
def test_each_fixture_has_its_promised_size_and_loads(filename):
    path = FIXTURES / filename
    nominal = FIXTURE_SIZES[filename]
    assert 0.85 * nominal <= path.stat().st_size <= 1.15 * nominal
    t = load_transcript(path)
    recipe = next(r for r in FIXTURE_RECIPES if r.filename == filename)
    assert (t.format, t.name) == ("jsonl", filename.removesuffix(".jsonl"))
    assert (t.metadata["seed"], t.metadata["turns"]) == (recipe.seed, recipe.turns)
    assert t.facts
    for fact in t.facts:
        assert fact.value in t.messages[fact.message_index].content


def test_fixture_shapes_differ_as_described():
    def load(name: str) -> Transcript:
        return load_transcript(FIXTURES / name)

    assert not any(m.tool_calls for m in load("chat-50k.jsonl").messages)
    assert len(load("floor-system-prompt-300k.jsonl").messages[0].content) == 100_000
    assert sum(len(m.images) for m in load("images-2m.jsonl").messages) >= 20
    shots = [len(i.data or "") for m in load("screenshots-1m.jsonl").messages for i in m.images]
    assert len(shots) >= 6 and min(shots) > 20_000 and max(shots) > 128 * 1024  # one is over a 128 KB WAF
    dense = "".join(m.content for m in load("dense-text-400k.jsonl").messages)
    counter = TokenCounter()
    counter.add(dense)
    assert counter.chars / counter.tokens < 3.0  # English is 4 chars a token: this is far denser
    assert re.search(r"[\u4e00-\u9fff]{8}", dense) and "base64 -w0" in dense and ".min.js" in dense
    screens = [i for m in load("screens-600k.jsonl").messages for i in m.images]
    assert len(screens) >= 8 and all(image_dimensions(i.data or "")[0] >= 1366 for i in screens)  # type: ignore[index]
    small = load("small-tools-1m.jsonl").messages
    results = sorted(len(m.content) for m in small if m.role == "tool")
    assert len(results) > 500 and results[len(results) // 2] < 1_000


def test_fixtures_stay_within_the_size_budget_and_are_documented():
    total = sum(p.stat().st_size for p in FIXTURES.glob("*.jsonl"))
    assert total <= FIXTURE_TOTAL_LIMIT
    readme = (FIXTURES / "README.md").read_text(encoding="utf-8")
    for filename in FIXTURE_SIZES:
        assert f"`{filename}` | {(FIXTURES / filename).stat().st_size:,} |" in readme


@pytest.mark.parametrize("filename", ["chat-50k.jsonl", "coding-120k.jsonl"])
def test_small_fixtures_regenerate_byte_for_byte(tmp_path, filename):
    committed = load_transcript(FIXTURES / filename)
    made_with = committed.metadata["faker_version"]
    if made_with != faker.VERSION:
        pytest.skip(f"fixture made with Faker {made_with}, installed {faker.VERSION}: outputs differ")
    recipe = next(r for r in FIXTURE_RECIPES if r.filename == filename)
    write_fixtures(tmp_path, recipes=(recipe,))
    assert (tmp_path / filename).read_bytes() == (FIXTURES / filename).read_bytes()


def test_dense_text_and_large_screenshots_are_options_recorded_only_when_used():
    plain = generate_session(seed=9, turns=6, image_every=2)
    dense = generate_session(seed=9, turns=6, image_every=2, dense_text=1.0, large_screenshots=True)
    assert (
        "dense_text" not in plain.metadata["options"] and "large_screenshots" not in plain.metadata["options"]
    )
    assert dense.metadata["options"]["dense_text"] == 1.0 and dense.metadata["options"]["large_screenshots"]
    text = "".join(m.content for m in dense.messages[1:])
    counter = TokenCounter()
    counter.add(text)
    assert counter.chars / counter.tokens < 3.0
    assert all(image_dimensions(i.data or "")[0] >= 1366 for m in dense.messages for i in m.images)  # type: ignore[index]
    with pytest.raises(ValueError, match=r"dense_text is a share of texts: give a value in \[0, 1\], got 2"):
        generate_session(seed=5, turns=1, dense_text=2)
