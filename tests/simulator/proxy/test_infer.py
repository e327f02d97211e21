"""Record a gateway through the proxy, infer a scenario, replay it: the same outcomes, request by request."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path

import httpx
import pytest

from simulator.providers.mock import MockProvider
from simulator.proxy.fault_base import Fault
from simulator.proxy.faults import (
    BodyCap,
    CloseAfterBody,
    HeaderCap,
    RateLimit429,
    ResetAfter,
    StatusPage,
    WafBlock,
)
from simulator.proxy.infer import RecordingError, infer_scenario, load_recording, roundest, scenario_toml
from simulator.proxy.journal import RECORD_FORMAT, JsonLines, page_fingerprint, record_entry
from simulator.proxy.loopback import TURN_HEADER, LoopbackServer
from simulator.proxy.middlebox import Middlebox
from simulator.proxy.pagebook import known_page, known_pages
from simulator.proxy.pages import PAGES_DIR
from simulator.proxy.scenario import load_scenario

KB = 1024
Plan = Sequence[tuple[int, int, int]]  # (turn, body bytes, extra head bytes)
PLAN: Plan = [
    (1, 10 * KB, 0),
    (2, 60 * KB, 0),
    (3, 120 * KB, 0),
    (4, 20 * KB, 0),
    (5, 200 * KB, 0),
    (6, 300 * KB, 0),
    (7, 700 * KB, 0),
    (8, 1024 * KB, 0),
    (9, 30 * KB, 10 * KB),
    (10, 100 * KB, 0),
    (11, 250 * KB, 0),
    (12, 5 * KB, 0),
]


@pytest.fixture(autouse=True)
def no_proxy_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(name, raising=False)


def body(size: int) -> bytes:
    """An OpenAI chat request of exactly ``size`` bytes."""
    empty = json.dumps({"model": "gpt-4o", "messages": [{"role": "user", "content": ""}]})
    content = "x" * (size - len(empty))
    return json.dumps({"model": "gpt-4o", "messages": [{"role": "user", "content": content}]}).encode()


def outcome(client: httpx.Client, url: str, turn: int, size: int, pad: int) -> str:
    """What the client saw: ``dropped``, or the status and the page's fingerprint."""
    headers = {TURN_HEADER: str(turn), "content-type": "application/json"}
    if pad:
        headers["x-big"] = "h" * pad
    try:
        response = client.post(url + "/v1/chat/completions", content=body(size), headers=headers)
    except httpx.TransportError:
        return "dropped"
    if response.status_code == 200:
        return "200"
    page = page_fingerprint(response.content, host=response.url.host, path=response.url.path)
    return f"{response.status_code}:{page}"


def record(gateway: Middlebox, path: Path, plan: Plan, *, bodies: bool = False) -> list[str]:
    """Send ``plan`` through a recording proxy in front of ``gateway``; what the client saw."""
    seen = []
    with LoopbackServer(gateway) as upstream:
        writer = JsonLines(path, {"format": RECORD_FORMAT, "upstream": upstream.base_url})
        proxy = LoopbackServer(
            None,
            upstream=upstream.base_url,
            record_bodies=bodies,
            on_exchange=lambda r, t: writer.write(record_entry(r, t)),
        )
        with proxy, httpx.Client(trust_env=False, timeout=10) as client:
            seen = [outcome(client, proxy.base_url, *step) for step in plan]
        writer.close()
    return seen


def replay(scenario_file: Path, plan: Plan) -> list[str]:
    """Send ``plan`` to a mock behind the inferred scenario's faults; what the client saw."""
    scenario = load_scenario(scenario_file)
    box = scenario.build_middlebox(scenario.build_provider())
    with LoopbackServer(box) as server, httpx.Client(trust_env=False, timeout=10) as client:
        return [outcome(client, server.base_url, *step) for step in plan]


def infer_to(tmp_path: Path, recording: Path) -> tuple[Path, str]:
    header, observed = load_recording(recording)
    inference = infer_scenario(observed)
    text = scenario_toml(inference, source=recording.name, upstream=header["upstream"])
    out = tmp_path / "inferred.toml"
    out.write_text(text, encoding="utf-8")
    assert inference.reproduced == inference.total, inference.notes
    return out, text


