"""The real-engine tier of a replay: a scenario that names an engine runs through the real program.

:func:`engine_for` builds the scenario's engine: its ``[engine]`` knobs, else knobs derived from
the faults the engine imitates (a body cap's limit, a header cap, a policy denial of every path,
the CRS paranoia and threshold of an anomaly-scored fault) — the inverse of
:meth:`~simulator.engines.base.Engine.imitation`, checked by the conformance tests. The replay
then puts the mock provider behind the engine instead of behind the faults.
"""

from __future__ import annotations

from typing import Any

from simulator.engines.base import Engine
from simulator.engines.registry import MODSECURITY_ENGINES, engine_class
from simulator.proxy.fault_base import Fault
from simulator.proxy.fault_specs import ScenarioError
from simulator.proxy.faults import AnomalyWaf, BodyCap, HeaderCap, WafBlock
from simulator.proxy.scenario import Scenario

__all__ = ["engine_for", "knobs_from_faults"]


def knobs_from_faults(name: str, faults: tuple[Fault, ...]) -> dict[str, Any]:
    """The knobs of engine ``name`` that give the behaviour ``faults`` imitate."""
    knobs: dict[str, Any] = {}
    for fault in faults:
        if isinstance(fault, BodyCap) and "body_cap" not in knobs:
            # Apache's ModSecurity refuses a body of its no-files limit or more: one byte above the cap
            knobs["body_cap"] = fault.limit + 1 if name == "apache-modsecurity" else fault.limit
        elif isinstance(fault, HeaderCap):
            knobs["header_cap"] = fault.limit
        elif isinstance(fault, WafBlock) and fault.min_bytes == 0:
            knobs["deny"] = ("/",)
        elif isinstance(fault, AnomalyWaf) and name in MODSECURITY_ENGINES:
            knobs.update(crs_paranoia=fault.paranoia, inbound_threshold=fault.threshold)
    return knobs


def engine_for(scenario: Scenario, upstream: str) -> Engine:
    """The scenario's engine in front of ``upstream`` (ScenarioError naming the scenario when it is wrong)."""
    where = str(scenario.source or f"scenario {scenario.name!r}")
    if scenario.engine is None:
        raise ScenarioError(
            f'{where}: names no engine; add engine = "nginx" (or another) to replay it for real'
        )
    try:
        cls = engine_class(scenario.engine)
        knobs = {**knobs_from_faults(cls.name, scenario.faults), **dict(scenario.engine_knobs)}
        return cls(upstream=upstream, **knobs)
    except TypeError as error:
        raise ScenarioError(f"{where}: [engine] {error}") from None
    except ValueError as error:
        raise ScenarioError(f"{where}: engine: {error}") from None
