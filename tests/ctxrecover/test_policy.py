"""Policy: seed defaults, validation, replace(), and from_env() with bad values (SPEC §10)."""

from __future__ import annotations

import dataclasses
import math
import re
import warnings

import pytest

from ctxrecover.errors import ConfigError
from ctxrecover.policy import CHAT_POLICY, DEFAULT_POLICY, ENV_VARIABLES, ConfigWarning, Policy

SPEC_ENV_VARIABLES = {
    "CHATCLI_CONTEXT_WINDOW",
    "CHATCLI_MAX_RECOVERY_ATTEMPTS",
    "CHATCLI_MAX_TOKEN_ESCALATIONS",
    "CHATCLI_EMERGENCY_KEEP_MESSAGES",
    "CHATCLI_MAX_PAYLOAD",
    "CHATCLI_MICROCOMPACT_TRUNCATE_TURNS",
    "CHATCLI_MICROCOMPACT_SUMMARIZE_TURNS",
    "CHATCLI_MICROCOMPACT_HEAD_CHARS",
    "CHATCLI_MICROCOMPACT_TAIL_CHARS",
    "CHATCLI_MICROCOMPACT_MIN_CONTENT",
    "CHATCLI_TOOL_RESULT_BUDGET_CHARS",
    "CHATCLI_TOOL_RESULT_MAX_CHARS",
    "CHATCLI_COMPACT_MODEL",
    "CHATCLI_CONTEXT_ENGINE",
    "CHATCLI_SKILL_INJECT_BUDGET",
    "CHATCLI_SKILL_AGE_TURNS",
    "CHATCLI_MAX_BLOCKED_REQUESTS",  # SPEC §12
}
INTEGER_VARIABLES = sorted(
    v
    for v in SPEC_ENV_VARIABLES
    if v not in {"CHATCLI_MAX_PAYLOAD", "CHATCLI_COMPACT_MODEL", "CHATCLI_CONTEXT_ENGINE"}
)

SEED_DEFAULTS = {
    "context_window": None,
    "chars_per_token": 4.0,
    "budget_ratio": 0.60,
    "keep_recent": 8,
    "chat_budget_ratio": 0.75,
    "chat_keep_recent": 10,
    "preflight_budget_ratio": 0.40,
    "manual_budget_ratio": 0.50,
    "payload_cap": 0,
    "payload_cap_headroom": 0.7,
    "max_recovery_attempts": 3,
    "max_blocked_requests": 6,  # SPEC §12
    "experiment_max_tokens": 16,
    "max_token_escalations": 2,
    "emergency_keep_messages": 10,
    "nuclear_keep_messages": 4,
    "nuclear_message_max_chars": 4000,
    "level1_budget_factor": 0.5,
    "level1_assistant_max_chars": 5000,
    "learned_cap_factor": 0.75,
    "cap_strategy": "three_quarters",  # SPEC §11: the seed's ¾ rule is the default strategy
    "bisection_tolerance": 0.02,
    "retry_min_reduction": 0.005,  # SPEC §11: a retry a hair below a rejection is not sent
    "assumed_payload_cap": 4 * 1024 * 1024,
    "floor_warning_fraction": 0.75,
    "preflight_cap_fraction": 0.85,
    "uncapped_warning_bytes": int(2.5 * 1024 * 1024),
    "suspected_payload_history_chars": 500_000,
    "microcompact_truncate_turns": 2,
    "microcompact_summarize_turns": 4,
    "microcompact_head_chars": 2000,
    "microcompact_tail_chars": 500,
    "microcompact_min_content": 3000,
    "tool_result_budget_chars": 200_000,
    "tool_result_max_chars": 20_000,
    "tool_result_preview_head": 4000,
    "tool_result_preview_tail": 1000,
    "tool_result_turn_floor": 5200,
    "verbatim_budget_fraction": 0.25,
    "summarizer_backoff_compactions": 2,
    "summarizer_retries": 1,
    "summarizer_timeout_s": 180.0,
    "summary_min_messages": 4,
    # Decision (issue 15, P6): a summary keeps earlier summaries as they are and covers what is new
    "summary_scope": "incremental",
    "summary_target_ratio": 0.75,
    "summaries_budget_fraction": 0.1,
    "undo_depth": 5,
    "shrink_min_chars": 400,
    "default_max_tokens": 4096,
    "max_output_tokens_cap": 128_000,
    "skill_inject_budget": 24_000,
    "skill_age_turns": 6,
    "compact_model": None,
    "context_engine": None,
}

