"""Anomaly scoring the CRS way: rules as data, run over a request's variables, scores summed to a threshold.

An :class:`AnomalyScorer` runs the rules of a rule set's data file (:mod:`simulator.proxy.crs`
wrote it from the rule files; ``fixtures/waf/crs-3.3.json`` is the OWASP CRS 3.3.4 that Debian 12
ships) as ModSecurity 2 does for a request: the JSON body is parsed into ``ARGS`` (every leaf
value, as the JSON body processor does), the headers, path and query into their variables; each
rule of the paranoia level or below applies its transformations to each targeted value and its
operator to the result, and **every matching value adds the rule's score** (critical 5, error 4,
warning 3, notice 2) — so several fragments of one body add up; a chain scores once when all its
links match. The request is blocked when the sum reaches the inbound threshold (default 5: one
critical match). Operators and expressions the mock cannot run (libinjection's ``@detectSQLi`` and
``@detectXSS``, a variable-width look-behind) are listed in :attr:`AnomalyScorer.unsupported`.
"""

from __future__ import annotations

import base64
import binascii
import html
import json
import re
import urllib.parse
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from types import MappingProxyType
from typing import Any

import httpx

from simulator.proxy.crs import Rule, Target, rules_from_data
from simulator.resources import data_dir

__all__ = ["RULE_SETS", "AnomalyScorer", "Match", "Verdict", "rule_set"]

WAF_DIR = data_dir("waf")
RULE_SETS: Mapping[str, str] = MappingProxyType({"crs-3.3": "crs-3.3.json"})
MACRO_RE = re.compile(r"%\{(?:tx|TX)\.(\w+)\}")
UNSUPPORTED_OPERATORS = frozenset({"detectsqli", "detectxss"})
Value = tuple[str, str]  # (variable name, value)


@dataclass(frozen=True, slots=True)
class Match:
    """One value a rule matched, and what it added to the score."""

    rule: str
    variable: str
    score: int


@dataclass(frozen=True, slots=True)
class Verdict:
    """The anomaly score of a request, its matches, and whether it reached the threshold."""

    score: int
    threshold: int
    matches: tuple[Match, ...]

    @property
    def blocked(self) -> bool:
        """Whether the score reached the inbound threshold."""
        return self.score >= self.threshold

    @property
    def rules(self) -> tuple[str, ...]:
        """The ids of the rules that matched, in order, once each."""
        return tuple(dict.fromkeys(match.rule for match in self.matches))


# -- transformations (ModSecurity's t: functions) -------------------------------------------


def _url_decode(value: str) -> str:
    value = re.sub(r"%u([0-9a-fA-F]{4})", lambda m: chr(int(m.group(1), 16)), value)
    return urllib.parse.unquote_plus(value, errors="surrogateescape")


def _js_decode(value: str) -> str:
    value = re.sub(r"\\u([0-9a-fA-F]{4})", lambda m: chr(int(m.group(1), 16)), value)
    value = re.sub(r"\\x([0-9a-fA-F]{2})", lambda m: chr(int(m.group(1), 16)), value)
    escapes = {"n": "\n", "t": "\t", "r": "\r", "b": "\b", "f": "\f", "v": "\v", "0": "\0"}
    return re.sub(r"\\(.)", lambda m: escapes.get(m.group(1), m.group(1)), value)


def _css_decode(value: str) -> str:
    return re.sub(r"\\([0-9a-fA-F]{1,6})\s?", lambda m: chr(min(int(m.group(1), 16), 0x10FFFF)), value)


def _cmd_line(value: str) -> str:
    value = re.sub(r"[\\\"'^]", "", value)
    # a run of blanks before "/" or "(" goes; tried at the run's start only (linear on long blank runs)
    value = re.sub(r"(?<!\s)\s+(?=[/(])", "", value)
    value = re.sub(r"[,;]", " ", value)
    return re.sub(r"\s+", " ", value).lower()


def _normalise_path(value: str) -> str:
    parts: list[str] = []
    for part in value.split("/"):
        if part == "..":
            if parts and parts[-1] not in ("", ".."):
                parts.pop()
            else:
                parts.append(part)
        elif part != ".":
            parts.append(part)
    return re.sub("/+", "/", "/".join(parts))


def _base64(value: str) -> str:
    try:
        return base64.b64decode(value + "=" * (-len(value) % 4)).decode("latin-1")
    except (binascii.Error, ValueError):
        return value


