"""Squid as a reverse proxy (``accel`` mode, the upstream as its origin ``cache_peer``), caching nothing.

``body_cap`` is ``request_body_max_size`` (its ERR_TOO_BIG 413 page), ``header_cap``
``request_header_max_size``, ``deny`` an ``http_access deny`` by path (ERR_ACCESS_DENIED, 403).
When the upstream resets or closes without answering, Squid answers its ERR_READ_ERROR or
ERR_ZERO_SIZE_OBJECT 502 page; when it cannot connect, ERR_CONNECT_FAIL (503).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from simulator.engines.base import Engine, lines, seconds
from simulator.engines.process import Launch
from simulator.proxy.fault_base import Fault
from simulator.proxy.faults import BodyCap, WafBlock

__all__ = ["Squid"]


@dataclass(kw_only=True, eq=False)
class Squid(Engine):
    """Squid in front of ``upstream``."""

    name = "squid"
    program = "squid"
    packages = ("squid",)
    run_as = "proxy"
    log_files = ("cache.log",)

    version_command = ("squid", "-v")
    version_pattern = r"Version (\S+)"

    def prepare(self, workspace: Path, port: int) -> Launch:
        denied = [
            line
            for number, prefix in enumerate(self.deny, start=1)
            for line in (
                f"acl denied_{number} urlpath_regex ^{re.escape(prefix)}",
                f"http_access deny denied_{number}",
            )
        ]
        config = lines(
            f"http_port 127.0.0.1:{port} accel defaultsite=127.0.0.1 no-vhost",
            f"cache_peer {self.target.host} parent {self.target.port} 0 no-query originserver name=upstream",
            "cache_peer_access upstream allow all",
            denied,
            "http_access allow all",
            "cache deny all",
            "cache_mem 8 MB",
            f"pid_filename {workspace}/squid.pid",
            f"cache_log {workspace}/cache.log",
            "access_log none",
            "cache_store_log none",
            f"coredump_dir {workspace}",
            "netdb_filename none",
            "pinger_enable off",
            "shutdown_lifetime 0 seconds",
            "visible_hostname ctxsim-squid",
            "cache_effective_user proxy" if self.as_root else None,
            None if self.body_cap is None else f"request_body_max_size {self.body_cap} bytes",
            None if self.header_cap is None else f"request_header_max_size {self.header_cap} bytes",
            f"read_timeout {seconds(self.upstream_timeout_s)} seconds",
            f"request_timeout {seconds(self.client_timeout_s)} seconds",
            "connect_timeout 5 seconds",
        )
        (workspace / "squid.conf").write_text(config, encoding="utf-8")
        return Launch(("squid", "-N", "-f", f"{workspace}/squid.conf"))

    def imitation(self) -> tuple[Fault, ...]:
        faults: list[Fault] = []
        if "/" in self.deny:
            faults.append(WafBlock(page="squid"))
        if self.body_cap is not None:
            faults.append(BodyCap(limit=self.body_cap, response="squid"))
        return tuple(faults)