def test_a_recorded_gateway_with_known_faults_is_inferred_and_replays_the_same_outcomes(
    tmp_path: Path,
) -> None:
    faults: list[Fault] = [
        HeaderCap(limit=8 * KB),
        RateLimit429(from_turn=4, until_turn=4),
        ResetAfter(n_bytes=512 * KB),
        BodyCap(limit=128_000, response="nginx"),
    ]
    gateway = Middlebox(MockProvider("openai-chat", context_window=10_000_000), faults, seed=1)
    seen = record(gateway, tmp_path / "gateway.jsonl", PLAN)
    assert seen.count("dropped") == 2 and sum(s.startswith("413:") for s in seen) == 3

    scenario_file, text = infer_to(tmp_path, tmp_path / "gateway.jsonl")

    assert replay(scenario_file, PLAN) == seen
    scenario = load_scenario(scenario_file)
    kinds = [fault.kind for fault in scenario.faults]
    assert kinds == ["header-cap", "rate-limit-429", "reset-after", "body-cap"]
    cap = scenario.faults[3]
    assert isinstance(cap, BodyCap) and cap.response == "nginx" and 120 * KB <= cap.limit < 200 * KB
    assert scenario.provider.format == "openai-chat"
    assert "the limit lies in [122,880, 204,800) B (ctxsim probe narrows it)" in text


def test_pages_the_book_does_not_know_are_reproduced_from_recorded_bodies(tmp_path: Path) -> None:
    custom = StatusPage(
        status=502,
        body="<html><title>Squid: bad gateway</title>ERR_ZERO_SIZE</html>",
        content_type="text/html",
        min_bytes=64 * KB,
    )
    waf = WafBlock(min_bytes=500 * KB, page="akamai")
    gateway = Middlebox(MockProvider("openai-chat", context_window=10_000_000), [waf, custom], seed=3)
    plan = [(1, 10 * KB, 0), (2, 70 * KB, 0), (3, 600 * KB, 0), (4, 20 * KB, 0), (5, 100 * KB, 0)]
    seen = record(gateway, tmp_path / "squid.jsonl", plan, bodies=True)

    scenario_file, _ = infer_to(tmp_path, tmp_path / "squid.jsonl")

    assert replay(scenario_file, plan) == seen
    kinds = [(f.kind, getattr(f, "page", None)) for f in load_scenario(scenario_file).faults]
    assert kinds == [("waf-403-html", "akamai"), ("status-page", None)]


def test_a_fault_that_is_not_about_size_is_pinned_to_its_turns(tmp_path: Path) -> None:
    closes = CloseAfterBody(from_turn=3, until_turn=4)
    gateway = Middlebox(MockProvider("openai-chat", context_window=10_000_000), [closes])
    plan = [(1, 50 * KB, 0), (2, 5 * KB, 0), (3, 6 * KB, 0), (4, 40 * KB, 0), (5, 7 * KB, 0)]
    seen = record(gateway, tmp_path / "turns.jsonl", plan)
    assert seen == ["200", "200", "dropped", "dropped", "200"]

    scenario_file, _ = infer_to(tmp_path, tmp_path / "turns.jsonl")

    (fault,) = load_scenario(scenario_file).faults
    assert (fault.from_turn, fault.until_turn) == (3, 4)
    assert replay(scenario_file, plan) == seen


@pytest.mark.parametrize(
    ("low", "high", "expected"),
    [
        (120_000, 140_000, 131_072),
        (127_500, 128_500, 128_000),
        (0, 5, 0),
        (999, 1001, 1000),
        (122_880, 204_800, 200_000),
        (1, 2, 1),
    ],
)
def test_the_threshold_is_the_roundest_number_in_the_interval(low: int, high: int, expected: int) -> None:
    assert roundest(low, high) == expected and low <= expected < high