TRANSFORMATIONS: Mapping[str, Callable[[str], str]] = MappingProxyType(
    {
        "lowercase": str.lower,
        "urldecodeuni": _url_decode,
        "urldecode": _url_decode,
        "htmlentitydecode": html.unescape,
        "utf8tounicode": lambda v: v,  # our values are already decoded text
        "removenulls": lambda v: v.replace("\0", ""),
        "jsdecode": _js_decode,
        "cssdecode": _css_decode,
        "cmdline": _cmd_line,
        "compresswhitespace": lambda v: re.sub(r"\s+", " ", v),
        "removewhitespace": lambda v: re.sub(r"\s+", "", v),
        "normalisepath": _normalise_path,
        "normalizepath": _normalise_path,
        "normalizepathwin": lambda v: _normalise_path(v.replace("\\", "/")),
        "replacecomments": lambda v: re.sub(r"/\*.*?(\*/|$)", " ", v, flags=re.S),
        "length": lambda v: str(len(v)),
        "base64decode": _base64,
    }
)


# -- operators --------------------------------------------------------------------------------


def _pcre(pattern: str) -> re.Pattern[str]:
    """A PCRE expression as Python reads it (``\\z`` is ``\\Z``; a flag group moved to the front)."""
    pattern = pattern.replace(r"\z", r"\Z")
    if pattern.startswith(".*"):  # PCRE anchors a leading .* itself; Python would retry it at every offset
        pattern = "(?m)^" + pattern
    leading = re.match(r"^(.*?)\(\?([imsx]+)\)", pattern)
    if leading and leading.group(1) and "(" not in leading.group(1):
        pattern = f"(?{leading.group(2)})" + leading.group(1) + pattern[leading.end() :]
    return re.compile(pattern)


def _byte_ranges(argument: str) -> frozenset[int]:
    allowed: set[int] = set()
    for part in argument.split(","):
        low, _, high = part.strip().partition("-")
        allowed.update(range(int(low), int(high or low) + 1))
    return frozenset(allowed)


Stages = dict[tuple[str, tuple[str, ...]], tuple[str, ...]]


@dataclass(frozen=True)
class _Compiled:
    """A rule ready to run: its operator and its transformation chain (values cached per request)."""

    rule: Rule
    operator: Callable[[str], bool]
    steps: tuple[str, ...]

    @property
    def targets(self) -> tuple[Target, ...]:
        return self.rule.targets

    def test(self, value: str, stages: Stages) -> bool:
        """Whether the rule matches ``value`` (``stages`` caches each value's transformations)."""
        key = (value, self.steps)
        if key not in stages:
            seen = [value]
            for step in self.steps:
                seen.append(TRANSFORMATIONS[step](seen[-1]))
            stages[key] = tuple(seen)
        values = stages[key] if self.rule.multi_match else stages[key][-1:]
        if self.rule.operator == "rx":
            values = tuple(_short_blanks(v, stages) for v in values)
        return any(self.operator(v) != self.rule.negated for v in values)


#: Python's ``re`` has no PCRE match limit: some CRS expressions take quadratic time on a long run of
#: blanks (an experiment's padding). Runs longer than this are shortened for the ``rx`` operator only —
#: no CRS expression needs more blanks in a row to match; lengths and counts see the real value.
BLANK_RUN_LIMIT = 256
#: Chars of values whose rule verdicts an :class:`AnomalyScorer` remembers across requests.
VERDICT_CACHE_CHARS = 64 * 1024 * 1024
_LONG_BLANKS = re.compile(rf"\s{{{BLANK_RUN_LIMIT + 1},}}")


def _short_blanks(value: str, stages: Stages) -> str:
    """``value`` with each run of blanks over :data:`BLANK_RUN_LIMIT` cut to that many (cached)."""
    if len(value) <= BLANK_RUN_LIMIT:
        return value
    key = (value, ("short_blanks",))
    if key not in stages:
        stages[key] = (_LONG_BLANKS.sub(lambda m: m.group(0)[:BLANK_RUN_LIMIT], value),)
    return stages[key][0]


def _operator(rule: Rule, tx: Mapping[str, str]) -> Callable[[str], bool] | None:
    """The operator of ``rule`` as a test on one transformed value, or None when the mock cannot run it."""
    argument = rule.argument
    if isinstance(argument, str):
        argument = MACRO_RE.sub(lambda m: tx.get(m.group(1).lower(), m.group(0)), argument)
        if MACRO_RE.search(argument):
            return None
    name = rule.operator
    if name in UNSUPPORTED_OPERATORS:
        return None
    if name == "rx":
        try:
            expression = _pcre(str(argument))
        except re.error:
            return None
        return lambda value: expression.search(value) is not None
    if name == "pm":  # case-insensitive phrases; str's substring search beats one big alternation by far
        phrases = tuple(p.lower() for p in (argument if isinstance(argument, tuple) else (argument,)) if p)

        def pm(value: str) -> bool:
            lowered = value.lower()
            return any(phrase in lowered for phrase in phrases)

        return pm
    text = str(argument)
    if name in ("eq", "gt", "ge", "lt", "le"):
        compare = {"eq": int.__eq__, "gt": int.__gt__, "ge": int.__ge__, "lt": int.__lt__, "le": int.__le__}[
            name
        ]
        if not text.lstrip("-").isdigit():
            return None
        limit = int(text)
        return lambda value: value.lstrip("-").isdigit() and compare(int(value), limit)
    simple: Mapping[str, Callable[[str], bool]] = {
        "within": lambda value: value in text,
        "endswith": lambda value: value.endswith(text),
        "beginswith": lambda value: value.startswith(text),
        "streq": lambda value: value == text,
        "contains": lambda value: text in value,
    }
    if name in simple:
        return simple[name]
    if name == "validatebyterange":
        allowed = _byte_ranges(text)
        return lambda value: any(byte not in allowed for byte in value.encode("utf-8", "surrogateescape"))
    if name == "validateurlencoding":
        return lambda value: re.search(r"%(?![0-9a-fA-F]{2})", value) is not None
    return None


