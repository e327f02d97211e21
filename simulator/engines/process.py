"""Running a real program from the system's packages: a temp workspace, free loopback ports, start,
wait until it accepts connections, stop it and everything it forked, remove the workspace.

An :class:`EngineProcess` is started in its own session (process group), so :meth:`~EngineProcess.stop`
signals the whole group (SIGTERM, then SIGKILL after a grace period): no worker outlives its
master. Every running process is also stopped at interpreter exit (:mod:`atexit`), and, where
``setpriv`` (util-linux) is installed, receives SIGTERM when the Python process dies without
cleaning up (a parent-death signal) — so a killed test run leaves no orphan either. Ctrl-C and a
failing test unwind through the context manager.
"""

from __future__ import annotations

import atexit
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

__all__ = [
    "EngineError",
    "EngineMissing",
    "EngineProcess",
    "EngineStartError",
    "Launch",
    "free_port",
    "program_version",
]

LOOPBACK = "127.0.0.1"
DEFAULT_READY_TIMEOUT_S = 15.0
STOP_GRACE_S = 5.0
POLL_S = 0.02
LOG_TAIL_LINES = 12
# setpriv (util-linux, in every Debian base system) sets the parent-death signal before it executes
# the engine: if the Python process is killed outright, the engine gets SIGTERM instead of living on.
SETPRIV = ("setpriv", "--pdeathsig", "TERM", "--")
DEFAULT_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"
_running: set[EngineProcess] = set()
_running_lock = threading.Lock()


@dataclass(frozen=True, slots=True)
class Launch:
    """How to start an engine whose configuration is written: its command line and extra environment."""

    argv: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)


class EngineError(RuntimeError):
    """A real engine could not be used (missing, failed to start, misconfigured)."""


class EngineMissing(EngineError):
    """The engine's program (or a module it needs) is not installed; the message names the Debian packages."""

    def __init__(self, engine: str, what: str, packages: Sequence[str]) -> None:
        self.engine, self.what, self.packages = engine, what, tuple(packages)
        super().__init__(
            f"{engine} is not available ({what}); install it with: apt-get install {' '.join(packages)}"
        )


class EngineStartError(EngineError):
    """The engine did not come up: it exited, or did not accept connections in time (its log is quoted)."""


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now (the OS picks it; a start retries if it is taken since)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((LOOPBACK, 0))
        port: int = sock.getsockname()[1]
        return port


_versions: dict[tuple[str, ...], str] = {}


def program_version(argv: Sequence[str], pattern: Callable[[str], str]) -> str:
    """The version a program reports (``argv`` prints it, ``pattern`` picks it out), cached per argv."""
    key = tuple(argv)
    if key not in _versions:
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=10, check=False)
            _versions[key] = pattern(done.stdout + done.stderr)
        except (OSError, subprocess.TimeoutExpired):
            _versions[key] = ""
    return _versions[key]


def _accepts(port: int) -> bool:
    try:
        with socket.create_connection((LOOPBACK, port), timeout=0.2):
            return True
    except OSError:
        return False


