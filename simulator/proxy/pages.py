"""Pages a middlebox answers with: the 413/431/403 bodies in ``fixtures/pages/``, statuses and headers."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from types import MappingProxyType

from simulator.resources import data_dir

__all__ = [
    "BEDROCK_HTML_PAGE",
    "BODY_CAP_PAGES",
    "HEADER_CAP_PAGE",
    "PAGES_DIR",
    "PageVariant",
    "TIMEOUT_PAGES",
    "UPSTREAM_ERROR_PAGES",
    "WAF_PAGES",
    "page_text",
]


PAGES_DIR = data_dir("pages")  # the checkout's fixtures/pages, or the wheel's copy
CLOUDFLARE_COLO = "FRA"


@dataclass(frozen=True, slots=True)
class PageVariant:
    """One fault page: its file in ``fixtures/pages/``, status, content type and headers.

    ``$name`` placeholders in the file and the headers are filled per request
    (``host``, ``path``, ``ray_id``, ``client_ip``, ``reference``,
    ``support_id``, ``cf_id``, ``transaction_id``).
    """

    file: str
    status: int
    content_type: str
    headers: tuple[tuple[str, str], ...] = ()


BODY_CAP_PAGES: Mapping[str, PageVariant] = MappingProxyType(
    {
        "nginx": PageVariant("413-nginx.html", 413, "text/html", (("server", "nginx"),)),
        "envoy": PageVariant("413-envoy.txt", 413, "text/plain", (("server", "envoy"),)),
        "aws-alb": PageVariant("413-aws-alb.html", 413, "text/html", (("server", "awselb/2.0"),)),
        "cloudflare": PageVariant(
            "413-cloudflare.html",
            413,
            "text/html",
            (("server", "cloudflare"), ("cf-ray", "${ray_id}-" + CLOUDFLARE_COLO)),
        ),
        "json-error": PageVariant("413-json-error.json", 413, "application/json"),
        "json-message": PageVariant("413-json-message.json", 413, "application/json"),
    }
)
WAF_PAGES: Mapping[str, PageVariant] = MappingProxyType(
    {
        "cloudflare": PageVariant(
            "403-cloudflare.html",
            403,
            "text/html; charset=UTF-8",
            (("server", "cloudflare"), ("cf-ray", "${ray_id}-" + CLOUDFLARE_COLO)),
        ),
        "akamai": PageVariant("403-akamai.html", 403, "text/html", (("server", "AkamaiGHost"),)),
        "modsecurity": PageVariant(
            "403-modsecurity.html", 403, "text/html; charset=iso-8859-1", (("server", "Apache"),)
        ),
        "f5": PageVariant("403-f5.html", 403, "text/html; charset=utf-8"),
        "aws-waf": PageVariant(
            "403-aws-waf.html",
            403,
            "text/html",
            (("server", "CloudFront"), ("x-cache", "Error from cloudfront"), ("x-amz-cf-id", "${cf_id}")),
        ),
    }
)
# The corporate incident: a proxy's HTML 403 in front of the Bedrock JSON API.
# The page deliberately carries no WAF vocabulary: only the HTML gives it away.
BEDROCK_HTML_PAGE = PageVariant("403-corporate-proxy.html", 403, "text/html; charset=utf-8")
HEADER_CAP_PAGE = PageVariant("431-header-fields.html", 431, "text/html")
# A gateway's upstream timeout: nginx (proxy_read_timeout), an AWS ALB (idle timeout), and
# Cloudflare's own 524 after 100 s without an origin answer.
TIMEOUT_PAGES: Mapping[str, PageVariant] = MappingProxyType(
    {
        "nginx": PageVariant("504-nginx.html", 504, "text/html", (("server", "nginx"),)),
        "aws-alb": PageVariant("504-aws-alb.html", 504, "text/html", (("server", "awselb/2.0"),)),
        "cloudflare": PageVariant(
            "524-cloudflare.html",
            524,
            "text/html; charset=UTF-8",
            (("server", "cloudflare"), ("cf-ray", "${ray_id}-" + CLOUDFLARE_COLO)),
        ),
    }
)
# A gateway's own answer when its upstream dropped or refused the request: what a client sees instead of
# the upstream's 413 when a proxy chain masks it. Envoy's local reply for an upstream reset before the
# response headers (response flag UC; 95 bytes, text/plain), nginx's and an AWS ALB's 502 pages.
UPSTREAM_ERROR_PAGES: Mapping[str, PageVariant] = MappingProxyType(
    {
        "envoy": PageVariant("503-envoy.txt", 503, "text/plain", (("server", "envoy"),)),
        "nginx": PageVariant("502-nginx.html", 502, "text/html", (("server", "nginx"),)),
        "aws-alb": PageVariant("502-aws-alb.html", 502, "text/html", (("server", "awselb/2.0"),)),
    }
)


@cache
def page_text(file: str) -> str:
    path = PAGES_DIR / file
    try:
        return path.read_bytes().decode("utf-8")
    except FileNotFoundError:
        raise FileNotFoundError(
            f"fault page {path} is missing from the bundled data (fixtures/pages/); reinstall ctxrecover"
        ) from None
