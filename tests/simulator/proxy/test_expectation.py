"""The ``[expect]`` table: every field read and validated, matched against what a run showed."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from simulator.proxy import expectation as expectation_module
from simulator.proxy.expectation import EXPECT_FIELDS, Expectation, Observed, notice_pattern
from simulator.proxy.fault_specs import ScenarioError
from simulator.proxy.scenario import load_scenario

HEAD = (
    'description = "A test scenario."\n\n[provider]\nformat = "anthropic"\n\n'
    '[expect]\noutcome = "recovered"\n'
)
LEARNED = (
    "ℹ Gateway rejected a %s request — payload cap set to %s for this session "
    "(export CHATCLI_MAX_PAYLOAD to override)"
)
SHOWN = (
    "ℹ Gateway rejected a 127.9 KB request — payload cap set to 96.0 KB for this session "
    "(export CHATCLI_MAX_PAYLOAD to override)"
)


def load(tmp_path: Path, expect_lines: str) -> Expectation:
    path = tmp_path / "s.toml"
    path.write_text(HEAD + expect_lines, encoding="utf-8")
    return load_scenario(path).expect


def test_every_field_is_read_from_the_table(tmp_path: Path) -> None:
    expect = load(
        tmp_path,
        (
            'failure_kind = "waf_rejection"\ncompaction_level = 0\nrejected_requests = [1, 3]\n'
            f'cap_learned = true\nsummarizer = "refused"\nnotices = ["{LEARNED}"]\nfloor_warning = true\n'
            "content_blocks = 1\nfinal_max_tokens = 8192\nrequests_over_cap = 0\n"
        ),
    )
    assert expect == Expectation(
        "recovered",
        failure_kind="waf_rejection",
        compaction_level=0,
        floor_warning=True,
        summarizer="refused",
        notices=(LEARNED,),
        rejected_requests=(1, 3),
        cap_learned=True,
        content_blocks=1,
        final_max_tokens=8192,
        requests_over_cap=0,
    )
    assert load(tmp_path, "rejected_requests = []\n").rejected_requests == ()
    assert load(tmp_path, "").rejected_requests is None  # not named: not checked


def test_the_fields_table_documents_every_field() -> None:
    assert list(EXPECT_FIELDS) == [
        "outcome",
        "failure_kind",
        "compaction_level",
        "rejected_requests",
        "cap_learned",
        "summarizer",
        "notices",
        "floor_warning",
        "content_blocks",
        "withheld",
        "final_max_tokens",
        "requests_over_cap",
        "own_workload",
    ]
    assert set(EXPECT_FIELDS) == {f.name for f in dataclasses.fields(Expectation)}
    doc = expectation_module.__doc__ or ""
    assert all(f"``{name}``" in doc for name in EXPECT_FIELDS)


PER_EPISODE = (
    "[expect] rejected_requests must be a list of integers > 0 (rejected requests per failure episode, "
    "in order; [] for none), got "
)
ERRORS = [
    (
        'notces = ["x"]\n',
        "[expect] has unknown key 'notces'; valid keys: outcome, failure_kind, "
        "compaction_level, rejected_requests, cap_learned, summarizer, notices, floor_warning, "
        "content_blocks, withheld, "
        "final_max_tokens, requests_over_cap, own_workload",
    ),
    (
        'notices = "⚠ Recoverable failure (%s)"\n',
        "[expect] notices must be a list of texts (SPEC texts, %s "
        "for any value), got '⚠ Recoverable failure (%s)'",
    ),
    ('notices = ["ok", " "]\n', "[expect] notices[1] must be a non-empty text, got ' '"),
    ("rejected_requests = [1, 0]\n", PER_EPISODE + "[1, 0]"),
    ("rejected_requests = 2\n", PER_EPISODE + "2"),
    ("rejected_requests = [true]\n", PER_EPISODE + "[True]"),
    ('cap_learned = "yes"\n', "[expect] cap_learned must be true or false, got 'yes'"),
    (
        'summarizer = "lazy"\n',
        "[expect] summarizer must be one of unused, answered, refused, too_short, "
        "failed, overflowed, timed_out, cancelled, got 'lazy'",
    ),
    ("compaction_level = -1\n", "[expect] compaction_level must be one of 0, 1, 2, 3, got -1"),
    ("floor_warning = 1\n", "[expect] floor_warning must be true or false, got 1"),
    ("content_blocks = -1\n", "[expect] content_blocks must be an integer >= 0, got -1"),
    ('content_blocks = "one"\n', "[expect] content_blocks must be an integer, got 'one'"),
    ("withheld = -1\n", "[expect] withheld must be an integer >= 0, got -1"),
    ("final_max_tokens = 0\n", "[expect] final_max_tokens must be an integer >= 1, got 0"),
    ("requests_over_cap = -2\n", "[expect] requests_over_cap must be an integer >= 0, got -2"),
    (
        'failure_kind = "too_big"\n',
        "[expect] failure_kind must be one of context_overflow, "
        "payload_too_large, waf_rejection, policy_block, content_refused, suspected_payload, "
        "malformed_history, output_truncated, output_limit, auth, rate_limit, transient_network, other, ok, "
        "got 'too_big'",
    ),
]


@pytest.mark.parametrize(("lines", "message"), ERRORS, ids=[e[0].split(" ")[0] for e in ERRORS])
def test_a_bad_field_is_an_error_naming_the_file_and_the_field(
    tmp_path: Path, lines: str, message: str
) -> None:
    with pytest.raises(ScenarioError) as caught:
        load(tmp_path, lines)
    assert str(caught.value) == f"{tmp_path / 's.toml'}: {message}"


def test_an_expect_that_is_not_a_table_or_has_no_outcome_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "s.toml"
    path.write_text("expect = 3\n" + HEAD.replace('[expect]\noutcome = "recovered"\n', ""), encoding="utf-8")
    with pytest.raises(ScenarioError, match=r"s\.toml: \[expect\] must be a table, got 3$"):
        load_scenario(path)
    path.write_text(HEAD.replace('outcome = "recovered"\n', 'failure_kind = "auth"\n'), encoding="utf-8")
    with pytest.raises(ScenarioError, match=r"\[expect\] outcome is missing; valid outcomes: ok, recovered"):
        load_scenario(path)


# -- notices ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "line", "matches"),
    [
        (LEARNED, SHOWN, True),
        (LEARNED, SHOWN + " and more", False),  # a whole line, not a part of one
        (
            "ℹ pre-flight: history %s ≈ %d%% of configured cap (%s) — compacting",
            "ℹ pre-flight: history 117.7 KB ≈ 122% of configured cap (96.0 KB) — compacting",
            True,
        ),
        (
            "ℹ pre-flight: history %s ≈ %d%% of configured cap (%s) — compacting",
            "ℹ pre-flight: history 117.7 KB ≈ most of configured cap (96.0 KB) — compacting",
            False,
        ),
        (
            "⚠ System prompt alone is %s",
            "⚠ System prompt alone is 101.5 KB — close to the edge",
            True,
        ),  # prefix
        ("✓ Trim was enough (%s → %s)", "✓ Trim was enough (1.0 KB → 0.5 KB)", True),
        ("✓ Trim was enough (%s → %s)", "✓ Trim was enough [1.0 KB → 0.5 KB]", False),  # brackets are literal
        ("budget %.1f tokens", "budget 12.5 tokens", True),
        ("budget %.1f tokens", "budget twelve tokens", False),
    ],
)
def test_a_notice_is_a_spec_text_whose_placeholders_stand_for_values(
    text: str, line: str, matches: bool
) -> None:
    assert (notice_pattern(text).fullmatch(line) is not None) is matches


# -- problems --------------------------------------------------------------------------------------------
SEEN = Observed(
    outcome="recovered",
    failure_kinds=("waf_rejection",),
    compaction_level=2,
    rejected_requests=(1,),
    learned_cap=98_256,
    summarizer_calls=("answered", "answered"),
    lines=(SHOWN, "✓ Summary applied (9 → 6 msgs)"),
    content_blocks=((98_256, 98_256),),
    final_max_tokens=4096,
)


def test_an_expectation_the_run_meets_has_no_problem() -> None:
    expect = Expectation(
        "recovered",
        failure_kind="waf_rejection",
        compaction_level=2,
        summarizer="answered",
        notices=(LEARNED, "✓ Summary applied (%d → %d msgs)"),
        rejected_requests=(1,),
        cap_learned=True,
        content_blocks=1,
        final_max_tokens=4096,
    )
    assert expect.problems(SEEN) == []


@pytest.mark.parametrize(
    ("changes", "problem"),
    [
        ({"outcome": "failed"}, "outcome recovered, expected failed"),
        ({"failure_kind": "auth"}, "first failure waf_rejection, expected auth"),
        ({"compaction_level": 3}, "compaction level 2, expected 3"),
        ({"compaction_level": 0}, "compaction level 2, expected none"),
        ({"rejected_requests": ()}, "rejected requests per episode [1], expected []"),
        ({"rejected_requests": (1, 1)}, "rejected requests per episode [1], expected [1, 1]"),
        ({"cap_learned": False}, "payload cap learned (98,256 bytes), expected none"),
        ({"summarizer": "refused"}, "summarizer answered ×2, expected a call refused"),
        ({"summarizer": "unused"}, "summarizer called 2 time(s), expected unused"),
        (
            {"notices": ("⚠ Summarization failed (%s) — falling back to truncation",)},
            "no line shown matches '⚠ Summarization failed (%s) — falling back to truncation'",
        ),
        ({"floor_warning": True}, "no floor warning notice"),
        ({"content_blocks": 0}, "1 content block(s), expected 0"),
        ({"final_max_tokens": 8192}, "last request's max_tokens 4096, expected 8192"),
        ({"requests_over_cap": 2}, "0 request(s) sent above the learned payload cap, expected 2"),
    ],
)
def test_each_unmet_field_is_one_readable_problem(changes: dict[str, object], problem: str) -> None:
    expect = dataclasses.replace(Expectation("recovered"), **changes)
    assert expect.problems(SEEN) == [problem]


def test_a_content_block_that_moved_the_learned_cap_is_a_problem_even_when_the_count_is_right() -> None:
    moved = dataclasses.replace(SEEN, content_blocks=((None, 98_256), (98_256, 98_256)))
    assert Expectation("recovered", content_blocks=2).problems(moved) == [
        "a content block changed the learned cap (none → 98,256 bytes)"
    ]


def test_a_run_without_compaction_or_summarizer_meets_none_and_unused() -> None:
    quiet = Observed(outcome="no_compaction", failure_kinds=("rate_limit",), rejected_requests=(1,))
    expect = Expectation(
        "no_compaction", compaction_level=0, summarizer="unused", cap_learned=False, rejected_requests=(1,)
    )
    assert expect.problems(quiet) == []
    assert Expectation("no_compaction", cap_learned=True, compaction_level=1).problems(quiet) == [
        "compaction level none, expected 1",
        "no payload cap learned, expected one",
    ]
    assert Expectation("no_compaction", summarizer="failed").problems(quiet) == [
        "summarizer no call, expected a call failed"
    ]
