"""Every mock that imitates a real engine is held against that engine, byte for byte where it matters.

For each configuration of :data:`CASES`, the same requests go to the real engine and to a loopback
middlebox serving the engine's :meth:`~simulator.engines.base.Engine.imitation`, both in front of
the same mock provider: the largest body that passes, one byte more, and a 4 MB body whose first
part is sent before the client waits for an early answer. Status, content type, page fingerprint
(ids, dates, versions, host and path removed) and the connection's behaviour (an answer before the
body ended, a close, a reset) must be the same — and what the case says the engine does.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from simulator.engines import Engine
from simulator.engines.capture import CAPTURES, CHAT_PATH, captured_pages
from simulator.engines.conformance import (
    CONFORMANCE_HEADERS,
    agent_content_bodies,
    imitation_server,
    observe,
    observe_body,
)
from simulator.engines.modsecurity import fired_rules
from simulator.proxy.anomaly import AnomalyScorer
from simulator.proxy.fault_specs import fault_spec
from simulator.proxy.faults import AnomalyWaf
from simulator.proxy.journal import page_fingerprint, page_title
from simulator.proxy.pagebook import known_page
from simulator.proxy.pages import PAGES_DIR

ROOT = Path(__file__).resolve().parents[3]
BIG = 4_000_000  # a body far over every cap: the client sends its first part, then waits for an answer
TABLE_BEGIN, TABLE_END = "<!-- engines table: begin -->", "<!-- engines table: end -->"


@dataclass(frozen=True)
class Case:
    """An engine configuration, the largest body it lets through, and what it does above that."""

    engine: str
    knobs: dict[str, Any]
    passes_up_to: int | None  # None: every size passes
    refused: int | None  # the status of a refused body
    early: bool = True  # the answer comes before a 4 MB body ends
    reset: bool = False  # a client still sending a 4 MB body meets a reset
    note: str = ""
    sizes: tuple[int, ...] = field(default=())

    @property
    def id(self) -> str:
        return f"{self.engine}-" + "-".join(f"{k}={v}" for k, v in self.knobs.items())


KIB128 = 128 * 1024
CASES = (
    Case("nginx", {"body_cap": KIB128}, KIB128, 413, note="413 by Content-Length, then a lingering close"),
    Case("haproxy", {"body_cap": KIB128}, KIB128, 413, reset=True, note="413, then closes at once"),
    Case("squid", {"body_cap": KIB128}, KIB128, 413, reset=True, note="ERR_TOO_BIG 413, closes at once"),
    Case(
        "caddy",
        {"body_cap": 128_000},
        128_000,
        502,
        reset=True,
        note="an empty 502, not a 413; `max_size 128KB` in a Caddyfile is 128,000 B",
    ),
    Case(
        "apache",
        {"body_cap": KIB128},
        None,
        None,
        early=False,
        note="LimitRequestBody does not apply to a proxied request: 4 MB passes",
    ),
    Case(
        "apache-modsecurity",
        {"body_cap": KIB128},
        KIB128 - 1,
        413,
        note="SecRequestBodyNoFilesLimit refuses a body of the limit or more (Apache's 413)",
    ),
    Case(
        "nginx-modsecurity",
        {"body_cap": KIB128},
        KIB128,
        400,
        early=False,
        note="over SecRequestBodyNoFilesLimit: a body-parse error (rule 200002), nginx's 400, after the body",
    ),
    Case(
        "nginx-modsecurity",
        {"body_cap": 1024 * 1024, "request_body_limit": KIB128},
        KIB128,
        403,
        early=False,
        note="over SecRequestBodyLimit: the bare 403 a content rule gets too",
    ),
    Case("nginx", {"deny": ("/",)}, None, 403, note="`deny all`: nginx's 403", sizes=(100,)),
    Case("apache", {"deny": ("/",)}, None, 403, note="`Require all denied`: Apache's 403", sizes=(100,)),
    Case("haproxy", {"deny": ("/",)}, None, 403, note="`http-request deny`: its 403", sizes=(100,)),
    Case("squid", {"deny": ("/",)}, None, 403, note="`http_access deny`: ERR_ACCESS_DENIED", sizes=(100,)),
)


def _sizes(case: Case) -> list[tuple[int, int | None]]:
    """(size, early_after) of the requests a case sends."""
    if case.sizes:
        return [(size, None) for size in case.sizes]
    if case.passes_up_to is None:
        return [(KIB128, None), (KIB128 + 1, None), (BIG, KIB128 + 4096)]
    edge = case.passes_up_to
    return [(edge, None), (edge + 1, None), (BIG, edge + 4096)]


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES, ids=lambda case: case.id)
def test_the_mock_answers_as_the_real_engine_does(
    case: Case, start_engine: Callable[..., Engine], mock_upstream: str
) -> None:
    engine = start_engine(case.engine, **case.knobs)
    with imitation_server(engine, mock_upstream) as mock_url:
        for size, early_after in _sizes(case):
            real = observe(engine.url, size, early_after=early_after)
            mock = observe(mock_url, size, early_after=early_after)
            refused = case.refused is not None and (case.passes_up_to is None or size > case.passes_up_to)
            if case.sizes:  # a policy denial refuses everything
                refused = True
            # Relaying the provider's own answer, Apache closes after a 400 (ap_status_drops_connection):
            # not a fault of the gateway, so not the mock's to imitate.
            ignore = () if refused else ("closed",)
            assert real.differences(mock, ignore=ignore) == [], f"{size:,} B: real {real} != mock {mock}"
            expected = case.refused if refused else 200
            if size == BIG and not refused:
                expected = 400  # the mock provider's own context-overflow answer to 4 MB
            assert real.status == expected, f"{size:,} B: {real}"
            if size == BIG and refused:
                assert (real.early, real.reset) == (case.early, case.reset), f"{size:,} B: {real}"


@pytest.mark.slow
def test_the_captured_pages_are_what_the_installed_engines_answer(
    require_engine: Callable[[str], None],
) -> None:
    for name in dict.fromkeys(capture.engine for capture in CAPTURES):
        require_engine(name)
    # Known as the bundled page from its shape, as ctxsim infer reads it: Squid's ERR_READ_ERROR names the
    # system error it met ("(104) Connection reset by peer" or "(32) Broken pipe", as the reset races the
    # body), so its fingerprint may differ while the page is the same.
    for capture, engine, response in captured_pages():
        stored = (PAGES_DIR / capture.file).read_bytes().replace(b"${path}", capture.path.encode())
        stored = stored.replace(b"$$", b"$")
        host = engine.url.removeprefix("http://").partition(":")[0]
        pages = [
            known_page(
                response.status_code,
                page_fingerprint(body, host=host, path=capture.path),
                title=page_title(body),
                content_type=response.headers.get("content-type", ""),
                length=len(body),
                server=response.headers.get("server", ""),
            )
            for body in (response.content, stored)
        ]
        assert pages[0] is not None and pages[0] == pages[1], capture.file


def engines_table() -> str:
    """The README's "mock vs real" table, from :data:`CASES` and each engine's imitation."""
    from simulator.engines import engine_class

    rows = [
        "| engine | configured | passes | above it, real and mock | the mock that imitates it |",
        "|---|---|---|---|---|",
    ]
    for case in CASES:
        engine = engine_class(case.engine)(upstream="http://127.0.0.1:9", **case.knobs)
        knobs = ", ".join(f"`{k}={v!r}`" for k, v in case.knobs.items())
        passes = "every size" if case.passes_up_to is None and not case.sizes else "nothing"
        if case.passes_up_to is not None:
            passes = f"≤ {case.passes_up_to:,} B"
        faults = ", ".join(f"`{fault_spec(fault)}`" for fault in engine.imitation()) or "none (no fault)"
        rows.append(f"| {case.engine} | {knobs} | {passes} | {case.note} | {faults} |")
    return "\n".join(rows)


def test_the_readme_table_of_engines_is_current() -> None:
    readme = ROOT / "README.md"
    text = readme.read_text(encoding="utf-8")
    begin, end = text.index(TABLE_BEGIN) + len(TABLE_BEGIN), text.index(TABLE_END)
    table = "\n" + engines_table() + "\n"
    if os.environ.get("UPDATE_README"):
        readme.write_text(text[:begin] + table + text[end:], encoding="utf-8")
    assert text[begin:end] == table, "regenerate with UPDATE_README=1 pytest tests/simulator/engines"


CONTENT_CASES = (
    ("apache-modsecurity", {}),
    ("apache-modsecurity", {"inbound_threshold": 10}),
    ("apache-modsecurity", {"crs_paranoia": 2}),
    ("nginx-modsecurity", {}),
)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("name", "knobs"),
    CONTENT_CASES,
    ids=[f"{n}-" + "-".join(f"{k}={v}" for k, v in kn.items()) for n, kn in CONTENT_CASES],
)
def test_the_anomaly_scored_mock_blocks_what_the_real_crs_blocks(
    name: str, knobs: dict[str, Any], start_engine: Callable[..., Engine], mock_upstream: str
) -> None:
    """Agent content (code, shell, SQL, paths, HTML, tool calls) gets the same decisions from the mock's
    anomaly scoring as from the real CRS; where they differ, the real engine fired a rule the mock says
    it cannot run (libinjection's operators), and nothing else."""
    engine = start_engine(name, **knobs)
    (anomaly,) = [fault for fault in engine.imitation() if isinstance(fault, AnomalyWaf)]
    unsupported = set(AnomalyScorer.bundled(paranoia=anomaly.paranoia).unsupported)
    agreed, unexplained = 0, []
    with imitation_server(engine, mock_upstream) as mock_url:
        for sample, body in agent_content_bodies():
            offset = len(engine.process.read_log("error.log"))
            real = observe_body(engine.url, body, check_close=False)
            fired = set(fired_rules(engine.process.read_log("error.log"), since=offset))
            mock = observe_body(mock_url, body, check_close=False)
            # let through: the provider's own answer (its ids vary), so the status is what to compare
            passed = real.status == mock.status == 200
            if passed or not real.differences(mock):
                agreed += 1
                continue
            request = httpx.Request("POST", mock_url + CHAT_PATH, content=body, headers=CONFORMANCE_HEADERS)
            missed = fired - set(anomaly.verdict(request).rules)
            if not missed or not missed <= unsupported:
                unexplained.append(f"{sample}: real {real.status} {sorted(fired)}, mock {mock.status}")
    assert unexplained == []
    assert agreed >= len(agent_content_bodies()) - 3  # measured: only libinjection-only blocks differ
