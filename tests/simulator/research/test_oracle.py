"""The oracle of rejected requests: the fewest a lawful policy needs per episode (SPEC §§6, 11, 12)."""

from __future__ import annotations

import dataclasses
import math

import pytest

from ctxrecover.events import Notice
from ctxrecover.messages import Message, ToolCall
from ctxrecover.recovery import CONTENT_WITHHELD_CODE, CONTENT_WITHHELD_NOTICE, WITHHELD_AGAIN_NOTICE
from simulator.recorder import ReplayEvent, fresh_part_count
from simulator.replay import replay
from simulator.research.metrics import EXPERIMENT_BLOCKED, EXPERIMENT_PASSED, episodes
from simulator.research.oracle import (
    ORACLE_RULES,
    Signal,
    content_candidates,
    culprits_kept_out,
    fewest_rejected,
    oracle_episodes,
    oracle_rejections,
    versus_oracle,
)
from simulator.workloads import split_turns


@pytest.mark.parametrize(
    ("signal", "first_of_kind", "fewest"),
    [
        (Signal("payload_too_large"), True, 1),  # §6: the 413 teaches the cap, the retry fits it
        (Signal("context_overflow"), True, 1),
        (Signal("waf_rejection"), True, 2),  # §12: read as size by the size experiment, refused too
        (Signal("waf_rejection"), False, 1),  # §12: a page read as size before is size at once
        (Signal("rate_limit"), True, 1),
        (Signal("output_limit"), True, 1),
        (Signal("transient_network"), True, 2),  # §2.4, §11: one plain retry first
        (Signal("transient_network"), False, 1),  # §11: a later one is payload evidence at once
        (Signal("waf_rejection", "content", 1), True, 1),  # §12: 1 + ⌈log2 n⌉
        (Signal("waf_rejection", "content", 2), True, 2),
        (Signal("waf_rejection", "content", 5), True, 4),
        (Signal("waf_rejection", "content", 8), True, 4),
        (Signal("waf_rejection", "content", 9), True, 5),
        (Signal("waf_rejection", "content", 3), True, 3),
        (Signal("waf_rejection", "content", 4), True, 3),
        (Signal("waf_rejection", "content", 16), True, 5),
        (Signal("waf_rejection", "content", 17), True, 6),
        (Signal("waf_rejection", "content", 5), False, 4),  # each block is searched afresh
        # k culprits kept out: k blocks, the j-th among the n - j parts left (the resend refused again)
        (Signal("waf_rejection", "content", 2, culprits=2), True, 2 + 1),
        (Signal("waf_rejection", "content", 4, culprits=2), True, 3 + 3),
        (Signal("waf_rejection", "content", 6, culprits=3), True, 4 + 4 + 3),
        (Signal("waf_rejection", "content", 3, culprits=0), True, 3),  # none kept out: still one block
        (Signal("waf_rejection", "policy"), True, 2),  # §12: the minimal request is refused too
        (Signal("waf_rejection", "floor"), True, 2),
    ],
)
def test_each_rule_gives_the_fewest_rejected_requests_the_spec_allows(
    signal: Signal, first_of_kind: bool, fewest: int
) -> None:
    assert fewest_rejected(signal, first_of_kind=first_of_kind) == fewest


def test_every_rule_names_its_spec_sections() -> None:
    assert set(ORACLE_RULES) == {
        "unambiguous",
        "block_as_size_first",
        "ambiguous_first",
        "ambiguous_later",
        "content",
        "policy_or_floor",
    }
    assert all("§" in sections for _, sections in ORACLE_RULES.values())


def test_only_the_first_ambiguous_failure_of_a_session_earns_the_plain_retry() -> None:
    signals = [
        Signal("transient_network", signature="network-drop:-:"),
        Signal("payload_too_large"),
        Signal("transient_network", signature="network-drop:-:"),
        Signal("transient_network", signature="transient_network:503:ab12"),  # another failure: a retry
        Signal("waf_rejection", "content", 12),
    ]
    assert oracle_rejections(signals) == [2, 1, 1, 2, 1 + 4]


