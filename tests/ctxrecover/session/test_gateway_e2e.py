"""The gateway model end to end (SPEC §11, §12): the issue's cases through HttpxSender + httpx.MockTransport.

Each gateway is a plain ``handler(request) -> response`` (or a raised transport error) that
records the size of every body it saw and whether it let it through, per turn. The last
test runs them all and measures rejected requests per episode (an episode is a turn with
at least one rejection) against the least any policy could need: one for a size gate that
says so; two for the first ambiguous failure of its kind — a reset or a 503 gets a plain
retry (SPEC §11), a WAF page that does not say why gets the one request that tells size from
content (SPEC §12) — and one for later ones; 1 + ⌈log2 n⌉ for a content block among n parts.
The gateways here answer size with a WAF page, so their first episode costs two.
"""

from __future__ import annotations

import base64
import json
import random
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import httpx
import pytest

from ctxrecover.archive import Archive
from ctxrecover.classify import Failure, FailureKind, classify
from ctxrecover.errors import HeaderFaultError, UnrecoverableFailure
from ctxrecover.events import Event, Notice, PreCompact, StatusEvent
from ctxrecover.messages import Image, Message, ToolCall
from ctxrecover.policy import Policy
from ctxrecover.session import Session
from ctxrecover.sizes import format_payload_size, total_weight
from ctxrecover.transport import HttpxSender

KB = 1024
WAF_PAGE = (
    "<html><head><title>403 Forbidden</title></head><body><h1>Request blocked</h1>"
    "<p>Your request was blocked by the corporate web application firewall. Incident %d.</p></body></html>"
)
ENVOY_503 = "upstream connect error or disconnect/reset before headers. reset reason: connection termination"
NGINX_413 = (
    "<html><head><title>413 Request Entity Too Large</title></head><body><center><h1>413 Request Entity "
    "Too Large</h1></center><hr><center>nginx</center></body></html>"
)
SQL = "SELECT * FROM users WHERE name = '' OR 1=1 --"
CONTENT_BLOCK = (
    "✖ Gateway refused a %s request although it had accepted a %s one — a content/policy block, not a "
    "size limit: payload cap unchanged, history not compacted. Likely trigger: the newest message "
    "(#%d, %s, %s) — remove or rephrase it, or ask the gateway's administrators which rule matched"
)
HEADER_FAULT = (
    "✖ Gateway rejected the request headers (HTTP 431, %s of headers; body %s) — a header limit, not a "
    "body size: history compaction cannot help. Shorten cookies, tokens or custom headers, or raise the "
    "proxy's header-size limit"
)
OUTPUT_LIMIT = (
    "ℹ Provider rejected max_tokens=%s as too large — retrying with max_tokens=%d for this session "
    "(no compaction)"
)
OUTPUT_LIMIT_DEFAULT = (
    "ℹ Provider rejected its default max_tokens (the request set none) as too large — retrying with "
    "max_tokens=%d for this session (no compaction)"
)


def bedrock_ok(text: str = "ok") -> httpx.Response:
    return httpx.Response(
        200,
        json={
            "output": {"message": {"role": "assistant", "content": [{"text": text}]}},
            "stopReason": "end_turn",
            "usage": {"inputTokens": 100, "outputTokens": 2, "totalTokens": 102},
        },
    )


def waf_403(request: httpx.Request) -> httpx.Response:
    page = WAF_PAGE % random.randint(1, 10**6)  # the incident number changes, the page does not
    return httpx.Response(403, text=page, headers={"content-type": "text/html"})


