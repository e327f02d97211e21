"""The anomaly-scored WAF: CRS rules as data, scores summed over the whole body, a threshold."""

from __future__ import annotations

import json
import textwrap
import time
from pathlib import Path

import httpx
import pytest

from simulator.proxy.anomaly import TRANSFORMATIONS, AnomalyScorer, rule_set
from simulator.proxy.crs import Target, read_rules, rules_to_data, tx_defaults
from simulator.proxy.fault_specs import parse_fault_spec
from simulator.proxy.faults import AnomalyWaf
from simulator.proxy.middlebox import Middlebox
from simulator.resources import data_dir

CRS_RULES = Path("/usr/share/modsecurity-crs/rules")


def chat(*contents: str, host: str = "gateway.example") -> httpx.Request:
    messages = [{"role": "tool", "tool_call_id": "c", "content": text} for text in contents]
    body = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}, *messages]}
    return httpx.Request("POST", f"http://{host}/v1/chat/completions", json=body, headers={"user-agent": "t"})


def ok(request: httpx.Request) -> httpx.Response:
    return httpx.Response(200, json={"ok": True})


def test_every_matching_value_adds_its_score_so_fragments_block_together() -> None:
    scorer = AnomalyScorer.bundled(paranoia=1, threshold=10)
    one = scorer.score(chat("cat -n src/main.py | head -40", "plain words"))
    two = scorer.score(chat("cat -n src/main.py | head -40", "find . -name '*.pyc' -print0 | xargs -0 rm -f"))
    assert not one.blocked and one.score == 5
    assert two.blocked and two.score >= 10
    assert {m.variable for m in two.matches} == {
        "ARGS:json.messages.array_1.content",
        "ARGS:json.messages.array_2.content",
    }


