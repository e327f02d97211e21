"""The proxy's runtime control API, toxiproxy-style: JSON over HTTP on its own loopback port.

=========================  ===================================================================
``GET /faults``            the faults in the order they are tried: ``{"faults": [FAULT, …]}``
``POST /faults``           add one: ``{"name": "cap", "spec": "body-cap:128KB:waf-403-html"}`` or
                           ``{"name": "cap", "kind": "body-cap", "limit": "128KB"}``; optional
                           ``"toxicity"`` (the probability it fires) → 201 FAULT (409 if the name exists)
``GET /faults/{name}``     one fault
``POST /faults/{name}``    replace it in place (same body, no name needed) → 200 FAULT
``DELETE /faults/{name}``  remove it → 204
``POST /reset``            remove every fault (toxiproxy's reset) → 204
``GET /stats``             the server's counters (requests, outcomes, connections, bytes in flight)
=========================  ===================================================================

A FAULT is ``{"name", "kind", "toxicity", "spec", "fields"}`` (``spec`` is null when a value
cannot be written compactly). Bad input is a 4xx with ``{"error": "…"}`` naming what to fix.
:class:`AdminApi` is transport-free (``handle(method, target, body) -> (status, document)``);
:class:`~simulator.proxy.loopback.LoopbackServer` serves it with ``admin_port=``.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import unquote

from simulator.proxy.fault_base import Fault
from simulator.proxy.fault_specs import (
    ScenarioError,
    fault_fields,
    fault_from_table,
    fault_spec,
    parse_fault_spec,
)
from simulator.proxy.middlebox import Middlebox

__all__ = ["ENDPOINTS", "AdminAnswer", "AdminApi", "AdminError", "fault_from_document", "view"]

ENDPOINTS = (
    "GET /faults",
    "POST /faults",
    "GET /faults/{name}",
    "POST /faults/{name}",
    "DELETE /faults/{name}",
    "POST /reset",
    "GET /stats",
)
NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
EXAMPLE = '{"name": "cap", "spec": "body-cap:128KB:waf-403-html", "toxicity": 1.0}'

Answer = tuple[int, Any]


@dataclasses.dataclass(frozen=True, slots=True)
class AdminAnswer:
    """What the admin API answers: a status, a JSON document (None: no body) and extra headers."""

    status: int
    document: Any
    headers: tuple[tuple[str, str], ...] = ()


class AdminError(Exception):
    """A request the admin API refuses: ``status`` and a message saying what to fix."""

    def __init__(self, status: int, message: str, headers: tuple[tuple[str, str], ...] = ()) -> None:
        super().__init__(message)
        self.status, self.headers = status, headers


def view(name: str, fault: Fault) -> dict[str, Any]:
    """The JSON of one named fault."""
    try:
        spec: str | None = fault_spec(fault)
    except ValueError:
        spec = None
    return {
        "name": name,
        "kind": fault.kind,
        "toxicity": fault.probability,
        "spec": spec,
        "fields": fault_fields(fault),
    }


def _document(body: bytes) -> dict[str, Any]:
    try:
        document = json.loads(body or b"null")
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as error:
        problem = f"{type(error).__name__}: {error}"
        raise AdminError(400, f"the body is not JSON ({problem}); send e.g. {EXAMPLE}") from None
    if not isinstance(document, dict):
        raise AdminError(400, f"the body must be a JSON object, e.g. {EXAMPLE}")
    return document


def fault_from_document(document: Mapping[str, Any]) -> Fault:
    """A fault from ``{"spec": …}`` or ``{"kind": …, fields…}``, with an optional ``toxicity``."""
    fields = {k: v for k, v in document.items() if k not in ("name", "toxicity", "spec")}
    try:
        if "spec" in document:
            spec = document["spec"]
            if not isinstance(spec, str):
                raise AdminError(400, f"spec must be a string such as 'body-cap:128KB:nginx', got {spec!r}")
            if fields:
                raise AdminError(
                    400, f"give either spec or kind and fields, not both (got spec and {sorted(fields)})"
                )
            fault = parse_fault_spec(spec)
        elif "kind" in fields:
            fault = fault_from_table(fields, "fault")
        else:
            raise AdminError(400, f"give the fault as spec or as kind and fields, e.g. {EXAMPLE}")
    except ScenarioError as error:
        raise AdminError(400, str(error)) from None
    toxicity = document.get("toxicity")
    if toxicity is None:
        return fault
    if isinstance(toxicity, bool) or not isinstance(toxicity, int | float) or not 0 <= toxicity <= 1:
        raise AdminError(
            400, f"toxicity (the probability the fault fires) must be within [0, 1], got {toxicity!r}"
        )
    return dataclasses.replace(fault, probability=float(toxicity))


class AdminApi:
    """Reads and changes ``middlebox``'s faults while it serves; ``stats()`` feeds ``GET /stats``."""

    def __init__(self, middlebox: Middlebox, *, stats: Callable[[], Mapping[str, Any]] | None = None) -> None:
        self.middlebox = middlebox
        self.stats = stats

    def handle(self, method: str, target: str, body: bytes) -> AdminAnswer:
        """Answer one request; never raises (bad input is a 4xx answer with ``{"error": …}``)."""
        try:
            return AdminAnswer(*self._route(method, target.partition("?")[0].rstrip("/") or "/", body))
        except AdminError as error:
            return AdminAnswer(error.status, {"error": str(error)}, error.headers)

    def _route(self, method: str, path: str, body: bytes) -> Answer:
        parts = path.strip("/").split("/")
        routes: dict[str, Callable[[], Answer]]
        if parts == ["faults"]:
            routes = {"GET": self._list, "POST": lambda: self._add(_document(body))}
        elif len(parts) == 2 and parts[0] == "faults":
            name = unquote(parts[1])
            routes = {
                "GET": lambda: self._one(name),
                "POST": lambda: self._replace(name, _document(body)),
                "DELETE": lambda: self._remove(name),
            }
        elif parts == ["reset"]:
            routes = {"POST": self._reset}
        elif parts == ["stats"] and self.stats is not None:
            stats = self.stats
            routes = {"GET": lambda: (200, dict(stats()))}
        elif parts == [""]:
            routes = {"GET": lambda: (200, {"endpoints": list(ENDPOINTS)})}
        else:
            raise AdminError(404, f"no endpoint {method} {path}; endpoints: {', '.join(ENDPOINTS)}")
        if method not in routes:
            allowed = ", ".join(sorted(routes))
            raise AdminError(405, f"{path} takes {allowed}, not {method}", (("allow", allowed),))
        return routes[method]()

    def _list(self) -> Answer:
        return 200, {"faults": [view(name, fault) for name, fault in self.middlebox.named_faults]}

    def _one(self, name: str) -> Answer:
        fault = dict(self.middlebox.named_faults).get(name)
        if fault is None:
            raise AdminError(404, self._unknown(name))
        return 200, view(name, fault)

    def _add(self, document: dict[str, Any]) -> Answer:
        name = document.get("name")
        if name is not None and (not isinstance(name, str) or not NAME_RE.fullmatch(name)):
            raise AdminError(
                400,
                "name must be 1-64 letters, digits, '.', '_' or '-' (starting with a "
                f"letter or digit), got {name!r}",
            )
        fault = fault_from_document(document)
        try:
            name = self.middlebox.add_fault(fault, name)
        except KeyError as error:
            raise AdminError(409, f"{error.args[0]} (POST /faults/{name} replaces it)") from None
        return 201, view(name, fault)

    def _replace(self, name: str, document: dict[str, Any]) -> Answer:
        if document.get("name", name) != name:
            raise AdminError(400, f"the body names {document['name']!r} but the path names {name!r}")
        fault = fault_from_document(document)
        try:
            self.middlebox.replace_fault(name, fault)
        except KeyError:
            raise AdminError(404, self._unknown(name)) from None
        return 200, view(name, fault)

    def _remove(self, name: str) -> Answer:
        try:
            self.middlebox.remove_fault(name)
        except KeyError:
            raise AdminError(404, self._unknown(name)) from None
        return 204, None

    def _reset(self) -> Answer:
        self.middlebox.clear_faults()
        return 204, None

    def _unknown(self, name: str) -> str:
        names = ", ".join(n for n, _ in self.middlebox.named_faults) or "none"
        return f"no fault named {name!r}; faults: {names}"
