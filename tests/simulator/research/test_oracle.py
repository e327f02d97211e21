"""The oracle of rejected requests: the fewest a lawful policy needs per episode (SPEC §§6, 11, 12)."""

from __future__ import annotations

import pytest

from simulator.replay import replay
from simulator.research.metrics import episodes
from simulator.research.oracle import (
    ORACLE_RULES,
    Signal,
    content_candidates,
    fewest_rejected,
    oracle_episodes,
    oracle_rejections,
    versus_oracle,
)


@pytest.mark.parametrize(
    ("signal", "first_of_kind", "fewest"),
    [
        (Signal("payload_too_large"), True, 1),  # §6: the 413 teaches the cap, the retry fits it
        (Signal("context_overflow"), True, 1),
        (Signal("waf_rejection"), True, 1),  # a block page the size experiment reads as size (§11, §12)
        (Signal("output_limit"), True, 1),
        (Signal("transient_network"), True, 2),  # §2.4, §11: one plain retry first
        (Signal("transient_network"), False, 1),  # §11: a later one is payload evidence at once
        (Signal("waf_rejection", "content", 1), True, 1),  # §12: 1 + ⌈log2 n⌉
        (Signal("waf_rejection", "content", 2), True, 2),
        (Signal("waf_rejection", "content", 5), True, 4),
        (Signal("waf_rejection", "content", 8), True, 4),
        (Signal("waf_rejection", "content", 9), True, 5),
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
        "ambiguous_first",
        "ambiguous_later",
        "content",
        "policy_or_floor",
    }
    assert all("§" in sections for _, sections in ORACLE_RULES.values())


def test_only_the_first_ambiguous_failure_of_a_session_earns_the_plain_retry() -> None:
    kinds = [
        ("transient_network", False, 0),
        ("payload_too_large", False, 0),
        ("transient_network", False, 0),
        ("waf_rejection", True, 12),
    ]
    assert oracle_rejections(kinds) == [2, 1, 1, 1 + 4]


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
    """The block search's experiments are answered (cut at experiment_max_tokens): they split the metrics'
    episodes but not the oracle's, which sums the 413's one request and the content search's."""
    result = replay(None, "waf-content-block-right-after-a-413")
    (episode,) = oracle_episodes(result)
    candidates = content_candidates(result, episode.turn)
    assert [(s.kind, s.reading) for s in episode.signals] == [
        ("payload_too_large", None),
        ("waf_rejection", "content"),
    ]
    assert episode.signals[1].candidates == candidates > 1
    assert episode.oracle == 1 + fewest_rejected(episode.signals[1], first_of_kind=True)
    table = episodes(result.frame)
    assert len(table) > 1 and int(table["rejected_requests"].sum()) == episode.rejected


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
