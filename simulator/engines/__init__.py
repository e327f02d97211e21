"""Real middleboxes from the system's packages run on loopback under generated configurations.

nginx, HAProxy, Apache and nginx with ModSecurity and the OWASP CRS, Squid and Caddy.

Each engine is a small class whose fields are the knobs users set (body and header caps, deny
rules, upstream, timeouts; for ModSecurity on/off, CRS paranoia level, inbound anomaly
threshold, request body limit and action, the JSON body processor), and a context manager:
``with ApacheModSecurity(crs_paranoia=1, upstream=url) as gw: gw.url``. :mod:`.process` starts
and stops the programs (free ports, readiness, no orphans, temp dirs removed); each engine's
:meth:`~simulator.engines.base.Engine.imitation` names the mock faults that claim to behave the
same, which the conformance tests hold against the real program.
"""

from simulator.engines.apache import Apache, ApacheModSecurity
from simulator.engines.base import Engine, EngineConfigError, Upstream
from simulator.engines.caddy import Caddy
from simulator.engines.haproxy import HAProxy
from simulator.engines.nginx import Nginx, NginxModSecurity
from simulator.engines.process import EngineError, EngineMissing, EngineProcess, EngineStartError
from simulator.engines.registry import ENGINES, MODSECURITY_ENGINES, engine_class
from simulator.engines.squid import Squid

__all__ = [
    "ENGINES",
    "MODSECURITY_ENGINES",
    "Apache",
    "ApacheModSecurity",
    "Caddy",
    "Engine",
    "EngineConfigError",
    "EngineError",
    "EngineMissing",
    "EngineProcess",
    "EngineStartError",
    "HAProxy",
    "Nginx",
    "NginxModSecurity",
    "Squid",
    "Upstream",
    "engine_class",
]
