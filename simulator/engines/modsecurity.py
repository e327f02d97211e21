"""ModSecurity and the OWASP Core Rule Set as Debian installs them, with the knobs users turn.

Both flavours start from the configuration their package recommends (ModSecurity 2 for Apache:
``/etc/modsecurity/modsecurity.conf-recommended``; libmodsecurity3 for nginx:
``/etc/nginx/modsecurity.conf``) and change only what a knob says, plus what a loopback test
needs: temp and audit files in the workspace, and the status engine off (it looks up a host
on the internet). The CRS is loaded as the package's ``owasp-crs.load`` does, with a setup that
sets the paranoia level and the inbound anomaly threshold.

Which rules fired is in the engine's logs: :func:`fired_rules` reads their ids.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, ClassVar

from simulator.engines.base import EngineConfigError
from simulator.proxy.faults import AnomalyWaf

__all__ = [
    "BODY_LIMIT_ACTIONS",
    "CRS_RULES_DIR",
    "ModSecurityKnobs",
    "crs_include",
    "fired_rules",
    "modsecurity_config",
]

CRS_RULES_DIR = "/usr/share/modsecurity-crs/rules"
CRS_SETUP = "/etc/modsecurity/crs/crs-setup.conf"  # Debian's: the defaults, with 900990 (the setup version)
CRS_EXCLUSIONS = (
    "/etc/modsecurity/crs/REQUEST-900-EXCLUSION-RULES-BEFORE-CRS.conf",
    "/etc/modsecurity/crs/RESPONSE-999-EXCLUSION-RULES-AFTER-CRS.conf",
)
BODY_LIMIT_ACTIONS = ("Reject", "ProcessPartial")
RECOMMENDED_NO_FILES_LIMIT = 131_072
JSON_RULE_ID = "200001"  # the recommended configuration's rule that turns on the JSON body processor
RULE_ID_RE = re.compile(r"""\bid:\s*'?(\d+)""")
FIRED_RE = re.compile(r"""\[id "(\d+)"\]""")
# Rules that only report a request's outcome, not a match (the anomaly evaluation, the correlation).
BOOKKEEPING_RULES = frozenset({"949110", "959100", "980130", "980140"})


@dataclass(kw_only=True, eq=False)
class ModSecurityKnobs:
    """The ModSecurity knobs of an engine (a mixin of :class:`~simulator.engines.base.Engine` fields).

    ``modsecurity`` turns the rule engine on or off (``SecRuleEngine``); ``crs_paranoia`` (1–4) and
    ``inbound_threshold`` are the CRS's paranoia level and inbound anomaly score threshold (a
    critical match scores 5); ``request_body_limit`` and ``body_limit_action`` are
    ``SecRequestBodyLimit`` and ``SecRequestBodyLimitAction`` (``Reject``: refuse a body over the
    limit; ``ProcessPartial``: inspect its first part, let it through); ``json_body_processor``
    keeps the recommended rule that parses JSON bodies into arguments (off: the body is one blob).
    The engine's ``body_cap`` is ``SecRequestBodyNoFilesLimit`` — the limit a JSON body meets
    (default 131,072 B, as recommended).
    """

    if TYPE_CHECKING:  # the engine's, which this mixes into
        name: ClassVar[str]
        body_cap: int | None

    modsecurity: bool = True
    crs_paranoia: int = 1
    inbound_threshold: int = 5
    request_body_limit: int = 13_107_200
    body_limit_action: str = "Reject"
    json_body_processor: bool = True

    def _check(self) -> None:
        self.check_modsecurity(self.name)

    def no_files_limit(self) -> int:
        """ModSecurity's limit for a body without files (``SecRequestBodyNoFilesLimit``; the engine's
        ``body_cap``, else the recommended 131,072 B)."""
        return RECOMMENDED_NO_FILES_LIMIT if self.body_cap is None else self.body_cap

    def check_modsecurity(self, engine: str) -> None:
        """EngineConfigError naming the first knob out of range."""
        if self.crs_paranoia not in (1, 2, 3, 4):
            raise EngineConfigError(f"{engine}: crs_paranoia must be 1, 2, 3 or 4, got {self.crs_paranoia!r}")
        if isinstance(self.inbound_threshold, bool) or not (
            isinstance(self.inbound_threshold, int) and self.inbound_threshold >= 1
        ):
            raise EngineConfigError(
                f"{engine}: inbound_threshold must be an integer >= 1, got {self.inbound_threshold!r}"
            )
        if self.request_body_limit < 1:
            raise EngineConfigError(
                f"{engine}: request_body_limit must be >= 1, got {self.request_body_limit}"
            )
        if self.body_limit_action not in BODY_LIMIT_ACTIONS:
            raise EngineConfigError(
                f"{engine}: body_limit_action must be one of {', '.join(BODY_LIMIT_ACTIONS)}, "
                f"got {self.body_limit_action!r}"
            )

    def anomaly_fault(self, *, page: str) -> AnomalyWaf:
        """The mock of these rules: the CRS scored at this paranoia level against this threshold."""
        return AnomalyWaf(
            paranoia=self.crs_paranoia,
            threshold=self.inbound_threshold,
            page=page,
            json_body=self.json_body_processor,
        )

    def modsecurity_knobs(self, no_files_limit: int) -> list[str]:
        """The ModSecurity knobs that differ from the recommended configuration, as phrases."""
        shown = [] if self.modsecurity else ["ModSecurity off"]
        if self.modsecurity:
            shown.append(f"CRS paranoia {self.crs_paranoia}, inbound threshold {self.inbound_threshold}")
        shown.append(f"JSON body limit {no_files_limit:,} B ({self.body_limit_action})")
        if not self.json_body_processor:
            shown.append("no JSON body processor")
        return shown


