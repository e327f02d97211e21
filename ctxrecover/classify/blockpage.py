"""Is this response a middlebox refusing the request? Vendor identity and block wording, read from evidence.

A reading has three parts, each from :mod:`.fingerprints` (data):

- ``vendor``: the first fingerprint whose headers, page markers or reference
  shapes the evidence shows (identity only: Cloudflare also fronts OpenAI);
- ``block``: what says the request was *refused* — a header that reports a
  block, a page title or heading with block wording, or a refusal sentence in
  the visible text (``strong`` for a header or a refusal sentence — a refusal
  verb with its subject or agent —; weaker wording such as an incident ID or
  "access denied" counts only on a page or beside a vendor the body names:
  a vendor header alone never turns a provider's JSON into a block);
- ``fault``: the page's title announces a fault instead (a CDN's 502 page),
  so its status decides unless a strong signal says otherwise.

>>> from ctxrecover.classify.evidence import gather
>>> reading = read_block(gather(body="<title>Access Denied</title>Reference #18.2d35.1557333295.a4e1",
...                             headers={"server": "AkamaiGHost"}))
>>> reading.vendor, reading.block, reading.fault
('akamai', 'title: access denied', False)
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ctxrecover.classify.evidence import Evidence
from ctxrecover.classify.fingerprints import (
    BLOCK_MARKER,
    BLOCK_TEXT_PATTERNS,
    BLOCK_TITLE_WORDS,
    NOT_A_BLOCK_PATTERNS,
    STRONG_BLOCK_PATTERNS,
    VENDORS,
    VendorFingerprint,
)
from ctxrecover.classify.tables import CONTENT_POLICY_PHRASES

__all__ = ["BlockReading", "read_block"]

# Latin words match as whole words; CJK words have no word boundaries and match as substrings.
_TITLE_WORDS = tuple(
    re.compile(rf"\b{re.escape(w)}\b" if w.isascii() else re.escape(w)) for w in BLOCK_TITLE_WORDS
)
_BLOCK_MARKER = re.compile(BLOCK_MARKER)
_BLOCK_CODES = tuple((v.vendor, re.compile(c)) for v in VENDORS for c in v.block_codes)
_BLOCK_TEXT = tuple(re.compile(p) for p in BLOCK_TEXT_PATTERNS)
_FAULT = tuple(re.compile(p) for p in NOT_A_BLOCK_PATTERNS)
_REFERENCES = {v.vendor: tuple(re.compile(r) for r in v.references) for v in VENDORS}


@dataclass(frozen=True, slots=True)
class BlockReading:
    """What the evidence says about a middlebox: its ``vendor``, the ``block`` signal, a ``fault`` page.

    ``identity_only``: the block signal is only a page of a named security vendor that says no fault.
    """

    vendor: str | None = None
    block: str | None = None
    strong: bool = False
    fault: bool = False
    identity_only: bool = False


def _vendor_in_headers(x: Evidence, row: VendorFingerprint) -> bool:
    if any(name in x.headers for name in row.headers):
        return True
    return any(part in x.headers.get(name, "").lower() for name, part in row.header_values)


def _vendor_in_body(x: Evidence, row: VendorFingerprint) -> bool:
    markers = [m for page in x.pages for m in page.markers]
    if any(part in m for part in row.markers for m in markers):
        return True
    return any(p.search(x.text) for p in _REFERENCES[row.vendor])


def _title_block(x: Evidence) -> str | None:
    for page in x.pages:
        for line in (page.title, *page.headings):
            lowered = line.lower()
            words = zip(BLOCK_TITLE_WORDS, _TITLE_WORDS, strict=True)
            hit = next((w for w, p in words if p.search(lowered)), None)
            if hit:
                return f"title: {hit}"
    return None


def _is_fault_page(x: Evidence) -> bool:
    lines = [line.lower() for page in x.pages for line in (page.title, *page.headings)]
    return any(p.search(line) for p in _FAULT for line in lines)


def _says_fault(x: Evidence) -> bool:
    return any(p.search(x.text) for p in _FAULT)


def read_block(x: Evidence) -> BlockReading:
    """The middlebox reading of ``x`` (never raises; all data from :mod:`.fingerprints`).

    Signals, strongest first: a block header or a vendor's block code; a title or
    heading with block wording; a refusal sentence; an element id naming a block;
    finally a page that names a security vendor and says no fault. A plain text
    about a content policy (moderation, safety system) that names no security
    vendor is the provider's refusal, no block.
    """
    named = next((row.vendor for row in VENDORS if _vendor_in_body(x, row)), None)
    vendor = named or next((row.vendor for row in VENDORS if _vendor_in_headers(x, row)), None)
    fault = _is_fault_page(x)
    header = next((h for row in VENDORS for h in row.block_headers if h in x.headers), None)
    if header:
        return BlockReading(vendor, f"header {header}", True, fault)
    code = next(((v, m.group(0)) for v, p in _BLOCK_CODES if (m := p.search(x.text))), None)
    if code:
        return BlockReading(vendor or code[0], f"{code[0]} {code[1]}", True, fault)
    if not x.pages and not named and any(p in x.text for p in CONTENT_POLICY_PHRASES):
        return BlockReading(vendor, None, False, fault)  # the provider's moderation refusing the content
    title = _title_block(x)
    text_hit = next(((i, p) for i, p in enumerate(_BLOCK_TEXT) if p.search(x.text)), None)
    strong = text_hit is not None and text_hit[0] < STRONG_BLOCK_PATTERNS
    if title:
        return BlockReading(vendor, title, strong, fault)
    if text_hit is not None and (strong or x.pages or named):
        match = text_hit[1].search(x.text)
        return BlockReading(vendor, f"text: {match.group(0) if match else ''}", strong, fault)
    marker = next((m for page in x.pages for m in sorted(page.markers) if _BLOCK_MARKER.search(m)), None)
    if marker:
        return BlockReading(vendor, f"marker {marker}", False, fault)
    if named and x.pages and not _says_fault(x):
        return BlockReading(vendor, f"{named} page", False, fault, identity_only=True)
    return BlockReading(vendor, None, False, fault)