# -- variables --------------------------------------------------------------------------------


def _json_args(node: Any, name: str, out: list[Value]) -> None:
    if isinstance(node, dict):
        for key, child in node.items():
            _json_args(child, f"{name}.{key}", out)
    elif isinstance(node, list):
        for index, child in enumerate(node):
            _json_args(child, f"{name}.array_{index}", out)
    elif node is None:
        out.append((name, ""))
    elif isinstance(node, bool):
        out.append((name, "true" if node else "false"))
    else:
        out.append((name, str(node)))


@dataclass(frozen=True)
class _Request:
    """The variables of one request, as ModSecurity collects them."""

    collections: Mapping[str, tuple[Value, ...]]

    @classmethod
    def of(cls, request: httpx.Request, *, json_body: bool) -> _Request:
        body = request.read().decode("utf-8", "replace")
        args: list[Value] = [(f"ARGS:{k}", v) for k, v in urllib.parse.parse_qsl(request.url.query.decode())]
        content_type = request.headers.get("content-type", "").lower()
        if json_body and content_type.startswith("application/json") and body:
            try:
                _json_args(json.loads(body), "ARGS:json", args)
            except ValueError:
                pass  # ModSecurity flags REQBODY_ERROR; nothing to inspect as arguments
        headers = [(f"REQUEST_HEADERS:{k}", v) for k, v in request.headers.items()]
        cookies = [
            (f"REQUEST_COOKIES:{k.strip()}", v)
            for part in request.headers.get("cookie", "").split(";")
            if "=" in part
            for k, _, v in [part.partition("=")]
        ]
        path = request.url.path
        uri = request.url.raw_path.decode("latin-1")
        collections = {
            "ARGS": tuple(args),
            "ARGS_NAMES": tuple((f"ARGS_NAMES:{n.partition(':')[2]}", n.partition(":")[2]) for n, _ in args),
            "REQUEST_HEADERS": tuple(headers),
            "REQUEST_HEADERS_NAMES": tuple(
                (f"REQUEST_HEADERS_NAMES:{k}", k) for k, _ in request.headers.items()
            ),
            "REQUEST_COOKIES": tuple(cookies),
            "REQUEST_COOKIES_NAMES": tuple(
                (f"REQUEST_COOKIES_NAMES:{n}", n.partition(":")[2]) for n, _ in cookies
            ),
            "REQUEST_FILENAME": (("REQUEST_FILENAME", path),),
            "REQUEST_BASENAME": (("REQUEST_BASENAME", path.rsplit("/", 1)[-1]),),
            "REQUEST_URI": (("REQUEST_URI", uri),),
            "REQUEST_URI_RAW": (("REQUEST_URI_RAW", uri),),
            "REQUEST_LINE": (("REQUEST_LINE", f"{request.method} {uri} HTTP/1.1"),),
            "REQUEST_METHOD": (("REQUEST_METHOD", request.method),),
            "REQUEST_PROTOCOL": (("REQUEST_PROTOCOL", "HTTP/1.1"),),
            "REQUEST_BODY": (("REQUEST_BODY", body),) if body else (),
            "QUERY_STRING": (("QUERY_STRING", request.url.query.decode()),),
        }
        return cls(MappingProxyType(collections))

    def values(self, targets: Iterable[Target], matched: Sequence[Value] = ()) -> list[Value]:
        """The values ``targets`` name (exclusions applied, ``&VAR`` counted; MATCHED_VARS: ``matched``)."""
        chosen: list[Value] = []
        excluded: set[str] = set()
        for target in targets:
            if target.name in ("MATCHED_VAR", "MATCHED_VARS"):
                pool: Sequence[Value] = matched
            else:
                pool = self.collections.get(target.name, ())
            selected = [v for v in pool if _selected(v[0], target)]
            if target.excluded:
                excluded.update(name for name, _ in selected)
            elif target.count:
                chosen.append((f"&{target.name}", str(len(selected))))
            else:
                chosen.extend(selected)
        return [v for v in chosen if v[0] not in excluded]