def _statements(text: str) -> list[str]:
    """The configuration's lines with continuation lines (ending in ``\\``) joined to their statement."""
    out: list[str] = []
    pending = ""
    for line in text.splitlines():
        if pending:
            pending += "\n" + line
        else:
            pending = line
        if not line.rstrip().endswith("\\"):
            out.append(pending)
            pending = ""
    if pending:
        out.append(pending)
    return out


def modsecurity_config(
    recommended: str,
    knobs: ModSecurityKnobs,
    *,
    no_files_limit: int,
    workspace: Path,
    unicode_map: str,
    audit_log: str,
) -> str:
    """The recommended configuration with the knobs applied and its files in ``workspace``."""
    directives: Mapping[str, str] = MappingProxyType(
        {
            "SecRuleEngine": "On" if knobs.modsecurity else "Off",
            "SecRequestBodyLimit": str(knobs.request_body_limit),
            "SecRequestBodyNoFilesLimit": str(no_files_limit),
            "SecRequestBodyLimitAction": knobs.body_limit_action,
            "SecTmpDir": str(workspace / "modsec-tmp"),
            "SecDataDir": str(workspace / "modsec-data"),
            "SecAuditEngine": "RelevantOnly",
            "SecAuditLogType": "Serial",
            "SecAuditLog": audit_log,
            "SecUnicodeMapFile": f"{unicode_map} 20127",
            "SecStatusEngine": "Off",
        }
    )
    (workspace / "modsec-tmp").mkdir(exist_ok=True)
    (workspace / "modsec-data").mkdir(exist_ok=True)
    seen: set[str] = set()
    out: list[str] = []
    for statement in _statements(recommended):
        word = statement.strip().split(None, 1)[0] if statement.strip() else ""
        rule = RULE_ID_RE.search(statement)
        if rule and rule.group(1) == JSON_RULE_ID and not knobs.json_body_processor:
            out.append(f"# {JSON_RULE_ID} (the JSON body processor) left out: json_body_processor=False")
            continue
        if word in directives:
            out.append(f"{word} {directives[word]}")
            seen.add(word)
        else:
            out.append(statement)
    out += [f"{word} {value}" for word, value in directives.items() if word not in seen]
    return "\n".join(out) + "\n"


def crs_include(knobs: ModSecurityKnobs, workspace: Path, *, optional: str) -> str:
    """Lines that load the CRS as Debian's ``owasp-crs.load`` does, with the paranoia and threshold set.

    ``optional`` is the flavour's directive for a file that may be missing (``IncludeOptional`` on
    Apache; libmodsecurity has only ``Include``, so missing exclusion files are left out).
    """
    setup = workspace / "crs-setup.conf"
    base = Path(CRS_SETUP).read_text(encoding="utf-8") if Path(CRS_SETUP).is_file() else ""
    setup.write_text(
        base
        + "\n# ctxsim: the paranoia level and the inbound anomaly threshold of this gateway\n"
        + f'SecAction "id:900000,phase:1,nolog,pass,t:none,setvar:tx.paranoia_level={knobs.crs_paranoia}"\n'
        + 'SecAction "id:900110,phase:1,nolog,pass,t:none,'
        + f"setvar:tx.inbound_anomaly_score_threshold={knobs.inbound_threshold},"
        + 'setvar:tx.outbound_anomaly_score_threshold=4"\n',
        encoding="utf-8",
    )
    if not base:  # no Debian setup file: the defaults it would have set
        with setup.open("a", encoding="utf-8") as file:
            file.write(
                'SecDefaultAction "phase:1,log,auditlog,pass"\nSecDefaultAction "phase:2,log,auditlog,pass"\n'
            )
    before, after = CRS_EXCLUSIONS
    include = [f"Include {setup}"]
    include += [f"{optional} {before}"] if optional != "Include" or Path(before).is_file() else []
    include.append(f"Include {CRS_RULES_DIR}/*.conf")
    include += [f"{optional} {after}"] if optional != "Include" or Path(after).is_file() else []
    return "\n".join(include) + "\n"


def fired_rules(log: str, *, since: int = 0) -> list[str]:
    """The ids of the rules a ModSecurity log reports from offset ``since`` on, in order (repeats kept);
    the anomaly evaluation and correlation rules are left out."""
    return [rule for rule in FIRED_RE.findall(log[since:]) if rule not in BOOKKEEPING_RULES]


def rule_ids(rules: Iterable[str]) -> list[str]:
    """Distinct rule ids in first-seen order."""
    return list(dict.fromkeys(rules))
