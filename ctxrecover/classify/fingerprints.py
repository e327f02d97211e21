"""Vendor fingerprints of proxies, WAFs, CDNs and web filters, and the wording of a block: data only.

A middlebox page is recognised by its *structure* — response headers only that
vendor sets, identifying markup (``tag.attribute=value`` markers of
:mod:`ctxrecover.classify.page`), the shape of its reference or incident IDs —
never by one memorised sentence. Identity alone is not a block (Cloudflare also
serves 502 pages, OpenAI's JSON answers carry ``cf-ray``): :mod:`.blockpage`
combines a fingerprint with the page's block wording (:data:`BLOCK_TITLE_WORDS`,
:data:`BLOCK_TEXT_PATTERNS`) or with a header that itself reports a block.

Every row cites where the vendor's page, header or ID format was published.
Strings are lowercase (headers, markers and texts are matched lowercased).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "BLOCK_MARKER",
    "BLOCK_TEXT_PATTERNS",
    "BLOCK_TITLE_WORDS",
    "NOT_A_BLOCK_PATTERNS",
    "STRONG_BLOCK_PATTERNS",
    "VENDORS",
    "VendorFingerprint",
]

IDENTYWAF = "https://github.com/stamparm/identYwaf/blob/master/data.json"
WHATWAF = "https://github.com/Ekultek/WhatWaf/tree/master/content/plugins"


@dataclass(frozen=True, slots=True)
class VendorFingerprint:
    """How one vendor's responses identify themselves.

    ``headers``: header names only this vendor sets; ``header_values``: (header,
    substring of its lowercase value); ``markers``: substrings of page markers;
    ``references``: regexes over the visible text (reference/incident-ID shapes,
    the vendor's own name in a footer); ``block_headers``: headers whose presence
    alone reports a block or challenge; ``block_codes``: regexes of the vendor's
    own error codes that mean a block (Cloudflare's ``error code: 1020``);
    ``source``: where this was published.
    """

    vendor: str
    source: str
    headers: tuple[str, ...] = ()
    header_values: tuple[tuple[str, str], ...] = ()
    markers: tuple[str, ...] = ()
    references: tuple[str, ...] = ()
    block_headers: tuple[str, ...] = ()
    block_codes: tuple[str, ...] = ()


VENDORS: tuple[VendorFingerprint, ...] = (
    VendorFingerprint(
        "cloudflare",
        "https://developers.cloudflare.com/cloudflare-challenges/challenge-types/challenge-pages/detect-response"
        " (cf-mitigated: challenge); https://developers.cloudflare.com/rules/custom-errors/reference/error-page-"
        "types/ (WAF block and challenge pages); cloudflare/cloudflare-docs: src/content/docs/support/"
        "troubleshooting/http-status-codes/cloudflare-1xxx-errors/ (1xxx codes in the body); "
        f"{IDENTYWAF}; {WHATWAF}/cloudflare.py (cf-ray, Ray ID)",
        headers=("cf-ray", "cf-mitigated", "cf-chl-bypass"),
        header_values=(("server", "cloudflare"),),
        markers=(
            "cf-error-details",
            "cf-wrapper",
            "/cdn-cgi/",
            "challenge-error-text",
            "cf-chl",
            "cf_chl",
            "block_headline",
            "cf-browser-verification",
            "cf-error-code",
        ),
        references=(
            r"cloudflare ray id",
            r"\bray id:?\s*[0-9a-f]{16}\b",
            r"performance (?:&|and) security by"
            r" cloudflare",
            r"\bcloudflare\b",
        ),
        block_headers=("cf-mitigated",),
        # 1xxx codes of a refusal: 1005-1012 (banned ASN/IP/country, browser signature, access denied), 1020.
        block_codes=(r"\berror(?: code)?:? ?10(?:0[5-9]|1[0-2]|20)\b",),
    ),
    VendorFingerprint(
        "akamai",
        f"{IDENTYWAF} (kona: AkamaiGHost, reference 18.xxxxxxxx.1xxxxxxxxx.xxxxxxx); {WHATWAF}/akamai.py",
        header_values=(("server", "akamaighost"), ("server", "akamainetstorage")),
        headers=("akamai-grn", "x-akamai-transformed"),
        references=(
            r"reference\s*#\s*\d+\.[0-9a-f]+\.\d+\.[0-9a-f]+",
            r"errors\.edgesuite\.net",
            r"\bakamai\b",
        ),
    ),
    VendorFingerprint(
        "imperva",
        f"{IDENTYWAF} (incapsula, securesphere); {WHATWAF}/incapsula.py (x-cdn, incap_ses); "
        "https://github.com/ziplokk1/incapsula-cracker-py3/issues/1 (_Incapsula_Resource, incident ID)",
        headers=("x-iinfo",),
        header_values=(("x-cdn", "incapsula"), ("x-cdn", "imperva")),
        markers=("_incapsula_resource", "imperva", "incapsula"),
        references=(
            r"incapsula incident id",
            r"\bincident id(?: is)?:?\s*\d{6,}(?:-\d+)?",
            r"\bimperva\b",
            r"\bincapsula\b",
        ),
    ),
    VendorFingerprint(
        "sucuri",
        f"{IDENTYWAF} (sucuri, godaddy); {WHATWAF}/sucuri.py (x-sucuri-id, x-sucuri-block, "
        "Sucuri/Cloudproxy); "
        "https://github.com/Ekultek/WhatWaf/issues/1164",
        headers=("x-sucuri-id", "x-sucuri-block", "x-sucuri-cache"),
        header_values=(("server", "sucuri"),),
        markers=("cdn.sucuri.net", "sucuri-firewall-block", "utm_source=firewall_block"),
        references=(r"\bsucuri\b", r"cloudproxy@sucuri\.net", r"website firewall"),
        block_headers=("x-sucuri-block",),
    ),
    VendorFingerprint(
        "f5",
        f"{IDENTYWAF} (asm: 'The requested URL was rejected', support ID); {WHATWAF}/bigip.py",
        header_values=(("server", "big-ip"), ("server", "bigip")),
        references=(r"\bsupport id(?: is)?:?\s*[0-9]{8,}", r"security\.f5aas\.com", r"\bbig-?ip\b"),
    ),
    VendorFingerprint(
        "aws-waf",
        f"{IDENTYWAF} (aws: 'Request blocked ... Generated by cloudfront'); {WHATWAF}/aws.py, "
        f"{WHATWAF}/cloudfront.py (x-amz-cf-id); https://repost.aws/knowledge-center/cloudfront-403-request-blocked",
        headers=("x-amzn-waf-action", "x-amz-cf-id", "x-amz-cf-pop"),
        header_values=(("server", "cloudfront"), ("server", "awselb"), ("x-cache", "cloudfront")),
        references=(r"generated by cloudfront", r"\bcloudfront\b", r"\baws waf\b"),
        block_headers=("x-amzn-waf-action",),
    ),
    VendorFingerprint(
        "azure",
        "https://learn.microsoft.com/en-us/azure/web-application-firewall/ag/web-application-firewall-troubleshoot"
        " (Application Gateway 403 page and server header)",
        headers=("x-azure-ref", "x-msedge-ref"),
        header_values=(("server", "microsoft-azure-application-gateway"),),
        references=(r"microsoft-azure-application-gateway", r"azure front door", r"\bazure waf\b"),
    ),
    VendorFingerprint(
        "modsecurity",
        f"{IDENTYWAF} (modsecurity); {WHATWAF}/modsecurity.py",
        header_values=(("server", "mod_security"), ("server", "modsecurity")),
        markers=("modsecurity-errorpage",),
        references=(r"\bmod_?security\b", r"\bmod security\b"),
    ),
    VendorFingerprint(
        "barracuda",
        f"{IDENTYWAF} (barracuda: barra_counter_session, event ID at the bottom of the page); "
        f"{WHATWAF}/barracuda.py",
        header_values=(("set-cookie", "barra_counter_session"), ("server", "barracuda")),
        markers=("barracuda",),
        references=(r"\bbarracuda\b", r"event id found at the bottom of the page"),
    ),
    VendorFingerprint(
        "fortinet",
        f"{WHATWAF}/fortigate.py; https://github.com/Ekultek/WhatWaf/issues/34 and "
        "https://github.com/Ekultek/WhatWaf/issues/513 (FortiGate block pages)",
        header_values=(("server", "fortiweb"), ("server", "fortigate"), ("set-cookie", "fortiwafsid")),
        markers=("fortiguard", "fortinet", "fgd_icon"),
        references=(r"\bforti(?:web|gate|guard|net)\b", r"\battack id:?\s*\d+", r"\bmessage id:?\s*\d+"),
    ),
    VendorFingerprint(
        "paloalto",
        f"{IDENTYWAF} (paloalto: 'has been blocked in accordance with company policy'); "
        f"{WHATWAF}/paloalto.py; https://github.com/Ekultek/WhatWaf/issues/476 (Web Page Blocked, 503)",
        references=(r"palo alto networks", r"\bpan-os\b", r"in accordance with company policy"),
    ),
    VendorFingerprint(
        "zscaler",
        f"{WHATWAF}/zscaler.py (server: zscaler); https://github.com/Ekultek/WhatWaf/issues/178 (block page)",
        header_values=(("server", "zscaler"),),
        markers=("zscaler",),
        references=(r"\bzscaler\b",),
    ),
    VendorFingerprint(
        "squid",
        "squid-cache/squid: errors/templates/ERR_ACCESS_DENIED; "
        f"{WHATWAF}/squid.py (x-squid-error, server: squid)",
        headers=("x-squid-error",),
        header_values=(("server", "squid"), ("via", "squid")),
        references=(r"\(squid(?:/[\d.]+)?\)", r"\bsquid/\d", r"\berr_access_denied\b", r"\bsquid\b"),
    ),
    VendorFingerprint(
        "bluecoat",
        "https://github.com/nolanlawson/pokedex.org/issues/12 (ProxySG page: 'Content Blocked "
        "(content_filter_denied)')",
        header_values=(("server", "bluecoat"), ("via", "bluecoat")),
        references=(
            r"\((?:policy|content_filter|policy_redirect)_denied\)",
            r"\bblue ?coat\b",
            r"\bproxysg\b",
        ),
    ),
    VendorFingerprint(
        "citrix",
        f"{IDENTYWAF} (netscaler: 'Application Firewall Block Page', 'AppFW Session ID')",
        header_values=(("via", "ns-cache"), ("set-cookie", "citrix_ns_id")),
        references=(r"appfw session id", r"violation category: appfw_", r"\bnetscaler\b"),
    ),
    VendorFingerprint(
        "wordfence",
        f"{IDENTYWAF} (wordfence); {WHATWAF}/wordfence.py",
        references=(r"generated by wordfence", r"\bwordfence\b"),
    ),
    VendorFingerprint(
        "sonicwall",
        f"{IDENTYWAF} (sonicwall: 'Web Site Blocked', nsa_banner); {WHATWAF}/sonicwall.py",
        header_values=(("server", "sonicwall"),),
        markers=("nsa_banner",),
        references=(r"\bsonicwall\b",),
    ),
    VendorFingerprint(
        "sophos",
        f"{IDENTYWAF} (sophos: 'Powered by UTM Web Protection')",
        references=(r"utm web protection", r"\bsophos\b"),
    ),
    VendorFingerprint(
        "radware",
        f"{IDENTYWAF} (radware: 'Unauthorized Request Blocked', CloudWebSec@radware.com)",
        references=(r"cloudwebsec@radware\.com", r"\bradware\b"),
    ),
    VendorFingerprint(
        "perimeterx",
        f"{IDENTYWAF} (perimeterx: perimeterx.com/whywasiblocked)",
        markers=("perimeterx.com", "px-captcha"),
        references=(r"\bperimeterx\b",),
    ),
    VendorFingerprint(
        "distil",
        f"{IDENTYWAF} (distil: distilCaptchaForm, distilCallbackGuard)",
        markers=("distilcaptchaform", "distilcallbackguard", "distilnetworks"),
        references=(r"\bdistil networks\b",),
    ),
    VendorFingerprint(
        "vercel",
        f"{IDENTYWAF} (vercel: 'Vercel Security Checkpoint', /vercel/security/)",
        headers=("x-vercel-mitigated",),
        markers=("/vercel/security/",),
        references=(r"vercel security checkpoint",),
        block_headers=("x-vercel-mitigated",),
    ),
    VendorFingerprint(
        "alibaba",
        f"{IDENTYWAF} (aliyundun: //errors.aliyun.com/; tencent: waf.tencent-cloud.com)",
        markers=("errors.aliyun.com", "waf.tencent-cloud.com", "waf.tencent.com"),
        references=(r"errors\.aliyun\.com", r"waf\.tencent"),
    ),
    VendorFingerprint(
        "wallarm",
        f"{IDENTYWAF} (wallarm: Server: nginx-wallarm)",
        header_values=(("server", "wallarm"),),
        references=(r"\bwallarm\b",),
    ),
    VendorFingerprint(
        "stackpath",
        f"{IDENTYWAF} (stackpath)",
        header_values=(("server", "stackpath"),),
        references=(r"\bstackpath\b",),
    ),
)

# Words that, in a page's title or headings, say "this request was refused by a middlebox".
# Source: the titles and headlines of the block pages cited in VENDORS (Cloudflare "Attention Required!",
# "Just a moment...", Akamai/Sucuri/squid "Access Denied", F5 "Request Rejected", Imperva "Pardon Our
# Interruption"/"Request unsuccessful", Palo Alto/FortiGate/SonicWall "Web Page Blocked", ModSecurity
# "406 Not Acceptable", Vercel "Security Checkpoint", Citrix "Application Firewall Block Page").
BLOCK_TITLE_WORDS: tuple[str, ...] = (
    "access denied",
    "blocked",
    "block page",
    "denied",
    "forbidden",
    "rejected",
    "not acceptable",
    "attention required",
    "just a moment",
    "pardon our interruption",
    "request unsuccessful",
    "security check",
    "captcha",
    "are you a robot",
    "not allowed",
    "unauthorized activity",
    "unauthorized request",
    "checking your browser",
    "ddos protection",
    "firewall",
    "web filter",
    "restricted",
    "prohibited",
    "one more step",
    "verify you are human",
    "bot verification",
    "security checkpoint",
    "web protection",
    "unauthorized access",
    "ddos",
    # The same wording in other languages (block pages speak the visitor's or the vendor's language):
    # Chinese (Alibaba Cloud, Tencent Cloud, Baidu, 360 in identYwaf: "blocked", "intercepted",
    # "access denied", "access forbidden", "security threat", "cloud protection"), Portuguese/Spanish,
    # French, German, Russian, Japanese, Korean "access denied" / "blocked".
    "阻断",
    "拦截",
    "访问被拒绝",
    "禁止访问",
    "安全威胁",
    "云防护",
    "acesso negado",
    "acceso denegado",
    "bloqueado",
    "accès refusé",
    "bloqué",
    "zugriff verweigert",
    "gesperrt",
    "доступ запрещен",
    "заблокирован",
    "アクセス拒否",
    "ブロック",
    "차단",
)
# Structural markers of a block page: an element id (or Cloudflare's data-translate key) naming a block,
# a denial or a challenge — Aliyun's block_message/block_traceid_tips, Cloudflare's block_headline and
# challenge-error-text, Sucuri's access-denied section (pages cited in VENDORS).
BLOCK_MARKER = (
    r"\.(?:id|data-translate)=(?:[\w-]*[-_])?(?:block(?:ed)?|access[-_]denied|denied|captcha|challenge)"
    r"(?:[-_][\w-]*)?$"
)
# Sentences of the page body that report a block, as shapes (verb of refusal + agent/cause), matched on the
# visible text of a page or on a plain error text. Same sources as VENDORS.
BLOCK_TEXT_PATTERNS: tuple[str, ...] = (
    # Strong: a refusal verb with its subject or its agent; these stand alone, on a page or in a plain text.
    r"\b(?:you|your (?:request|ip|access|connection)|this (?:request|page|site|website|url)|access|the "
    r"(?:request|page|url|site|website)|request)\b[^.\n]{0,40}\b(?:has|have|had|was|were|is|are|been)\s+"
    r"(?:been\s+)?(?:blocked|rejected|limited by the site owner)",
    r"\b(?:blocked|denied|rejected)\s+by\s+(?:the\s+|your\s+|our\s+|a\s+)?(?:[\w-]+\s+){0,3}?"
    r"(?:firewall|waf|security|proxy|administrator|gateway|organi[sz]ation|company|"
    r"(?:network|corporate|company|acceptable use|access) policy|(?:web|url|internet) filter|"
    r"cloudflare|imperva|incapsula|akamai|sucuri|fortiguard|fortiweb|zscaler|barracuda|mod_?security|"
    r"sonicwall|watchguard|wordfence|radware|website protection)",
    r"\brequest (?:blocked|rejected)\b",
    r"\bthe requested url (?:was|has been) (?:rejected|blocked)",
    r"\bin accordance with (?:company|corporate|your organi[sz]ation's) policy",
    r"\baccess control configuration prevents your request",
    r"(?:已被|被)(?:拦截|阻断|拒绝)",  # Chinese "has been intercepted / blocked / refused" (WDS, Aliyun)
    # Weaker: count on a page, or beside a vendor named in the text (an incident ID, "access denied").
    r"\baccess (?:is |was |has been )?denied\b",
    r"\brequest denied\b",
    r"\b(?:content|web content|url|site|website) (?:blocked|denied)\b",
    r"\bsecurity (?:policy|rule|service|solution|system|check)\b",
    r"\bdon'?t have permission to access\b",
    r"\b(?:support|incident|reference|event|block|case) id\b",
    r"\bweb (?:page|site) blocked\b",
    r"\bcategory:?\s+[\w -]+\b(?:blocked|not allowed)",
    r"\bchecking (?:if the site connection is secure|your browser)",
    r"\benable javascript and cookies to continue",
    r"\bverify(?:ing)? (?:you are|that you are) (?:a )?human",
)
STRONG_BLOCK_PATTERNS = 7  # the first seven patterns above stand alone
# Pages of the same vendors that report a fault, not a block: their status decides (transient, payload...).
NOT_A_BLOCK_PATTERNS: tuple[str, ...] = (
    r"\b(?:bad gateway|gateway time-?out|service unavailable|origin (?:is )?unreachable|connection timed out"
    r"|web server is down|internal server error|could not connect|wasn't able to connect|unable to connect"
    r"|connection (?:refused|failed|reset)|temporarily unavailable|too many requests|rate limited"
    r"|request entity too large|payload too large|request header or cookie too large|too large"
    r"|timeout|timed out"
    r"|time-out|unknown error|handshake failed|dns (?:resolution )?error|not found|could not be found)\b",
)