GOOD_ENV_VALUES = [
    ("CHATCLI_CONTEXT_WINDOW", "200000", "context_window", 200_000),
    ("CHATCLI_MAX_RECOVERY_ATTEMPTS", "5", "max_recovery_attempts", 5),
    ("CHATCLI_MAX_TOKEN_ESCALATIONS", "3", "max_token_escalations", 3),
    ("CHATCLI_EMERGENCY_KEEP_MESSAGES", "12", "emergency_keep_messages", 12),
    ("CHATCLI_MAX_PAYLOAD", "5MB", "payload_cap", 5_242_880),
    ("CHATCLI_MAX_PAYLOAD", " 512kb ", "payload_cap", 524_288),
    ("CHATCLI_MAX_PAYLOAD", "5", "payload_cap", 5_242_880),
    ("CHATCLI_MICROCOMPACT_TRUNCATE_TURNS", "3", "microcompact_truncate_turns", 3),
    ("CHATCLI_MICROCOMPACT_SUMMARIZE_TURNS", "6", "microcompact_summarize_turns", 6),
    ("CHATCLI_MICROCOMPACT_HEAD_CHARS", "1500", "microcompact_head_chars", 1500),
    ("CHATCLI_MICROCOMPACT_TAIL_CHARS", "300", "microcompact_tail_chars", 300),
    ("CHATCLI_MICROCOMPACT_MIN_CONTENT", " 4000 ", "microcompact_min_content", 4000),
    ("CHATCLI_TOOL_RESULT_BUDGET_CHARS", "100000", "tool_result_budget_chars", 100_000),
    ("CHATCLI_TOOL_RESULT_MAX_CHARS", "10000", "tool_result_max_chars", 10_000),
    ("CHATCLI_COMPACT_MODEL", "openai:gpt-4o-mini", "compact_model", "openai:gpt-4o-mini"),
    (
        "CHATCLI_COMPACT_MODEL",
        "bedrock:anthropic.claude-3-haiku-20240307-v1:0",
        "compact_model",
        "bedrock:anthropic.claude-3-haiku-20240307-v1:0",
    ),
    ("CHATCLI_CONTEXT_ENGINE", "provider", "context_engine", "provider"),
    ("CHATCLI_CONTEXT_ENGINE", "Provider", "context_engine", "provider"),
    ("CHATCLI_CONTEXT_ENGINE", "mcp:ctx-engine", "context_engine", "mcp:ctx-engine"),
    (
        "CHATCLI_CONTEXT_ENGINE",
        "http://127.0.0.1:8765/compact",
        "context_engine",
        "http://127.0.0.1:8765/compact",
    ),
    ("CHATCLI_SKILL_INJECT_BUDGET", "12000", "skill_inject_budget", 12_000),
    ("CHATCLI_SKILL_AGE_TURNS", "3", "skill_age_turns", 3),
    ("CHATCLI_MAX_BLOCKED_REQUESTS", "2", "max_blocked_requests", 2),
]


def warning_texts(record: pytest.WarningsRecorder) -> list[str]:
    return [str(w.message) for w in record if issubclass(w.category, ConfigWarning)]


# -- defaults, presets, fields ---------------------------------------------------


@pytest.mark.parametrize(("name", "value"), sorted(SEED_DEFAULTS.items()))
def test_default_policy_holds_the_seed_default(name: str, value: object) -> None:
    assert getattr(Policy(), name) == value
    assert getattr(DEFAULT_POLICY, name) == value


