"""nginx as a reverse proxy, and nginx with libmodsecurity3 and the OWASP CRS.

``body_cap`` is ``client_max_body_size`` (nginx's default: 1 MiB; it answers a declared length
over it with its 413 page before reading the body, then drains it), ``header_cap`` the size of
one request line or header field (``large_client_header_buffers``: beyond it, a 400 "Request
Header Or Cookie Too Large"), ``deny`` ``deny all`` per location. nginx answers a denied path
and a ModSecurity block with the same bare 403 page.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from simulator.engines.base import Engine, lines, seconds
from simulator.engines.modsecurity import CRS_RULES_DIR, ModSecurityKnobs, crs_include, modsecurity_config
from simulator.engines.process import Launch
from simulator.proxy.fault_base import Fault
from simulator.proxy.faults import BodyCap, WafBlock

__all__ = ["Nginx", "NginxModSecurity"]

NGINX_DEFAULT_BODY_CAP = 1024 * 1024  # client_max_body_size 1m
MODULES_DIR = "/usr/share/nginx/modules"
MODSECURITY_MODULES = ("ndk_http_module.so", "ngx_http_modsecurity_module.so")
RECOMMENDED = "/etc/nginx/modsecurity.conf"
UNICODE_MAP = "/etc/nginx/unicode.mapping"
TEMP_PATHS = ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")


@dataclass(kw_only=True, eq=False)
class Nginx(Engine):
    """nginx in front of ``upstream`` (``proxy_pass``), with its own pages and defaults."""

    name = "nginx"
    program = "nginx"
    packages: ClassVar[tuple[str, ...]] = ("nginx",)
    run_as = "nobody"
    log_files = ("error.log",)

    version_command = ("nginx", "-v")
    version_pattern = r"nginx/(\S+)"

    def effective_body_cap(self) -> int | None:
        """The body cap nginx enforces (its 1 MiB default when none is set; None: unlimited)."""
        return NGINX_DEFAULT_BODY_CAP if self.body_cap is None else self.body_cap

    def _http_extra(self, workspace: Path) -> list[str]:
        return []

    def _load_modules(self) -> list[str]:
        return []

    def prepare(self, workspace: Path, port: int) -> Launch:
        for temp in TEMP_PATHS:
            (workspace / temp).mkdir()
        cap = self.effective_body_cap()
        header = (
            [
                f"client_header_buffer_size {min(1024, self.header_cap)};",
                f"large_client_header_buffers 4 {self.header_cap};",
            ]
            if self.header_cap is not None
            else []
        )
        denied = [f"    location ^~ {prefix} {{ deny all; }}" for prefix in self.deny if prefix != "/"]
        config = lines(
            self._load_modules(),
            "daemon off;",
            "master_process on;",
            "worker_processes 1;",
            f"pid {workspace}/nginx.pid;",
            f"error_log {workspace}/error.log info;",
            "user nobody nogroup;" if self.as_root else None,
            "events { worker_connections 256; }",
            "http {",
            "  access_log off;",
            [f"  {temp}_temp_path {workspace}/{temp};" for temp in TEMP_PATHS],
            f"  client_max_body_size {0 if cap is None else cap};",
            [f"  {line}" for line in header],
            f"  client_body_timeout {seconds(self.client_timeout_s)}s;",
            f"  client_header_timeout {seconds(self.client_timeout_s)}s;",
            f"  proxy_read_timeout {seconds(self.upstream_timeout_s)}s;",
            f"  proxy_send_timeout {seconds(self.upstream_timeout_s)}s;",
            [f"  {line}" for line in self._http_extra(workspace)],
            "  server {",
            f"    listen 127.0.0.1:{port};",
            "    deny all;" if "/" in self.deny else None,
            denied,
            f"    location / {{ proxy_pass http://{self.target.address}; }}",
            "  }",
            "}",
        )
        (workspace / "nginx.conf").write_text(config, encoding="utf-8")
        argv = (
            "nginx",
            "-c",
            f"{workspace}/nginx.conf",
            "-p",
            str(workspace),
            "-e",
            f"{workspace}/error.log",
        )
        return Launch(argv)

    def knobs(self) -> list[str]:
        shown = super().knobs()
        if self.body_cap is None:
            shown.insert(0, f"body cap {NGINX_DEFAULT_BODY_CAP:,} B (nginx's default)")
        return shown

    def imitation(self) -> tuple[Fault, ...]:
        faults: list[Fault] = []
        if "/" in self.deny:
            faults.append(WafBlock(page="nginx"))
        cap = self.effective_body_cap()
        if cap is not None:
            faults.append(BodyCap(limit=cap, response="nginx"))
        return tuple(faults)


@dataclass(kw_only=True, eq=False)
class NginxModSecurity(ModSecurityKnobs, Nginx):
    """nginx with libmodsecurity3 and the OWASP CRS; ``body_cap`` is ModSecurity's JSON body limit.

    nginx's own ``client_max_body_size`` is unlimited here, so a body meets ModSecurity: over
    ``request_body_limit`` it is refused with the same bare 403 page as a rule match; over
    ``body_cap`` (``SecRequestBodyNoFilesLimit``) it fails to parse (rule 200002) and gets
    nginx's 400 page.
    """

    name = "nginx-modsecurity"
    packages = ("nginx", "libnginx-mod-http-modsecurity", "modsecurity-crs")
    needs = (
        *((f"{MODULES_DIR}/{module}", "the nginx module") for module in MODSECURITY_MODULES),
        (RECOMMENDED, "libmodsecurity's recommended configuration"),
        (CRS_RULES_DIR, "the OWASP CRS rules"),
    )
    log_files = ("error.log",)

    def effective_body_cap(self) -> int | None:
        return None  # nginx's own cap is off: ModSecurity's limit is the cap

    def _load_modules(self) -> list[str]:
        return [f"load_module {MODULES_DIR}/{module};" for module in MODSECURITY_MODULES]

    def _http_extra(self, workspace: Path) -> list[str]:
        rules = modsecurity_config(
            Path(RECOMMENDED).read_text(encoding="utf-8"),
            self,
            no_files_limit=self.no_files_limit(),
            workspace=workspace,
            unicode_map=UNICODE_MAP,
            audit_log=str(workspace / "modsec_audit.log"),
        )
        rules += crs_include(self, workspace, optional="Include")
        (workspace / "modsecurity.conf").write_text(rules, encoding="utf-8")
        return ["modsecurity on;", f"modsecurity_rules_file {workspace}/modsecurity.conf;"]

    def knobs(self) -> list[str]:
        shown = [k for k in Engine.knobs(self) if not k.startswith("body cap")]
        return self.modsecurity_knobs(self.no_files_limit()) + shown

    def imitation(self) -> tuple[Fault, ...]:
        faults: list[Fault] = []
        if "/" in self.deny:
            faults.append(WafBlock(page="nginx"))
        if self.modsecurity and self.body_limit_action == "Reject":
            faults.append(WafBlock(min_bytes=self.request_body_limit + 1, page="nginx"))
        if self.modsecurity:
            faults.append(WafBlock(min_bytes=self.no_files_limit() + 1, page="nginx-modsecurity"))
            faults.append(self.anomaly_fault(page="nginx"))
        return tuple(faults)