def test_a_growing_conversation_scores_the_same_with_verdicts_kept_across_requests(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from simulator.proxy import anomaly

    turns = ["plain words", "cat -n src/main.py | head -40", "SELECT a FROM b UNION SELECT c FROM d", "ok"]
    kept = AnomalyScorer.bundled(paranoia=1, threshold=10)
    for n in range(1, len(turns) + 1):
        request = chat(*turns[:n])
        assert kept.score(request) == AnomalyScorer.bundled(paranoia=1, threshold=10).score(request)
    assert kept._verdicts  # the earlier turns' verdicts were remembered, not recomputed
    monkeypatch.setattr(anomaly, "VERDICT_CACHE_CHARS", 64)  # bounded: past the limit it starts over
    small = AnomalyScorer.bundled(paranoia=1, threshold=10)
    verdict = small.score(chat(*turns))
    assert verdict == kept.score(chat(*turns)) and small._cached_chars <= 64


def test_rules_above_the_paranoia_level_do_not_run() -> None:
    request = chat('{"command": "grep -rn TODO src/ | wc -l"}')
    assert AnomalyScorer.bundled(paranoia=1).score(request).score == 0
    assert "942260" in AnomalyScorer.bundled(paranoia=2).score(request).rules


def test_ordinary_prose_and_a_numeric_host_alone_pass() -> None:
    verdict = AnomalyScorer.bundled().score(
        chat("The fixture lacks a timezone; UTC fixes it.", host="127.0.0.1")
    )
    assert (verdict.blocked, verdict.rules) == (False, ("920350",))  # "Host header is a numeric IP" warns: 3


def test_cmdline_drops_blanks_before_a_slash_or_paren_in_one_pass_over_a_long_blank_run() -> None:
    cmdline = TRANSFORMATIONS["cmdline"]
    assert cmdline('C:\\> "Cat"  /etc/passwd ; ls  (x)  y') == "c:> cat/etc/passwd ls(x) y"
    # a size experiment's blanked request is one value of ~25 KB of spaces: a pattern retried at every
    # offset of the run took seconds per rule there (quadratic); 400 KB of blanks must be instant
    started = time.perf_counter()
    assert cmdline("Hi" + " " * 400_000 + "/x") == "hi/x"
    assert time.perf_counter() - started < 1.0


def test_the_operators_the_mock_cannot_run_are_named() -> None:
    unsupported = AnomalyScorer.bundled(paranoia=1).unsupported
    assert {"942100", "941100"} <= set(unsupported)  # libinjection's @detectSQLi and @detectXSS
    assert "932100" not in unsupported


def test_the_fault_blocks_by_content_whatever_the_size_and_parses_from_a_spec() -> None:
    fault = parse_fault_spec("anomaly-waf:1:5:nginx")
    assert fault == AnomalyWaf(paranoia=1, threshold=5, page="nginx")
    box = Middlebox(ok, [fault])
    client = httpx.Client(transport=httpx.MockTransport(box))
    small = chat("cat /etc/passwd")
    assert client.send(small).status_code == 403
    assert client.send(chat("x" * 200_000)).status_code == 200
    assert box.rejections[0].kind == "anomaly-waf"


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("anomaly-waf:5", "paranoia must be 1, 2, 3 or 4, got 5"),
        ("anomaly-waf:1:0", "threshold must be > 0, got 0"),
        ("anomaly-waf:1:5:imperva", "page must be one of"),
        ("anomaly-waf:rules=crs-2", "rules must be one of crs-3.3, got 'crs-2'"),
    ],
)
def test_bad_settings_are_refused_naming_the_field(spec: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_fault_spec(spec)


def test_rule_files_are_read_into_rules_with_their_ids_sources_levels_and_chains(tmp_path: Path) -> None:
    (tmp_path / "words.data").write_text("# comment\nalpha\nbeta gamma\n", encoding="utf-8")
    (tmp_path / "REQUEST-930-TEST.conf").write_text(
        textwrap.dedent(
            """\
            # a comment
            SecRule TX:EXECUTING_PARANOIA_LEVEL "@lt 1" "id:930011,phase:1,pass,nolog,skipAfter:END"
            SecRule ARGS|!ARGS:/^skip/ "@rx a\\"b" \\
                "id:930001,phase:2,block,t:none,t:lowercase,severity:'CRITICAL',\\
                msg:'one, two',setvar:'tx.anomaly_score_pl1=+%{tx.critical_anomaly_score}'"
            SecRule TX:EXECUTING_PARANOIA_LEVEL "@lt 2" "id:930013,phase:1,pass,nolog,skipAfter:END"
            SecRule ARGS_NAMES "@pmFromFile words.data" "id:930002,phase:2,block,chain,\\
                setvar:'tx.anomaly_score_pl2=+%{tx.warning_anomaly_score}'"
                SecRule MATCHED_VARS "!@rx ^beta$" "t:none"
            """
        ),
        encoding="utf-8",
    )
    first, second = read_rules(tmp_path)
    assert (first.id, first.source, first.phase, first.paranoia, first.score) == (
        "930001",
        "REQUEST-930-TEST.conf:3",
        2,
        1,
        5,
    )
    assert first.targets == (Target("ARGS"), Target("ARGS", "/^skip/", excluded=True))
    assert (first.operator, first.argument, first.transformations, first.message) == (
        "rx",
        'a"b',
        ("lowercase",),
        "one, two",
    )
    assert (second.id, second.paranoia, second.score, second.argument) == (
        "930002",
        2,
        3,
        ("alpha", "beta gamma"),
    )
    (link,) = second.chain
    assert (link.targets, link.operator, link.negated, link.argument) == (
        (Target("MATCHED_VARS"),),
        "rx",
        True,
        "^beta$",
    )


@pytest.mark.skipif(not CRS_RULES.is_dir(), reason="needs Debian's modsecurity-crs (the rule files)")
def test_the_bundled_rule_set_is_what_the_installed_crs_reads_as() -> None:
    bundled = json.loads((data_dir("waf") / "crs-3.3.json").read_text(encoding="utf-8"))
    fresh = rules_to_data(read_rules(CRS_RULES), source=bundled["source"], tx=tx_defaults(CRS_RULES))
    assert json.loads(json.dumps(fresh)) == bundled
    rules, tx, source = rule_set("crs-3.3")
    assert len(rules) == len(bundled["rules"]) and tx["allowed_methods"] == "GET HEAD POST OPTIONS"
    assert "OWASP ModSecurity Core Rule Set 3.3.4" in source


@pytest.mark.parametrize(
    "trigger", ["cat /etc/passwd", "<script>alert(1)</script>", "1' UNION SELECT password FROM users --"]
)
def test_long_runs_of_blanks_score_as_the_text_around_them(trigger: str) -> None:
    # An experiment pads with blanks (SPEC §12). Python's re has no PCRE match limit, so the mock cuts
    # long blank runs for its regular expressions: what is around them still scores the same, blanks
    # alone score nothing, and the cut is bounded (the scorer returns on 200 KB of blanks).
    scorer = AnomalyScorer.bundled(paranoia=1, threshold=5)
    padding = " " * 200_000
    alone = scorer.score(chat(trigger))
    padded = scorer.score(chat(padding + trigger + padding))
    assert alone.blocked and padded.blocked and set(padded.rules) == set(alone.rules)
    assert not scorer.score(chat("Hi" + padding)).matches
