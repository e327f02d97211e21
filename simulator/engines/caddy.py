"""Caddy as a reverse proxy (a generated Caddyfile: no admin endpoint, no automatic HTTPS).

``body_cap`` is ``request_body { max_size }`` written in bytes. Caddy does not answer an
over-cap body with a 413: its proxy fails reading the body and the client gets an **empty
502** (``Content-Length: 0``) — and in a Caddyfile ``128KB`` means 128,000 bytes (decimal
units; ``128KiB`` is 131,072). ``header_cap`` is the server's ``max_header_size`` (431 beyond
it), ``deny`` ``respond 403`` on the paths (an empty 403).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from simulator.engines.base import Engine, EngineConfigError, lines, seconds
from simulator.engines.process import Launch
from simulator.proxy.fault_base import Fault
from simulator.proxy.faults import BodyCap, StatusPage

__all__ = ["CADDY_UNITS", "Caddy"]

SIZE_RE = re.compile(r"(\d+(?:\.\d+)?)\s*([KMG]i?B?|B)?", re.IGNORECASE)
# go-humanize's units, as Caddy's request_body max_size reads them: decimal unless "i".
CADDY_UNITS = {
    "b": 1,
    "k": 1000,
    "kb": 1000,
    "m": 1000**2,
    "mb": 1000**2,
    "g": 1000**3,
    "gb": 1000**3,
    "ki": 1024,
    "kib": 1024,
    "mi": 1024**2,
    "mib": 1024**2,
    "gi": 1024**3,
    "gib": 1024**3,
}


@dataclass(kw_only=True, eq=False)
class Caddy(Engine):
    """Caddy in front of ``upstream``."""

    name = "caddy"
    program = "caddy"
    packages = ("caddy",)

    version_command = ("caddy", "version")
    version_pattern = r"v?(\d+\.\d+\.\d+)"

    @classmethod
    def read_size(cls, name: str, text: str) -> int:
        """As Caddy (go-humanize) reads a size: ``128KB`` is 128,000 B, ``128KiB`` is 131,072 B."""
        match = SIZE_RE.fullmatch(text.strip())
        if match is None or float(match.group(1)) <= 0:
            raise EngineConfigError(
                f"{name} {text!r}: expected a size such as 128KB (Caddy: 128,000 B) or 128KiB"
            )
        unit = (match.group(2) or "B").lower()
        return int(float(match.group(1)) * CADDY_UNITS[unit])

    def prepare(self, workspace: Path, port: int) -> Launch:
        matchers = " ".join(f"{prefix.rstrip('/')}*" if prefix != "/" else "*" for prefix in self.deny)
        server_options = [
            "  servers {",
            "    timeouts {",
            f"      read_body {seconds(self.client_timeout_s)}s",
            "    }",
            None if self.header_cap is None else f"    max_header_size {self.header_cap}",
            "  }",
        ]
        config = lines(
            "{",
            "  admin off",
            "  auto_https off",
            f"  storage file_system {workspace}/data",
            [line for line in server_options if line is not None],
            "}",
            f"http://127.0.0.1:{port} {{",
            "  bind 127.0.0.1",
            None if self.body_cap is None else f"  request_body {{\n    max_size {self.body_cap}\n  }}",
            None if not self.deny else f"  @denied path {matchers}\n  respond @denied 403",
            f"  reverse_proxy {self.target.address} {{",
            f"    transport http {{\n      read_timeout {seconds(self.upstream_timeout_s)}s\n    }}",
            "  }",
            "}",
        )
        (workspace / "Caddyfile").write_text(config, encoding="utf-8")
        env = {
            "HOME": str(workspace),
            "XDG_DATA_HOME": f"{workspace}/data",
            "XDG_CONFIG_HOME": f"{workspace}/config",
        }
        return Launch(("caddy", "run", "--config", f"{workspace}/Caddyfile", "--adapter", "caddyfile"), env)

    def imitation(self) -> tuple[Fault, ...]:
        faults: list[Fault] = []
        if "/" in self.deny:
            faults.append(StatusPage(status=403, body="", content_type=""))
        if self.body_cap is not None:
            faults.append(BodyCap(limit=self.body_cap, response="caddy"))
        return tuple(faults)
