"""HAProxy as a reverse proxy (``mode http``).

HAProxy has no body-size directive: ``body_cap`` is the usual rule, ``http-request deny
deny_status 413 if { req.hdr_val(content-length) gt N }`` — by the declared length (a chunked
body passes), answered with HAProxy's 413 page before the body is read, and the connection
closed: a client still sending meets a reset unless it reads the answer while it sends.
``header_cap`` is the request buffer (``tune.bufsize``, less ``tune.maxrewrite``): a head that
does not fit gets its 400 page. ``deny`` is ``http-request deny`` by path prefix (its 403 page,
"Request forbidden by administrative rules").
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from simulator.engines.base import Engine, lines, seconds
from simulator.engines.process import Launch
from simulator.proxy.fault_base import Fault
from simulator.proxy.faults import BodyCap, WafBlock

__all__ = ["HAProxy"]

MAXREWRITE = 1024  # tune.maxrewrite: the part of the buffer kept free for header rewrites


@dataclass(kw_only=True, eq=False)
class HAProxy(Engine):
    """HAProxy in front of ``upstream``."""

    name = "haproxy"
    program = "haproxy"
    packages = ("haproxy",)

    version_command = ("haproxy", "-v")
    version_pattern = r"HAProxy version (\S+)"

    def prepare(self, workspace: Path, port: int) -> Launch:
        over_cap = f"{{ req.hdr_val(content-length) gt {self.body_cap} }}"
        buffer = None if self.header_cap is None else self.header_cap + MAXREWRITE
        denied = [
            "  http-request deny" if prefix == "/" else f"  http-request deny if {{ path_beg {prefix} }}"
            for prefix in self.deny
        ]
        config = lines(
            "global",
            "  maxconn 256",
            f"  pidfile {workspace}/haproxy.pid",
            None if buffer is None else f"  tune.bufsize {buffer}",
            None if buffer is None else f"  tune.maxrewrite {MAXREWRITE}",
            "defaults",
            "  mode http",
            "  timeout connect 5s",
            f"  timeout client {seconds(self.client_timeout_s)}s",
            f"  timeout http-request {seconds(self.client_timeout_s)}s",
            f"  timeout server {seconds(self.upstream_timeout_s)}s",
            "frontend gateway",
            f"  bind 127.0.0.1:{port}",
            None if self.body_cap is None else f"  http-request deny deny_status 413 if {over_cap}",
            denied,
            "  default_backend upstream",
            "backend upstream",
            f"  server upstream {self.target.address}",
        )
        (workspace / "haproxy.cfg").write_text(config, encoding="utf-8")
        return Launch(("haproxy", "-db", "-f", f"{workspace}/haproxy.cfg"))

    def imitation(self) -> tuple[Fault, ...]:
        faults: list[Fault] = []
        if "/" in self.deny:
            faults.append(WafBlock(page="haproxy"))
        if self.body_cap is not None:
            faults.append(BodyCap(limit=self.body_cap, response="haproxy"))
        return tuple(faults)
