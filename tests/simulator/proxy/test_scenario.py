"""Scenarios as data: bundled scenarios, validation errors naming file and field, CLI fault specs."""

from __future__ import annotations

import json
import re
from pathlib import Path

import httpx
import pytest

from ctxrecover.sizes import char_budget, total_weight
from simulator.proxy.fault_specs import parse_fault_spec
from simulator.proxy.faults import (
    BedrockHtml403,
    BodyCap,
    CloseAfterBody,
    Fault,
    HeaderCap,
    IdleTimeout,
    RateLimit429,
    ResetAfter,
    SlowClose,
    WafBlock,
)
from simulator.proxy.scenario import (
    FAILURE_KINDS,
    OUTCOMES,
    SCENARIOS_DIR,
    Scenario,
    ScenarioError,
    list_scenarios,
    load_scenario,
)

KB = 1024
BUNDLED = (
    "anthropic-200k-overflow",
    "bedrock-window-misconfigured",
    "cloudflare-waf-403",
    "corporate-128k-waf",
    "crs-agent-content-withheld",
    "crs-system-prompt-blocked",
    "envoy-503-masks-413",
    "eof-mid-post-512k",
    "floor-too-big",
    "gemini-1m-overflow",
    "header-431",
    "max-tokens-over-model-cap",
    "max-tokens-truncation",
    "nginx-1m-413",
    "openai-128k-overflow",
    "rate-limit-429",
    "rst-after-128k-small-history",
    "rst-after-256k",
    "screenshots-128k-waf",
    "summarizer-overflows",
    "summarizer-refuses",
    "tight-cap-1.2x-system-prompt",
    "tight-cap-1.35x-system-prompt",
    "tight-cap-1.5x-system-prompt",
    "waf-content-block-after-large-bodies",
    "waf-content-block-right-after-a-413",
    "waf-content-block-set-aside-then-summarized",
    "waf-content-block-under-learned-cap",
    "waf-content-rule-cut-by-size-compaction",
)


# -- bundled scenarios ------------------------------------------------------------------


def test_list_scenarios_names_every_bundled_scenario() -> None:
    assert list_scenarios() == list(BUNDLED)


@pytest.mark.parametrize("name", BUNDLED)
def test_every_bundled_scenario_loads_with_a_description_and_an_expectation(name: str) -> None:
    scenario = load_scenario(name)
    assert scenario.name == name
    assert scenario.source == SCENARIOS_DIR / f"{name}.toml"
    assert len(scenario.description) > 60
    assert scenario.expect.outcome in OUTCOMES
    assert scenario.expect.failure_kind in (*FAILURE_KINDS, None)
    assert isinstance(scenario.build_middlebox(None).faults, tuple)
    assert scenario.build_provider().format == scenario.provider.format


