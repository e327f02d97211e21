"""Gateway faults and where they run: middleboxes, pages, fault specs, scenarios, in-process and loopback."""

from simulator.proxy.fault_specs import ScenarioError, parse_fault_spec
from simulator.proxy.faults import (
    FAULT_KINDS,
    BedrockHtml403,
    BodyCap,
    CloseAfterBody,
    ConnectionFault,
    Fault,
    HeaderCap,
    IdleTimeout,
    RateLimit429,
    ResetAfter,
    SlowClose,
    WafBlock,
)
from simulator.proxy.inprocess import mount_inprocess, respx_router
from simulator.proxy.loopback import TURN_HEADER, ExchangeRecord, LoopbackServer
from simulator.proxy.middlebox import Middlebox, Rejection
from simulator.proxy.scenario import Expectation, Scenario, list_scenarios, load_scenario

__all__ = [
    "FAULT_KINDS",
    "TURN_HEADER",
    "BedrockHtml403",
    "BodyCap",
    "CloseAfterBody",
    "ConnectionFault",
    "ExchangeRecord",
    "Expectation",
    "Fault",
    "HeaderCap",
    "IdleTimeout",
    "LoopbackServer",
    "Middlebox",
    "RateLimit429",
    "Rejection",
    "ResetAfter",
    "Scenario",
    "ScenarioError",
    "SlowClose",
    "WafBlock",
    "list_scenarios",
    "load_scenario",
    "mount_inprocess",
    "parse_fault_spec",
    "respx_router",
]
