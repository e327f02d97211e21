"""An HTML page reduced to what a reader sees — title, headings, visible text — plus its structural markers.

Error texts often carry a whole page: a proxy's block page, a gateway's 413 page,
an SDK message that pastes the body after ``Error code: 403 -``. Phrase matching
must read what the page *says*, never its machinery: scripts, styles, comments,
attribute values and JSON inside markup (a Cloudflare page's beacon JSON names a
``token``) are dropped from the text. Attribute values are kept apart, as
``tag.attribute=value`` markers, for the vendor fingerprints alone.

Parsing uses the standard library's :class:`html.parser.HTMLParser` (tolerant of
broken markup, never raises on bad input) with bounded work.

>>> page = reduce_html('<html><head><title>Access Denied</title><script>var t={"token":1}</script></head>'
...                    '<body><h1>Blocked</h1><p>Reference&nbsp;#18.1</p></body></html>')
>>> page.title, page.headings, page.text
('Access Denied', ('Blocked',), 'Blocked\\nReference #18.1')
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from html.parser import HTMLParser

__all__ = ["MARKUP", "Page", "reduce_html"]

MAX_MARKERS = 400
MAX_MARKER_CHARS = 200
MAX_PAGE_CHARS = 200_000
# Text that holds a page, or a fragment of one (an SDK message quoting the body).
MARKUP = re.compile(
    r"<(?:!doctype\s+html|html|head|body|title|h[1-6]|div|center|p|pre|span|table|form|iframe|"
    r"script|style|meta|noscript|a\s)\b",
    re.IGNORECASE,
)
# Content never shown to a reader.
HIDDEN_TAGS: frozenset[str] = frozenset({"script", "style", "template", "svg", "object"})
# Tags that start a new line of visible text, so clauses never run across blocks.
BLOCK_TAGS: frozenset[str] = frozenset(
    {
        "p",
        "div",
        "br",
        "hr",
        "li",
        "ul",
        "ol",
        "tr",
        "td",
        "th",
        "table",
        "section",
        "article",
        "header",
        "footer",
        "main",
        "center",
        "pre",
        "blockquote",
        "form",
        "title",
        "h1",
        "h2",
        "h3",
        "h4",
        "h5",
        "h6",
        "dt",
        "dd",
        "body",
        "html",
        "noscript",
        "iframe",
    }
)
HEADING_TAGS: frozenset[str] = frozenset({"h1", "h2", "h3"})
# Attributes whose values identify a page's machinery (fingerprints read them, phrases never do).
# Resources a stylesheet loads (``url(https://errors.aliyun.com/...)``): kept as ``style.url=`` markers.
STYLE_URL = re.compile(r"url\(\s*['\"]?([^'\")\s]+)")
STYLE_BLOCK = re.compile(r"<style[^>]*>(.*?)(?:</style|$)", re.IGNORECASE | re.DOTALL)  # even unterminated
MARKER_ATTRIBUTES: frozenset[str] = frozenset(
    {
        "id",
        "class",
        "src",
        "href",
        "action",
        "name",
        "content",
        "data-translate",
        "data-ray",
        "for",
    }
)


@dataclass(frozen=True, slots=True)
class Page:
    """What an HTML page shows: ``title``, ``headings`` (h1–h3), ``text`` (visible, one block a line).

    ``markers`` are ``tag.attribute=value`` strings (lowercase) of identifying
    attributes, for structural fingerprints only.
    """

    title: str
    headings: tuple[str, ...]
    text: str
    markers: frozenset[str]


class _Reducer(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.hidden: list[str] = []
        self.in_title = False
        self.heading: list[str] | None = None
        self.title: list[str] = []
        self.headings: list[str] = []
        self.lines: list[list[str]] = [[]]
        self.markers: set[str] = set()

    def _new_line(self) -> None:
        if self.lines[-1]:
            self.lines.append([])

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "title":
            self.in_title = True
        elif tag in HIDDEN_TAGS:
            self.hidden.append(tag)
        if tag in HEADING_TAGS:
            self.heading = []
        if tag in BLOCK_TAGS:
            self._new_line()
        for name, value in attrs:
            if name in MARKER_ATTRIBUTES and value:
                self._mark(f"{tag}.{name}", value)

    def _mark(self, where: str, value: str) -> None:
        if len(self.markers) < MAX_MARKERS:
            self.markers.add(f"{where}={value.strip().lower()[:MAX_MARKER_CHARS]}")

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in HIDDEN_TAGS:  # <script src=... /> has no content to hide
            for name, value in attrs:
                if name in MARKER_ATTRIBUTES and value:
                    self._mark(f"{tag}.{name}", value)
            return
        self.handle_starttag(tag, attrs)

    def handle_endtag(self, tag: str) -> None:
        if tag == "title":
            self.in_title = False
        elif tag in HIDDEN_TAGS and tag in self.hidden:
            del self.hidden[len(self.hidden) - 1 - self.hidden[::-1].index(tag) :]
        if tag in HEADING_TAGS and self.heading is not None:
            heading = " ".join(" ".join(self.heading).split())
            if heading:
                self.headings.append(heading)
            self.heading = None
        if tag in BLOCK_TAGS:
            self._new_line()

    def handle_data(self, data: str) -> None:
        if self.in_title:
            self.title.append(data)
            return
        if self.hidden:
            return
        words = " ".join(data.split())
        if words:
            self.lines[-1].append(words)
            if self.heading is not None:
                self.heading.append(words)


def reduce_html(markup: str) -> Page:
    """The :class:`Page` an HTML document (or a text quoting one) shows; never raises on bad markup."""
    reducer = _Reducer()
    try:
        reducer.feed(markup[:MAX_PAGE_CHARS])
        reducer.close()
    except Exception:  # html.parser is tolerant, but a page is evidence, never a reason to fail
        pass
    for block in STYLE_BLOCK.findall(markup[:MAX_PAGE_CHARS]):
        for url in STYLE_URL.findall(block):
            reducer._mark("style.url", url)
    text = "\n".join(" ".join(line) for line in reducer.lines if line)
    title = " ".join(" ".join(reducer.title).split())
    return Page(title=title, headings=tuple(reducer.headings), text=text, markers=frozenset(reducer.markers))
