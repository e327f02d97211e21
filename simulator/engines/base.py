"""What every real gateway has: the knobs users set, the packages it comes from, start and stop.

An :class:`Engine` is a configured gateway in front of one ``upstream`` (an ``http://HOST:PORT``
URL, e.g. a :class:`~simulator.proxy.loopback.LoopbackServer` serving a mock provider). Its
knobs are fields: ``body_cap`` and ``header_cap`` in bytes (None: the engine's own default),
``deny`` (path prefixes refused by a policy rule, ``"/"`` for every path), and the timeouts.
Subclasses write the engine's configuration from them; :meth:`Engine.imitation` gives the mock
faults that claim to behave the same (the conformance tests hold the two side by side).

>>> from simulator.engines import Nginx
>>> Nginx(upstream="http://127.0.0.1:9", body_cap=128 * 1024, deny=("/admin",)).describe()
'nginx: body cap 131,072 B, denies /admin'
"""

from __future__ import annotations

import os
import re
import shutil
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import ClassVar, Self

import httpx

from ctxrecover.sizes import parse_payload_size
from simulator.engines.process import (
    EngineError,
    EngineMissing,
    EngineProcess,
    EngineStartError,
    Launch,
    free_port,
    program_version,
)
from simulator.proxy.fault_base import Fault

__all__ = ["Engine", "EngineConfigError", "Upstream"]

PORT_RETRIES = 3  # a free port can be taken between picking it and the engine binding it
PORT_TAKEN = "address already in use"


class EngineConfigError(EngineError, ValueError):
    """A knob has a value the engine cannot take; the message names the knob."""


@dataclass(frozen=True, slots=True)
class Upstream:
    """Where a gateway forwards: a plain-HTTP host and port (no path, no TLS)."""

    host: str
    port: int

    @classmethod
    def parse(cls, url: str) -> Upstream:
        """``http://HOST:PORT`` (EngineConfigError naming what is wrong otherwise)."""
        try:
            parsed = httpx.URL(url)
        except (httpx.InvalidURL, TypeError) as error:
            raise EngineConfigError(f"upstream {url!r} is not a URL: {error}") from None
        if parsed.scheme != "http" or not parsed.host:
            raise EngineConfigError(
                f"upstream must be an http://HOST:PORT URL, got {url!r} (for a TLS upstream, put "
                "ctxsim proxy --upstream https://… between the gateway and it)"
            )
        if parsed.raw_path not in (b"", b"/") or parsed.query:
            raise EngineConfigError(f"upstream must have no path or query, got {url!r}")
        return cls(parsed.host, parsed.port or 80)

    @property
    def address(self) -> str:
        """``HOST:PORT``."""
        return f"{self.host}:{self.port}"


