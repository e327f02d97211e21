"""A hostile environment: every CHATCLI_* variable set to garbage at once.

SPEC §10: integers apply only when they parse and are > 0; a bad value is reported
(a clear warning naming the variable), never a crash. The policy keeps every
default, a session built from it recovers as a default session would, and each
bad variable reaches the user exactly once, as a ``config`` notice.
"""

from __future__ import annotations

import warnings
from collections import Counter

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxrecover.archive import MemoryArchive
from ctxrecover.events import Event, Notice
from ctxrecover.messages import Message, ToolCall
from ctxrecover.policy import DEFAULT_POLICY, ENV_VARIABLES, ConfigWarning, Policy
from ctxrecover.session import Session
from ctxrecover.transport import HttpxSender
from simulator.providers.mock import MockProvider
from simulator.proxy.faults import BodyCap
from simulator.proxy.middlebox import Middlebox
from simulator.research.retention import chars_lost

# One garbage value per variable, each a different way of being wrong.
GARBAGE: dict[str, str] = {
    "CHATCLI_CONTEXT_WINDOW": "lots",
    "CHATCLI_MAX_RECOVERY_ATTEMPTS": "-3",
    "CHATCLI_MAX_TOKEN_ESCALATIONS": "0",
    "CHATCLI_EMERGENCY_KEEP_MESSAGES": "1.5",
    "CHATCLI_MAX_PAYLOAD": "-5MB",
    "CHATCLI_MICROCOMPACT_TRUNCATE_TURNS": "0x10",
    "CHATCLI_MICROCOMPACT_SUMMARIZE_TURNS": "four",
    "CHATCLI_MICROCOMPACT_HEAD_CHARS": "2 000",
    "CHATCLI_MICROCOMPACT_TAIL_CHARS": "NaN",
    "CHATCLI_MICROCOMPACT_MIN_CONTENT": "9" * 5000,  # past int()'s default digit limit
    "CHATCLI_TOOL_RESULT_BUDGET_CHARS": "1e6",
    "CHATCLI_TOOL_RESULT_MAX_CHARS": "\u221e",
    "CHATCLI_COMPACT_MODEL": "gpt-4o-mini",  # no provider: prefix
    "CHATCLI_CONTEXT_ENGINE": "ftp://engine.invalid",
    "CHATCLI_SKILL_INJECT_BUDGET": "true",
    "CHATCLI_SKILL_AGE_TURNS": "-",
    "CHATCLI_MAX_BLOCKED_REQUESTS": "six",
}
CAP = 32 * 1024
TURNS = 5
RESULT_CHARS = 12_000
PARALLEL_READS = 3


def test_the_garbage_table_covers_every_documented_variable() -> None:
    assert set(GARBAGE) == set(ENV_VARIABLES)


def _policy_from_garbage(env: dict[str, str] | None = None) -> tuple[Policy, list[str]]:
    with pytest.warns(ConfigWarning) as record:
        policy = Policy.from_env(env)
    return policy, [str(w.message) for w in record]


def _named_once(texts: list[str]) -> None:
    """Each variable is named by exactly one of ``texts``, and every text names one."""
    named = Counter(v for text in texts for v in ENV_VARIABLES if text.startswith(f"{v}="))
    assert named == Counter(set(ENV_VARIABLES)), named
    assert len(texts) == len(ENV_VARIABLES)


def test_from_env_warns_once_per_bad_variable_and_keeps_every_default() -> None:
    policy, messages = _policy_from_garbage(GARBAGE)
    _named_once(messages)
    assert all("ignored" in m and "keeping the default" in m for m in messages)
    assert policy == DEFAULT_POLICY
    assert {field: getattr(policy, field) for field in ENV_VARIABLES.values()} == {
        field: getattr(DEFAULT_POLICY, field) for field in ENV_VARIABLES.values()
    }
    assert list(policy.env_problems) == messages


def test_from_env_reads_the_real_process_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for variable, value in GARBAGE.items():
        monkeypatch.setenv(variable, value)
    policy, messages = _policy_from_garbage()
    _named_once(messages)
    assert policy == DEFAULT_POLICY


