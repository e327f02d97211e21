"""The launcher: a program starts in its own workspace, is ready when its port accepts, and stops with
everything it forked; a program that fails to start is reported with its log."""

from __future__ import annotations

import os
import sys
import textwrap
import time
from pathlib import Path

import pytest

from simulator.engines import Engine, EngineMissing, EngineProcess, EngineStartError, Nginx
from simulator.engines.process import Launch, free_port

# A stand-in engine: forks a worker (as nginx and Apache do), writes both pids, then listens.
FORKING_SERVER = textwrap.dedent(
    """
    import os, socket, sys, time
    port, pids = int(sys.argv[1]), sys.argv[2]
    child = os.fork()
    if child == 0:
        time.sleep(600)
        os._exit(0)
    with open(pids, "w") as f:
        f.write(f"{os.getpid()} {child}")
    server = socket.create_server(("127.0.0.1", port))
    print("listening", flush=True)
    while True:
        server.accept()[0].close()
    """
)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as stat:  # a zombie waiting for its reaper is gone for good
        return stat.read().split(") ")[1].split()[0] != "Z"


def _gone(pid: int) -> bool:
    """Whether ``pid`` is gone once its signal is delivered (the kernel takes a moment to finish it)."""
    deadline = time.monotonic() + 10
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.01)
    return not _alive(pid)


def _forking(port: int):  # type: ignore[no-untyped-def]
    def prepare(workspace: Path) -> Launch:
        (workspace / "server.py").write_text(FORKING_SERVER, encoding="utf-8")
        return Launch((sys.executable, str(workspace / "server.py"), str(port), str(workspace / "pids")))

    return prepare


def test_a_process_is_ready_when_its_port_accepts_and_stops_with_its_children() -> None:
    port = free_port()
    process = EngineProcess("forking", _forking(port), [port])
    with process:
        workspace = process.workspace
        assert workspace is not None and process.running
        master, child = map(int, (workspace / "pids").read_text().split())
        assert _alive(master) and _alive(child)
    assert _gone(master)
    assert _gone(child)  # the worker went with its process group
    assert not workspace.exists()


def test_a_failing_test_still_stops_the_process() -> None:
    port = free_port()
    process = EngineProcess("forking", _forking(port), [port])
    with pytest.raises(RuntimeError, match="the test failed"), process:
        pid = process.pid
        raise RuntimeError("the test failed")
    assert pid is not None and _gone(pid)


def test_a_process_that_exits_before_it_is_ready_is_reported_with_its_log() -> None:
    def prepare(workspace: Path) -> Launch:
        return Launch((sys.executable, "-c", "import sys; print('bad directive on line 3'); sys.exit(4)"))

    process = EngineProcess("broken", prepare, [free_port()])
    with pytest.raises(EngineStartError, match=r"broken exited with status 4 before it was ready") as error:
        process.start()
    assert "engine.log: bad directive on line 3" in str(error.value)
    assert process.workspace is None and not process.running


def test_a_process_that_never_listens_is_stopped_after_the_ready_timeout() -> None:
    def prepare(workspace: Path) -> Launch:
        return Launch((sys.executable, "-c", "import time; time.sleep(60)"))

    port = free_port()
    process = EngineProcess("silent", prepare, [port], ready_timeout_s=0.5)
    started = time.monotonic()
    with pytest.raises(EngineStartError, match=rf"silent did not accept connections on 127.0.0.1:{port}"):
        process.start()
    assert time.monotonic() - started < 30  # stopped, not left waiting
    assert not process.running


def test_a_missing_engine_names_the_debian_packages_to_install() -> None:
    class Absent(Nginx):
        program = "ctxsim-no-such-program"

    with pytest.raises(EngineMissing) as error:
        Absent(upstream="http://127.0.0.1:9").start()
    assert str(error.value) == (
        "nginx is not available (ctxsim-no-such-program is not on PATH); "
        "install it with: apt-get install nginx"
    )
    assert error.value.packages == ("nginx",)


@pytest.mark.parametrize(
    ("knobs", "message"),
    [
        (
            {"upstream": "https://api.example"},
            "upstream must be an http://HOST:PORT URL, got 'https://api.example'",
        ),
        (
            {"upstream": "http://127.0.0.1:9/v1"},
            "upstream must have no path or query, got 'http://127.0.0.1:9/v1'",
        ),
        ({"body_cap": 0}, "nginx: body_cap must be a size in bytes >= 1, got 0"),
        ({"deny": ("admin",)}, "nginx: deny takes path prefixes such as '/' or '/v1/admin', got 'admin'"),
        ({"upstream_timeout_s": 0}, "nginx: upstream_timeout_s must be > 0 seconds, got 0"),
    ],
)
def test_bad_knobs_are_refused_naming_the_knob(knobs: dict[str, object], message: str) -> None:
    options: dict[str, object] = {"upstream": "http://127.0.0.1:9", **knobs}
    with pytest.raises(
        ValueError, match="^" + message.replace("(", r"\(").replace(")", r"\)").replace("?", r"\?")
    ):
        Nginx(**options)  # type: ignore[arg-type]


def test_an_engine_is_not_reachable_before_it_starts() -> None:
    engine: Engine = Nginx(upstream="http://127.0.0.1:9")
    with pytest.raises(RuntimeError, match="nginx is not running; call start"):
        _ = engine.url
