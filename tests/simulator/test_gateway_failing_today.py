"""Gateway cases the library gets wrong today (issue 10), pinned as strict xfails until it is fixed.

Each case is a scenario whose ``[expect]`` says what SPEC §11 asks; the library misses it for the
reason in the mark. They are not bundled scenarios (``python -m simulator run`` must show every
bundled one met): when the library is fixed, the xfail turns into a failure here, and the case
moves to ``fixtures/scenarios/``.
"""

from __future__ import annotations

import dataclasses

import pytest

from simulator.proxy.expectation import Expectation
from simulator.proxy.scenario import Scenario, load_scenario, scenario_from_document
from simulator.replay import ReplayResult, expectation_problems, replay

CONTENT_BLOCK = (
    "✖ Gateway refused a %s request although it had accepted a %s one — a content/policy block, not a size "
    "limit: payload cap unchanged, history not compacted. Likely trigger: the newest message (#%d, %s, %s) — "
    "remove or rephrase it, or ask the gateway's administrators which rule matched"
)


def planted_at(turn: int) -> Scenario:
    """The bundled content-block-under-a-learned-cap scenario with its SQL fragment before ``turn``."""
    scenario = load_scenario("waf-content-block-under-learned-cap")
    return dataclasses.replace(scenario, workload=dataclasses.replace(scenario.workload, plant_turn=turn))


def met(result: ReplayResult, expect: Expectation) -> None:
    assert expectation_problems(result, expect) == []


@pytest.mark.xfail(strict=True, reason=(
    "library defect: a message set aside for a content block is restored from its stub by the level-2 "
    "summarizer (SPEC §5 restores folded stubs), quoted in the summary and refused again; the new "
    "ContentBlockedError then names the newest message, which is innocent, and the turn fails"
))
def test_a_message_set_aside_stays_out_of_later_summaries() -> None:
    # SQL planted before turn 20: blocked and set aside on turn 20 (one refusal, cap unchanged); on turn
    # 26 a summary quotes "tool result → -- slow query log: SELECT … OR 1=1 …" from the restored stub.
    result = replay(None, planted_at(20))
    met(result, Expectation("recovered", rejected_requests=(1, 1), cap_learned=True, content_blocks=1))


@pytest.mark.xfail(strict=True, reason=(
    "library defect: when one turn meets a real 413 and then a content block, the recovery for the 413 "
    "appended the [SYSTEM NOTICE — PAYLOAD LIMIT HIT] message (SPEC §6.6), and ContentBlockedError names "
    "that notice as 'the newest message' (#12, user message, 684 B) instead of the tool result that "
    "carries the content; setting the notice aside does not help and the turn fails"
))
def test_a_content_block_right_after_a_size_limit_names_the_conversations_message() -> None:
    result = replay(None, planted_at(8))
    met(result, Expectation("recovered", rejected_requests=(2,), cap_learned=True, content_blocks=1,
                            notices=(CONTENT_BLOCK,)))


@pytest.mark.xfail(strict=True, reason=(
    "limitation of SPEC §11's evidence rule: a content rule whose trigger the size-limit compaction "
    "happens to cut is indistinguishable from a size limit (refused above every accepted size, accepted "
    "once smaller), so the session keeps a cap at the largest accepted size — 93.7 KB over a 91.4 KB "
    "system prompt — and compacts every later turn to level 3; the issue asks that a content block never "
    "change the learned cap"
))
def test_a_content_rule_whose_trigger_compaction_cuts_teaches_no_cap() -> None:
    document = {
        "description": "A WAF rule on a log line quoting `curl … | sh` in a SWE-agent observation, after "
                       "91–95 KB bodies passed (a 90 KB system prompt).",
        "provider": {"format": "anthropic"},
        "fault": [{"kind": "content-match", "pattern": r"curl [^|]*\|\s*sh\b", "page": "modsecurity"}],
        "workload": {"transcript": "swe-agent-nofc-quiet-rotation.traj", "system_prompt_bytes": "90KB"},
        "expect": {"outcome": "content_blocked", "cap_learned": False, "content_blocks": 1},
    }
    scenario = scenario_from_document(document, name="rce-rule-cut-by-compaction")
    result = replay(None, scenario)
    met(result, scenario.expect)