def test_only_the_first_size_reading_of_a_block_page_costs_its_size_experiment() -> None:
    """SPEC §12: no cap without a size experiment; a page read as size before is size at once. Another
    page (another signature), or a page read as content before, needs its own experiment."""
    page, other = "waf_rejection:403:e90c9349", "waf_rejection:403:37d16ecc"
    signals = [
        Signal("waf_rejection", "content", 1, page),
        Signal("waf_rejection", signature=page),
        Signal("waf_rejection", signature=page),
        Signal("waf_rejection", signature=other),
        Signal("waf_rejection", signature=other),
    ]
    assert oracle_rejections(signals) == [1, 2, 1, 2, 1]


def test_a_block_page_read_as_size_costs_the_block_and_its_refused_size_experiment() -> None:
    """The experiment the gateway refuses (``experiment:blocked``) is a rejected request of its episode,
    the first of its page in the session; the one-word route probe before it passes and costs nothing;
    the same page later is size without the blanks."""
    result = replay(None, "cloudflare-waf-403")
    (episode,) = oracle_episodes(result)
    outcomes = [r.outcome for r in result.records if r.turn == episode.turn]
    assert outcomes == ["rejected:waf_rejection", EXPERIMENT_PASSED, EXPERIMENT_BLOCKED, "recovered@L1"]
    assert (episode.rejected, episode.oracle, episode.recovered) == (2, 2, True)
    assert episode.signals == (Signal("waf_rejection", signature=result.signatures[(episode.turn, 1)]),)
    later = replay(None, "screenshots-128k-waf")
    assert [(e.rejected, e.oracle) for e in oracle_episodes(later)] == [(2, 2), (1, 1)]


@pytest.mark.parametrize(
    "scenario",
    ["screenshots-128k-waf", "waf-content-block-set-aside-then-summarized", "rst-after-256k", "header-431"],
)
def test_the_oracles_episodes_are_the_metrics_episodes(scenario: str) -> None:
    result = replay(None, scenario)
    table = episodes(result.frame)
    rows = table[["turn", "first_failure_kind", "rejected_requests", "recovered"]].itertuples(index=False)
    assert [(e.turn, e.first_failure_kind, e.rejected, e.recovered) for e in oracle_episodes(result)] == [
        (int(turn), str(kind), int(rejected), bool(recovered)) for turn, kind, rejected, recovered in rows
    ]


def test_a_reset_episode_costs_the_plain_retry_the_oracle_grants() -> None:
    result = replay(None, "rst-after-256k")
    (episode,) = oracle_episodes(result)
    assert (episode.first_failure_kind, episode.rejected, episode.oracle, episode.recovered) == (
        "transient_network",
        2,
        2,
        True,
    )


def test_a_413_then_a_content_rule_is_one_episode_costing_both_limits() -> None:
    """The block search's experiments (``experiment:*``) keep the episode open; the oracle sums the
    413's one request and the content search's, and every refused experiment is a rejected request."""
    result = replay(None, "waf-content-block-right-after-a-413")
    (episode,) = oracle_episodes(result)
    assert [(s.kind, s.reading) for s in episode.signals] == [
        ("payload_too_large", None),
        ("waf_rejection", "content"),
    ]
    # The block's candidates are the refused request's parts the last accepted request did not carry:
    # the transcript's new messages, and what the 413's compaction rewrote on the way.
    blocked_attempt = next(
        r.attempt for r in result.records if r.turn == episode.turn and r.failure_kind == "waf_rejection"
    )
    fresh = result.fresh_parts[(episode.turn, blocked_attempt)]
    assert episode.signals[1].candidates == fresh > content_candidates(result, episode.turn) > 1
    assert episode.oracle == 1 + fewest_rejected(episode.signals[1], first_of_kind=True)
    turn = [r.outcome for r in result.records if r.turn == episode.turn]
    assert episode.rejected == turn.count(EXPERIMENT_BLOCKED) + 2  # the 413 and the block page
    (row,) = episodes(result.frame).itertuples(index=False)
    assert int(row.rejected_requests) == episode.rejected