class EngineProcess:
    """One engine process: its workspace, its command line, its log, its lifetime.

    ``prepare(workspace)`` writes the configuration and returns the :class:`Launch`; ``ports`` are
    the loopback ports that must accept connections before it counts as ready. ``user`` (when
    running as root) owns the workspace, so an engine that drops privileges can write its temp files.
    """

    def __init__(
        self,
        name: str,
        prepare: Callable[[Path], Launch],
        ports: Sequence[int],
        *,
        user: str | None = None,
        log_files: Sequence[str] = (),
        ready_timeout_s: float = DEFAULT_READY_TIMEOUT_S,
    ) -> None:
        self.name = name
        self.ports = tuple(ports)
        self._prepare = prepare
        self._user = user
        self._log_files = tuple(log_files)
        self.ready_timeout_s = ready_timeout_s
        self.workspace: Path | None = None
        self.popen: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int | None:
        """The engine's process id while it runs."""
        return self.popen.pid if self.popen is not None else None

    @property
    def running(self) -> bool:
        """Whether the engine process is alive."""
        return self.popen is not None and self.popen.poll() is None

    def start(self) -> EngineProcess:
        """Write the configuration in a new workspace, start the engine, wait until its ports accept."""
        if self.popen is not None:
            raise EngineError(f"{self.name} is already started; stop it first")
        self.workspace = Path(tempfile.mkdtemp(prefix=f"ctxsim-{self.name}-"))
        try:
            launch = self._prepare(self.workspace)
            self._own_workspace()
            self._spawn(launch)
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def _own_workspace(self) -> None:
        assert self.workspace is not None
        self.workspace.chmod(0o755)
        if self._user is None or os.geteuid() != 0:
            return
        for path in (self.workspace, *self.workspace.rglob("*")):
            shutil.chown(path, self._user)

    def _spawn(self, launch: Launch) -> None:
        assert self.workspace is not None
        argv = list(launch.argv)
        prefix = list(SETPRIV) if shutil.which(SETPRIV[0]) else []
        env = {"PATH": os.environ.get("PATH", DEFAULT_PATH), "LANG": "C", **launch.env}
        log = (self.workspace / "engine.log").open("wb")
        try:
            self.popen = subprocess.Popen(
                prefix + argv,
                cwd=self.workspace,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        except OSError as error:
            raise EngineStartError(f"{self.name} could not be started ({argv[0]}): {error}") from None
        finally:
            log.close()
        with _running_lock:
            _running.add(self)

    def _wait_ready(self) -> None:
        assert self.popen is not None
        deadline = time.monotonic() + self.ready_timeout_s
        waiting = list(self.ports)
        while waiting:
            if self.popen.poll() is not None:
                raise EngineStartError(
                    f"{self.name} exited with status {self.popen.returncode} before it was ready:"
                    f"{self.log_tail()}"
                )
            if time.monotonic() > deadline:
                raise EngineStartError(
                    f"{self.name} did not accept connections on 127.0.0.1:{waiting[0]} within "
                    f"{self.ready_timeout_s:g} s:{self.log_tail()}"
                )
            if _accepts(waiting[0]):
                waiting.pop(0)
            else:
                time.sleep(POLL_S)

    def log_tail(self) -> str:
        """The last lines of the engine's output and error logs (for error messages)."""
        if self.workspace is None:
            return ""
        lines: list[str] = []
        for name in ("engine.log", *self._log_files):
            path = self.workspace / name
            if path.is_file():
                text = path.read_text(encoding="utf-8", errors="replace").splitlines()
                lines += [f"{name}: {line}" for line in text[-LOG_TAIL_LINES:] if line.strip()]
        return "".join(f"\n  {line}" for line in lines) or " (no log output)"

    def read_log(self, name: str) -> str:
        """A log file of the workspace ("" when there is none)."""
        if self.workspace is None or not (self.workspace / name).is_file():
            return ""
        return (self.workspace / name).read_text(encoding="utf-8", errors="replace")

    def stop(self) -> None:
        """SIGTERM the engine's process group, SIGKILL what is left after a grace, remove the workspace."""
        popen, self.popen = self.popen, None
        if popen is not None:
            _signal_group(popen, signal.SIGTERM)
            try:
                popen.wait(STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                pass
            _signal_group(popen, signal.SIGKILL)  # the workers too, whatever the master did
            if popen.poll() is None:
                popen.wait(STOP_GRACE_S)
            with _running_lock:
                _running.discard(self)
        workspace, self.workspace = self.workspace, None
        if workspace is not None:
            shutil.rmtree(workspace, ignore_errors=True)

    def __enter__(self) -> EngineProcess:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def _signal_group(popen: subprocess.Popen[bytes], signum: int) -> None:
    try:
        os.killpg(popen.pid, signum)
    except (ProcessLookupError, PermissionError):
        pass


@atexit.register
def _stop_all() -> None:
    with _running_lock:
        running = list(_running)
    for process in running:
        process.stop()