def test_fields_lists_every_knob_in_order_and_not_env_problems() -> None:
    assert Policy.fields() == tuple(SEED_DEFAULTS)
    assert "env_problems" not in Policy.fields()


def test_chat_preset_differs_from_default_only_in_budget_and_keep_recent() -> None:
    assert CHAT_POLICY.budget_ratio == 0.75
    assert CHAT_POLICY.keep_recent == 10
    assert CHAT_POLICY == DEFAULT_POLICY.replace(budget_ratio=0.75, keep_recent=10)
    assert DEFAULT_POLICY == Policy()


def test_policy_is_frozen() -> None:
    policy = Policy()
    with pytest.raises(dataclasses.FrozenInstanceError):
        policy.keep_recent = 3  # type: ignore[misc]
    with pytest.raises((AttributeError, TypeError)):
        policy.new_knob = 1  # type: ignore[attr-defined]
    assert policy.keep_recent == 8


def test_policy_is_hashable_and_compares_by_value() -> None:
    assert {Policy(): "a"}[Policy()] == "a"
    assert Policy(keep_recent=3) != Policy()


def test_integral_ratio_is_stored_as_float() -> None:
    policy = Policy(budget_ratio=1)
    assert policy.budget_ratio == 1.0
    assert isinstance(policy.budget_ratio, float)


def test_zero_recovery_attempts_is_allowed_for_no_recovery_baselines() -> None:
    assert Policy(max_recovery_attempts=0, max_token_escalations=0).max_recovery_attempts == 0


# -- validation ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({"budget_ratio": 0}, "Policy.budget_ratio must be a fraction in (0, 1], e.g. 0.5 (got 0)"),
        ({"budget_ratio": 1.5}, "Policy.budget_ratio must be a fraction in (0, 1], e.g. 0.5 (got 1.5)"),
        ({"chat_budget_ratio": math.nan}, "Policy.chat_budget_ratio must be a fraction in (0, 1]"),
        ({"payload_cap_headroom": True}, "Policy.payload_cap_headroom must be a fraction in (0, 1]"),
        ({"verbatim_budget_fraction": "0.25"}, "Policy.verbatim_budget_fraction must be a fraction"),
        (
            {"emergency_keep_messages": 1},
            "Policy.emergency_keep_messages must be an integer >= 2 (got 1): keep at least 2 so the "
            "history can still start with a user message and hold a reply",
        ),
        ({"keep_recent": 0}, "Policy.keep_recent must be an integer >= 1 (got 0)"),
        ({"keep_recent": 2.5}, "Policy.keep_recent must be an integer >= 1 (got 2.5)"),
        ({"keep_recent": True}, "Policy.keep_recent must be an integer >= 1 (got True)"),
        ({"max_recovery_attempts": -1}, "Policy.max_recovery_attempts must be an integer >= 0 (got -1)"),
        ({"payload_cap": -5}, "Policy.payload_cap must be an integer >= 0 (got -5)"),
        ({"context_window": 0}, "Policy.context_window must be a positive number of tokens, or None"),
        ({"chars_per_token": 0}, "Policy.chars_per_token must be a positive finite number (got 0)"),
        ({"summarizer_timeout_s": math.inf}, "Policy.summarizer_timeout_s must be a positive finite number"),
        ({"compact_model": "gpt-4o"}, "Policy.compact_model must look like 'provider:model'"),
        (
            {"context_engine": "mcp:"},
            "Policy.context_engine must be 'provider', 'mcp:<server>' or an http(s) URL",
        ),
        ({"context_engine": "ftp://host/x"}, "Policy.context_engine must be 'provider'"),
        (
            {"summary_scope": "everything"},
            "Policy.summary_scope must be one of 'segment', 'incremental', 'target' (got 'everything')",
        ),
        ({"summary_target_ratio": 0.0}, "Policy.summary_target_ratio must be a fraction in (0, 1]"),
        ({"summaries_budget_fraction": 1.5}, "Policy.summaries_budget_fraction must be a fraction in (0, 1]"),
        (
            {"cap_strategy": "halving"},
            "Policy.cap_strategy must be one of 'three_quarters', 'bisection', 'none' (got 'halving')",
        ),
        ({"bisection_tolerance": 0}, "Policy.bisection_tolerance must be a fraction in (0, 1]"),
    ],
)
def test_invalid_value_raises_config_error_that_says_how_to_fix(changes: dict, expected: str) -> None:
    with pytest.raises(ConfigError) as info:
        Policy(**changes)
    assert expected in str(info.value)
    assert isinstance(info.value, ValueError)
    with pytest.raises(ConfigError):
        DEFAULT_POLICY.replace(**changes)