def test_content_candidates_are_the_parts_new_since_the_last_accepted_request() -> None:
    """The units the library's search withholds: texts and tool-call arguments, system messages aside."""
    result = replay("coding-120k", "waf-content-block-right-after-a-413")
    turn = 7  # 0-based: the 8th reply
    parsed, _ = split_turns(result.replayed.messages)
    fresh = [parsed[turn - 1].reply, *parsed[turn - 1].followers, *parsed[turn].inputs]
    texts = sum(bool(m.content or m.images) for m in fresh if m.role != "system")
    calls = sum(c.arguments not in ("", "{}") for m in fresh for c in m.tool_calls)
    assert content_candidates(result, turn) == texts + calls


def test_a_floor_failure_ends_an_episode_that_did_not_recover() -> None:
    result = replay(None, "floor-too-big")
    (episode,) = oracle_episodes(result)
    assert (episode.first_failure_kind, episode.rejected, episode.oracle, episode.recovered) == (
        "payload_too_large",
        1,
        1,
        False,
    )


def test_versus_oracle_sums_rejected_and_oracle_over_every_episode() -> None:
    results = {
        name: replay(None, name) for name in ("rst-after-256k", "cloudflare-waf-403", "openai-128k-overflow")
    }
    summary = versus_oracle(results)
    rows = summary["rows"]
    assert summary["episodes"] == len(rows) == 3
    assert summary["rejected"] == sum(r["rejected"] for r in rows)
    assert summary["oracle"] == sum(r["oracle"] for r in rows)
    assert summary["ratio"] == summary["rejected"] / summary["oracle"]
    assert summary["mean_rejected"] == summary["rejected"] / 3
    assert summary["over_oracle"] == [r for r in rows if r["rejected"] > r["oracle"]]
    assert set(summary["by_kind"]) == {r["kind"] for r in rows}


def test_a_turn_that_keeps_out_two_culprits_is_held_to_two_blocks() -> None:
    """CRS trips on two parts of claude-code-tidy-dry-run's turn 2: the resend without the first culprit
    is refused again, a second block among the parts left."""
    result = replay("claude-code-tidy-dry-run", "crs-agent-content-withheld")
    (episode,) = [e for e in oracle_episodes(result) if e.turn == 2]
    (signal,) = episode.signals
    assert (signal.reading, signal.culprits) == ("content", culprits_kept_out(result, 2)) == ("content", 2)
    n = signal.candidates
    assert episode.oracle == (1 + math.ceil(math.log2(n))) + (1 + math.ceil(math.log2(n - 1)))
    assert episode.rejected <= episode.oracle


def test_fresh_parts_are_the_parts_the_accepted_request_did_not_carry_as_they_are() -> None:
    """New messages count, and so does a new form of an old one (a summary, a preview); a message
    resent unchanged does not, whatever its object; system messages are never candidates."""
    system, ask = Message.system("You are a coding agent."), Message.user("read the file")
    call = Message.assistant(tool_calls=[ToolCall("c1", "read_file", '{"path": "a.py"}')])
    accepted = [system, ask, call, Message.tool("c1", "print('hi')" * 200)]
    rewritten = Message.tool("c1", "[preview] print('hi') … <<ccr:" + "0" * 16 + ">>")
    request = [Message.system("You are a coding agent."), Message.user("read the file"), call, rewritten]
    assert fresh_part_count(request, accepted) == 1
    assert fresh_part_count([*request, Message.user("and now?")], accepted) == 2
    assert fresh_part_count(accepted, accepted) == 0


def test_content_withheld_before_sending_is_no_culprit_found() -> None:
    """Content identical to what the gateway refused before is withheld before it is sent (SPEC §12):
    its notice shares the withheld code, but no block was met for it."""
    result = replay("claude-code-tidy-dry-run", "crs-agent-content-withheld")
    again = Notice(CONTENT_WITHHELD_CODE, WITHHELD_AGAIN_NOTICE % "Tool result #7 (read_file, 2.0 KB)")
    found = Notice(CONTENT_WITHHELD_CODE, CONTENT_WITHHELD_NOTICE % ("403", "80.0 KB", "tool result #7"))
    base = culprits_kept_out(result, 2)
    with_again = dataclasses.replace(result, events=(*result.events, ReplayEvent(2, 1, again)))
    with_found = dataclasses.replace(result, events=(*result.events, ReplayEvent(2, 1, found)))
    assert (culprits_kept_out(with_again, 2), culprits_kept_out(with_found, 2)) == (base, base + 1)