class _Provider:
    """An OpenAI-compatible mock behind an nginx-style body cap, counting what it rejects."""

    def __init__(self) -> None:
        self.upstream = MockProvider("openai-chat", context_window=1_000_000)
        self.box = Middlebox(self.upstream, [BodyCap(CAP)])

    def sender(self) -> HttpxSender:
        return HttpxSender(
            "openai-chat",
            base_url="http://gateway.test",
            model="gpt-4o",
            transport=httpx.MockTransport(self.box),
        )


def _agent_turn(turn: int) -> list[Message]:
    """A user task, then parallel file reads whose results alone are over the gateway's cap."""
    calls = [
        ToolCall(f"read_{turn}_{i}", "read_file", f'{{"path": "src/m{turn}_{i}.py"}}')
        for i in range(PARALLEL_READS)
    ]
    results = [Message.tool(call.id, f"module {call.id} line\n" * (RESULT_CHARS // 20)) for call in calls]
    return [
        Message.user(f"turn {turn}: inspect the modules and report"),
        Message.assistant("Reading them.", calls),
        *results,
    ]


def _run(policy: Policy) -> tuple[Session, list[Event], list[Message], _Provider]:
    provider = _Provider()
    events: list[Event] = []
    session = Session(
        provider.sender(),
        policy=policy,
        archive=MemoryArchive(),
        on_event=events.append,
        model="gpt-4o",
        env={},
        sleep=lambda _s: None,
    )
    fed = [Message.system("You are a careful coding agent.")]
    session.add(fed[0])
    for turn in range(1, TURNS + 1):
        for msg in _agent_turn(turn):
            session.add(msg)
            fed.append(msg)
        fed.append(session.complete())
    return session, events, fed, provider


def test_a_session_on_the_garbage_policy_recovers_like_a_default_session() -> None:
    policy, _ = _policy_from_garbage(GARBAGE)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the session itself warns about nothing
        session, events, fed, provider = _run(policy)
        baseline, baseline_events, _, baseline_provider = _run(DEFAULT_POLICY)

    notices = [e for e in events if isinstance(e, Notice)]
    config = [n.message for n in notices if n.code == "config"]
    _named_once(config)
    assert config == list(policy.env_problems)
    first_turn_end = next(i for i, e in enumerate(events) if isinstance(e, Notice) and e.code != "config")
    assert all(isinstance(e, Notice) and e.code == "config" for e in events[: len(config)])
    assert first_turn_end == len(config)

    # Everything else is exactly what a session on the defaults does.
    assert [n for n in notices if n.code != "config"] == [n for n in baseline_events if isinstance(n, Notice)]
    rejected = [r.request_bytes for r in provider.box.rejections]
    assert rejected, "the scenario must make the gateway reject a request"
    assert rejected == [r.request_bytes for r in baseline_provider.box.rejections]
    assert session.learned_cap == min(rejected) * 3 // 4 == baseline.learned_cap
    assert session.stats.recoveries == baseline.stats.recoveries >= 1
    assert session.history == baseline.history
    assert chars_lost(fed, session.history, session.archive) == 0


ENV_TEXT = st.text(max_size=12) | st.sampled_from(
    [
        "",
        " ",
        "5",
        "5MB",
        "+7",
        "0",
        "-1",
        "1.5",
        "9" * 5000,
        "١٢",
        "openai:gpt-4o-mini",
        "mcp:engine",
        "provider",
        "PROVIDER",
        "https://engine.test/compact",
        "mcp:",
        "http://",
        "\u00a0",
    ]
)


@settings(max_examples=60, deadline=None)
@given(env=st.dictionaries(st.sampled_from(sorted(ENV_VARIABLES)), ENV_TEXT))
def test_from_env_never_raises_and_reports_each_ignored_variable_once(env: dict[str, str]) -> None:
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        policy = Policy.from_env(env)
    messages = [str(w.message) for w in record]
    assert all(issubclass(w.category, ConfigWarning) for w in record)
    assert messages == list(policy.env_problems)
    ignored = Counter(v for m in messages for v in env if m.startswith(f"{v}="))
    assert all(count == 1 for count in ignored.values()) and len(ignored) == len(messages)
    for variable, field in ENV_VARIABLES.items():
        if variable not in env or variable in ignored:
            assert getattr(policy, field) == getattr(DEFAULT_POLICY, field), variable