# -- replace ------------------------------------------------------------------------------


def test_replace_returns_a_new_policy_and_leaves_the_original_untouched() -> None:
    original = Policy()
    derived = original.replace(keep_recent=4, budget_ratio=0.5)
    assert (derived.keep_recent, derived.budget_ratio) == (4, 0.5)
    assert (original.keep_recent, original.budget_ratio) == (8, 0.60)
    assert DEFAULT_POLICY == Policy()


def test_replace_with_unknown_field_lists_valid_names() -> None:
    with pytest.raises(ConfigError) as info:
        DEFAULT_POLICY.replace(keep_recnet=4)
    message = str(info.value)
    assert "'keep_recnet'" in message
    assert "valid fields:" in message
    assert all(name in message for name in ("keep_recent", "emergency_keep_messages", "context_engine"))


# -- from_env: good values -------------------------------------------------------------


def test_env_table_is_exactly_the_documented_variables() -> None:
    assert set(ENV_VARIABLES) == SPEC_ENV_VARIABLES
    assert set(ENV_VARIABLES.values()) <= set(Policy.fields())
    with pytest.raises(TypeError):
        ENV_VARIABLES["CHATCLI_X"] = "keep_recent"  # type: ignore[index]


@pytest.mark.parametrize(("variable", "raw", "name", "expected"), GOOD_ENV_VALUES)
def test_good_env_value_is_applied(variable: str, raw: str, name: str, expected: object) -> None:
    policy = Policy.from_env({variable: raw})
    assert getattr(policy, name) == expected
    assert policy.env_problems == ()
    assert policy == DEFAULT_POLICY.replace(**{name: expected})


def test_from_env_reads_os_environ_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    for variable in SPEC_ENV_VARIABLES:
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("CHATCLI_EMERGENCY_KEEP_MESSAGES", "7")
    monkeypatch.setenv("CHATCLI_MAX_PAYLOAD", "2.5MB")
    policy = Policy.from_env()
    assert (policy.emergency_keep_messages, policy.payload_cap) == (7, 2_621_440)


def test_unrelated_variables_are_ignored() -> None:
    policy = Policy.from_env({"CHATCLI_KEEP_RECENT": "3", "PATH": "/bin"})
    assert policy == DEFAULT_POLICY
    assert policy.env_problems == ()


def test_from_env_over_a_base_keeps_the_base_values() -> None:
    policy = Policy.from_env({"CHATCLI_MAX_RECOVERY_ATTEMPTS": "1"}, base=CHAT_POLICY)
    assert (policy.budget_ratio, policy.keep_recent, policy.max_recovery_attempts) == (0.75, 10, 1)