EXPECTED = {  # name: (format, fault kinds, outcome, failure kind)
    "corporate-128k-waf": ("bedrock-converse", ["bedrock-html-403"], "recovered", "waf_rejection"),
    "bedrock-window-misconfigured": ("bedrock-converse", [], "recovered", "context_overflow"),
    "nginx-1m-413": ("openai-chat", ["body-cap"], "recovered", "payload_too_large"),
    "cloudflare-waf-403": ("anthropic", ["waf-403-html"], "recovered", "waf_rejection"),
    "eof-mid-post-512k": ("openai-chat", ["close-after-body"], "recovered", "suspected_payload"),
    "rst-after-256k": ("anthropic", ["reset-after"], "recovered", "transient_network"),  # SPEC §11
    "header-431": ("openai-chat", ["header-cap"], "no_compaction", "payload_too_large"),  # SPEC §11
    "anthropic-200k-overflow": ("anthropic", [], "recovered", "context_overflow"),
    "openai-128k-overflow": ("openai-chat", [], "recovered", "context_overflow"),
    "gemini-1m-overflow": ("gemini", [], "recovered", "context_overflow"),
    "max-tokens-truncation": ("anthropic", [], "escalated", "output_truncated"),
    "summarizer-refuses": ("openai-chat", [], "ok", None),
    "summarizer-overflows": ("openai-chat", [], "ok", None),
    "floor-too-big": ("anthropic", ["body-cap"], "fail_fast_floor", "payload_too_large"),
    "rate-limit-429": ("openai-chat", ["rate-limit-429"], "no_compaction", "rate_limit"),
    # the gateway model's scenarios (issue 10)
    "envoy-503-masks-413": ("openai-chat", ["upstream-error"], "recovered", "transient_network"),
    "max-tokens-over-model-cap": ("anthropic", [], "max_tokens_lowered", "output_limit"),
    "rst-after-128k-small-history": ("anthropic", ["reset-after"], "recovered", "transient_network"),
    "screenshots-128k-waf": ("anthropic", ["waf-403-html"], "recovered", "waf_rejection"),
    "tight-cap-1.2x-system-prompt": ("anthropic", ["body-cap"], "recovered", "payload_too_large"),
    "tight-cap-1.35x-system-prompt": ("openai-chat", ["body-cap"], "recovered", "payload_too_large"),
    "tight-cap-1.5x-system-prompt": ("bedrock-converse", ["body-cap"], "recovered", "payload_too_large"),
    "waf-content-block-after-large-bodies": (
        "anthropic",
        ["content-match"],
        "content_withheld",
        "waf_rejection",
    ),
    "waf-content-block-under-learned-cap": (
        "anthropic",
        ["body-cap", "content-match"],
        "recovered",
        "payload_too_large",
    ),
    "waf-content-block-right-after-a-413": (
        "anthropic",
        ["body-cap", "content-match"],
        "recovered",
        "payload_too_large",
    ),
    "waf-content-block-set-aside-then-summarized": (
        "anthropic",
        ["body-cap", "content-match"],
        "recovered",
        "payload_too_large",
    ),
    "waf-content-rule-cut-by-size-compaction": (
        "anthropic",
        ["content-match"],
        "content_withheld",
        "waf_rejection",
    ),
    # the real CRS's scenarios (issue 22 item 9): Apache + ModSecurity + CRS, imitated by the anomaly scorer
    "crs-agent-content-withheld": ("anthropic", ["anomaly-waf"], "content_withheld", "waf_rejection"),
    "crs-system-prompt-blocked": ("anthropic", ["anomaly-waf"], "content_floor", "waf_rejection"),
}


@pytest.mark.parametrize("name", BUNDLED)
def test_bundled_scenario_wiring(name: str) -> None:
    scenario = load_scenario(name)
    fmt, kinds, outcome, failure_kind = EXPECTED[name]
    assert scenario.provider.format == fmt
    assert [f.kind for f in scenario.faults] == kinds
    assert (scenario.expect.outcome, scenario.expect.failure_kind) == (outcome, failure_kind)


def test_corporate_scenario_passes_101kb_and_blocks_129kb_with_bedrock_html() -> None:
    scenario = load_scenario("corporate-128k-waf")
    assert scenario.faults == (BedrockHtml403(128_000),)
    assert scenario.workload.system_prompt_bytes == 100 * KB
    assert scenario.expect.floor_warning is True
    box = scenario.build_middlebox(scenario.build_provider())
    client = httpx.Client(transport=httpx.MockTransport(box), base_url="http://bedrock")
    path = f"/model/{scenario.provider.model}/converse"

    def send(size: int) -> httpx.Response:
        text = "t" * (size - len(json.dumps({"messages": [{"role": "user", "content": [{"text": ""}]}]})))
        body = json.dumps({"messages": [{"role": "user", "content": [{"text": text}]}]}).encode()
        assert len(body) == size
        return client.post(path, content=body)

    assert send(101 * KB).status_code == 200
    blocked = send(129 * KB)
    assert (blocked.status_code, blocked.headers["content-type"]) == (403, "text/html; charset=utf-8")
    assert send(129_434).status_code == 403  # the seed's 126.4 KB request


