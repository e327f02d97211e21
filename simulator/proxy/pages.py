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
# Pages captured from the real engines (Debian 12's nginx 1.22, Apache 2.4 + ModSecurity 2.9, HAProxy 2.6,
# Squid 5.7, Caddy 2.6) by `python -m simulator.engines.capture`; fixtures/pages/captured.json says from
# which engine, version, knobs and request each came.
APACHE_SERVER = (("server", "Apache/2.4.71 (Debian)"),)
SQUID_HEADERS = (("server", "squid/5.7"), ("via", "1.1 ctxsim-squid (squid/5.7)"))


@dataclass(frozen=True, slots=True)
class PageVariant:
    """One fault page: its file in ``fixtures/pages/``, status, content type and headers.

    ``$name`` placeholders in the file and the headers are filled per request
    (``host``, ``path``, ``ray_id``, ``client_ip``, ``reference``,
    ``support_id``, ``cf_id``, ``transaction_id``). ``lingers`` says what the gateway does with a
    body it has not read after answering: drain it before closing (nginx's and Apache's lingering
    close: the client finishes sending, then reads the page), or close at once (HAProxy, Squid,
    Caddy: a client still sending meets a reset, the page already in its socket). ``closes``: the
    page says ``Connection: close``; the real engines keep the connection after a policy or rule 403
    (the body is read by then), so their 403s do not.
    """

    file: str
    status: int
    content_type: str
    headers: tuple[tuple[str, str], ...] = ()
    lingers: bool = True
    closes: bool = True


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
        "apache": PageVariant("413-apache.html", 413, "text/html; charset=iso-8859-1", APACHE_SERVER),
        "haproxy": PageVariant(
            "413-haproxy.html", 413, "text/html", (("cache-control", "no-cache"),), lingers=False
        ),
        "squid": PageVariant(
            "413-squid.html",
            413,
            "text/html;charset=utf-8",
            (*SQUID_HEADERS, ("x-squid-error", "ERR_TOO_BIG 0")),
            lingers=False,
        ),
        # Caddy's request_body max_size: its proxy fails reading the body and answers an empty 502.
        "caddy": PageVariant("502-caddy.txt", 502, "", (("server", "Caddy"),), lingers=False),
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
        # A hosting provider's custom Mod_Security page (its "Not Acceptable!" ErrorDocument), not the
        # engine's default: Apache + ModSecurity + CRS answers with Apache's plain 403 ("apache").
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
        # The real engines' own 403s: what a rule match and a policy denial (nginx `deny all`, Apache
        # `Require all denied`, HAProxy `http-request deny`, Squid `http_access deny`) both answer.
        "apache": PageVariant(
            "403-apache.html", 403, "text/html; charset=iso-8859-1", APACHE_SERVER, closes=False
        ),
        "nginx": PageVariant("403-nginx.html", 403, "text/html", (("server", "nginx"),), closes=False),
        "haproxy": PageVariant(
            "403-haproxy.html",
            403,
            "text/html",
            (("cache-control", "no-cache"),),
            lingers=False,
            closes=False,
        ),
        "squid": PageVariant(
            "403-squid.html",
            403,
            "text/html;charset=utf-8",
            (*SQUID_HEADERS, ("x-squid-error", "ERR_ACCESS_DENIED 0")),
            lingers=False,
            closes=False,
        ),
        # nginx + libmodsecurity3: a JSON body over SecRequestBodyNoFilesLimit fails to parse (rule
        # 200002, after the whole body is read), answered with nginx's 400 page.
        "nginx-modsecurity": PageVariant("400-nginx.html", 400, "text/html", (("server", "nginx"),)),
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
        "apache": PageVariant("502-apache.html", 502, "text/html; charset=iso-8859-1", APACHE_SERVER),
        "apache-503": PageVariant("503-apache.html", 503, "text/html; charset=iso-8859-1", APACHE_SERVER),
        "haproxy": PageVariant("503-haproxy.html", 503, "text/html", (("cache-control", "no-cache"),)),
        "squid": PageVariant(
            "502-squid.html",
            502,
            "text/html;charset=utf-8",
            (*SQUID_HEADERS, ("x-squid-error", "ERR_READ_ERROR 104")),
        ),
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