@dataclass
class Gateway:
    """A middlebox in front of Bedrock: ``decide(request)`` answers (or raises), None lets it through."""

    decide: Callable[[httpx.Request], httpx.Response | None]
    turn: int = 0
    log: list[tuple[int, int, bool]] = field(default_factory=list)  # (turn, body bytes, accepted)

    def __call__(self, request: httpx.Request) -> httpx.Response:
        try:
            answer = self.decide(request)
        except httpx.TransportError:
            self.log.append((self.turn, len(request.content), False))
            raise
        self.log.append((self.turn, len(request.content), answer is None))
        return bedrock_ok() if answer is None else answer

    @property
    def rejected(self) -> list[int]:
        return [size for _, size, ok in self.log if not ok]

    def in_turn(self, turn: int) -> list[tuple[int, bool]]:
        return [(size, ok) for t, size, ok in self.log if t == turn]

    def episodes(self) -> tuple[int, int]:
        """(episodes, rejected requests): turns with at least one rejection, and all rejections."""
        turns = {t for t, _, ok in self.log if not ok}
        return len(turns), len(self.rejected)


def session_for(gateway: Gateway, **kwargs: object) -> tuple[Session, list[Event]]:
    events: list[Event] = []
    sender = HttpxSender(
        "bedrock-converse",
        base_url="http://gateway.test",
        model="anthropic.claude-3-5-sonnet",
        headers=kwargs.pop("headers", None),  # type: ignore[arg-type]
        transport=httpx.MockTransport(gateway),
    )
    kwargs.setdefault("sleep", lambda seconds: None)
    return Session(sender, on_event=events.append, **kwargs), events  # type: ignore[arg-type]


def notices(events: list[Event], code: str) -> list[str]:
    return [e.message for e in events if isinstance(e, Notice) and e.code == code]


def size_gate(limit: int, answer: Callable[[httpx.Request], httpx.Response] = waf_403) -> Gateway:
    return Gateway(lambda request: answer(request) if len(request.content) >= limit else None)


#: A one-word request carrying no conversation content (the route probe) is smaller than this.
PROBE_BYTES = 200


def assert_never_resent_a_known_failing_size(gateway: Gateway) -> None:
    """After a rejection, every body sent is smaller than the smallest rejected so far — but the one
    request that tells a WAF page's size reading from a content reading (SPEC §12): right after the
    refusal (and the one-word route probe), blanks as large. Refused too, it makes the size reading a fact."""
    smallest: int | None = None
    refused: int | None = None  # the size of the last refusal, while only the route probe followed it
    for _, size, ok in gateway.log:
        telling = refused is not None and size == refused
        assert smallest is None or size < smallest or telling, (size, smallest)
        if not ok:
            smallest = size if smallest is None else min(smallest, size)
        refused = size if not ok else (refused if size < PROBE_BYTES else None)


# -- 431 -------------------------------------------------------------------------------------------------


def test_a_431_is_one_request_one_diagnosis_no_compaction_and_no_body_cap() -> None:
    def header_limit(request: httpx.Request) -> httpx.Response | None:
        headers = sum(len(name) + len(value) + 4 for name, value in request.headers.raw)
        return httpx.Response(431, text="") if headers > 8 * KB else None

    gateway = Gateway(header_limit)
    session, events = session_for(gateway, headers={"cookie": "session=" + "c" * 9_000})
    session.extend([Message.system("sys"), Message.user("question " + "x" * 20_000)])
    before = session.history

    with pytest.raises(HeaderFaultError) as info:
        session.complete()

    ((body, ok),) = gateway.in_turn(0)
    error = info.value
    assert error.header_bytes is not None and error.header_bytes > 9_000
    expected = HEADER_FAULT % (format_payload_size(error.header_bytes), format_payload_size(body))
    assert str(error) == expected and notices(events, "header_fault") == [expected]
    assert error.request_bytes == body
    assert session.history == before and session.learned_cap is None
    assert session.gateway.rejections == () and session.gateway.header_faults == 1
    assert not any(isinstance(e, PreCompact | StatusEvent) for e in events)
    assert session.stats.recovery_attempts == 0


# -- tight caps: 1.2–1.5 × the system prompt, a tool result every turn --------------------------------


