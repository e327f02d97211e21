"""Faults as data: a scenario's ``[[fault]]`` table or a compact ``KIND[:VALUE…][:key=value…]`` spec.

Sizes accept ``"128KB"``-style strings (:func:`ctxrecover.sizes.parse_payload_size`);
bad input raises :class:`ScenarioError` naming the field and what it expected.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from ctxrecover.sizes import parse_payload_size
from simulator.proxy.faults import FAULT_KINDS, BodyCap, Fault

__all__ = [
    "FAULT_SPEC_EXAMPLES",
    "FAULT_SPEC_POSITIONALS",
    "ScenarioError",
    "fault_fields",
    "fault_spec",
    "parse_fault_spec",
]


FAULT_SIZE_FIELDS = frozenset({"limit", "min_bytes", "n_bytes", "rate"})
BARE_NUMBER_RE = re.compile(r"\s*\d+(\.\d*)?\s*")
ZERO_SIZE_RE = re.compile(r"\s*0+(\.0*)?\s*([KMG]B?|B)\s*", re.IGNORECASE)
SIZE_HINT = 'a size in bytes or a string such as "128KB" or "1.5MB"'
# Positional values of the compact fault spec, per kind (options go as key=value).
FAULT_SPEC_POSITIONALS: Mapping[str, tuple[str, ...]] = MappingProxyType(
    {
        "body-cap": ("limit", "response"),
        "header-cap": ("limit",),
        "waf-403-html": ("page",),
        "content-match": ("pattern", "page"),
        "anomaly-waf": ("paranoia", "threshold", "page"),
        "bedrock-html-403": (),
        "reset-after": ("n_bytes",),
        "close-after-body": (),
        "slow-close": ("delay_s",),
        "idle-timeout": ("delay_s",),
        "rate-limit-429": ("retry_after",),
        "timeout": ("delay_s", "page"),
        "status-page": ("status", "content_type"),
        "upstream-error": ("page",),
        "latency": ("delay_s",),
        "bandwidth": ("rate",),
        "cut-stream": ("n_bytes",),
    }
)
FAULT_SPEC_EXAMPLES: Mapping[str, str] = MappingProxyType(
    {
        "body-cap": "body-cap:128KB:nginx or body-cap:128KB:waf-403-html",
        "header-cap": "header-cap:8KB",
        "waf-403-html": "waf-403-html:akamai:min_bytes=129KB",
        "content-match": r"content-match:union\s+select:modsecurity",
        "anomaly-waf": "anomaly-waf:1:5:apache",
        "bedrock-html-403": "bedrock-html-403:min_bytes=128000B",
        "reset-after": "reset-after:256KB",
        "close-after-body": "close-after-body:min_bytes=512KB",
        "slow-close": "slow-close:5",
        "idle-timeout": "idle-timeout:30",
        "rate-limit-429": "rate-limit-429:20:from_turn=3:until_turn=3",
        "timeout": "timeout:30:nginx",
        "status-page": "status-page:502:min_bytes=1MB",
        "upstream-error": "upstream-error:envoy:min_bytes=128KB",
        "latency": "latency:0.5:jitter_s=0.1",
        "bandwidth": "bandwidth:64KB",
        "cut-stream": "cut-stream:2KB",
    }
)


class ScenarioError(ValueError):
    """A scenario file or fault spec is invalid; the message names the file and field."""


class FieldProblem(Exception):
    """A value of the wrong type or shape (the caller adds where it was)."""


def parse_size(name: str, value: object) -> int:
    """Integers are bytes; strings go through parse_payload_size and need a unit."""
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    if isinstance(value, str) and BARE_NUMBER_RE.fullmatch(value):
        raise FieldProblem(
            f"{name} needs a unit: {value!r} would mean megabytes to parse_payload_size; "
            f"write '{value.strip()}B' for bytes or e.g. '128KB'"
        )
    if isinstance(value, str):
        parsed = parse_payload_size(value)
        if parsed > 0 or ZERO_SIZE_RE.fullmatch(value):
            return parsed
    raise FieldProblem(f"{name} must be {SIZE_HINT}, got {value!r}")


def typed_value(name: str, value: object, annotation: str) -> object:
    """Check (and for CLI strings, convert) ``value`` against a dataclass field annotation."""
    base = annotation.removesuffix(" | None")
    if base == "str":
        if isinstance(value, str):
            return value
        raise FieldProblem(f"{name} must be a string, got {value!r}")
    if base == "bool":
        if isinstance(value, bool):
            return value
        raise FieldProblem(f"{name} must be true or false, got {value!r}")
    number: type[int] | type[float] = int if base == "int" else float
    if isinstance(value, bool):
        raise FieldProblem(f"{name} must be {'an integer' if number is int else 'a number'}, got {value!r}")
    if isinstance(value, int) or (number is float and isinstance(value, float)):
        return _finite(name, number(value))
    if isinstance(value, str):
        try:
            converted = number(value)
        except ValueError:
            pass
        else:
            return _finite(name, converted)
    raise FieldProblem(f"{name} must be {'an integer' if number is int else 'a number'}, got {value!r}")


def _finite(name: str, value: float) -> float:
    if math.isfinite(value):
        return value
    raise FieldProblem(f"{name} must be a finite number, got {value!r}")


def coerce_field(name: str, value: object, field: dataclasses.Field[Any], sizes: frozenset[str]) -> object:
    return parse_size(name, value) if name in sizes else typed_value(name, value, str(field.type))


def dataclass_fields(cls: type) -> dict[str, dataclasses.Field[Any]]:
    return {f.name: f for f in dataclasses.fields(cls)}


def is_required(field: dataclasses.Field[Any]) -> bool:
    return field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING


def fault_from_table(table: Mapping[str, Any], where: str) -> Fault:
    """Build one fault from a ``[[fault]]`` table (or a parsed CLI spec)."""
    kinds = ", ".join(sorted(FAULT_KINDS))
    if "kind" not in table:
        raise ScenarioError(f"{where}: kind is missing; valid kinds: {kinds}")
    kind = table["kind"]
    if kind not in FAULT_KINDS:
        raise ScenarioError(f"{where}: unknown fault kind {kind!r}; valid kinds: {kinds}")
    cls = FAULT_KINDS[kind]
    fields = dataclass_fields(cls)
    where = f"{where} ({kind})"
    unknown = sorted(set(table) - {"kind", *fields})
    if unknown:
        valid = ", ".join(sorted({"kind", *fields}))
        raise ScenarioError(f"{where}: unknown key {unknown[0]!r}; valid keys: {valid}")
    missing = [name for name, f in fields.items() if is_required(f) and name not in table]
    if missing:
        raise ScenarioError(f"{where}: {missing[0]} is missing, e.g. {FAULT_SPEC_EXAMPLES[kind]}")
    try:
        kwargs: dict[str, Any] = {
            name: coerce_field(name, value, fields[name], FAULT_SIZE_FIELDS)
            for name, value in table.items()
            if name != "kind"
        }
        return cls(**kwargs)
    except (FieldProblem, ValueError) as exc:
        raise ScenarioError(f"{where}: {exc}") from None


def parse_fault_spec(spec: str) -> Fault:
    """Parse ``KIND[:VALUE...][:key=value...]`` into a fault.

    Positional values per kind are :data:`FAULT_SPEC_POSITIONALS`; options are
    any fault field (``probability``, ``from_turn``, ``until_turn``,
    ``min_bytes``, ...). ``body-cap:SIZE:KIND`` applies another fault kind to
    bodies over SIZE: ``body-cap:128KB:waf-403-html`` is a WAF 403 page for
    bodies over 128 KB (``reset-after`` resets after SIZE bytes).
    """
    where = f"fault spec {spec!r}"
    kind, *parts = [part.strip() for part in spec.strip().split(":")]
    if kind not in FAULT_KINDS:
        raise ScenarioError(
            f"{where}: unknown fault kind {kind!r}; valid kinds: {', '.join(sorted(FAULT_KINDS))} "
            "(form KIND[:VALUE...][:key=value...], e.g. body-cap:128KB:nginx)"
        )
    positionals = [part for part in parts if "=" not in part]
    options: dict[str, Any] = {}
    for part in parts:
        if "=" in part:
            key, value = (s.strip() for s in part.split("=", 1))
            if key in options:
                raise ScenarioError(f"{where}: option {key!r} is given twice")
            options[key] = value
    if kind == BodyCap.kind and len(positionals) >= 2 and positionals[1] in FAULT_KINDS:
        try:
            limit = parse_size("limit", positionals[0])
        except FieldProblem as exc:
            raise ScenarioError(f"{where} ({kind}): {exc}") from None
        kind, positionals = positionals[1], positionals[2:]
        if kind == "reset-after":
            options.setdefault("n_bytes", limit)
        else:
            options.setdefault("min_bytes", limit + 1)
    names = FAULT_SPEC_POSITIONALS[kind]
    if len(positionals) > len(names):
        expected = ":".join(names) if names else "no positional values"
        raise ScenarioError(
            f"{where}: too many values for {kind} (expected {expected}); e.g. {FAULT_SPEC_EXAMPLES[kind]}"
        )
    return fault_from_table({"kind": kind, **dict(zip(names, positionals, strict=False)), **options}, where)


def fault_fields(fault: Fault) -> dict[str, Any]:
    """The fields of ``fault`` that differ from their defaults (``kind`` first), as scenario values."""
    fields: dict[str, Any] = {"kind": fault.kind}
    for field in dataclasses.fields(fault):
        value = getattr(fault, field.name)
        if is_required(field) or value != field.default:
            fields[field.name] = value
    return fields


def fault_spec(fault: Fault) -> str:
    """The compact ``KIND[:VALUE...][:key=value...]`` spec of ``fault`` (:func:`parse_fault_spec` reads it).

    ValueError when a value holds a ``:`` (a page body, say): such a fault has JSON fields only.

    >>> fault_spec(parse_fault_spec("body-cap:128KB:waf-403-html"))
    'waf-403-html:min_bytes=131073B'
    """
    fields = fault_fields(fault)
    kind = fields.pop("kind")
    names = FAULT_SPEC_POSITIONALS[kind]
    parts = [kind]
    for name in names:
        if name not in fields or "=" in str(fields[name]):
            break  # the rest go as key=value
        parts.append(_spec_value(name, fields.pop(name)))
    parts += [f"{name}={_spec_value(name, value)}" for name, value in fields.items()]
    if any(":" in part.partition("=")[2] for part in parts[1:]):
        raise ValueError(f"{fault!r} has a value with ':' that a compact spec cannot hold; use JSON fields")
    return ":".join(parts)


def _spec_value(name: str, value: object) -> str:
    if name in FAULT_SIZE_FIELDS:
        return f"{value}B"
    return str(value)
