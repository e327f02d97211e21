"""ModSecurity rule files read into rules as data: the request rules of a rule set such as the OWASP CRS.

:func:`read_rules` parses ``SecRule`` statements (joined continuation lines, Apache's quoting:
only ``\\"`` is unescaped) into :class:`Rule` values — id, source (file:line), phase, targets,
transformations, operator and its argument (an ``@pmFromFile`` list resolved from its data
file), paranoia level (its ``paranoia-level/N`` tag, else the level section it sits in) and the
anomaly score it adds (``setvar:tx.anomaly_score_plN=+%{tx.critical_anomaly_score}``: critical 5,
error 4, warning 3, notice 2), with the links of a chain. Only the request-inspection files are
kept (protocol enforcement and attacks; not the setup, exceptions, IP reputation, DoS or the
blocking evaluation). ``python -m simulator.proxy.crs RULES_DIR OUT.json`` writes the data file
the mock's anomaly-scored fault runs (``fixtures/waf/``).
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "SEVERITY_SCORES",
    "Rule",
    "Target",
    "read_rules",
    "rules_from_data",
    "rules_to_data",
    "tx_defaults",
]

# CRS 3.3 crs-setup.conf defaults (tx.critical_anomaly_score and the others).
SEVERITY_SCORES = {"critical": 5, "error": 4, "warning": 3, "notice": 2}
REQUEST_FILES = re.compile(r"REQUEST-9(1[13]|2\d|3\d|4[0-4])-.*\.conf$")
SCORE_RE = re.compile(r"tx\.anomaly_score_pl(\d)=\+%\{tx\.(\w+)_anomaly_score\}", re.IGNORECASE)
LEVEL_GATE_RE = re.compile(r'^SecRule\s+TX:EXECUTING_PARANOIA_LEVEL\s+"@lt\s+(\d)"', re.IGNORECASE)
PARANOIA_TAG_RE = re.compile(r"paranoia-level/(\d)")


@dataclass(frozen=True, slots=True)
class Target:
    """One variable of a rule: ``ARGS``, ``REQUEST_HEADERS:User-Agent``; ``excluded`` for ``!VAR:sel``,
    ``count`` for ``&VAR``."""

    name: str
    selector: str = ""
    excluded: bool = False
    count: bool = False


@dataclass(frozen=True, slots=True)
class Rule:
    """One rule (or chain link): what it inspects, how, and what a match adds to the anomaly score."""

    id: str
    source: str
    phase: int
    targets: tuple[Target, ...]
    transformations: tuple[str, ...]
    operator: str
    argument: str | tuple[str, ...]
    negated: bool = False
    paranoia: int = 1
    severity: str = ""
    score_level: int = 0  # the anomaly_score_plN it adds to (0: none)
    message: str = ""
    multi_match: bool = False  # the operator sees the value after every transformation, not only the last
    chain: tuple[Rule, ...] = field(default=())

    @property
    def score(self) -> int:
        """What one match adds to the anomaly score (0 for a rule that only sets state)."""
        return SEVERITY_SCORES.get(self.severity, 0) if self.score_level else 0


def _statements(text: str) -> Iterator[tuple[int, str]]:
    """(line, statement) with continuation lines joined and comments left out."""
    pending, start = "", 0
    for number, line in enumerate(text.splitlines(), start=1):
        if not pending:
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            start = number
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1]
            continue
        yield start, pending + line
        pending = ""
    if pending:
        yield start, pending


def _words(statement: str) -> list[str]:
    """Apache's configuration words: whitespace-separated, double quotes group, ``\\"`` is a quote."""
    words, i, n = [], 0, len(statement)
    while i < n:
        if statement[i].isspace():
            i += 1
            continue
        if statement[i] == '"':
            i += 1
            word = []
            while i < n and statement[i] != '"':
                if statement[i] == "\\" and i + 1 < n and statement[i + 1] == '"':
                    word.append('"')
                    i += 2
                    continue
                word.append(statement[i])
                i += 1
            words.append("".join(word))
            i += 1
        else:
            j = i
            while j < n and not statement[j].isspace():
                j += 1
            words.append(statement[i:j])
            i = j
    return words


def _actions(text: str) -> list[tuple[str, str]]:
    """``name:value`` pairs of an action list (commas inside single quotes do not split)."""
    out: list[str] = []
    current: list[str] = []
    quoted = False
    for char in text:
        if char == "'":
            quoted = not quoted
        if char == "," and not quoted:
            out.append("".join(current))
            current = []
        else:
            current.append(char)
    out.append("".join(current))
    pairs = []
    for action in (a.strip() for a in out):
        if action:
            name, _, value = action.partition(":")
            pairs.append((name.strip().lower(), value.strip().strip("'")))
    return pairs


def _targets(text: str) -> tuple[Target, ...]:
    targets = []
    for part in text.split("|"):
        excluded, count = part.startswith("!"), part.startswith("&")
        part = part.lstrip("!&")
        name, _, selector = part.partition(":")
        targets.append(Target(name.upper(), selector, excluded, count))
    return tuple(targets)


