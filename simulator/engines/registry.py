"""The real engines by name, as ``ctxsim gateway ENGINE`` and a scenario's ``engine =`` name them."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from simulator.engines.apache import Apache, ApacheModSecurity
from simulator.engines.base import Engine, EngineConfigError
from simulator.engines.caddy import Caddy
from simulator.engines.haproxy import HAProxy
from simulator.engines.nginx import Nginx, NginxModSecurity
from simulator.engines.squid import Squid

__all__ = ["ENGINES", "MODSECURITY_ENGINES", "engine_class"]

ENGINES: Mapping[str, type[Engine]] = MappingProxyType(
    {cls.name: cls for cls in (Nginx, NginxModSecurity, Apache, ApacheModSecurity, HAProxy, Squid, Caddy)}
)
MODSECURITY_ENGINES = frozenset({NginxModSecurity.name, ApacheModSecurity.name})


def engine_class(name: str) -> type[Engine]:
    """The engine class called ``name`` (EngineConfigError listing the names otherwise)."""
    try:
        return ENGINES[name]
    except KeyError:
        raise EngineConfigError(f"unknown engine {name!r}; engines: {', '.join(ENGINES)}") from None