def test_floor_too_big_system_prompt_is_over_the_cap() -> None:
    scenario = load_scenario("floor-too-big")
    (cap,) = scenario.faults
    assert isinstance(cap, BodyCap)
    assert scenario.workload.system_prompt_bytes > cap.limit


def test_rate_limit_scenario_fires_once_on_turn_three() -> None:
    box = load_scenario("rate-limit-429").build_middlebox(lambda r: httpx.Response(200, json={}))
    statuses = [
        box(httpx.Request("POST", "http://mock/v1/chat/completions", content=b"{}")).status_code
        for _ in range(5)
    ]
    assert statuses == [200, 200, 429, 200, 200]


def test_max_tokens_scenario_reply_overruns_max_tokens_within_two_escalations() -> None:
    scenario = load_scenario("max-tokens-truncation")
    workload = scenario.workload
    assert workload.max_tokens is not None and workload.reply_tokens is not None
    assert workload.max_tokens < workload.reply_tokens <= workload.max_tokens * 4
    assert scenario.provider.max_output_tokens_cap is not None
    assert workload.max_tokens * 4 <= scenario.provider.max_output_tokens_cap


def _transcript_weight(name: str) -> tuple[int, int]:
    """Total weight of a bundled transcript and of its first message."""
    from simulator.workloads import find_transcript, load_named_transcript

    try:
        find_transcript(name)
    except ValueError:
        pytest.skip(f"transcript {name} is neither bundled nor in ../shared/transcripts (a fresh clone)")
    messages = load_named_transcript(name).messages
    return total_weight(messages), total_weight(messages[:2])


@pytest.mark.parametrize("name", ["anthropic-200k-overflow", "openai-128k-overflow", "gemini-1m-overflow"])
def test_overflow_scenarios_window_is_hit_mid_run_by_their_transcript(name: str) -> None:
    scenario = load_scenario(name)
    assert scenario.workload.transcript is not None
    total, opening = _transcript_weight(scenario.workload.transcript)
    window_chars = scenario.provider.context_window * 4
    assert opening < window_chars < total


@pytest.mark.parametrize("name", ["summarizer-refuses", "summarizer-overflows"])
def test_summarizer_scenarios_force_planned_compaction(name: str) -> None:
    scenario = load_scenario(name)
    policy = scenario.apply_policy()
    assert (
        scenario.summarizer.behaviour
        == {"summarizer-refuses": "refusing", "summarizer-overflows": "overflowing"}[name]
    )
    assert policy.context_window == 4000
    assert scenario.workload.transcript is not None
    total, _ = _transcript_weight(scenario.workload.transcript)
    assert total > char_budget(4000, policy.budget_ratio)


# -- validation errors ----------------------------------------------------------------------

VALID = """\
description = "A test scenario."

[provider]
format = "anthropic"

[[fault]]
kind = "waf-403-html"
min_bytes = "129KB"
page = "akamai"

[expect]
outcome = "recovered"
"""


