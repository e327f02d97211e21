"""Gateway faults and where they run: middleboxes, pages, fault specs, scenarios, in-process and loopback,
the runtime admin API, recording a gateway and inferring a scenario from it, probing a body cap; the
CRS's anomaly scoring as rules as data."""

from simulator.proxy.admin import AdminApi
from simulator.proxy.anomaly import AnomalyScorer
from simulator.proxy.fault_specs import ScenarioError, fault_spec, parse_fault_spec
from simulator.proxy.faults import (
    FAULT_KINDS,
    AnomalyWaf,
    Bandwidth,
    BedrockHtml403,
    BodyCap,
    CloseAfterBody,
    ConnectionFault,
    CutStream,
    Fault,
    GatewayTimeout,
    HeaderCap,
    IdleTimeout,
    Latency,
    RateLimit429,
    ResetAfter,
    SlowClose,
    StatusPage,
    WafBlock,
)
from simulator.proxy.inprocess import mount_inprocess, respx_router
from simulator.proxy.journal import ExchangeRecord, ExchangeTrace
from simulator.proxy.limits import ServerLimits
from simulator.proxy.loopback import TURN_HEADER, LoopbackServer, ServerStartError
from simulator.proxy.middlebox import Middlebox, Rejection
from simulator.proxy.scenario import Expectation, Scenario, list_scenarios, load_scenario

__all__ = [
    "FAULT_KINDS",
    "TURN_HEADER",
    "AdminApi",
    "AnomalyScorer",
    "AnomalyWaf",
    "Bandwidth",
    "BedrockHtml403",
    "BodyCap",
    "CloseAfterBody",
    "ConnectionFault",
    "CutStream",
    "ExchangeRecord",
    "ExchangeTrace",
    "Expectation",
    "Fault",
    "GatewayTimeout",
    "HeaderCap",
    "IdleTimeout",
    "Latency",
    "LoopbackServer",
    "Middlebox",
    "RateLimit429",
    "Rejection",
    "ResetAfter",
    "Scenario",
    "ScenarioError",
    "ServerLimits",
    "ServerStartError",
    "SlowClose",
    "StatusPage",
    "WafBlock",
    "fault_spec",
    "list_scenarios",
    "load_scenario",
    "mount_inprocess",
    "parse_fault_spec",
    "respx_router",
]