def tight_cap_run(ratio: float, seed: int, turns: int = 25) -> tuple[Gateway, Session, list[Event]]:
    rng = random.Random(seed)
    system_chars = 20 * KB
    gateway = size_gate(int(system_chars * ratio))
    session, events = session_for(gateway)
    session.extend([Message.system("You are an agent. " + "S" * system_chars), Message.user("Start.")])
    for turn in range(turns):
        gateway.turn = turn
        session.complete()
        call = f"t{turn}"
        session.add(Message.assistant("", [ToolCall(call, "read_file", f'{{"path": "f{turn}.py"}}')]))
        session.add(Message.tool(call, f"# f{turn}.py\n" + "code line\n" * rng.randint(200, 800)))
    return gateway, session, events


@pytest.mark.parametrize("ratio", [1.2, 1.35, 1.5])
def test_tight_caps_cost_one_episode_and_never_resend_a_failing_size(ratio: float) -> None:
    for seed in range(3):
        gateway, session, _ = tight_cap_run(ratio, seed)  # no RecoveryError: no failed turn, no false floor
        episodes, rejected = gateway.episodes()
        # one episode: the WAF page, then blanks as large (refused: size; the one-word probe passed)
        assert episodes == 1 and rejected == 2, (ratio, seed, gateway.rejected)
        assert_never_resent_a_known_failing_size(gateway)
        model = session.gateway
        assert model.learned_cap is not None
        assert model.largest_accepted <= model.learned_cap < model.smallest_rejected


# -- fill the cap (SPEC §12) -----------------------------------------------------------------------------


def nginx_413(request: httpx.Request) -> httpx.Response:
    return httpx.Response(413, text=NGINX_413, headers={"content-type": "text/html"})


def test_the_retry_after_a_size_rejection_fills_the_learned_cap_instead_of_a_fraction_of_it() -> None:
    gateway = size_gate(256 * KB, nginx_413)
    session, _ = session_for(gateway)
    session.extend([Message.system("You are a careful engineer.")])
    turn = 0
    while not gateway.rejected:
        gateway.turn = turn
        notes = "\n".join(
            f"turn {turn} finding {line}: the parser keeps state per line" for line in range(200)
        )
        session.extend([Message.user(f"step {turn}: go on"), Message.assistant(notes), Message.user("next")])
        session.complete()
        turn += 1
    (rejected, retry) = gateway.in_turn(turn - 1)
    cap = session.gateway.learned_cap
    assert cap is not None and not rejected[1] and retry[1]
    # ≥ 75 % of the learned cap, never over it: SPEC §6's Level 1 alone, which cuts every long
    # assistant message at once, retried with less than half of it
    assert 0.75 * cap <= retry[0] <= cap, (retry[0], cap)


# -- the corporate 128 KB WAF with a ~100 KB system prompt ----------------------------------------------


def corporate_run(turns: int = 40) -> tuple[Gateway, Session, list[Event], dict[int, list[Event]]]:
    rng = random.Random(7)
    gateway = size_gate(128_000)
    session, events = session_for(gateway)
    session.extend([Message.system("You are the corporate assistant. " + "P" * (101 * KB + 512))])
    per_turn: dict[int, list[Event]] = {}
    for turn in range(turns):
        gateway.turn = turn
        session.add(Message.user("question " + "q" * rng.randint(500, 3_000)))
        start = len(events)
        session.complete()
        per_turn[turn] = events[start:]
    return gateway, session, events, per_turn


