"""ctxsim proxy (admin API, JSON log, record, scenario, SIGTERM, clear errors), fault, infer and probe."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from simulator.cli.app import main
from simulator.providers.mock import MockProvider
from simulator.proxy.faults import BodyCap
from simulator.proxy.loopback import LoopbackServer
from simulator.proxy.middlebox import Middlebox
from simulator.proxy.scenario import load_scenario

KB = 1024
SECRET = "AIzaSy-NEVER-PRINTED"
REPO = Path(__file__).resolve().parents[3]


@pytest.fixture(autouse=True)
def no_proxy_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(name, raising=False)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_until_up(port: int, process: subprocess.Popen[str] | None = None) -> None:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise AssertionError(f"the proxy exited with {process.returncode}: {process.communicate()}")
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise AssertionError(f"nothing listens on {port}")


class Running:
    """``ctxsim proxy`` in a child process, stopped with SIGTERM as a service manager stops it."""

    def __init__(self, *argv: str) -> None:
        self.port = free_port()
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        command = [sys.executable, "-m", "simulator", "proxy", "--listen", f"127.0.0.1:{self.port}", *argv]
        self.process = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=REPO
        )
        wait_until_up(self.port, self.process)
        self.url = f"http://127.0.0.1:{self.port}"

    def stop(self) -> tuple[int, str, str]:
        """(exit code, stdout, stderr) once it stopped."""
        self.process.send_signal(signal.SIGTERM)
        out, err = self.process.communicate(timeout=30)
        return self.process.returncode, out, err


@pytest.fixture
def running() -> Iterator[list[Running]]:
    started: list[Running] = []
    yield started
    for proxy in started:
        if proxy.process.poll() is None:
            proxy.process.kill()
            proxy.process.communicate()


def anthropic_body(text: str = "hi") -> dict[str, object]:
    return {"model": "claude-sonnet-4", "max_tokens": 64, "messages": [{"role": "user", "content": text}]}


# -- the admin API and ctxsim fault ---------------------------------------------------------------


def test_faults_change_on_a_running_proxy_through_ctxsim_fault(
    capsys: pytest.CaptureFixture[str], running: list[Running]
) -> None:
    admin_port = free_port()
    proxy = Running("--upstream", "mock:anthropic", "--admin", f"127.0.0.1:{admin_port}")
    running.append(proxy)
    admin = f"127.0.0.1:{admin_port}"
    wait_until_up(admin_port)
    url = proxy.url + "/v1/messages"
    before = httpx.post(url, json=anthropic_body("x" * 200 * KB), trust_env=False)
    assert main(["fault", "add", "waf", "body-cap:128KB:waf-403-html", "--admin", admin]) == 0
    blocked = httpx.post(url, json=anthropic_body("x" * 200 * KB), trust_env=False)
    assert main(["fault", "list", "--admin", admin]) == 0
    assert (
        main(
            [
                "fault",
                "add",
                "waf",
                "body-cap:1MB:waf-403-html",
                "--replace",
                "--toxicity",
                "1",
                "--admin",
                "http://" + admin,
            ]
        )
        == 0
    )
    assert main(["fault", "remove", "waf", "--admin", admin]) == 0
    after = httpx.post(url, json=anthropic_body("x" * 200 * KB), trust_env=False)
    assert main(["fault", "reset", "--admin", admin]) == 0
    code, proxy_out, _ = proxy.stop()
    out = capsys.readouterr().out + proxy_out
    assert code == 0
    assert (before.status_code, blocked.status_code, after.status_code) == (200, 403, 200)
    assert "added waf: waf-403-html:min_bytes=131073B" in out
    assert "waf  toxicity 1     waf-403-html:min_bytes=131073B" in out
    assert "replaced waf: waf-403-html:min_bytes=1048577B" in out and "removed waf" in out
    assert f"admin API on http://127.0.0.1:{admin_port} (GET/POST /faults" in out
    assert "→ responded 403 [waf]" in out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["fault", "list", "--admin", "127.0.0.1:{dead}"],
            "cannot reach the admin API at http://127.0.0.1:{dead}",
        ),
        (["fault", "list"], "--admin is missing: give the proxy's admin address"),
        (
            ["proxy", "--admin", "10.0.0.1:8475"],
            "--admin '10.0.0.1:8475': the admin API binds loopback addresses only",
        ),
        (["proxy", "--listen", "0.0.0.0:8080"], "LoopbackServer binds loopback addresses only"),
        (
            ["proxy", "--listen", "127.0.0.1:{busy}"],
            "--listen 127.0.0.1:{busy}: cannot listen there: the port is in use (another program, or another "
            "ctxsim proxy, holds it); give --listen another port (0: any free port)",
        ),
        (
            ["proxy", "--admin", "127.0.0.1:{busy}"],
            "--admin 127.0.0.1:{busy}: cannot listen there: the port is in use (another program, or another "
            "ctxsim proxy, holds it); give --admin another port (0: any free port)",
        ),
        (
            ["proxy", "--listen", "127.0.0.1:{dead}", "--admin", "localhost:{dead}"],
            "--admin localhost:{dead}: that is the --listen address; the admin API needs a port of its own, "
            "e.g. --admin localhost:0 (any free port)",
        ),
        (["proxy", "--scenario", "no-such-scenario"], "unknown scenario 'no-such-scenario'"),
        (
            ["proxy", "--log-json", "/nonexistent/dir/log.jsonl", "--max-seconds", "1"],
            "--log-json /nonexistent/dir/log.jsonl: cannot write",
        ),
        (["infer", "/nonexistent/record.jsonl"], "/nonexistent/record.jsonl: cannot read the record file"),
        (["probe", "ftp://gateway"], "probe URL 'ftp://gateway': expected an http(s):// URL"),
        (["probe", "http://127.0.0.1:{dead}/v1/chat/completions"], "cannot reach http://127.0.0.1:{dead}"),
        (["fault", "add", "x", "teapot:418", "--admin", "127.0.0.1:{dead}"], "cannot reach the admin API"),
    ],
)
def test_bad_input_is_one_error_line_never_a_traceback(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, argv: list[str], message: str
) -> None:
    monkeypatch.delenv("CTXSIM_ADMIN", raising=False)
    dead = free_port()
    with socket.socket() as busy_socket:
        busy_socket.bind(("127.0.0.1", 0))
        busy_socket.listen()
        busy = busy_socket.getsockname()[1]
        code = main([part.format(dead=dead, busy=busy) for part in argv])
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith("ctxsim: error: ") and err.count("\n") == 1, err
    assert message.format(dead=dead, busy=busy) in err
    assert "Traceback" not in err


def test_a_duplicate_fault_add_names_the_cli_s_own_way_to_replace_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    box = Middlebox(MockProvider("anthropic", context_window=10_000), [])
    with LoopbackServer(box, admin_port=0) as server:
        admin = server.admin_url.removeprefix("http://")
        assert main(["fault", "add", "cap", "body-cap:128KB:nginx", "--admin", admin]) == 0
        capsys.readouterr()
        duplicate = main(["fault", "add", "cap", "body-cap:1MB:nginx", "--toxicity", "0.5", "--admin", admin])
        duplicate_err = capsys.readouterr().err
        replaced = main(
            ["fault", "add", "cap", "body-cap:1MB:nginx", "--toxicity", "0.5", "--replace", "--admin", admin]
        )
        replaced_out = capsys.readouterr().out
        missing = main(["fault", "add", "gone", "latency:0.1", "--replace", "--admin", admin])
        missing_err = capsys.readouterr().err
    assert (duplicate, replaced, missing) == (2, 0, 2)
    assert duplicate_err == (
        "ctxsim: error: a fault named 'cap' already exists on the proxy; replace it in place with "
        f"`ctxsim fault add cap body-cap:1MB:nginx --replace --toxicity 0.5 --admin {admin}`, or remove it "
        f"first with `ctxsim fault remove cap --admin {admin}`\n"
    )
    assert replaced_out == "replaced cap: body-cap:1048576B:probability=0.5\n"
    assert missing_err == (
        "ctxsim: error: no fault named 'gone' to replace on the proxy "
        f"(`ctxsim fault list --admin {admin}` lists them); add it with "
        f"`ctxsim fault add gone latency:0.1 --admin {admin}`\n"
    )


def test_the_admin_api_refusal_reaches_the_command_line(
    capsys: pytest.CaptureFixture[str], running: list[Running]
) -> None:
    admin_port = free_port()
    proxy = Running("--admin", f"127.0.0.1:{admin_port}")
    running.append(proxy)
    wait_until_up(admin_port)
    code = main(["fault", "add", "x", "teapot:418", "--admin", f"127.0.0.1:{admin_port}"])
    proxy.stop()
    err = capsys.readouterr().err
    assert code == 2
    assert (
        "ctxsim: error: the admin API refused POST /faults: fault spec 'teapot:418': unknown fault kind"
        in err
    )


# -- the JSON log, the record, a scenario ------------------------------------------------------------


def test_the_json_log_has_one_redacted_line_per_request(tmp_path: Path, running: list[Running]) -> None:
    log = tmp_path / "log.jsonl"
    proxy = Running(
        "--upstream",
        "mock:gemini",
        "--fault",
        "latency:0.01",
        "--fault",
        "body-cap:1KB",
        "--log-json",
        str(log),
    )
    running.append(proxy)
    body = {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}
    path = f"/v1beta/models/gemini-2.5-pro:generateContent?key={SECRET}"
    ok = httpx.post(proxy.url + path, json=body, headers={"x-goog-api-key": SECRET}, trust_env=False)
    capped = httpx.post(proxy.url + path, content=b"x" * 2 * KB, trust_env=False)
    code, out, _ = proxy.stop()
    assert code == 0
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    assert (ok.status_code, capped.status_code) == (200, 413)
    assert SECRET not in out and SECRET not in log.read_text()
    assert [(e["turn"], e["outcome"], e["status"], e["fault_name"]) for e in lines] == [
        (1, "answered", 200, "latency"),
        (2, "responded", 413, "body-cap,latency"),
    ]
    assert lines[0]["path"] == "/v1beta/models/gemini-2.5-pro:generateContent?key=[redacted]"
    assert lines[1]["content_length"] == 2 * KB and lines[0]["elapsed_ms"] >= 10
    assert set(lines[0]) >= {
        "time",
        "turn",
        "body_bytes",
        "response_bytes",
        "elapsed_ms",
        "upstream_ms",
        "fault",
    }


def test_record_then_infer_writes_a_scenario_that_loads(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], running: list[Running]
) -> None:
    record, scenario = tmp_path / "gateway.jsonl", tmp_path / "gateway.toml"
    box = Middlebox(MockProvider("anthropic", context_window=10_000_000), [BodyCap(limit=100 * KB)])
    with LoopbackServer(box) as gateway:
        proxy = Running("--upstream", gateway.base_url, "--record", str(record))
        running.append(proxy)
        for size in (10, 50, 90, 150, 400):
            httpx.post(
                proxy.url + "/v1/messages",
                json=anthropic_body("x" * size * KB),
                headers={"x-api-key": SECRET},
                trust_env=False,
            )
        assert proxy.stop()[0] == 0
    assert main(["infer", str(record), "--out", str(scenario)]) == 0
    out = capsys.readouterr().out
    assert SECRET not in record.read_text()
    assert f"wrote {scenario}" in out and "reproduces 5 of 5 recorded outcomes" in out
    loaded = load_scenario(scenario)
    assert loaded.provider.format == "anthropic"
    (cap,) = loaded.faults
    assert isinstance(cap, BodyCap) and 90 * KB < cap.limit < 150 * KB


def test_a_scenario_gives_the_proxy_its_faults_and_provider(running: list[Running]) -> None:
    proxy = Running("--scenario", "corporate-128k-waf")
    running.append(proxy)
    code, out, _ = proxy.stop()
    assert code == 0
    assert "→ mock bedrock-converse provider (context window 200,000 tokens)" in out
    assert "fault bedrock-html-403: BedrockHtml403(" in out


def test_mock_openai_answers_the_model_list_and_both_apis(running: list[Running]) -> None:
    proxy = Running()
    running.append(proxy)
    models = httpx.get(proxy.url + "/v1/models", trust_env=False).json()
    chat = httpx.post(
        proxy.url + "/v1/chat/completions",
        trust_env=False,
        json={"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]},
    )
    responses = httpx.post(
        proxy.url + "/v1/responses", json={"model": "gpt-4o", "input": "hi"}, trust_env=False
    )
    code, out, _ = proxy.stop()
    assert code == 0
    assert "gpt-4o" in [m["id"] for m in models["data"]]
    assert (chat.json()["object"], responses.json()["object"]) == ("chat.completion", "response")
    assert "serves: POST /v1/chat/completions, POST /v1/responses, GET …/models" in out


# -- probe -------------------------------------------------------------------------------------------


def test_probe_reports_the_cap_of_a_gateway(capsys: pytest.CaptureFixture[str]) -> None:
    box = Middlebox(MockProvider("openai-chat", context_window=10_000_000), [BodyCap(limit=200_000)])
    with LoopbackServer(box) as gateway:
        code = main(
            [
                "probe",
                gateway.base_url,
                "--min",
                "1KB",
                "--max",
                "1MB",
                "--resolution",
                "1KB",
                "--header",
                f"authorization: Bearer {SECRET}",
            ]
        )
    out = capsys.readouterr().out
    assert code == 0 and SECRET not in out
    assert "at most 10 requests" in out and "— refused" in out and "— passed" in out
    summary = out.splitlines()[-1]
    assert summary.startswith("body cap: between ") and "after 10 requests" in summary
    bounds = summary.split("between ")[1].split(" and ")
    passed, refused = (int(part.split(" B")[0].replace(",", "")) for part in bounds)
    assert passed <= 200_000 < refused and refused - passed <= KB


# -- SIGTERM -----------------------------------------------------------------------------------------


@pytest.fixture
def proxy_process() -> Iterator[subprocess.Popen[str]]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    process = subprocess.Popen(
        [sys.executable, "-m", "simulator", "proxy", "--listen", "127.0.0.1:0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=REPO,
    )
    yield process
    if process.poll() is None:
        process.kill()
        process.wait()


def test_sigterm_stops_the_proxy_with_its_summary_and_exit_code_0(
    proxy_process: subprocess.Popen[str],
) -> None:
    assert proxy_process.stdout is not None
    first = proxy_process.stdout.readline()
    url = first.split(" listening on ")[1].split(" ")[0]
    while "stop with Ctrl-C or SIGTERM" not in proxy_process.stdout.readline():
        pass
    answer = httpx.post(
        url + "/v1/chat/completions",
        trust_env=False,
        json={"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]},
    )
    proxy_process.send_signal(signal.SIGTERM)
    out, err = proxy_process.communicate(timeout=20)
    assert answer.status_code == 200
    assert proxy_process.returncode == 0
    assert out.splitlines()[-1] == "served 1 request(s)"
    assert "stopping (SIGTERM)" in err and "Traceback" not in err


@pytest.mark.parametrize(
    ("sizes", "error"),
    [
        (
            ["--min", "16MB", "--max", "1KB"],
            "--min 16.0 MB must be smaller than --max 1.0 KB: --min is a size the gateway lets through, "
            "--max one it refuses",
        ),
        (["--min", "4KB", "--max", "4KB"], "--min 4.0 KB must be smaller than --max 4.0 KB"),
        (
            ["--min", "1KB", "--max", "2KB", "--resolution", "4KB"],
            "--resolution 4.0 KB must be smaller than --max − --min (1.0 KB): there is nothing to bisect",
        ),
    ],
)
def test_probe_refuses_an_empty_range_before_it_prints_a_plan_or_sends(
    capsys: pytest.CaptureFixture[str], sizes: list[str], error: str
) -> None:
    box = Middlebox(MockProvider("openai-chat", context_window=10_000_000), [])
    with LoopbackServer(box) as gateway:
        code = main(["probe", gateway.base_url, *sizes])
        served = gateway.served
    captured = capsys.readouterr()
    assert (code, captured.out, served) == (2, "", 0)
    assert captured.err.startswith(f"ctxsim: error: {error}") and captured.err.count("\n") == 1
