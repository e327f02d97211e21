"""The ctxsim command line: help, run directories, turn logs, one-line errors, classify, generate, proxy."""

from __future__ import annotations

import argparse
import dataclasses
import io
import json
import re
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pandas as pd
import pytest

import ctxrecover
from simulator.cli import main, policy_from_spec
from simulator.cli.common import package_version, positive_int_arg, seconds_arg, seed_arg
from simulator.cli.output import format_archive_sources, run_document
from simulator.providers.mock import MockProvider
from simulator.proxy.loopback import LoopbackServer
from simulator.proxy.scenario import SCENARIOS_DIR as SCENARIOS
from simulator.replay import replay
from simulator.research.metrics import RUN_COLUMNS
from simulator.transcripts.loaders import load_transcript
from simulator.workloads import load_named_transcript

REPO = Path(__file__).parents[3]
PAGES = REPO / "fixtures" / "pages"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
SUBCOMMANDS = ("run", "replay", "sweep", "report", "proxy", "classify", "generate")
RECOVERABLE_WAF = (
    "⚠ Recoverable failure (proxy/WAF rejection (403 + security signals)) — compacting and retrying"
)
TINY_RUN = ("run", "--transcripts", "chat-50k", "--scenarios", "corporate-128k-waf,rate-limit-429")
TINY_SWEEP = (
    "sweep",
    "--grid",
    "budget_ratio=0.5,0.75",
    "--scenarios",
    "corporate-128k-waf",
    "--transcripts",
    "chat-50k",
    "--policies",
    "default,cline-drop-half",
    "--workers",
    "1",
)


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


# -- help ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("argv", [["--help"], *([name, "--help"] for name in SUBCOMMANDS)])
def test_every_subcommand_has_help(capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
    code, out, err = run_cli(capsys, *argv)

    assert code == 0 and err == ""
    assert out.startswith("usage: ctxsim")


def test_the_module_runs_as_a_program() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "simulator", "classify", "--status", "429"],
        input="",
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=REPO,
    )

    assert done.returncode == 0, done.stderr
    assert "kind:           rate_limit" in done.stdout


# -- run ---------------------------------------------------------------------------------------------