def test_corporate_waf_learns_a_cap_at_what_passed_and_does_not_compact_every_turn() -> None:
    gateway, session, events, per_turn = corporate_run()

    assert gateway.episodes() == (1, 2)  # the WAF page, and the request that tells size from content
    (episode,) = {t for t, _, ok in gateway.log if not ok}
    model = session.gateway
    assert model.learned_cap is not None and model.largest_accepted <= model.learned_cap
    assert model.learned_cap >= 0.95 * 128_000  # not ¾ of the rejection (96 KB), under the 101.5 KB prompt
    later = [t for t in per_turn if t > episode]
    compacting = [
        t for t in later if any(isinstance(e, StatusEvent) and e.phase == "start" for e in per_turn[t])
    ]
    preflight = [
        t for t in later if any(isinstance(e, Notice) and e.code == "preflight" for e in per_turn[t])
    ]
    assert len(compacting) <= len(later) // 3, compacting  # only when the turns' own growth needs it
    assert len(preflight) <= 2, preflight
    assert all(" of learned cap (" in text for text in notices(events, "preflight"))
    assert not any(" of configured cap (" in text for text in notices(events, "preflight"))
    # the §6.1 notice when the rejection set the cap; requests that pass later only raise it, silently
    learned = notices(events, "learned_cap")
    assert learned == [learned[0]] and learned[0].startswith("ℹ Gateway rejected a ")
    assert_never_resent_a_known_failing_size(gateway)


# -- screenshots under a 128 KB WAF --------------------------------------------------------------------


def screenshot_run(turns: int = 12, shot_kb: int = 40) -> tuple[Gateway, Session, list[Event], list[str]]:
    rng = random.Random(3)
    gateway = size_gate(128 * KB)
    session, events = session_for(gateway)
    session.extend([Message.system("You drive a browser. " + "r" * 10_000)])
    shots: list[str] = []
    for turn in range(turns):
        gateway.turn = turn
        data = base64.b64encode(rng.randbytes(shot_kb * 768)).decode()
        shots.append(data)
        session.add(Message.user(f"open page {turn} and look"))
        session.add(Message.assistant("", [ToolCall(f"s{turn}", "screenshot", "{}")]))
        session.add(Message.tool(f"s{turn}", f"screenshot of page {turn}", images=(Image(data=data),)))
        session.complete()
    return gateway, session, events, shots


def test_screenshots_count_by_their_bytes_and_old_ones_are_archived_and_recoverable(
    reachable_entries: Callable[[Sequence[Message], Archive], set[str]],
) -> None:
    gateway, session, events, shots = screenshot_run()

    episodes, rejected = gateway.episodes()
    assert episodes <= 1 and rejected <= 2 * episodes
    assert max(size for _, size, ok in gateway.log if ok) < 128 * KB
    history = session.history
    assert total_weight(history) >= sum(len(i.data or "") for m in history for i in m.images)
    assert notices(events, "images_archived")
    kept = [i.data for m in history for i in m.images]
    assert kept and kept[-1] == shots[-1]  # the newest screenshot is still seen
    archived = reachable_entries(session.history, session.archive)
    for data in shots:
        assert data in kept or f"data:image/png;base64,{data}" in archived  # nothing lost


def test_a_screenshot_larger_than_the_gateway_is_archived_rather_than_failing_the_turn(
    reachable_entries: Callable[[Sequence[Message], Archive], set[str]],
) -> None:
    gateway, session, events, shots = screenshot_run(turns=3, shot_kb=200)

    assert all(ok for t, _, ok in gateway.log if t > 0)  # learned once, never refused again
    assert gateway.episodes() == (1, 2)
    archived = reachable_entries(session.history, session.archive)
    assert all(f"data:image/png;base64,{data}" in archived for data in shots)


# -- size-correlated resets and masked 413s ----------------------------------------------------------


def long_chat(session: Session, chars: int) -> None:
    session.extend([Message.system("rules " + "r" * 5_000)])
    i = 0
    while total_weight(session.history) < chars:
        session.add(Message.user(f"q{i} " + "u" * 3_000))
        session.add(Message.assistant(f"a{i} " + "a" * 6_000))
        i += 1
    session.add(Message.user("and now?"))


def reset_above(limit: int) -> Gateway:
    def drop(request: httpx.Request) -> None:
        if len(request.content) > limit:
            raise httpx.ReadError("[Errno 104] Connection reset by peer", request=request)

    return Gateway(drop)


