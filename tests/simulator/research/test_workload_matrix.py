"""The matrix tier's machinery: the oracle of rejected requests, the invariants' checks, [expect] apart."""

from __future__ import annotations

import dataclasses

import pytest

from simulator.proxy.expectation import Expectation, Observed, expectation_from_table
from simulator.proxy.fault_specs import ScenarioError
from simulator.proxy.scenario import list_scenarios, load_scenario
from simulator.replay import FloorFailure, replay
from simulator.research.ledger import Losses
from simulator.research.workload_matrix import check_run, expectation_split, matrix_run


# -- the invariants, each on a real replay and on the same run broken the way it guards against ------------
@pytest.fixture(scope="module")
def floor_run():  # type: ignore[no-untyped-def]
    return replay("coding-120k", "floor-too-big")


def test_a_run_that_holds_every_invariant_has_no_violation(floor_run) -> None:  # type: ignore[no-untyped-def]
    assert floor_run.outcome == "fail_fast_floor" and floor_run.floor is not None
    assert check_run(floor_run) == []


def test_a_floor_below_the_gateways_limit_is_a_violation(floor_run) -> None:  # type: ignore[no-untyped-def]
    small = dataclasses.replace(floor_run.floor, over_bytes=1000)
    (violation,) = check_run(dataclasses.replace(floor_run, floor=small))
    assert violation.invariant == "real_floor"
    assert violation.detail == (
        f"turn 0: the {small.over} (1,000 bytes) was named over the limit; "
        "the gateway's limit is 131,072 bytes"
    )


def test_lost_chars_are_a_violation(floor_run) -> None:  # type: ignore[no-untyped-def]
    broken = dataclasses.replace(floor_run, chars_lost=5, losses=Losses(image=5))
    assert [(v.invariant, v.detail) for v in check_run(broken)] == [
        ("nothing_lost", "5 chars lost (image 5)")
    ]


def test_an_episode_over_the_oracle_is_a_violation() -> None:
    result = replay("screens-600k", "rst-after-128k-small-history")  # resets: the first earns one retry
    assert check_run(result) == []
    records = list(result.records)
    rejected = next(i for i, r in enumerate(records) if r.outcome.startswith("rejected:"))
    again = dataclasses.replace(records[rejected], attempt=records[rejected].attempt)
    doubled = dataclasses.replace(
        result, records=(*records[: rejected + 1], again, again, *records[rejected + 1 :])
    )
    vars(doubled).pop("frame", None)
    (violation,) = check_run(doubled)
    assert (violation.invariant, violation.detail) == (
        "oracle",
        f"turn {records[rejected].turn}: 4 rejected request(s) for a transient_network episode; "
        "the oracle needs 2",
    )


def test_a_block_page_read_as_size_holds_the_oracle_with_its_refused_size_experiment() -> None:
    """Issue 22: the first size episode of a block page costs the block and the refused experiment."""
    result = replay(None, "cloudflare-waf-403")
    assert "experiment:blocked" in {r.outcome for r in result.records}
    assert check_run(result) == []
    records = list(result.records)
    blocked = next(i for i, r in enumerate(records) if r.outcome == "experiment:blocked")
    again = records[blocked]  # the experiment refused once more
    doubled = dataclasses.replace(result, records=(*records[: blocked + 1], again, *records[blocked + 1 :]))
    vars(doubled).pop("frame", None)
    (violation,) = check_run(doubled)
    assert violation.detail == (
        f"turn {again.turn}: 3 rejected request(s) for a waf_rejection episode; the oracle needs 2"
    )


# -- [expect] rows that describe a scenario's own workload -----------------------------------------------
def test_own_workload_rows_are_reported_apart() -> None:
    expect = Expectation(
        "recovered", cap_learned=True, requests_over_cap=0, own_workload=("outcome", "cap_learned")
    )
    seen = Observed(outcome="ok", learned_cap=None, requests_over_cap=2)
    assert [field for field, _ in expect.field_problems(seen)] == [
        "outcome",
        "cap_learned",
        "requests_over_cap",
    ]
    result = replay("openai-chat-porto-trip", "tight-cap-1.5x-system-prompt")
    general, own = expectation_split(result)
    assert all(row in result.scenario.expect.own_workload for row in ("outcome", "failure_kind"))
    assert general == [] and own  # the cap never fires on 3 short turns: only own-workload rows miss
    cell = matrix_run(result)
    assert cell.expect_own_workload == tuple(own) and cell.violations == ()


def test_own_workload_names_fields_the_table_sets() -> None:
    with pytest.raises(ScenarioError, match="own_workload names 'cap_learned', which this"):
        expectation_from_table({"outcome": "ok", "own_workload": ["cap_learned"]}, "x: [expect]")
    with pytest.raises(ScenarioError, match="own_workload names 'size', which is not an"):
        expectation_from_table({"outcome": "ok", "own_workload": ["size"]}, "x: [expect]")


def test_every_bundled_scenario_marks_what_only_its_workload_shows() -> None:
    """A scenario whose fault fires only at some size or turn says which of its rows depend on that."""
    unmarked = [name for name in list_scenarios() if not load_scenario(name).expect.own_workload]
    assert unmarked == ["header-431", "rate-limit-429"]  # these hold on any transcript


def test_a_fail_fast_floor_names_its_part_and_size(floor_run) -> None:  # type: ignore[no-untyped-def]
    assert isinstance(floor_run.floor, FloorFailure)
    assert floor_run.floor.over == "smallest_request" and floor_run.floor.over_bytes >= 131_072  # the 413 cap
