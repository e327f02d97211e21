"""The real-engine tier: a scenario that names an engine replays through the real program."""

from __future__ import annotations

from pathlib import Path

import pytest

from simulator.cli.app import main
from simulator.engines import HAProxy, engine_class
from simulator.engines.tier import engine_for, knobs_from_faults
from simulator.proxy.scenario import ScenarioError, load_scenario
from simulator.replay import ReplayResult, expectation_problems, replay

SCENARIO = """\
description = "A gateway whose cap only the real engine has: the scenario's faults are none."
{engine}

[provider]
format = "openai-chat"
context_window = 1000000

[policy]
context_window = 1000000

[workload]
transcript = "generated"
history_bytes = "300KB"

[expect]
outcome = "recovered"
"""


@pytest.mark.parametrize(
    ("name", "knobs"),
    [
        ("nginx", {"body_cap": 131072}),
        ("haproxy", {"body_cap": 131072}),
        ("squid", {"body_cap": 131072}),
        ("caddy", {"body_cap": 128000}),
        ("apache-modsecurity", {"body_cap": 131072, "crs_paranoia": 2, "inbound_threshold": 10}),
        ("nginx-modsecurity", {"crs_paranoia": 3, "inbound_threshold": 7}),
        ("apache", {"deny": ("/",)}),
    ],
)
def test_the_knobs_derived_from_an_engines_imitation_are_its_knobs(
    name: str, knobs: dict[str, object]
) -> None:
    engine = engine_class(name)(upstream="http://127.0.0.1:9", **knobs)  # type: ignore[arg-type]
    derived = knobs_from_faults(name, engine.imitation())
    assert {k: v for k, v in derived.items() if k in knobs} == knobs


def test_an_engine_table_gives_knobs_and_a_bad_one_names_the_file(tmp_path: Path) -> None:
    good = tmp_path / "good.toml"
    good.write_text(
        SCENARIO.format(engine='[engine]\nname = "haproxy"\nbody_cap = "128KB"'), encoding="utf-8"
    )
    scenario = load_scenario(good)
    assert (scenario.engine, scenario.engine_knobs) == ("haproxy", (("body_cap", 131072),))
    assert engine_for(scenario, "http://127.0.0.1:9").body_cap == 131072
    bad = tmp_path / "bad.toml"
    bad.write_text(SCENARIO.format(engine="engine = 5"), encoding="utf-8")
    with pytest.raises(ScenarioError, match=r"bad.toml: engine must be a name such as \"nginx\""):
        load_scenario(bad)
    unknown = tmp_path / "unknown.toml"
    unknown.write_text(SCENARIO.format(engine='engine = "iis"'), encoding="utf-8")
    with pytest.raises(ScenarioError, match=r"unknown.toml: engine: unknown engine 'iis'; engines: nginx, "):
        engine_for(load_scenario(unknown), "http://127.0.0.1:9")


def test_run_with_real_engines_names_the_packages_of_a_missing_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(HAProxy, "program", "ctxsim-no-such-program")
    path = tmp_path / "haproxy.toml"
    path.write_text(SCENARIO.format(engine='engine = "haproxy"'), encoding="utf-8")
    assert main(["run", "--scenarios", str(path), "--engines", "real", "--out", str(tmp_path / "run")]) == 2
    assert capsys.readouterr().err == (
        "ctxsim: error: haproxy is not available (ctxsim-no-such-program is not on PATH); "
        "install it with: apt-get install haproxy\n"
    )


@pytest.mark.slow
def test_a_scenario_naming_an_engine_replays_through_the_real_program(
    tmp_path: Path, require_engine: object
) -> None:
    require_engine("haproxy")  # type: ignore[operator]
    path = tmp_path / "haproxy.toml"
    path.write_text(
        SCENARIO.format(engine='[engine]\nname = "haproxy"\nbody_cap = "128KB"'), encoding="utf-8"
    )
    mock = replay(None, path)
    real = replay(None, path, engines="real")
    assert (mock.outcome, mock.failure_kinds) == ("ok", [])  # no fault: only the real engine has the cap
    assert real.outcome == "recovered" and real.failure_kinds[0] == "payload_too_large"
    assert real.learned_cap is not None and real.learned_cap <= 131072
    assert real.chars_lost == 0


@pytest.mark.slow
def test_the_real_crs_refuses_a_coding_agents_system_prompt_and_the_session_fails_fast_naming_it(
    require_engine: object,
) -> None:
    # Apache + ModSecurity + OWASP CRS 3.3 at its defaults, against the mock's anomaly-scored imitation:
    # the same requests, the same content-floor diagnosis, two blocked requests, no cap (issue 22 item 9).
    require_engine("apache-modsecurity")  # type: ignore[operator]
    mock = replay(None, "crs-system-prompt-blocked")
    real = replay(None, "crs-system-prompt-blocked", engines="real")

    def shape(result: ReplayResult) -> list[tuple[int, int, str]]:
        return [(r.turn, r.attempt, r.outcome) for r in result.records]

    assert (
        shape(real)
        == shape(mock)
        == [
            (0, 1, "rejected:waf_rejection"),
            (0, 2, "experiment:passed"),  # one word alone: not the route
            (0, 3, "experiment:passed"),  # blanks as large: not size
            (0, 4, "failed"),  # the request without its one message, refused: the system prompt
        ]
    )
    assert expectation_problems(real) == []
    assert real.error is not None and real.error.startswith("✖ The gateway refuses the system prompt itself")
    assert real.learned_cap is None and real.chars_lost == 0


@pytest.mark.slow
def test_the_real_crs_refuses_a_shell_transcript_in_a_tool_result_and_the_session_withholds_it(
    require_engine: object,
) -> None:
    # Apache + ModSecurity + OWASP CRS 3.3 at its defaults, against the mock's anomaly-scored imitation: a
    # tool result holding `git commit -m "$(cat <<'EOF'` and `cat /etc/passwd | tail -20` is refused; one
    # word alone passes, blanks as large pass, the request without its new parts passes, two halvings find
    # it; it is withheld, every turn completes, no cap is learned (issue 22 item 9).
    require_engine("apache-modsecurity")  # type: ignore[operator]
    mock = replay(None, "crs-agent-content-withheld")
    real = replay(None, "crs-agent-content-withheld", engines="real")

    def shape(result: ReplayResult) -> list[tuple[int, int, int, str]]:
        return [(r.turn, r.attempt, r.request_bytes, r.outcome) for r in result.records]

    assert [(turn, attempt, outcome) for turn, attempt, _, outcome in shape(real)] == [
        (0, 1, "ok"),
        (1, 1, "rejected:waf_rejection"),
        (1, 2, "experiment:passed"),
        (1, 3, "experiment:passed"),
        (1, 4, "experiment:passed"),
        (1, 5, "experiment:passed"),
        (1, 6, "experiment:blocked"),
        (1, 7, "experiment:passed"),
        (1, 8, "experiment:blocked"),
        (1, 9, "ok"),
        (2, 1, "ok"),
    ]
    assert shape(real) == shape(mock)
    assert expectation_problems(real) == [] and expectation_problems(mock) == []
    assert real.outcome == "content_withheld" and real.turns_completed == real.turns == 3
    assert real.learned_cap is None and real.chars_lost == 0
    assert [n for n in real.notices if n.startswith("⚠ The gateway blocked")] == [
        "⚠ The gateway blocked this request for its content (403 at 26.1 KB): tool result #4 "
        "(search_trains, 391 B) withheld and archived — recall it locally; ask your security team to "
        "allow it"
    ]