def envoy_above(limit: int) -> Gateway:
    return size_gate(
        limit + 1,
        lambda request: httpx.Response(
            503, text=ENVOY_503, headers={"content-type": "text/plain", "server": "envoy"}
        ),
    )


@pytest.mark.parametrize("make_gateway", [reset_above, envoy_above], ids=["resets", "envoy-503"])
def test_repeated_failures_above_a_size_become_payload_evidence_and_no_turn_fails(
    make_gateway: Callable[[int], Gateway],
) -> None:
    gateway = make_gateway(128 * KB)
    slept: list[float] = []
    session, events = session_for(gateway, sleep=slept.append)
    long_chat(session, 150 * KB)

    for turn in range(10):
        gateway.turn = turn
        session.complete()  # never raises
        session.add(Message.user(f"turn {turn} " + "x" * 2_000))

    first, second, retried = gateway.in_turn(0)
    assert not first[1] and not second[1]  # one plain retry, then the repeat is evidence
    assert first[0] == second[0] > 128 * KB
    assert retried[1] and retried[0] <= 128 * KB
    assert gateway.episodes() == (1, 2) and slept == [1.0]
    assert session.gateway.smallest_rejected == first[0]
    assert (
        f"⚠ Recoverable failure (suspected payload limit (network error repeated at "
        f"{format_payload_size(first[0])})) — compacting and retrying"
    ) in notices(events, "recoverable_failure")


def test_a_genuinely_transient_reset_gets_one_plain_retry_and_no_compaction() -> None:
    state = {"dropped": False}

    def once(request: httpx.Request) -> None:
        if not state["dropped"]:
            state["dropped"] = True
            raise httpx.RemoteProtocolError("Server disconnected without a response.", request=request)

    gateway = Gateway(once)
    session, events = session_for(gateway)
    long_chat(session, 150 * KB)

    assert session.complete().content == "ok"

    (size, ok1), (again, ok2) = gateway.in_turn(0)
    assert (ok1, ok2) == (False, True) and size == again
    assert session.learned_cap is None and session.gateway.suspects == ()
    assert not any(isinstance(e, PreCompact | StatusEvent) for e in events)


# -- max_tokens above the model's output cap -------------------------------------------------------------

OPENAI_MAX_TOKENS = (
    '{"error": {"message": "max_tokens is too large: %d. This model supports at most %d completion tokens, '
    'whereas you provided %d.", "type": "invalid_request_error", "param": "max_tokens", '
    '"code": "invalid_value"}}'
)
STATED_CAP = re.compile(r"supports at most (\d+) completion tokens")


def classify_with_output_limit(error: BaseException | None = None, **kwargs: object) -> Failure:
    """``classify``, plus the output_limit kind the classify branch adds (a stated output cap)."""
    body = getattr(error, "body", None) or ""
    found = STATED_CAP.search(body) if "max_tokens is too large" in body else None
    if found:
        return Failure(
            FailureKind.OUTPUT_LIMIT,
            status=400,
            output_limit_tokens=int(found.group(1)),
            evidence="max_tokens is too large",
        )
    return classify(error, **kwargs)  # type: ignore[arg-type]