def _selected(name: str, target: Target) -> bool:
    if not target.selector or ":" not in name:
        return True
    key = name.partition(":")[2]
    selector = target.selector
    if selector.startswith("/") and selector.endswith("/") and len(selector) > 1:
        return re.search(selector[1:-1], key, re.IGNORECASE) is not None
    return key.lower() == selector.lower()


# -- the scorer -------------------------------------------------------------------------------


@cache
def rule_set(name: str) -> tuple[tuple[Rule, ...], Mapping[str, str], str]:
    """The rules, TX defaults and source of a bundled rule set (:data:`RULE_SETS`)."""
    if name not in RULE_SETS:
        raise ValueError(f"rules must be one of {', '.join(RULE_SETS)}, got {name!r}")
    document = json.loads((WAF_DIR / RULE_SETS[name]).read_text(encoding="utf-8"))
    tx = {k.lower(): str(v) for k, v in document.get("tx", {}).items()}
    return tuple(rules_from_data(document)), MappingProxyType(tx), str(document.get("source", ""))


class AnomalyScorer:
    """Runs a rule set on requests at a paranoia level against an inbound threshold.

    >>> scorer = AnomalyScorer.bundled(paranoia=1, threshold=5)
    >>> request = httpx.Request("POST", "http://gw/v1/chat/completions", json={"q": "cat /etc/passwd"})
    >>> verdict = scorer.score(request)
    >>> verdict.blocked, "930120" in verdict.rules
    (True, True)
    """

    def __init__(
        self,
        rules: Sequence[Rule],
        *,
        paranoia: int = 1,
        threshold: int = 5,
        tx: Mapping[str, str] | None = None,
        json_body: bool = True,
    ) -> None:
        self.paranoia, self.threshold, self.json_body = paranoia, threshold, json_body
        # Each rule's verdict on each value, kept across requests: a conversation resends its history,
        # so a request costs what is new in it. Cleared whole past VERDICT_CACHE_CHARS of values.
        self._verdicts: dict[str, dict[int, bool]] = {}  # value → the verdict of each rule run on it
        self._cached_chars = 0
        tx = tx or {}
        self._rules: list[tuple[_Compiled, tuple[_Compiled, ...]]] = []
        unsupported: list[str] = []
        for rule in rules:
            if rule.paranoia > paranoia:
                continue
            links = [self._compile(r, tx) for r in (rule, *rule.chain)]
            if any(link is None for link in links):
                unsupported.append(rule.id)
                continue
            first, *chain = [link for link in links if link is not None]
            self._rules.append((first, tuple(chain)))
        self.unsupported = tuple(unsupported)

    @classmethod
    def bundled(cls, name: str = "crs-3.3", **options: Any) -> AnomalyScorer:
        """A scorer of a bundled rule set (:data:`RULE_SETS`)."""
        rules, tx, _ = rule_set(name)
        return cls(rules, tx=tx, **options)

    @staticmethod
    def _compile(rule: Rule, tx: Mapping[str, str]) -> _Compiled | None:
        operator = _operator(rule, tx)
        steps = tuple(t.lower() for t in rule.transformations)
        if operator is None or any(step not in TRANSFORMATIONS for step in steps):
            return None
        return _Compiled(rule, operator, steps)

    def _test(self, compiled: _Compiled, value: str, stages: Stages) -> bool:
        """``compiled.test(value)``, remembered (a verdict depends on the rule and the value alone)."""
        verdicts = self._verdicts.get(value)
        if verdicts is None:
            if self._cached_chars + len(value) > VERDICT_CACHE_CHARS:
                self._verdicts, self._cached_chars = {}, 0
            verdicts = self._verdicts[value] = {}
            self._cached_chars += len(value)  # each value counted once, whatever the rules run on it
        verdict = verdicts.get(id(compiled))
        if verdict is None:
            verdict = verdicts[id(compiled)] = compiled.test(value, stages)
        return verdict

    def score(self, request: httpx.Request) -> Verdict:
        """The anomaly score of ``request`` and what matched."""
        variables = _Request.of(request, json_body=self.json_body)
        stages: Stages = {}
        matches: list[Match] = []
        for first, chain in self._rules:
            hits = [v for v in variables.values(first.targets) if self._test(first, v[1], stages)]
            if not hits:
                continue
            if not chain:
                matches += [Match(first.rule.id, name, first.rule.score) for name, _ in hits]
                continue
            matched = hits
            for link in chain:
                matched = [
                    v for v in variables.values(link.targets, matched) if self._test(link, v[1], stages)
                ]
                if not matched:
                    break
            if matched:
                matches.append(Match(first.rule.id, hits[0][0], first.rule.score))
        return Verdict(sum(m.score for m in matches), self.threshold, tuple(matches))