def write(tmp_path: Path, text: str, name: str = "s.toml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_a_scenario_file_loads_by_path_with_defaults(tmp_path: Path) -> None:
    scenario = load_scenario(write(tmp_path, VALID))
    assert scenario == Scenario(
        name="s",
        description="A test scenario.",
        provider=scenario.provider,
        faults=(WafBlock(129 * KB, page="akamai"),),
        expect=scenario.expect,
        source=tmp_path / "s.toml",
    )
    assert scenario.provider.model == "claude-sonnet-4-20250514"
    assert scenario.provider.context_window == 200_000
    assert (scenario.summarizer.behaviour, scenario.seed, scenario.policy) == ("extractive", 0, ())


def test_json_scenarios_load_too(tmp_path: Path) -> None:
    document = {
        "description": "JSON form.",
        "provider": {"format": "gemini", "context_window": 5000},
        "fault": [{"kind": "reset-after", "n_bytes": 1000, "probability": 0.25}],
        "expect": {"outcome": "failed", "failure_kind": "transient_network"},
        "seed": 9,
    }
    scenario = load_scenario(write(tmp_path, json.dumps(document), "j.json"))
    assert scenario.faults == (ResetAfter(1000, probability=0.25),)
    assert (scenario.seed, scenario.build_middlebox(None).faults) == (9, scenario.faults)


ERRORS: list[tuple[str, str, str]] = [
    (
        "unknown-kind",
        VALID.replace('kind = "waf-403-html"', 'kind = "waf"'),
        "{file}: fault #1: unknown fault kind 'waf'; valid kinds: anomaly-waf, bandwidth, "
        "bedrock-html-403, body-cap, "
        "close-after-body, content-match, cut-stream, header-cap, idle-timeout, latency, rate-limit-429, "
        "reset-after, slow-close, status-page, timeout, upstream-error, waf-403-html",
    ),
    (
        "missing-kind",
        VALID.replace('kind = "waf-403-html"\n', ""),
        "{file}: fault #1: kind is missing; valid kinds: anomaly-waf, bandwidth, "
        "bedrock-html-403, body-cap, "
        "close-after-body, content-match, cut-stream, header-cap, idle-timeout, latency, rate-limit-429, "
        "reset-after, slow-close, status-page, timeout, upstream-error, waf-403-html",
    ),
    (
        "bad-size",
        VALID.replace('"129KB"', '"lots"'),
        '{file}: fault #1 (waf-403-html): min_bytes must be a size in bytes or a string such as "128KB" or '
        "\"1.5MB\", got 'lots'",
    ),
    (
        "probability",
        VALID + '\n[[fault]]\nkind = "body-cap"\nlimit = "1MB"\nprobability = 1.5\n',
        "{file}: fault #2 (body-cap): probability must be within [0, 1], got 1.5",
    ),
    (
        "unknown-fault-key",
        VALID.replace('page = "akamai"', 'pgae = "akamai"'),
        "{file}: fault #1 (waf-403-html): unknown key 'pgae'; valid keys: from_turn, kind, min_bytes, page, "
        "probability, until_turn",
    ),
    (
        "missing-fault-field",
        VALID.replace('kind = "waf-403-html"', 'kind = "body-cap"').replace('page = "akamai"', ""),
        "{file}: fault #1 (body-cap): limit is missing, e.g. body-cap:128KB:nginx or "
        "body-cap:128KB:waf-403-html",
    ),
    (
        "bad-page",
        VALID.replace('"akamai"', '"imperva"'),
        "{file}: fault #1 (waf-403-html): page must be one of akamai, apache, aws-waf, cloudflare, f5, "
        "haproxy, modsecurity, nginx, nginx-modsecurity, squid, "
        "got 'imperva'",
    ),
    (
        "wrong-type",
        VALID.replace('page = "akamai"', "from_turn = true"),
        "{file}: fault #1 (waf-403-html): from_turn must be an integer, got True",
    ),
    (
        "unknown-top-key",
        'providr = "x"\n' + VALID,
        "{file}: unknown top-level key 'providr'; valid keys: description, engine, expect, fault, name, "
        "policy, provider, seed, summarizer, workload",
    ),
    (
        "unknown-section-key",
        VALID.replace('format = "anthropic"', 'format = "anthropic"\nfromat = 1'),
        "{file}: [provider] has unknown key 'fromat'; valid keys: context_window, format, "
        "max_output_tokens_cap, model",
    ),
    (
        "bad-format",
        VALID.replace('"anthropic"', '"claude"'),
        "{file}: [provider] format must be one of openai-chat, openai-responses, anthropic, gemini, "
        "bedrock-converse, got 'claude'",
    ),
    (
        "missing-format",
        VALID.replace('format = "anthropic"', 'model = "m"'),
        "{file}: [provider] format is missing; valid formats: openai-chat, openai-responses, "
        "anthropic, gemini, "
        "bedrock-converse",
    ),
    (
        "bad-window",
        VALID.replace('format = "anthropic"', 'format = "anthropic"\ncontext_window = 0'),
        "{file}: [provider] context_window must be > 0, got 0",
    ),
    (
        "missing-description",
        VALID.replace('description = "A test scenario."', ""),
        "{file}: description is missing; add one line saying what the scenario shows",
    ),
    (
        "bad-outcome",
        VALID.replace('"recovered"', '"fine"'),
        "{file}: [expect] outcome must be one of ok, recovered, retried, escalated, max_tokens_lowered, "
        "content_withheld, content_blocked, policy_blocked, content_floor, content_refused, no_compaction, "
        "fail_fast_floor, failed, got 'fine'",
    ),
    (
        "missing-expect",
        VALID.replace('[expect]\noutcome = "recovered"\n', ""),
        "{file}: [expect] section is missing; it needs outcome = one of ok, recovered, retried, escalated, "
        "max_tokens_lowered, content_withheld, content_blocked, policy_blocked, content_floor, "
        "content_refused, no_compaction, fail_fast_floor, failed",
    ),
    (
        "bad-failure-kind",
        VALID + 'failure_kind = "boom"\n',
        "{file}: [expect] failure_kind must be one of context_overflow, payload_too_large, waf_rejection, "
        "policy_block, content_refused, suspected_payload, malformed_history, output_truncated, "
        "output_limit, auth, rate_limit, transient_network, other, ok, got 'boom'",
    ),
    (
        "bad-level",
        VALID + "compaction_level = 4\n",
        "{file}: [expect] compaction_level must be one of 0, 1, 2, 3, got 4",
    ),
    (
        "bad-behaviour",
        VALID + '\n[summarizer]\nbehaviour = "lazy"\n',
        "{file}: [summarizer] behaviour must be one of extractive, refusing, too-short, slow, failing, "
        "overflowing, got 'lazy'",
    ),
    (
        "bad-workload-size",
        VALID + '\n[workload]\nsystem_prompt_bytes = "big"\n',
        '{file}: [workload] system_prompt_bytes must be a size in bytes or a string such as "128KB" or '
        "\"1.5MB\", got 'big'",
    ),
    ("bad-seed", "seed = -1\n" + VALID, "{file}: seed must be an integer >= 0, got -1"),
    (
        "fault-not-array",
        VALID.replace("[[fault]]", "[fault]"),
        "{file}: fault must be an array of tables ([[fault]] in TOML)",
    ),
]


@pytest.mark.parametrize(("text", "message"), [e[1:] for e in ERRORS], ids=[e[0] for e in ERRORS])
def test_validation_errors_name_the_file_and_field(tmp_path: Path, text: str, message: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ScenarioError) as caught:
        load_scenario(path)
    assert str(caught.value) == message.format(file=path)


def test_policy_overrides_are_validated_by_the_policy(tmp_path: Path) -> None:
    path = write(tmp_path, VALID + "\n[policy]\ncontext_windw = 8000\n")
    expected = f"{path}: [policy] Policy has no field 'context_windw'"
    with pytest.raises(ScenarioError, match=re.escape(expected)):
        load_scenario(path)
    policy = '\n[policy]\npayload_cap = "512KB"\ncontext_window = 8000\n'
    good = load_scenario(write(tmp_path, VALID + policy))
    assert good.policy_overrides() == {"context_window": 8000, "payload_cap": 512 * KB}
    assert good.apply_policy().payload_cap == 512 * KB


def test_invalid_toml_names_the_file(tmp_path: Path) -> None:
    path = write(tmp_path, "description = \n")
    with pytest.raises(ScenarioError, match=re.escape(f"{path}: invalid TOML: ")):
        load_scenario(path)


def test_unknown_scenario_name_lists_the_bundled_ones() -> None:
    with pytest.raises(ScenarioError) as caught:
        load_scenario("corporate-waf")
    assert str(caught.value) == (
        f"unknown scenario 'corporate-waf'; bundled scenarios: {', '.join(BUNDLED)} "
        "(or pass the path of a .toml or .json file)"
    )


def test_missing_scenario_file_is_reported(tmp_path: Path) -> None:
    with pytest.raises(ScenarioError, match=re.escape(f"{tmp_path / 'none.toml'}: no such scenario file")):
        load_scenario(tmp_path / "none.toml")


# -- compact CLI fault specs ---------------------------------------------------------------

SPECS: list[tuple[str, Fault]] = [
    ("body-cap:128KB", BodyCap(128 * KB)),
    ("body-cap:1MB:envoy", BodyCap(1024 * KB, response="envoy")),
    ("body-cap:128KB:waf-403-html", WafBlock(128 * KB + 1)),
    ("body-cap:128KB:waf-403-html:page=f5", WafBlock(128 * KB + 1, page="f5")),
    ("body-cap:128KB:bedrock-html-403", BedrockHtml403(128 * KB + 1)),
    ("body-cap:256KB:reset-after", ResetAfter(256 * KB)),
    ("body-cap:512KB:close-after-body", CloseAfterBody(min_bytes=512 * KB + 1)),
    ("header-cap:8KB", HeaderCap(8 * KB)),
    (
        "waf-403-html:akamai:min_bytes=129KB:probability=0.5",
        WafBlock(129 * KB, page="akamai", probability=0.5),
    ),
    ("bedrock-html-403:min_bytes=128000B", BedrockHtml403(128_000)),
    ("reset-after:256KB:from_turn=2", ResetAfter(256 * KB, from_turn=2)),
    ("close-after-body", CloseAfterBody()),
    ("slow-close:2.5", SlowClose(2.5)),
    ("idle-timeout:30", IdleTimeout(30.0)),
    ("rate-limit-429:20:from_turn=3:until_turn=3", RateLimit429(20, from_turn=3, until_turn=3)),
    (" rate-limit-429 : fmt=anthropic ", RateLimit429(fmt="anthropic")),
]


@pytest.mark.parametrize(("spec", "fault"), SPECS, ids=[s for s, _ in SPECS])
def test_parse_fault_spec(spec: str, fault: Fault) -> None:
    assert parse_fault_spec(spec) == fault


SPEC_ERRORS = [
    (
        "waf",
        "fault spec 'waf': unknown fault kind 'waf'; valid kinds: anomaly-waf, bandwidth, "
        "bedrock-html-403, body-cap, "
        "close-after-body, content-match, cut-stream, header-cap, idle-timeout, latency, rate-limit-429, "
        "reset-after, slow-close, status-page, timeout, upstream-error, waf-403-html (form "
        "KIND[:VALUE...][:key=value...], e.g. "
        "body-cap:128KB:nginx)",
    ),
    (
        "body-cap",
        "fault spec 'body-cap' (body-cap): limit is missing, e.g. body-cap:128KB:nginx or "
        "body-cap:128KB:waf-403-html",
    ),
    (
        "body-cap:huge",
        "fault spec 'body-cap:huge' (body-cap): limit must be a size in bytes or a string such "
        'as "128KB" or "1.5MB", got \'huge\'',
    ),
    (
        "body-cap:huge:waf-403-html",
        "fault spec 'body-cap:huge:waf-403-html' (body-cap): limit must be a size "
        'in bytes or a string such as "128KB" or "1.5MB", got \'huge\'',
    ),
    (
        "body-cap:1MB:iis",
        "fault spec 'body-cap:1MB:iis' (body-cap): response must be one of apache, aws-alb, caddy, "
        "cloudflare, envoy, haproxy, json-error, json-message, nginx, squid, got 'iis'",
    ),
    (
        "header-cap:8KB:16KB",
        "fault spec 'header-cap:8KB:16KB': too many values for header-cap (expected "
        "limit); e.g. header-cap:8KB",
    ),
    (
        "close-after-body:5",
        "fault spec 'close-after-body:5': too many values for close-after-body (expected "
        "no positional values); e.g. close-after-body:min_bytes=512KB",
    ),
    (
        "reset-after:262144",
        "fault spec 'reset-after:262144' (reset-after): n_bytes needs a unit: '262144' "
        "would mean megabytes to parse_payload_size; write '262144B' for bytes or e.g. "
        "'128KB'",
    ),
    ("slow-close:soon", "fault spec 'slow-close:soon' (slow-close): delay_s must be a number, got 'soon'"),
    (
        "waf-403-html:probability=2",
        "fault spec 'waf-403-html:probability=2' (waf-403-html): probability must be within [0, 1], got 2.0",
    ),
    (
        "waf-403-html:colour=red",
        "fault spec 'waf-403-html:colour=red' (waf-403-html): unknown key 'colour'; "
        "valid keys: from_turn, kind, min_bytes, page, probability, until_turn",
    ),
    (
        "reset-after:1KB:from_turn=2:from_turn=3",
        "fault spec 'reset-after:1KB:from_turn=2:from_turn=3': option 'from_turn' is given twice",
    ),
]


@pytest.mark.parametrize(("spec", "message"), SPEC_ERRORS, ids=[s for s, _ in SPEC_ERRORS])
def test_parse_fault_spec_errors_are_clear(spec: str, message: str) -> None:
    with pytest.raises(ScenarioError) as caught:
        parse_fault_spec(spec)
    assert str(caught.value) == message


def test_scenario_errors_are_value_errors() -> None:
    assert issubclass(ScenarioError, ValueError)


# -- fitted to any transcript (issue 26 item 4) ----------------------------------------------------------
def test_a_plant_beyond_the_transcript_moves_to_its_last_turn_and_says_so() -> None:
    scenario = load_scenario("waf-content-block-after-large-bodies")
    fitted, notes = scenario.fitted(3)
    assert scenario.workload.plant_turn == 14 and fitted.workload.plant_turn == 3
    assert notes == ("[workload] plant_turn 14 is beyond the transcript's 3 turns: planted before turn 3",)
    assert fitted.workload.plant_text == scenario.workload.plant_text and fitted.faults == scenario.faults


def test_a_fault_window_beyond_the_transcript_starts_at_its_last_turn() -> None:
    scenario = load_scenario("rate-limit-429")  # a 429 on turn 3 only
    (fault,) = scenario.faults
    assert (fault.from_turn, fault.until_turn) == (3, 3)
    fitted, notes = scenario.fitted(2)
    assert [(f.from_turn, f.until_turn) for f in fitted.faults] == [(2, 2)]
    assert notes == (
        "fault #1 (rate-limit-429) from_turn 3 is beyond the transcript's 2 turns: it starts at turn 2",
    )
    open_ended = load_scenario("header-431")  # from turn 2 on
    fitted, notes = open_ended.fitted(1)
    assert [(f.from_turn, f.until_turn) for f in fitted.faults] == [(1, None)] and len(notes) == 1


def test_a_scenario_that_fits_is_itself_with_no_notes() -> None:
    scenario = load_scenario("rate-limit-429")
    assert scenario.fitted(3) == (scenario, ())
    assert load_scenario("nginx-1m-413").fitted(1) == (load_scenario("nginx-1m-413"), ())
    with pytest.raises(ScenarioError, match="a transcript of 0 turns has nothing to replay"):
        scenario.fitted(0)
