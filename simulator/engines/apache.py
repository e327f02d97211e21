"""Apache httpd as a reverse proxy (mod_proxy_http), and Apache with ModSecurity 2 and the OWASP CRS.

The configuration is Debian's defaults where they matter for a page (``ServerTokens OS``,
``ServerSignature On``: the pages end in ``Apache/2.4.x (Debian) Server at HOST Port N``).
``body_cap`` is ``LimitRequestBody`` — which does **not** apply to a reverse-proxied request
(measured: a 4 MB body passes a 128 KiB limit), so the plain engine has no body cap for an
API behind it; with ModSecurity, ``body_cap`` is ``SecRequestBodyNoFilesLimit``, which does
(its 413 page). ``header_cap`` is ``LimitRequestFieldSize`` (400 beyond it), ``deny`` is
``Require all denied`` per ``<Location>`` — the same 403 page as a ModSecurity block.
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

__all__ = ["Apache", "ApacheModSecurity"]

MODULES = "/usr/lib/apache2/modules"
BASE_MODULES = (
    ("mpm_event_module", "mod_mpm_event.so"),
    ("authz_core_module", "mod_authz_core.so"),
    ("proxy_module", "mod_proxy.so"),
    ("proxy_http_module", "mod_proxy_http.so"),
)
MODSECURITY_MODULES = (("unique_id_module", "mod_unique_id.so"), ("security2_module", "mod_security2.so"))
RECOMMENDED = "/etc/modsecurity/modsecurity.conf-recommended"
UNICODE_MAP = "/etc/modsecurity/unicode.mapping"


@dataclass(kw_only=True, eq=False)
class Apache(Engine):
    """Apache httpd in front of ``upstream`` (``ProxyPass``), with Debian's page defaults."""

    name = "apache"
    program = "apache2"
    packages: ClassVar[tuple[str, ...]] = ("apache2",)
    needs: ClassVar[tuple[tuple[str, str], ...]] = ((f"{MODULES}/mod_proxy_http.so", "the proxy module"),)
    run_as = "www-data"
    log_files = ("error.log",)

    version_command = ("apache2", "-v")
    version_pattern = r"Apache/(\S+)"

    def _modules(self) -> tuple[tuple[str, str], ...]:
        return BASE_MODULES

    def _extra(self, workspace: Path) -> list[str]:
        return [] if self.body_cap is None else [f"LimitRequestBody {self.body_cap}"]

    def prepare(self, workspace: Path, port: int) -> Launch:
        denied = [
            line
            for prefix in self.deny
            for line in (f'<Location "{prefix}">', "  Require all denied", "</Location>")
        ]
        config = lines(
            f"ServerRoot {workspace}",
            f"PidFile {workspace}/apache2.pid",
            f"Mutex file:{workspace}",
            f"ErrorLog {workspace}/error.log",
            "LogLevel warn",
            f"Listen 127.0.0.1:{port}",
            "ServerName 127.0.0.1",
            ["User www-data", "Group www-data"] if self.as_root else None,
            [f"LoadModule {module} {MODULES}/{file}" for module, file in self._modules()],
            "StartServers 1",
            "ServerLimit 2",
            "ThreadsPerChild 16",
            "MaxRequestWorkers 32",
            "ServerTokens OS",
            "ServerSignature On",
            f"Timeout {seconds(self.client_timeout_s)}",
            f"ProxyTimeout {seconds(self.upstream_timeout_s)}",
            None if self.header_cap is None else f"LimitRequestFieldSize {self.header_cap}",
            self._extra(workspace),
            f'ProxyPass "/" "http://{self.target.address}/"',
            f'ProxyPassReverse "/" "http://{self.target.address}/"',
            denied,
        )
        (workspace / "apache2.conf").write_text(config, encoding="utf-8")
        return Launch(("apache2", "-f", f"{workspace}/apache2.conf", "-DFOREGROUND"))

    def imitation(self) -> tuple[Fault, ...]:
        # LimitRequestBody does not apply to a reverse-proxied request: no body cap to imitate.
        return (WafBlock(page="apache"),) if "/" in self.deny else ()

    def knobs(self) -> list[str]:
        shown = super().knobs()
        return [
            f"{k} (LimitRequestBody: not applied to proxied requests)" if k.startswith("body cap") else k
            for k in shown
        ]


@dataclass(kw_only=True, eq=False)
class ApacheModSecurity(ModSecurityKnobs, Apache):
    """Apache with ModSecurity 2 and the OWASP CRS; ``body_cap`` is ModSecurity's JSON body limit
    (``SecRequestBodyNoFilesLimit``, 131,072 B by default), answered with Apache's 413 page."""

    name = "apache-modsecurity"
    packages = ("apache2", "libapache2-mod-security2", "modsecurity-crs")
    needs = (
        (f"{MODULES}/mod_security2.so", "the Apache module"),
        (RECOMMENDED, "ModSecurity's recommended configuration"),
        (CRS_RULES_DIR, "the OWASP CRS rules"),
    )

    def _modules(self) -> tuple[tuple[str, str], ...]:
        return BASE_MODULES + MODSECURITY_MODULES

    def _extra(self, workspace: Path) -> list[str]:
        rules = modsecurity_config(
            Path(RECOMMENDED).read_text(encoding="utf-8"),
            self,
            no_files_limit=self.no_files_limit(),
            workspace=workspace,
            unicode_map=UNICODE_MAP,
            audit_log=str(workspace / "modsec_audit.log"),
        )
        rules += crs_include(self, workspace, optional="IncludeOptional")
        (workspace / "modsecurity.conf").write_text(rules, encoding="utf-8")
        return [f"Include {workspace}/modsecurity.conf"]

    def knobs(self) -> list[str]:
        shown = [k for k in Engine.knobs(self) if not k.startswith("body cap")]
        return self.modsecurity_knobs(self.no_files_limit()) + shown

    def imitation(self) -> tuple[Fault, ...]:
        faults: list[Fault] = []
        if "/" in self.deny:
            faults.append(WafBlock(page="apache"))
        if self.modsecurity and self.body_limit_action == "Reject":
            # measured: ModSecurity 2 refuses a body of SecRequestBodyNoFilesLimit bytes or more, but
            # only one over SecRequestBodyLimit
            limit = min(self.no_files_limit() - 1, self.request_body_limit)
            faults.append(BodyCap(limit=limit, response="apache"))
        if self.modsecurity:
            faults.append(self.anomaly_fault(page="apache"))
        return tuple(faults)
