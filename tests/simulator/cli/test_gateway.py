"""ctxsim gateway: a real engine on loopback in front of a mock, told how to reach; a missing one named."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from simulator.cli.app import main
from simulator.engines import ENGINES, HAProxy, Nginx

REPO = Path(__file__).resolve().parents[3]


def test_a_missing_engine_is_one_line_naming_the_debian_packages(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(Nginx, "program", "ctxsim-no-such-program")
    assert main(["gateway", "nginx", "--cap", "128KB"]) == 2
    assert capsys.readouterr().err == (
        "ctxsim: error: nginx is not available (ctxsim-no-such-program is not on PATH); "
        "install it with: apt-get install nginx\n"
    )


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["gateway", "haproxy", "--crs", "2"], "--crs needs a ModSecurity engine"),
        (["gateway", "haproxy", "--cap", "lots"], "--cap 'lots': expected a size such as 128KB or 1MB"),
        (
            ["gateway", "haproxy", "--upstream", "https://api.example"],
            "upstream must be an http://HOST:PORT URL",
        ),
        (["gateway", "haproxy", "--upstream", "mock:nope"], "--upstream 'mock:nope': unknown mock"),
    ],
)
def test_bad_options_are_one_error_line(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    if HAProxy.missing() is not None:
        pytest.skip(f"needs Debian's haproxy ({HAProxy.missing()})")
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("ctxsim: error: ") and message in err and err.count("\n") == 1


@pytest.mark.slow
def test_a_gateway_runs_until_sigterm_and_says_how_to_reach_it() -> None:
    if HAProxy.missing() is not None:
        pytest.skip(f"needs Debian's haproxy ({HAProxy.missing()})")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    process = subprocess.Popen(
        [sys.executable, "-m", "simulator", "gateway", "haproxy", "--cap", "128KB"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=REPO,
    )
    try:
        assert process.stdout is not None
        lines = []
        while not (line := process.stdout.readline()).startswith("stop with"):
            assert line, f"the gateway ended early: {process.stderr.read() if process.stderr else ''}"
            lines.append(line.rstrip("\n"))
        url = re.match(
            r"ctxsim gateway haproxy \S+ listening on (http://127\.0\.0\.1:\d+) → mock openai", lines[0]
        )
        assert url is not None, lines[0]
        assert lines[1:3] == [
            "  haproxy: body cap 131,072 B",
            "  the mock that imitates it: ctxsim proxy --fault body-cap:131072B:haproxy",
        ]
        assert f"  export OPENAI_BASE_URL={url.group(1)}/v1" in lines
        chat = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}
        with httpx.Client(trust_env=False, timeout=30) as client:
            assert client.post(url.group(1) + "/v1/chat/completions", json=chat).status_code == 200
            big = {"model": "gpt-4o", "messages": [{"role": "user", "content": "x" * 140_000}]}
            assert client.post(url.group(1) + "/v1/chat/completions", json=big).status_code == 413
        process.send_signal(signal.SIGTERM)
        out, _ = process.communicate(timeout=30)
        assert process.returncode == 0
        assert out.rstrip().endswith("stopped haproxy")
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()


@pytest.mark.slow
@pytest.mark.parametrize("name", list(ENGINES))
def test_every_engine_starts_from_the_command_line(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    problem = ENGINES[name].missing()
    if problem is not None:
        pytest.skip(f"needs Debian's {' '.join(ENGINES[name].packages)} ({problem})")
    assert main(["gateway", name, "--max-seconds", "0.2"]) == 0
    out = capsys.readouterr().out
    assert re.match(rf"ctxsim gateway {name} \S+ listening on http://127\.0\.0\.1:\d+ → mock openai", out)
    assert out.rstrip().endswith(f"stopped {name}")