def test_run_writes_the_csv_manifest_and_figures_and_prints_the_table(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    out = tmp_path / "run"
    code, stdout, _ = run_cli(capsys, *TINY_RUN, "--figures", "--out", str(out))

    assert code == 0
    header = stdout.splitlines()[0].split()
    assert header[:3] == ["scenario", "runs", "turns"] and "lost" in header
    rows = {line.split()[0]: line for line in stdout.splitlines()[2:4]}
    assert "waf_rejection=1" in rows["corporate-128k-waf"] and "rate_limit=1" in rows["rate-limit-429"]
    assert stdout.splitlines()[-1].startswith(f"wrote {out}/: attempts.csv, ")

    csv_header = (out / "attempts.csv").read_text(encoding="utf-8").splitlines()[0]
    assert csv_header.split(",") == list(RUN_COLUMNS)
    for name in (
        "budget-corporate-128k-waf--chat-50k--default--s0.png",
        "budget-rate-limit-429--chat-50k--default--s0.png",
        "outcome-matrix.png",
    ):
        assert (out / name).read_bytes().startswith(PNG_MAGIC)

    manifest = json.loads((out / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["code_version"]["package"] == "0.1.0"
    assert manifest["policy"]["name"] == "default" and manifest["policy"]["fields"]["keep_recent"] == 8
    assert [s["name"] for s in manifest["scenarios"]] == ["corporate-128k-waf", "rate-limit-429"]
    (transcript,) = manifest["transcripts"]
    assert transcript["sha256"] == load_named_transcript("chat-50k").sha256
    assert manifest["seed"] is None
    assert {r["outcome"] for r in manifest["runs"]} == {"recovered", "no_compaction"}
    assert manifest["scenarios"][0]["provider"]["context_window"] == 200_000


def test_run_draws_no_figure_unless_asked_and_says_how_to_draw_them(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    out = tmp_path / "run"
    code, stdout, _ = run_cli(capsys, *TINY_RUN, "--out", str(out))

    assert code == 0 and stdout.splitlines()[-2:] == [
        f"wrote {out}/: attempts.csv, manifest.json",
        f"figures: ctxsim report {out}",
    ]
    assert sorted(p.name for p in out.iterdir()) == ["attempts.csv", "manifest.json"]
    assert run_cli(capsys, "report", str(out))[0] == 0
    assert (out / "report" / "outcome-matrix.png").read_bytes().startswith(PNG_MAGIC)


def test_version_names_the_installed_package(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(capsys, "--version")

    assert code == 0 and err == ""
    assert out == f"ctxsim {package_version()}\n" and package_version() == ctxrecover.__version__


def missed_scenario(tmp_path: Path) -> Path:
    """rate-limit-429, expecting a recovery it never makes (a rate limit is never compacted)."""
    text = (SCENARIOS / "rate-limit-429.toml").read_text(encoding="utf-8")
    path = tmp_path / "expects-too-much.toml"
    path.write_text(text.replace('outcome = "no_compaction"', 'outcome = "recovered"'), encoding="utf-8")
    return path


@pytest.mark.parametrize("command", ["run", "replay"])
def test_a_missed_expectation_exits_1_unless_report_only(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, command: str
) -> None:
    def argv(scenario: Path) -> list[str]:
        if command == "run":
            return ["run", "--scenarios", str(scenario), "--no-figures", "--out", str(tmp_path / "run")]
        return ["replay", "--scenario", str(scenario)]

    code, out, _ = run_cli(capsys, *argv(missed_scenario(tmp_path)))
    assert code == 1 and "outcome no_compaction, expected recovered" in out
    code, out_again, _ = run_cli(capsys, *argv(missed_scenario(tmp_path)), "--report-only")
    assert code == 0 and "outcome no_compaction, expected recovered" in out_again
    assert run_cli(capsys, *argv(SCENARIOS / "rate-limit-429.toml"))[0] == 0  # met: exit 0


def test_run_json_reports_every_scenario_and_run(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    out = tmp_path / "run"
    code, stdout, _ = run_cli(capsys, *TINY_RUN, "--no-figures", "--json", "--out", str(out))

    document = json.loads(stdout)
    assert code == 0 and document["run_dir"] == str(out) and document["expectations_met"] is True
    assert document["files"] == ["attempts.csv", "manifest.json"]
    waf, limit = document["scenarios"]
    assert (waf["scenario"], waf["failures_by_kind"], waf["outcomes"]) == (
        "corporate-128k-waf",
        {"waf_rejection": 1},
        {"recovered": 1},
    )
    assert (limit["expected_outcome"], limit["expectation_met"], limit["rejected_requests"]) == (
        "no_compaction",
        True,
        1,
    )
    run = document["runs"][0]
    assert run["transcript"] == "chat-50k" and run["problems"] == [] and run["chars_lost"] == 0
    assert run["attempts"] == len(pd.read_csv(out / "attempts.csv").query("scenario == 'corporate-128k-waf'"))


def test_the_failures_column_counts_truncated_answers(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    argv = ("run", "--scenarios", "max-tokens-truncation", "--no-figures", "--out", str(tmp_path / "run"))
    code, table, _ = run_cli(capsys, *argv)
    assert code == 0
    row = next(line for line in table.splitlines() if line.startswith("max-tokens-truncation"))  # the summary
    attempts = pd.read_csv(tmp_path / "run" / "attempts.csv")
    truncated = int((attempts["outcome"] == "truncated").sum())
    assert truncated == 2 and f"output_truncated={truncated}" in row

    code, stdout, _ = run_cli(capsys, *argv, "--json")
    assert json.loads(stdout)["scenarios"][0]["failures_by_kind"] == {"output_truncated": 2}


def test_replay_json_holds_the_run_its_notices_and_every_attempt(capsys: pytest.CaptureFixture[str]) -> None:
    code, stdout, _ = run_cli(
        capsys, "replay", "--transcript", "chat-50k", "--scenario", "corporate-128k-waf", "--json"
    )

    document = json.loads(stdout)
    assert code == 0
    assert document["run"]["outcome"] == "recovered" and document["run"]["expectation_met"] is True
    assert RECOVERABLE_WAF in document["notices"]
    assert [a["outcome"] for a in document["attempts"]].count("rejected:waf_rejection") == 1
    assert set(document["attempts"][0]) == set(RUN_COLUMNS)


def test_classify_json_is_the_failure_as_plain_values(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "stdin", io.StringIO("Rate limit exceeded: tokens per minute"))

    code, stdout, _ = run_cli(capsys, "classify", "--status", "429", "--json")

    document = json.loads(stdout)
    assert code == 0
    assert (document["kind"], document["recoverable"], document["status"]) == ("rate_limit", False, 429)
    assert list(document) == [
        "kind",
        "reason",
        "reason_text",
        "provider",
        "status",
        "rejected_bytes",
        "recoverable",
        "evidence",
    ]


def test_a_missing_extra_is_one_line_naming_it(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setitem(sys.modules, "tqdm.auto", None)  # as if the "sim" extra were not installed

    code, out, err = run_cli(
        capsys, "run", "--scenarios", "rate-limit-429", "--no-figures", "--out", str(tmp_path / "run")
    )

    assert code == 2 and out == "" and "Traceback" not in err
    assert err == (
        "ctxsim: error: this command needs the 'sim' extra (tqdm is not installed): "
        'pip install "ctxrecover[sim]"\n'
    )


def test_archived_chars_by_source_are_tabled_when_the_stats_break_them_down() -> None:
    @dataclasses.dataclass
    class Stats:
        chars_archived_by_source: dict[str, int]

    result = replay("chat-50k", "corporate-128k-waf")
    real = format_archive_sources([result])  # SessionStats breaks every archive write down by source
    breakdown = result.stats.chars_archived_by_source
    assert real is not None and breakdown and sum(breakdown.values()) == result.stats.chars_archived
    assert real.splitlines()[0].split() == ["scenario", *sorted(breakdown)]
    assert format_archive_sources([dataclasses.replace(result, stats=Stats({}))]) is None  # nothing: no table
    split = dataclasses.replace(result, stats=Stats({"planned": 1200, "recovery": 98_000}))

    table = format_archive_sources([split])
    assert table is not None
    assert table.splitlines()[0].split() == ["scenario", "planned", "recovery"]
    assert table.splitlines()[2].split() == ["corporate-128k-waf", "1,200", "98,000"]
    assert run_document(split)["chars_archived_by_source"] == {"planned": 1200, "recovery": 98_000}


def test_run_twice_without_timing_gives_byte_identical_csvs(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    for name in ("a", "b"):
        code, _, _ = run_cli(
            capsys, *TINY_RUN, "--seed", "3", "--no-timing", "--no-figures", "--out", str(tmp_path / name)
        )
        assert code == 0

    first = (tmp_path / "a" / "attempts.csv").read_bytes()
    assert first == (tmp_path / "b" / "attempts.csv").read_bytes()
    assert b"elapsed_ms" not in first.splitlines()[0]


def test_replay_prints_the_turn_log_and_a_summary(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(
        capsys,
        "replay",
        "--transcript",
        "chat-50k",
        "--scenario",
        "corporate-128k-waf",
        "--policy",
        "keep_recent=6",
    )

    lines = out.splitlines()
    assert code == 0
    turn = [line for line in lines if line.startswith("[turn 8 ·")]
    rejected = next(i for i, line in enumerate(turn) if line.startswith("[turn 8 · attempt 1] → "))
    assert "rejected:waf_rejection" in turn[rejected]
    # the refusal prints first, then the experiments that read it (one word alone passes: not the
    # route; blanks as large are refused: size), then the notices that reading causes, then the retry
    assert all(line.startswith("[turn 8 · attempt 1]") for line in turn[: rejected + 1])
    assert turn[rejected + 1] == "[turn 8 · attempt 2] → 91 B · experiment:passed"
    assert turn[rejected + 2].startswith("[turn 8 · attempt 3] → ")
    assert " · experiment:blocked · waf_rejection" in turn[rejected + 2]
    assert turn.index(f"[turn 8 · attempt 3] {RECOVERABLE_WAF}") == rejected + 3
    first_of_retry = next(i for i, line in enumerate(turn) if line.startswith("[turn 8 · attempt 4]"))
    assert all(line.startswith("[turn 8 · attempt 4]") for line in turn[first_of_retry:])
    assert turn[-1].startswith("[turn 8 · attempt 4] → ")
    assert " · recovered · after recovery level 1" in turn[-1]
    assert len([line for line in turn if "] → " in line]) == 4  # each attempt's line once
    # one vocabulary in words: no level codes anywhere in the log
    assert not [line for line in lines if re.search(r"\bL[123]\b|@L", line)]
    assert lines[-1].startswith("corporate-128k-waf × chat-50k: recovered (expected recovered)")


def test_policy_specs_read_presets_pairs_and_files(tmp_path: Path) -> None:
    path = tmp_path / "tight.json"
    path.write_text(json.dumps({"base": "chat", "payload_cap": 524288}), encoding="utf-8")

    assert policy_from_spec("chat")[0].keep_recent == 10
    pairs = policy_from_spec("keep_recent=4,payload_cap=512KB,context_window=none")[0]
    assert (pairs.keep_recent, pairs.payload_cap, pairs.context_window) == (4, 512 * 1024, None)
    assert policy_from_spec(str(path)) == (policy_from_spec("chat")[0].replace(payload_cap=524288), "tight")


# -- sweep and report -----------------------------------------------------------------------------------


def test_sweep_writes_a_sweep_directory_and_prints_the_comparison_table(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    out = tmp_path / "sweep"
    code, stdout, _ = run_cli(capsys, *TINY_SWEEP, "--no-figures", "--out", str(out))

    lines = stdout.splitlines()
    assert code == 0
    assert [cell.strip() for cell in lines[0].split("|")[1:4]] == ["policy", "scenario", "runs"]
    assert any(line.startswith("| cline-drop-half[budget_ratio=0.75]") for line in lines)
    assert lines[-2:] == ["4 runs: 4 computed, 0 from the cache", f"wrote {out}/"]
    assert {p.name for p in out.iterdir()} == {"attempts.csv", "summary.csv", "manifest.json", "cache"}

    code, stdout, _ = run_cli(capsys, *TINY_SWEEP, "--no-figures", "--out", str(out))
    assert code == 0 and stdout.splitlines()[-2] == "4 runs: 0 computed, 4 from the cache"


def test_report_regenerates_the_figures_and_tables_of_a_sweep(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    out = tmp_path / "sweep"
    assert run_cli(capsys, *TINY_SWEEP, "--no-figures", "--out", str(out))[0] == 0

    code, stdout, _ = run_cli(capsys, "report", str(out), "--formats", "png,svg")

    report = out / "report"
    assert code == 0 and stdout == f"wrote {len(list(report.iterdir()))} files to {report}/\n"
    assert (report / "outcome-matrix.png").read_bytes().startswith(PNG_MAGIC)
    assert (report / "outcome-matrix.svg").is_file() and (report / "comparison.md").is_file()


def test_report_also_reads_a_run_directory(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    out = tmp_path / "run"
    assert run_cli(capsys, *TINY_RUN, "--no-figures", "--out", str(out))[0] == 0

    code, stdout, _ = run_cli(capsys, "report", str(out), "--out", str(tmp_path / "figures"))

    assert code == 0 and stdout.startswith("wrote ") and (tmp_path / "figures" / "runs.csv").is_file()


# -- one-line errors -----------------------------------------------------------------------------------


def bad_jsonl(tmp_path: Path) -> Path:
    path = tmp_path / "broken.jsonl"
    path.write_text('{"role": "user", "content": "hi"}\n{"role": "user", "content": \n', encoding="utf-8")
    return path


def bad_scenario(tmp_path: Path) -> Path:
    path = tmp_path / "no-provider.toml"
    path.write_text('description = "x"\n[expect]\noutcome = "ok"\n', encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["run", "--scenarios", "no-such-scenario"], "unknown scenario 'no-such-scenario'"),
        (["replay", "--scenario", "rate-limit-429", "--transcript", "{bad}"], "broken.jsonl:2:"),
        (["replay", "--scenario", "{scenario}"], "no-provider.toml: [provider] section is missing"),
        (
            ["replay", "--scenario", "rate-limit-429", "--transcript", "/nonexistent/t.jsonl"],
            "/nonexistent/t.jsonl: no such transcript file",
        ),
        (["proxy", "--fault", "body-cap:big:nginx"], "limit must be a size in bytes"),
        (["proxy", "--fault", "teapot:418"], "unknown fault kind 'teapot'"),
        (["proxy", "--listen", "example.com:80"], "LoopbackServer binds loopback addresses only"),
        (["run", "--policy", "keep_recent=lots"], "--policy field keep_recent: expected an integer"),
        (["classify", "/nonexistent/body.txt"], "/nonexistent/body.txt: cannot read"),
        (
            ["classify", "bundled:404-nowhere"],
            "bundled:404-nowhere: no bundled page named '404-nowhere'; `ctxsim classify --list-pages` lists "
            "them (e.g. bundled:400-nginx)",
        ),
        (
            ["run", "--scenarios", "rate-limit-429", "--transcripts", "chat-50k", "--out", "{bad}"],
            "broken.jsonl: cannot write the run directory",
        ),
        (["generate", "--turns", "0", "--out", "x.jsonl"], "argument --turns: expected a positive integer"),
        (
            ["replay", "--scenario", "rate-limit-429", "--transport", "pigeon"],
            "argument --transport: invalid choice",
        ),
        (["sweep", "--grid", "budgetratio=0.5"], "--grid 'budgetratio' is not a Policy field; valid fields:"),
        (["sweep", "--grid", "budget_ratio=0.5,lots"], "--grid field budget_ratio: expected a number"),
        (
            ["sweep", "--grid", "budget_ratio=1.5", "--scenarios", "rate-limit-429"],
            "Policy.budget_ratio must be a fraction in (0, 1]",
        ),
        (["sweep", "--grid", "budget_ratio"], "--grid 'budget_ratio': expected NAME=V1,V2,..."),
        (["sweep", "--grid", "keep_recent=4", "--grid", "keep_recent=6"], "--grid keep_recent is given"),
        (["sweep", "--grid", "budget_ratio=0.4..0.8"], "ranges need a random search"),
        (["sweep", "--policies", "default,cline"], "unknown policy 'cline'"),
        (["sweep", "--workers", "2", "--dask", "local"], "not allowed with argument --workers"),
        (["report", "/nonexistent/run"], "/nonexistent/run: no such run directory"),
        (["report", "{scenario}", "--formats", "gif"], "--formats 'gif': use one or more of png, svg, pdf"),
    ],
)
def test_bad_input_gives_one_error_line_and_exit_code_2(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, argv: list[str], expected: str
) -> None:
    paths = {"{bad}": str(bad_jsonl(tmp_path)), "{scenario}": str(bad_scenario(tmp_path))}
    argv = [paths.get(arg, arg) for arg in argv]

    code, out, err = run_cli(capsys, *argv)

    assert code == 2 and out == ""
    assert len(err.splitlines()) == 1 and err.startswith("ctxsim")
    assert expected in err and "Traceback" not in err


# -- classify and generate ---------------------------------------------------------------------------


def test_classify_reads_a_file_with_status_and_headers(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(
        capsys,
        "classify",
        str(PAGES / "403-cloudflare.html"),
        "--status",
        "403",
        "--header",
        "content-type: text/html",
        "--request-bytes",
        "262144",
    )

    fields = dict(line.split(":", 1) for line in out.splitlines())
    assert code == 0
    assert fields["kind"].strip() == "waf_rejection"
    assert fields["recoverable"].strip() == "yes" and fields["rejected bytes"].strip() == "262144"
    assert list(fields)[:4] == ["kind", "reason", "reason text", "provider"] and "evidence" in fields


def test_classify_lists_the_bundled_pages_by_the_names_it_accepts(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "classify", "--list-pages")

    assert code == 0
    assert out.splitlines() == [f"bundled:{path.stem}" for path in sorted(PAGES.iterdir())]
    assert "bundled:403-cloudflare" in out.splitlines()


def test_classify_reads_a_bundled_page_by_name_as_it_reads_its_file(
    capsys: pytest.CaptureFixture[str],
) -> None:
    options = ("--status", "403", "--header", "content-type:text/html", "--json")
    by_name = run_cli(capsys, "classify", "bundled:403-cloudflare", *options)
    by_path = run_cli(capsys, "classify", str(PAGES / "403-cloudflare.html"), *options)

    assert by_name == by_path and by_name[0] == 0
    assert json.loads(by_name[1])["kind"] == "waf_rejection"


def test_classify_reads_stdin(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    body = (
        '{"type": "error", "error": {"type": "invalid_request_error", '
        '"message": "prompt is too long: 210000 tokens > 200000 maximum"}}'
    )
    monkeypatch.setattr(sys, "stdin", io.StringIO(body))

    code, out, _ = run_cli(capsys, "classify", "-", "--status", "400")

    assert code == 0 and out.splitlines()[0] == "kind:           context_overflow"


def test_generate_writes_a_loadable_transcript(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "session.jsonl"

    code, out, _ = run_cli(capsys, "generate", "--seed", "5", "--turns", "2", "--out", str(path))

    transcript = load_transcript(path)
    assert code == 0 and len(transcript.messages) > 2 and transcript.metadata["seed"] == 5
    assert out.startswith(f"wrote {path}: {len(transcript.messages)} messages") and transcript.sha256 in out


def test_generate_turns_are_the_turns_a_replay_runs(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "session.jsonl"

    code, out, _ = run_cli(capsys, "generate", "--seed", "7", "--turns", "20", "--out", str(path))

    transcript = load_transcript(path)
    result = replay(path, "rate-limit-429")
    assert code == 0 and result.turns == 20
    tasks = transcript.metadata["turns"]
    assert out.startswith(
        f"wrote {path}: {len(transcript.messages)} messages in 20 turns ({tasks} user tasks), "
    )


def test_generate_help_says_what_a_turn_is(capsys: pytest.CaptureFixture[str]) -> None:
    _, out, _ = run_cli(capsys, "generate", "--help")

    assert (
        " ".join(out.split()).count(
            "a turn is one assistant reply — one request to the provider, one session.complete(), what "
            "`ctxsim replay` counts; a user task with its tool steps and answer spans several turns"
        )
        == 1
    )


# -- proxy -----------------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def post(url: str, body: bytes) -> httpx.Response:
    deadline = time.monotonic() + 2.0
    with httpx.Client(trust_env=False, timeout=5.0) as client:
        while True:
            try:
                return client.post(url, content=body, headers={"content-type": "application/json"})
            except httpx.ConnectError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)


def proxy_in_thread(argv: list[str]) -> tuple[threading.Thread, list[int]]:
    codes: list[int] = []
    thread = threading.Thread(target=lambda: codes.append(main(argv)))
    thread.start()
    return thread, codes


def anthropic_body(text: str) -> bytes:
    return json.dumps(
        {"model": "claude-sonnet-4", "max_tokens": 64, "messages": [{"role": "user", "content": text}]}
    ).encode()


def test_proxy_serves_requests_through_its_faults_until_time_out(capsys: pytest.CaptureFixture[str]) -> None:
    port = free_port()
    thread, codes = proxy_in_thread(
        [
            "proxy",
            "--listen",
            f"127.0.0.1:{port}",
            "--upstream",
            "mock:anthropic",
            "--fault",
            "body-cap:2KB:nginx",
            "--max-seconds",
            "1.5",
        ]
    )
    url = f"http://127.0.0.1:{port}/v1/messages"

    answered, capped = post(url, anthropic_body("hi")), post(url, anthropic_body("x" * 4096))
    thread.join(timeout=10)

    out = capsys.readouterr().out
    assert codes == [0]
    assert answered.status_code == 200 and answered.json()["stop_reason"] == "end_turn"
    assert capped.status_code == 413 and "nginx" in capped.text
    assert f"ctxsim proxy listening on http://127.0.0.1:{port} → mock anthropic provider" in out
    assert f"export ANTHROPIC_BASE_URL=http://127.0.0.1:{port}" in out
    assert "→ responded 413" in out and out.splitlines()[-1] == "served 2 request(s)"


def test_proxy_relays_to_a_real_upstream_url(capsys: pytest.CaptureFixture[str]) -> None:
    provider = MockProvider("anthropic", context_window=200_000, script=["from upstream"])
    with LoopbackServer(provider) as upstream:
        port, upstream_url = free_port(), upstream.base_url
        thread, codes = proxy_in_thread(
            ["proxy", "--listen", f"127.0.0.1:{port}", "--upstream", upstream_url, "--max-seconds", "1"]
        )

        answer = post(f"http://127.0.0.1:{port}/v1/messages", anthropic_body("hi"))
        thread.join(timeout=10)

    assert codes == [0]
    assert answer.json()["content"][0]["text"] == "from upstream" and provider.call_count == 1
    out = capsys.readouterr().out
    assert f"→ {upstream_url}" in out and "→ forwarded 200" in out


@pytest.mark.parametrize(
    ("parse", "text", "message"),
    [
        (positive_int_arg, "0", "expected a positive integer, got '0'"),
        (positive_int_arg, "two", "expected a positive integer, got 'two'"),
        (seed_arg, "-1", "expected an integer >= 0, got '-1'"),
        (seed_arg, "1.5", "expected an integer >= 0, got '1.5'"),
        (seconds_arg, "0", "expected a number of seconds > 0, got '0'"),
        (seconds_arg, "nan", "expected a number of seconds > 0, got 'nan'"),
        (seconds_arg, "soon", "expected a number of seconds > 0, got 'soon'"),
    ],
)
def test_numeric_options_refuse_bad_values_naming_what_they_expect(
    parse: Callable[[str], float], text: str, message: str
) -> None:
    with pytest.raises(argparse.ArgumentTypeError) as raised:
        parse(text)
    assert str(raised.value) == message


def test_numeric_options_accept_their_values() -> None:
    assert (positive_int_arg("3"), seed_arg("0"), seconds_arg("0.5")) == (3, 0, 0.5)


def test_run_says_in_its_notes_where_a_planted_turn_moved(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # issue 26 item 4: a scenario applies to any workload; its plant moves to the transcript's last turn
    argv = (
        "run",
        "--transcripts",
        "openai-chat-porto-trip",
        "--scenarios",
        "waf-content-block-after-large-bodies",
        "--no-figures",
        "--report-only",
    )
    code, out, _ = run_cli(capsys, *argv, "--out", str(tmp_path / "a"))
    note = "[workload] plant_turn 14 is beyond the transcript's 3 turns: planted before turn 3"
    assert code == 0
    assert f"notes:\n  waf-content-block-after-large-bodies × openai-chat-porto-trip: {note}\n" in out
    code, stdout, _ = run_cli(capsys, *argv, "--json", "--out", str(tmp_path / "b"))
    assert json.loads(stdout)["runs"][0]["notes"] == [note]