def test_every_bundled_page_has_its_own_fingerprint_whatever_its_ids_host_and_path() -> None:
    pages = known_pages()
    assert len({(p.status, p.fingerprint) for p in pages}) == len(pages)
    for seed in range(3):
        box = Middlebox(None, [WafBlock(page="cloudflare")], seed=seed)
        decision = box.decide(httpx.Request("POST", f"http://host{seed}.corp/api/x{seed}", content=b"x"))
        page = known_page(
            403,
            page_fingerprint(
                decision.body,
                host=f"host{seed}.corp",  # type: ignore[union-attr]
                path=f"/api/x{seed}",
            ),
        )
        assert page is not None and (page.kind, page.name) == ("waf-403-html", "cloudflare")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("not json\n", "rec.jsonl:1: not JSON"),
        ("[1, 2]\n", "rec.jsonl:1: each line must be a JSON object"),
        ('{"turn": 1}\n', "rec.jsonl:1: not an exchange of a ctxsim proxy --record file"),
        (json.dumps({"format": RECORD_FORMAT}) + "\n", "rec.jsonl: no exchanges recorded"),
    ],
)
def test_a_bad_record_file_is_named_with_its_line(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "rec.jsonl"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(RecordingError, match=message):
        load_recording(path)


@pytest.mark.parametrize("bodies", [False, True], ids=["shapes", "bodies"])
def test_an_empty_page_is_recorded_as_a_fact(tmp_path: Path, bodies: bool) -> None:
    empty = StatusPage(status=503, body="", content_type="", min_bytes=150 * KB)
    gateway = Middlebox(MockProvider("openai-chat", context_window=10_000_000), [empty])
    plan = [(1, 10 * KB, 0), (2, 100 * KB, 0), (3, 200 * KB, 0), (4, 300 * KB, 0)]
    seen = record(gateway, tmp_path / "empty.jsonl", plan, bodies=bodies)

    scenario_file, text = infer_to(tmp_path, tmp_path / "empty.jsonl")

    (fault,) = load_scenario(scenario_file).faults
    assert isinstance(fault, StatusPage) and (fault.status, fault.body, fault.content_type) == (503, "", "")
    assert "not recorded" not in text
    assert replay(scenario_file, plan) == seen


def test_a_page_of_another_version_or_configuration_is_known_by_its_shape() -> None:
    # nginx's 413 worded otherwise: another fingerprint; the same status, title, type, server, about the size
    shape = {"title": "413 Request Entity Too Large", "content_type": "text/html", "server": "nginx/1.27.0"}
    page = known_page(413, "0" * 16, length=190, **shape)
    assert page is not None and page.identity == "body-cap/nginx"
    cloudflare = known_page(413, "0" * 16, length=190, **{**shape, "server": "cloudflare"})
    assert cloudflare is not None and cloudflare.identity == "body-cap/cloudflare"
    assert known_page(413, "0" * 16, length=900, **shape) is None
    assert known_page(413, "0" * 16, length=190, **{**shape, "title": "Something else"}) is None


def test_an_inferred_size_cap_comes_with_a_workload_that_reaches_it(tmp_path: Path) -> None:
    gateway = Middlebox(MockProvider("openai-chat", context_window=10_000_000), [BodyCap(limit=128 * KB)])
    record(gateway, tmp_path / "cap.jsonl", [(1, 10 * KB, 0), (2, 100 * KB, 0), (3, 200 * KB, 0)])

    scenario_file, _ = infer_to(tmp_path, tmp_path / "cap.jsonl")

    scenario = load_scenario(scenario_file)
    (cap,) = scenario.faults
    assert isinstance(cap, BodyCap)
    assert (scenario.workload.transcript, scenario.workload.history_bytes) == ("generated", 2 * cap.limit)
    assert (scenario.expect.outcome, scenario.expect.failure_kind) == ("recovered", "payload_too_large")


def test_a_page_stamped_with_another_http_date_has_the_same_fingerprint() -> None:
    # Squid stamps "Generated <IMF-fixdate> by <host>": the day name changes with the date, and must not count
    page = (PAGES_DIR / "413-squid.html").read_bytes()
    stamped = re.search(rb"Generated ([^<]*) GMT", page)
    assert stamped is not None
    other_day = page.replace(stamped.group(1), b"Sat, 31 Jul 2027 07:08:09")
    assert other_day != page and page_fingerprint(other_day) == page_fingerprint(page)