def _operator(text: str, rules_dir: Path) -> tuple[str, str | tuple[str, ...], bool]:
    negated = text.startswith("!")
    text = text[1:] if negated else text
    if not text.startswith("@"):
        return "rx", text, negated
    name, _, argument = text[1:].partition(" ")
    name = name.lower()
    if name == "pm":
        return name, tuple(argument.split()), negated
    if name == "pmfromfile":
        phrases: list[str] = []
        for file in argument.split():
            path = rules_dir / file
            if path.is_file():
                lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
                phrases += [line.strip() for line in lines if line.strip() and not line.startswith("#")]
        return "pm", tuple(phrases), negated
    return name, argument, negated


def _rule(words: list[str], source: str, rules_dir: Path, level: int) -> tuple[Rule, bool]:
    """The rule of a ``SecRule`` statement and whether it starts (or continues) a chain."""
    targets, operator_text = words[1], words[2]
    actions = _actions(words[3]) if len(words) > 3 else []
    names = dict(actions)
    operator, argument, negated = _operator(operator_text, rules_dir)
    paranoia = level
    score_level, severity = 0, names.get("severity", "").lower()
    for name, value in actions:
        tag = PARANOIA_TAG_RE.search(value) if name == "tag" else None
        if tag:
            paranoia = int(tag.group(1))
        score = SCORE_RE.search(value) if name == "setvar" else None
        if score:
            score_level, severity = int(score.group(1)), score.group(2).lower()
    rule = Rule(
        id=names.get("id", ""),
        source=source,
        phase=int(names.get("phase", "2")) if names.get("phase", "2").isdigit() else 2,
        targets=_targets(targets),
        transformations=tuple(v for n, v in actions if n == "t" and v != "none"),
        operator=operator,
        argument=argument,
        negated=negated,
        paranoia=paranoia,
        severity=severity,
        score_level=score_level,
        message=names.get("msg", ""),
        multi_match="multimatch" in names,
    )
    return rule, "chain" in names


def read_rules(rules_dir: Path, files: Sequence[Path] | None = None) -> list[Rule]:
    """The request-inspection rules of a rule set's directory (chains folded into their first rule)."""
    found: list[Rule] = []
    paths = (
        files if files is not None else sorted(p for p in rules_dir.iterdir() if REQUEST_FILES.search(p.name))
    )
    for path in paths:
        level = 1
        chain: list[Rule] = []
        for line, statement in _statements(path.read_text(encoding="utf-8", errors="replace")):
            gate = LEVEL_GATE_RE.match(statement)
            if gate:
                level = int(gate.group(1))
                continue
            words = _words(statement)
            if not words or words[0] != "SecRule" or len(words) < 3:
                continue
            rule, chained = _rule(words, f"{path.name}:{line}", rules_dir, level)
            chain.append(rule)
            if chained:
                continue
            first, *links = chain
            chain = []
            scored = next((link for link in (first, *links) if link.score_level), first)
            found.append(
                Rule(
                    **{
                        **{k: getattr(first, k) for k in Rule.__slots__ if k != "chain"},
                        "severity": scored.severity or first.severity,
                        "score_level": scored.score_level,
                        "paranoia": first.paranoia,
                    },
                    chain=tuple(links),
                )
            )
    return [rule for rule in found if rule.id]


TX_DEFAULT_RE = re.compile(r"setvar:'tx\.(\w+)=([^'%]*)'")


def tx_defaults(rules_dir: Path) -> dict[str, str]:
    """The TX variables the rule set's initialization file sets by default (allowed methods, …)."""
    found: dict[str, str] = {}
    for path in sorted(rules_dir.glob("REQUEST-901-*.conf")):
        for name, value in TX_DEFAULT_RE.findall(path.read_text(encoding="utf-8", errors="replace")):
            found.setdefault(name.lower(), value)
    return found


def rules_to_data(rules: Sequence[Rule], *, source: str, tx: dict[str, str] | None = None) -> dict[str, Any]:
    """The rules as the JSON document :func:`rules_from_data` reads."""
    return {"source": source, "tx": tx or {}, "rules": [asdict(rule) for rule in rules]}


def _from(entry: dict[str, Any]) -> Rule:
    argument = entry["argument"]
    return Rule(
        **{
            **entry,
            "targets": tuple(Target(**t) for t in entry["targets"]),
            "transformations": tuple(entry["transformations"]),
            "argument": tuple(argument) if isinstance(argument, list) else argument,
            "chain": tuple(_from(link) for link in entry["chain"]),
        }
    )


def rules_from_data(document: dict[str, Any]) -> list[Rule]:
    """Rules from a document :func:`rules_to_data` wrote."""
    return [_from(entry) for entry in document["rules"]]


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m simulator.proxy.crs RULES_DIR OUT.json [SOURCE]``: write a rule set's data file."""
    args = list(sys.argv[1:] if argv is None else argv)
    rules_dir, out = Path(args[0]), Path(args[1])
    source = args[2] if len(args) > 2 else str(rules_dir)
    rules = read_rules(rules_dir)
    document = rules_to_data(rules, source=source, tx=tx_defaults(rules_dir))
    out.write_text(json.dumps(document, indent=1) + "\n", encoding="utf-8")
    print(f"{out}: {len(rules)} rules from {rules_dir}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