@dataclass(kw_only=True, eq=False)
class Engine(ABC):
    """A real gateway from the system's packages, configured by its fields; a context manager.

    ``with Nginx(upstream=url, body_cap=131072) as gw: gw.url`` runs nginx on a free loopback port
    (``port`` to choose one) under a generated configuration in a temp dir, and stops it (and
    every process it forked) on the way out, also on Ctrl-C or a failing test.
    """

    name: ClassVar[str]
    program: ClassVar[str]
    packages: ClassVar[tuple[str, ...]]
    # Files the engine loads besides its program (modules, rule sets), each with what it is.
    needs: ClassVar[tuple[tuple[str, str], ...]] = ()
    # The unprivileged user an engine run as root works as (it must own the workspace).
    run_as: ClassVar[str | None] = None
    log_files: ClassVar[tuple[str, ...]] = ()

    upstream: str
    body_cap: int | None = None
    header_cap: int | None = None
    deny: tuple[str, ...] = ()
    upstream_timeout_s: float = 60.0
    client_timeout_s: float = 60.0
    port: int = 0
    target: Upstream = field(init=False, repr=False)
    _process: EngineProcess | None = field(default=None, init=False, repr=False)
    _port: int = field(default=0, init=False, repr=False)

    def __post_init__(self) -> None:
        self.target = Upstream.parse(self.upstream)
        for name in ("body_cap", "header_cap"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise EngineConfigError(f"{self.name}: {name} must be a size in bytes >= 1, got {value!r}")
        for name in ("upstream_timeout_s", "client_timeout_s"):
            if not getattr(self, name) > 0:
                raise EngineConfigError(f"{self.name}: {name} must be > 0 seconds, got {getattr(self, name)}")
        if not 0 <= self.port <= 65535:
            raise EngineConfigError(
                f"{self.name}: port must be within 0..65535 (0: a free one), got {self.port}"
            )
        self.deny = tuple(self.deny)
        for prefix in self.deny:
            if not prefix.startswith("/") or any(c.isspace() or c in "\"'{};#" for c in prefix):
                raise EngineConfigError(
                    f"{self.name}: deny takes path prefixes such as '/' or '/v1/admin', got {prefix!r}"
                )
        self._check()

    def _check(self) -> None:  # noqa: B027 - an optional hook
        """Validate the engine's own knobs (subclasses override)."""

    # -- what is installed ------------------------------------------------------------------

    @classmethod
    def missing(cls) -> str | None:
        """What is not installed (the program or a file it loads), or None when the engine can run."""
        if shutil.which(cls.program) is None:
            return f"{cls.program} is not on PATH"
        for path, what in cls.needs:
            if not os.path.exists(path):
                return f"{what} {path} is missing"
        return None

    @classmethod
    def check_available(cls) -> None:
        """Raise :class:`~simulator.engines.process.EngineMissing` naming the Debian packages to install."""
        problem = cls.missing()
        if problem is not None:
            raise EngineMissing(cls.name, problem, cls.packages)

    # The command that prints the engine's version, and the expression that picks it out.
    version_command: ClassVar[tuple[str, ...]] = ()
    version_pattern: ClassVar[str] = r"(\d+\.\d+\S*)"

    @classmethod
    def version(cls) -> str:
        """The installed engine's version ("" when it cannot tell)."""
        if not cls.version_command:
            return ""
        pattern = re.compile(cls.version_pattern)

        def pick(text: str) -> str:
            match = pattern.search(text)
            return match.group(1) if match else ""

        return program_version(list(cls.version_command), pick)

    @classmethod
    def read_size(cls, name: str, text: str) -> int:
        """A size as this engine reads one in its configuration: ``128KB`` is 131,072 B for most (Caddy
        reads it as 128,000 B); EngineConfigError naming ``name`` when it is not a size."""
        size = parse_payload_size(text)
        if size <= 0:
            raise EngineConfigError(f"{name} {text!r}: expected a size such as 128KB or 1MB")
        return size

    # -- running ----------------------------------------------------------------------------

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT`` of the running gateway."""
        if self._process is None or not self._process.running:
            raise EngineError(f"{self.name} is not running; call start() or use it as a context manager")
        return f"http://127.0.0.1:{self._port}"

    @property
    def running(self) -> bool:
        """Whether the engine process is alive."""
        return self._process is not None and self._process.running

    @property
    def process(self) -> EngineProcess:
        """The running engine process (its pid, workspace and logs)."""
        if self._process is None:
            raise EngineError(f"{self.name} is not running")
        return self._process

    def start(self) -> Self:
        """Start the engine on a free loopback port (or ``port``) and wait until it accepts connections."""
        if self._process is not None:
            raise EngineError(f"{self.name} is already started; stop() it first")
        self.check_available()
        for attempt in range(1, PORT_RETRIES + 1):
            self._port = self.port or free_port()
            process = EngineProcess(
                self.name,
                self._launch_on(self._port),
                [self._port],
                user=self.run_as,
                log_files=self.log_files,
            )
            try:
                self._process = process.start()
                return self
            except EngineStartError as error:
                if self.port or attempt == PORT_RETRIES or PORT_TAKEN not in str(error).lower():
                    raise
        raise AssertionError("unreachable")  # pragma: no cover - the loop returns or raises

    def _launch_on(self, port: int) -> _Prepare:
        return _Prepare(self, port)

    def stop(self) -> None:
        """Stop the engine and everything it forked; remove its workspace."""
        process, self._process = self._process, None
        if process is not None:
            process.stop()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    # -- for subclasses -------------------------------------------------------------------

    @property
    def as_root(self) -> bool:
        """Whether the engine starts as root (and so must drop to :attr:`run_as`)."""
        return os.geteuid() == 0

    @abstractmethod
    def prepare(self, workspace: Path, port: int) -> Launch:
        """Write the configuration into ``workspace``; the command line that runs it on ``port``."""

    @abstractmethod
    def imitation(self) -> tuple[Fault, ...]:
        """The mock faults that behave as this configured engine does (what the conformance tests check)."""

    def knobs(self) -> list[str]:
        """One phrase per knob that differs from the engine's default (for :meth:`describe`)."""
        shown = []
        if self.body_cap is not None:
            shown.append(f"body cap {self.body_cap:,} B")
        if self.header_cap is not None:
            shown.append(f"header cap {self.header_cap:,} B")
        if self.deny:
            shown.append(f"denies {', '.join(self.deny)}")
        return shown

    def describe(self) -> str:
        """``name: knob, knob`` — what this gateway is configured to do."""
        knobs = self.knobs()
        return f"{self.name}: {', '.join(knobs)}" if knobs else f"{self.name}: the engine's defaults"

    def settings(self) -> dict[str, object]:
        """The knobs as a mapping (field name → value)."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.init}


@dataclass(frozen=True, slots=True)
class _Prepare:
    engine: Engine
    port: int

    def __call__(self, workspace: Path) -> Launch:
        return self.engine.prepare(workspace, self.port)


def seconds(value: float) -> str:
    """A duration as whole seconds for a configuration file (at least 1)."""
    return str(max(1, round(value)))


def lines(*parts: str | Sequence[str] | None) -> str:
    """Configuration text from lines and groups of lines (None and empty groups left out)."""
    out: list[str] = []
    for part in parts:
        if part is None:
            continue
        out.extend([part] if isinstance(part, str) else part)
    return "\n".join(out) + "\n"