@pytest.mark.parametrize(
    "variable", ["CHATCLI_MAX_PAYLOAD", "CHATCLI_COMPACT_MODEL", "CHATCLI_CONTEXT_ENGINE"]
)
def test_empty_optional_value_means_unset_without_a_warning(variable: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        policy = Policy.from_env({variable: ""})
    assert policy == DEFAULT_POLICY
    assert policy.env_problems == ()


# -- from_env: bad values --------------------------------------------------------------------


@pytest.mark.parametrize("raw", ["abc", "-3", "0", "", "2.5", "1e3"])
@pytest.mark.parametrize("variable", INTEGER_VARIABLES)
def test_bad_integer_keeps_default_and_warns_naming_variable_and_value(variable: str, raw: str) -> None:
    name = ENV_VARIABLES[variable]
    with pytest.warns(ConfigWarning) as record:
        policy = Policy.from_env({variable: raw})
    [text] = warning_texts(record)
    assert text.startswith(f"{variable}={raw!r} ignored (")
    assert f"keeping the default {getattr(DEFAULT_POLICY, name)!r}" in text
    assert getattr(policy, name) == getattr(DEFAULT_POLICY, name)
    assert policy.env_problems == (text,)


def test_warning_points_at_the_caller() -> None:
    with pytest.warns(ConfigWarning) as record:
        Policy.from_env({"CHATCLI_MAX_RECOVERY_ATTEMPTS": "abc"})
    assert record[0].filename == __file__


@pytest.mark.parametrize(
    ("variable", "raw", "expected"),
    [
        (
            "CHATCLI_CONTEXT_WINDOW",
            "abc",
            "CHATCLI_CONTEXT_WINDOW='abc' ignored (not a positive integer); keeping the default None "
            "(the window comes from the model catalog)",
        ),
        (
            "CHATCLI_EMERGENCY_KEEP_MESSAGES",
            "1",
            "CHATCLI_EMERGENCY_KEEP_MESSAGES='1' ignored (Policy.emergency_keep_messages must be an integer "
            ">= 2 (got 1): keep at least 2 so the history can still start with a user message and hold a "
            "reply); keeping the default 10",
        ),
        (
            "CHATCLI_MAX_PAYLOAD",
            "0",
            "CHATCLI_MAX_PAYLOAD='0' ignored (not a positive size such as 5MB, 512KB or 5 (MB)); "
            "keeping the default 0 (no payload cap)",
        ),
        ("CHATCLI_MAX_PAYLOAD", "abc", "CHATCLI_MAX_PAYLOAD='abc' ignored (not a positive size"),
        ("CHATCLI_MAX_PAYLOAD", "-3", "CHATCLI_MAX_PAYLOAD='-3' ignored (not a positive size"),
        ("CHATCLI_MAX_PAYLOAD", "0MB", "CHATCLI_MAX_PAYLOAD='0MB' ignored (not a positive size"),
        (
            "CHATCLI_COMPACT_MODEL",
            "gpt-4o-mini",
            "CHATCLI_COMPACT_MODEL='gpt-4o-mini' ignored (not of the form provider:model "
            "(e.g. openai:gpt-4o-mini)); keeping the default None (the conversation's own model summarizes)",
        ),
        ("CHATCLI_COMPACT_MODEL", "openai:", "CHATCLI_COMPACT_MODEL='openai:' ignored (not of the form"),
        ("CHATCLI_COMPACT_MODEL", ":gpt-4o", "CHATCLI_COMPACT_MODEL=':gpt-4o' ignored (not of the form"),
        (
            "CHATCLI_CONTEXT_ENGINE",
            "engine",
            "CHATCLI_CONTEXT_ENGINE='engine' ignored (not 'provider', 'mcp:<server>' or an http(s) URL); "
            "keeping the default None (the built-in summarizer)",
        ),
        ("CHATCLI_CONTEXT_ENGINE", "mcp:", "CHATCLI_CONTEXT_ENGINE='mcp:' ignored (not 'provider'"),
        ("CHATCLI_CONTEXT_ENGINE", "http://", "CHATCLI_CONTEXT_ENGINE='http://' ignored (not 'provider'"),
        ("CHATCLI_CONTEXT_ENGINE", "ftp://h/x", "CHATCLI_CONTEXT_ENGINE='ftp://h/x' ignored (not 'provider'"),
    ],
)
def test_bad_value_warning_text(variable: str, raw: str, expected: str) -> None:
    with pytest.warns(ConfigWarning, match=re.escape(expected)) as record:
        policy = Policy.from_env({variable: raw})
    assert len(warning_texts(record)) == 1
    assert policy == DEFAULT_POLICY


def test_all_variables_garbage_gives_defaults_and_one_warning_per_variable() -> None:
    env = {variable: "garbage!" for variable in SPEC_ENV_VARIABLES}
    with pytest.warns(ConfigWarning) as record:
        policy = Policy.from_env(env)
    texts = warning_texts(record)
    assert len(texts) == len(SPEC_ENV_VARIABLES)
    assert sorted(t.split("=", 1)[0] for t in texts) == sorted(SPEC_ENV_VARIABLES)
    assert all("='garbage!' ignored (" in t for t in texts)
    assert policy == DEFAULT_POLICY
    assert policy.env_problems == tuple(texts)


def test_env_problems_do_not_affect_equality_and_survive_replace() -> None:
    with pytest.warns(ConfigWarning):
        policy = Policy.from_env({"CHATCLI_SKILL_AGE_TURNS": "-3"})
    assert policy == DEFAULT_POLICY
    assert hash(policy) == hash(DEFAULT_POLICY)
    assert len(policy.replace(keep_recent=3).env_problems) == 1


def test_good_and_bad_values_together_apply_the_good_ones() -> None:
    env = {"CHATCLI_MAX_TOKEN_ESCALATIONS": "4", "CHATCLI_TOOL_RESULT_MAX_CHARS": "0"}
    with pytest.warns(ConfigWarning, match="CHATCLI_TOOL_RESULT_MAX_CHARS='0'"):
        policy = Policy.from_env(env)
    assert (policy.max_token_escalations, policy.tool_result_max_chars) == (4, 20_000)


# -- ordered pairs ---------------------------------------------------------------


def test_an_inverted_microcompact_pair_warns_once_naming_both_variables_and_keeps_both_defaults() -> None:
    env = {"CHATCLI_MICROCOMPACT_TRUNCATE_TURNS": "5", "CHATCLI_MICROCOMPACT_SUMMARIZE_TURNS": "2"}
    with pytest.warns(ConfigWarning) as record:
        policy = Policy.from_env(env)
    [text] = warning_texts(record)
    assert text == (
        "CHATCLI_MICROCOMPACT_TRUNCATE_TURNS=5 and CHATCLI_MICROCOMPACT_SUMMARIZE_TURNS=2 ignored "
        "(microcompact_truncate_turns must be <= microcompact_summarize_turns: old tool results are "
        "previewed before they are summarized); keeping the defaults 2 and 4"
    )
    assert (policy.microcompact_truncate_turns, policy.microcompact_summarize_turns) == (2, 4)
    assert policy.env_problems == (text,)


def test_one_variable_that_inverts_the_pair_against_the_other_default_is_refused_too() -> None:
    with pytest.warns(ConfigWarning, match="CHATCLI_MICROCOMPACT_TRUNCATE_TURNS=6 and "):
        policy = Policy.from_env({"CHATCLI_MICROCOMPACT_TRUNCATE_TURNS": "6"})
    assert (policy.microcompact_truncate_turns, policy.microcompact_summarize_turns) == (2, 4)


def test_an_ordered_pair_from_the_environment_applies_without_a_warning(
    recwarn: pytest.WarningsRecorder,
) -> None:
    env = {"CHATCLI_MICROCOMPACT_TRUNCATE_TURNS": "3", "CHATCLI_MICROCOMPACT_SUMMARIZE_TURNS": "3"}
    policy = Policy.from_env(env)
    assert (policy.microcompact_truncate_turns, policy.microcompact_summarize_turns) == (3, 3)
    assert warning_texts(recwarn) == [] and policy.env_problems == ()


def test_constructing_an_inverted_pair_raises_naming_both_fields() -> None:
    with pytest.raises(
        ConfigError,
        match=r"Policy.microcompact_truncate_turns \(5\) must be <= "
        r"Policy.microcompact_summarize_turns \(2\)",
    ):
        Policy(microcompact_truncate_turns=5, microcompact_summarize_turns=2)
    with pytest.raises(ConfigError, match="microcompact_truncate_turns"):
        DEFAULT_POLICY.replace(microcompact_summarize_turns=1)