def openai_with_output_cap(cap: int, log: list[int | None]) -> Callable[[httpx.Request], httpx.Response]:
    def handler(request: httpx.Request) -> httpx.Response:
        max_tokens = json.loads(request.content).get("max_tokens")
        log.append(max_tokens)
        if max_tokens is not None and max_tokens > cap:
            return httpx.Response(400, text=OPENAI_MAX_TOKENS % (max_tokens, cap, max_tokens))
        return httpx.Response(
            200,
            json={
                "choices": [{"message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 50, "completion_tokens": 1},
            },
        )

    return handler


def test_max_tokens_over_the_models_cap_is_lowered_to_the_stated_limit_never_compacted() -> None:
    asked: list[int | None] = []
    events: list[Event] = []
    sender = HttpxSender(
        "openai-chat",
        base_url="http://provider.test",
        model="gpt-4o",
        transport=httpx.MockTransport(openai_with_output_cap(16_384, asked)),
    )
    session = Session(
        sender, on_event=events.append, max_tokens=200_000, classifier=classify_with_output_limit
    )
    session.extend([Message.system("sys"), Message.user("write a long essay")])

    assert session.complete().content == "ok"
    session.add(Message.user("and another"))
    assert session.complete().content == "ok"

    assert asked == [200_000, 16_384, 16_384]  # one rejection; the next turn is clamped before sending
    assert notices(events, "output_limit") == [OUTPUT_LIMIT % (200_000, 16_384)]
    assert not any(isinstance(e, PreCompact | StatusEvent) for e in events)
    assert session.learned_cap is None and session.stats.rejected_requests == 1
    assert session.state()["output_cap"] == 16_384


def test_a_max_tokens_rejection_without_a_stated_limit_halves_it() -> None:
    asked: list[int | None] = []
    sender = HttpxSender(
        "openai-chat",
        base_url="http://provider.test",
        model="gpt-4o",
        transport=httpx.MockTransport(openai_with_output_cap(20_000, asked)),
    )

    def unstated(error: BaseException | None = None, **kwargs: object) -> Failure:
        failure = classify_with_output_limit(error, **kwargs)
        if failure.kind is FailureKind.OUTPUT_LIMIT:
            return Failure(FailureKind.OUTPUT_LIMIT, status=400, evidence="max_tokens")
        return failure

    session = Session(sender, max_tokens=64_000, classifier=unstated)
    session.extend([Message.user("go")])
    assert session.complete().content == "ok"
    assert asked == [64_000, 32_000, 16_000]


def test_escalation_stops_at_the_catalog_output_cap_and_the_window_room() -> None:
    asked: list[int | None] = []

    def truncating(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        asked.append(body.get("max_tokens"))
        return httpx.Response(
            200,
            json={
                "choices": [{"message": {"role": "assistant", "content": "part"}, "finish_reason": "length"}],
                "usage": {"prompt_tokens": 6_000, "completion_tokens": 10},
            },
        )

    sender = HttpxSender(
        "openai-chat",
        base_url="http://provider.test",
        model="gpt-4o",
        transport=httpx.MockTransport(truncating),
    )
    Session(sender, max_tokens=8_192, history=[Message.user("go")]).complete()
    assert asked == [8_192, 16_384]  # gpt-4o's output cap is 16 384: no 32 768 escalation

    asked.clear()
    small_window = Policy(context_window=16_000)
    Session(sender, policy=small_window, max_tokens=4_096, history=[Message.user("go")]).complete()
    assert asked == [4_096, 8_192, 10_000]  # 16 000 window − 6 000 input tokens


# -- rejected requests per episode over every gateway above ---------------------------------------------


def test_rejected_requests_per_episode_over_the_test_gateways(capsys: pytest.CaptureFixture[str]) -> None:
    runs: dict[str, tuple[int, int]] = {}
    for ratio in (1.2, 1.35, 1.5):
        for seed in range(3):
            runs[f"tight-{ratio}-s{seed}"] = tight_cap_run(ratio, seed)[0].episodes()
    runs["corporate-128k-waf"] = corporate_run()[0].episodes()
    runs["screenshots-40k"] = screenshot_run()[0].episodes()
    runs["screenshots-200k"] = screenshot_run(turns=3, shot_kb=200)[0].episodes()
    size_gates = dict(runs)
    for name, make in (("resets-128k", reset_above), ("envoy-503-128k", envoy_above)):
        gateway = make(128 * KB)
        session, _ = session_for(gateway)
        long_chat(session, 150 * KB)
        for turn in range(6):
            gateway.turn = turn
            session.complete()
            session.add(Message.user("more " + "x" * 2_000))
        runs[name] = gateway.episodes()
    content: dict[str, tuple[int, int]] = {}
    for name, rows in (("content-block-below", 10), ("content-block-above", 3_000)):
        gateway = Gateway(lambda request: waf_403(request) if SQL.encode() in request.content else None)
        session, _ = session_for(gateway)
        session.extend([Message.system("You are a database agent. " + "r" * 8_000)])
        for i in range(10):
            gateway.turn = i
            session.add(Message.user(f"read table {i}"))
            session.add(Message.assistant("", [ToolCall(f"c{i}", "read_table", "{}")]))
            session.add(Message.tool(f"c{i}", f"row {i}\n" * 1_500))
            session.complete()
        gateway.turn = 10
        session.add(Message.assistant("", [ToolCall("sql", "query_db", "{}")]))
        session.add(Message.tool("sql", "row\n" * 50 + SQL + "\n" + "row\n" * rows))
        session.complete()  # the culprit is withheld: the turn completes
        content[name] = runs[name] = gateway.episodes()

    def ratio(selected: dict[str, tuple[int, int]]) -> float:
        return sum(r for _, r in selected.values()) / sum(e for e, _ in selected.values())

    with capsys.disabled():
        print("\nrejected requests per episode:")
        for name, (episodes, rejected) in runs.items():
            print(f"  {name:24s} {rejected} / {episodes}")
        print(f"  size gates: {ratio(size_gates):.2f}   all gateways: {ratio(runs):.2f}")
    # a WAF page for size: two for the first episode of the run (the telling request), one after
    assert all(rejected == episodes + 1 for episodes, rejected in size_gates.values()), size_gates
    # a content block among the last answer and the new result: 1 + ⌈log2 2⌉
    assert all(rejected <= 2 * episodes for episodes, rejected in content.values()), content
    # ambiguous failures cost two, never more
    assert all(rejected <= 2 * episodes for episodes, rejected in runs.values())


def test_a_max_tokens_rejection_of_a_request_that_set_none_retries_with_the_stated_limit() -> None:
    # The request carries no max_tokens: the provider's own default was refused. The notice must not
    # invent a number for it (it used to format "the provider default" into a %d: TypeError).
    asked: list[int | None] = []

    def default_too_large(request: httpx.Request) -> httpx.Response:
        max_tokens = json.loads(request.content).get("max_tokens")
        asked.append(max_tokens)
        if max_tokens is None:
            return httpx.Response(400, text=OPENAI_MAX_TOKENS % (32_768, 16_384, 32_768))
        return openai_with_output_cap(16_384, [])(request)

    events: list[Event] = []
    sender = HttpxSender(
        "openai-chat",
        base_url="http://provider.test",
        model="gpt-4o",
        transport=httpx.MockTransport(default_too_large),
    )
    session = Session(sender, on_event=events.append, history=[Message.user("go")])

    assert session.complete().content == "ok"
    assert asked == [None, 16_384]
    assert notices(events, "output_limit") == [OUTPUT_LIMIT_DEFAULT % 16_384]
    assert session.stats.rejected_requests == 1 and not any(isinstance(e, PreCompact) for e in events)


def test_a_max_tokens_rejection_of_a_request_that_set_none_and_states_no_limit_fails_cleanly() -> None:
    unstated = (
        '{"error": {"message": "max_tokens is too large", "type": "invalid_request_error", '
        '"param": "max_tokens", "code": "invalid_value"}}'
    )
    sender = HttpxSender(
        "openai-chat",
        base_url="http://provider.test",
        model="gpt-4o",
        transport=httpx.MockTransport(lambda request: httpx.Response(400, text=unstated)),
    )
    session = Session(sender, history=[Message.user("go")])

    with pytest.raises(UnrecoverableFailure, match=r"\(max_tokens=not set\)$"):
        session.complete()
