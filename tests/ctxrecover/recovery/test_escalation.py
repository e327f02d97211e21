"""Max-output-token escalation and continuation (SPEC §8)."""

from __future__ import annotations

import copy

import pytest

from ctxrecover.errors import ConfigError
from ctxrecover.messages import Message, ToolCall
from ctxrecover.policy import DEFAULT_POLICY, Policy
from ctxrecover.recovery.escalation import OutputEscalation

SPEC_CONTINUATION = (
    "Your response was cut off at the token limit. Resume DIRECTLY from where you stopped — do not "
    "repeat any content. Continue the implementation or explanation from the exact point of interruption."
)


def test_doubles_4096_to_8192_to_16384_then_stops() -> None:
    esc = OutputEscalation(Policy(), provider_cap=128_000)
    assert esc.next_max_tokens(4096) == 8192
    assert esc.next_max_tokens(8192) == 16384
    assert esc.next_max_tokens(16384) is None
    assert (esc.escalations, esc.total_escalations, esc.max_tokens) == (2, 2, 16384)


def test_unset_max_tokens_is_taken_as_4096() -> None:
    esc = OutputEscalation(Policy())
    assert esc.provider_cap == DEFAULT_POLICY.max_output_tokens_cap == 128_000
    assert esc.next_max_tokens(None) == 8192


def test_escalation_is_clamped_to_the_provider_cap() -> None:
    esc = OutputEscalation(Policy(), provider_cap=10_000)
    assert esc.next_max_tokens(8192) == 10_000
    assert esc.escalations == 1


def test_escalation_at_the_cap_does_not_consume_an_attempt() -> None:
    esc = OutputEscalation(Policy(), provider_cap=10_000)
    assert esc.next_max_tokens(10_000) is None
    assert esc.next_max_tokens(12_000) is None  # a user value above the cap cannot grow either
    assert esc.escalations == 0
    assert esc.next_max_tokens(4096) == 8192
    assert esc.next_max_tokens(8192) == 10_000
    assert esc.next_max_tokens(10_000) is None
    assert esc.escalations == 2


def test_escalation_count_comes_from_the_policy_and_resets_per_turn() -> None:
    assert OutputEscalation(Policy(max_token_escalations=0)).next_max_tokens(4096) is None
    esc = OutputEscalation(Policy(max_token_escalations=1))
    assert esc.next_max_tokens(4096) == 8192
    assert esc.exhausted and esc.next_max_tokens(8192) is None
    esc.start_turn()
    assert (esc.escalations, esc.max_tokens) == (0, 8192)
    assert esc.next_max_tokens(8192) == 16384
    assert esc.total_escalations == 2


def test_a_changed_user_override_wins_and_an_unchanged_one_keeps_the_escalation() -> None:
    esc = OutputEscalation(Policy())
    assert esc.observe_user_override(None) is None
    assert esc.next_max_tokens(None) == 8192
    assert esc.observe_user_override(None) == 8192  # unchanged: the escalation stays
    assert esc.observe_user_override(2000) == 2000  # changed: the user wins
    assert esc.observe_user_override(2000) == 2000
    assert esc.next_max_tokens(2000) == 4000
    assert esc.observe_user_override(2000) == 4000
    assert esc.observe_user_override(None) is None  # clearing the setting is a change too


def test_the_first_observation_only_records_the_user_setting() -> None:
    esc = OutputEscalation(Policy())
    assert esc.next_max_tokens(2000) == 4000
    assert esc.observe_user_override(2000) == 4000


def test_continuation_appends_the_partial_answer_and_the_exact_request() -> None:
    history = [Message.system("sys"), Message.user("write the module")]
    snapshot = copy.deepcopy(history)
    partial = Message.assistant("def main():\n    return")
    out = OutputEscalation.continuation(history, partial)
    assert out[:2] == history and out[2] is partial
    assert out[3].role == "user"
    assert out[3].content == SPEC_CONTINUATION
    assert history == snapshot and len(history) == 2


def test_continuation_leaves_out_cut_tool_calls() -> None:
    partial = Message.assistant("Reading it", tool_calls=[ToolCall("c1", "read_file", '{"path": "a.')])
    out = OutputEscalation.continuation([Message.user("go")], partial)
    assert out[1].content == "Reading it" and out[1].tool_calls == ()
    only_calls = Message.assistant(tool_calls=[ToolCall("c1", "read_file", '{"pa')])
    out = OutputEscalation.continuation([Message.user("go")], only_calls)
    assert [m.content for m in out] == ["go", SPEC_CONTINUATION]


@pytest.mark.parametrize(
    ("build", "match"),
    [
        (lambda: OutputEscalation(Policy(), provider_cap=0), "provider_cap"),
        (lambda: OutputEscalation(Policy()).next_max_tokens(0), "positive max_tokens"),
        (lambda: OutputEscalation(Policy()).observe_user_override(-1), "positive int"),
        (lambda: OutputEscalation.continuation([], Message.user("x")), "assistant message"),
    ],
)
def test_bad_arguments_say_how_to_fix(build, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        build()


def test_two_sessions_do_not_share_escalation_state() -> None:
    a, b = OutputEscalation(Policy()), OutputEscalation(Policy())
    a.next_max_tokens(4096)
    assert (b.escalations, b.max_tokens) == (0, None)
    assert DEFAULT_POLICY == Policy()


# -- SPEC §11: the output cap a provider states, the room the window leaves ----------------------------


def test_escalation_never_exceeds_the_room_the_window_leaves_after_the_input() -> None:
    esc = OutputEscalation(Policy(), provider_cap=64_000)
    assert esc.next_max_tokens(8192, room=10_000) == 10_000
    assert esc.next_max_tokens(10_000, room=10_000) is None  # cannot grow: no attempt spent
    assert esc.escalations == 1


def test_a_learned_output_cap_clamps_escalation_and_the_users_own_setting() -> None:
    esc = OutputEscalation(Policy(), provider_cap=128_000)
    assert esc.observe_user_override(200_000) == 200_000
    esc.learn_output_cap(16_384)
    assert esc.cap == 16_384 and esc.max_tokens == 16_384
    assert esc.observe_user_override(200_000) == 16_384  # the provider said so
    assert esc.next_max_tokens(16_384) is None
    esc.learn_output_cap(32_000)  # a looser value never loosens what was learned
    assert esc.learned_cap == 16_384
    assert "learned_cap=16384" in repr(esc)


@pytest.mark.parametrize("bad", [0, -1, True, 2.5])
def test_a_learned_output_cap_must_be_a_positive_int(bad: object) -> None:
    with pytest.raises(ConfigError, match="learn_output_cap"):
        OutputEscalation(Policy()).learn_output_cap(bad)  # type: ignore[arg-type]
