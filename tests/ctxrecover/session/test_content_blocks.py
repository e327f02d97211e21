"""Content and policy blocks end to end (SPEC §12): a block page is settled by experiments, the culprit is
found in few blocked requests and withheld with a notice, never evaded, never read as a cap.

Each gateway is a ``handler(request) -> response`` in front of Bedrock that records every body it saw
and whether it let it through, per turn; its rules look at the raw request body, as a WAF does.
"""

from __future__ import annotations

import base64
import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field

import httpx
import pytest

from ctxrecover.archive import WITHHELD_RECALL, recall
from ctxrecover.errors import ContentBlockedError, ContentFloorError, ContentRefusedError, PolicyBlockedError
from ctxrecover.events import Event, Notice, PreCompact
from ctxrecover.messages import Message, ToolCall
from ctxrecover.policy import Policy
from ctxrecover.recovery.notices import PAYLOAD_LIMIT_NOTICE
from ctxrecover.session import Session
from ctxrecover.sizes import format_payload_size
from ctxrecover.transport import HttpxSender

KB = 1024
MODSEC_PAGE = (
    "<html><head><title>403 Forbidden</title></head><body><h1>Forbidden</h1><p>You don't have permission "
    "to access this resource.</p><hr><address>Apache Server</address></body></html>"
)
NGINX_413 = (
    "<html><head><title>413 Request Entity Too Large</title></head><body><center><h1>413 Request Entity "
    "Too Large</h1></center><hr><center>nginx</center></body></html>"
)
SQL = "SELECT * FROM users WHERE name = '' OR 1=1 --"
WITHHELD = (
    "⚠ The gateway blocked this request for its content (%s at %s): %s withheld and archived — recall it "
    "locally; ask your security team to allow it"
)
WITHHELD_AGAIN = (
    "⚠ %s is identical to content the gateway refused earlier: withheld and archived before sending — "
    "recall it locally; ask your security team to allow it"
)
STUB = (
    "[withheld: the gateway refused this %s content (%s) — archived as <<ccr:%s>>; not resent through this "
    "gateway]"
)
POLICY = (
    "✖ The gateway refused even a one-word request carrying no conversation content (%s at %s): it refuses "
    "this route or client, not this conversation — nothing was compacted and no cap was learned; check the "
    "proxy's access rules for this route, then try again"
)
FLOOR = (
    "✖ The gateway refuses the %s itself: a request of only it and a one-word message was blocked (%s at "
    "%s) — no compaction can help; ask your security team to allow it, or change it"
)
BUDGET = (
    "✖ The gateway blocked %d requests of this turn for their content (budget %d, "
    "CHATCLI_MAX_BLOCKED_REQUESTS): the refused content is among %s — set it aside, or ask your security "
    "team which rule matched"
)
REFUSED = (
    "✖ The provider refused this request's content (%s): nothing was compacted or retried — rephrase it, "
    "or remove what it flagged"
)


def bedrock_ok(text: str = "ok") -> httpx.Response:
    message = {"role": "assistant", "content": [{"text": text}]}
    usage = {"inputTokens": 100, "outputTokens": 2, "totalTokens": 102}
    return httpx.Response(
        200, json={"output": {"message": message}, "stopReason": "end_turn", "usage": usage}
    )


def blocked() -> httpx.Response:
    return httpx.Response(403, text=MODSEC_PAGE, headers={"content-type": "text/html"})


@dataclass
class Gateway:
    """A WAF in front of Bedrock: ``refuses(body)`` decides; every body seen is kept with its turn."""

    refuses: Callable[[bytes], bool]
    turn: int = 0
    log: list[tuple[int, bytes, bool]] = field(default_factory=list)  # (turn, body, accepted)

    def __call__(self, request: httpx.Request) -> httpx.Response:
        refused = self.refuses(request.content)
        self.log.append((self.turn, request.content, not refused))
        return blocked() if refused else bedrock_ok()

    def in_turn(self, turn: int) -> list[tuple[int, bool]]:
        return [(len(body), ok) for t, body, ok in self.log if t == turn]

    def blocked_in(self, turn: int) -> int:
        return sum(1 for _, ok in self.in_turn(turn) if not ok)

    def bodies_after(self, turn: int) -> list[bytes]:
        return [body for t, body, _ in self.log if t > turn]


def contains(*needles: str) -> Callable[[bytes], bool]:
    """A rule on content: the body carries every needle (in any message, JSON-escaped as sent)."""
    encoded = [json.dumps(n)[1:-1].encode() for n in needles]
    return lambda body: all(n in body for n in encoded)


def session_for(gateway: Gateway, **options: object) -> tuple[Session, list[Event]]:
    events: list[Event] = []
    sender = HttpxSender(
        "bedrock-converse",
        base_url="http://gateway.test",
        model="anthropic.claude-3-5-sonnet",
        transport=httpx.MockTransport(gateway),
    )
    options.setdefault("sleep", lambda seconds: None)
    return Session(sender, on_event=events.append, **options), events  # type: ignore[arg-type]


def grown_agent(gateway: Gateway, turns: int = 10, **options: object) -> tuple[Session, list[Event]]:
    session, events = session_for(gateway, **options)
    session.extend([Message.system("You are a database agent. " + "r" * 8_000)])
    for i in range(turns):
        gateway.turn = i
        session.add(Message.user(f"read table {i}"))
        session.add(Message.assistant("", [ToolCall(f"c{i}", "read_table", "{}")]))
        session.add(Message.tool(f"c{i}", f"row {i}\n" * 1_500))
        session.complete()
    return session, events


def add_result(session: Session, call: str, text: str, tool: str = "query_db") -> None:
    session.add(Message.assistant("", [ToolCall(call, tool, "{}")]))
    session.add(Message.tool(call, text))


def notices(events: list[Event], code: str) -> list[str]:
    return [e.message for e in events if isinstance(e, Notice) and e.code == code]


def encodings(text: str) -> list[bytes]:
    """Every form the library could put ``text`` in a body: raw, JSON-escaped, base64."""
    return [text.encode(), json.dumps(text)[1:-1].encode(), base64.b64encode(text.encode())]


def bound(parts: int) -> int:
    """SPEC §12: about 1 + ⌈log2 n⌉ blocked requests for one culprit among n candidate parts."""
    return 1 + math.ceil(math.log2(parts)) if parts > 1 else 1


# -- a block below every accepted size: content (or policy), never size ---------------------------------


def test_a_content_block_below_accepted_sizes_is_withheld_in_one_search_and_the_turn_completes() -> None:
    gateway = Gateway(contains(SQL))
    session, events = grown_agent(gateway)
    gateway.turn = 10
    result = "row\n" * 50 + SQL + "\n" + "row\n" * 10
    add_result(session, "sql", result)
    refused_size = None
    before = len(events)

    assert session.complete().content == "ok"

    turn = gateway.in_turn(10)
    refused_size, _ = turn[0]
    assert not turn[0][1] and turn[-1][1]
    # candidates: the last answer and the new tool result; one halving
    assert gateway.blocked_in(10) <= bound(2)
    index = next(i for i, m in enumerate(session.history) if m.role == "tool" and m.tool_call_id == "sql")
    withheld = session.history[index]
    key = withheld.content.split("<<ccr:")[1][:16]
    assert withheld.content == STUB % ("query_db tool result", format_payload_size(len(result)), key)
    label = f"tool result #{index} (query_db, {format_payload_size(len(result))})"
    assert notices(events, "content_withheld") == [
        WITHHELD % ("403", format_payload_size(refused_size), label)
    ]
    # archived whole, recallable locally; through the gateway the recall explains instead
    assert session.archive.store.get(key) == result
    assert recall(session.archive, f"<<ccr:{key}>>").found[key] == WITHHELD_RECALL % key
    assert session.learned_cap is None and session.gateway.smallest_rejected is None
    assert not any(isinstance(e, PreCompact) for e in events[before:])
    assert session.stats.content_blocks == 1 and session.stats.withheld_chars == len(result)
    assert session.stats.block_experiments == len(turn) - 2


NOT_REPRODUCED = (
    "⚠ The gateway's block (%s at %s) did not reproduce: the same content passed in a test request — "
    "nothing withheld, the request is sent again"
)


def test_a_block_no_test_reproduces_withholds_nothing_and_the_request_is_sent_again() -> None:
    # A rule switched on for one request: the turn's parts are tested, both halves pass, and the
    # whole passes too — no content is blamed, nothing is withheld, the turn completes.
    once = [True]

    def flaky(body: bytes) -> bool:
        refused, once[0] = once[0] and b"needle" in body, False if b"needle" in body else once[0]
        return refused

    gateway = Gateway(flaky)
    session, events = grown_agent(gateway, turns=3)
    gateway.turn = 3
    session.add(Message.user("look at these"))
    add_result(session, "a", "needle one\n" * 40)
    add_result(session, "b", "needle two\n" * 40)
    history = session.history

    assert session.complete().content == "ok"

    turn = gateway.in_turn(3)
    assert gateway.blocked_in(3) == 1 and not turn[0][1]
    assert notices(events, "block_not_reproduced") == [
        NOT_REPRODUCED % ("403", format_payload_size(turn[0][0]))
    ]
    assert notices(events, "content_withheld") == []
    assert not any("[withheld:" in m.content for m in session.history) and session.stats.withheld_chars == 0
    assert [m for m in session.history if m.role == "tool"][-2:] == [m for m in history if m.role == "tool"][
        -2:
    ]
    assert turn[-1] == turn[0][:1] + (True,)  # the refused request itself, sent again, passed
    # the block, the one-word route probe, the new parts withheld, two halves of them, the whole, the request
    assert len(turn) == 7 and turn[1][0] < 100


def test_what_was_withheld_never_reaches_the_gateway_again_in_any_encoding_a_reread_is_withheld_first() -> (
    None
):
    gateway = Gateway(contains(SQL))
    session, events = grown_agent(gateway)
    gateway.turn = 10
    result = "row\n" * 50 + SQL + "\n" + "row\n" * 10
    add_result(session, "sql", result)
    session.complete()

    gateway.turn = 11
    add_result(session, "sql2", result)  # the same file read again
    session.add(Message.user("summarize what you found"))
    assert session.complete().content == "ok"
    assert gateway.blocked_in(11) == 0  # withheld before it was sent
    index = next(i for i, m in enumerate(session.history) if m.tool_call_id == "sql2")
    label = f"Tool result #{index} (query_db, {format_payload_size(len(result))})"
    assert notices(events, "content_withheld")[-1] == WITHHELD_AGAIN % label
    for turn in range(12, 16):
        gateway.turn = turn
        session.add(Message.user(f"next question {turn}: recall <<ccr:{session.gateway.withheld[0]}>>"))
        session.complete()
        session.compact()  # summaries and cuts must not bring it back either
    later = b"".join(gateway.bodies_after(10))
    assert not any(form in later for form in encodings(result))
    assert not any(form in later for form in encodings(SQL))


# -- a block above every accepted size: size or content, one request tells --------------------------------


def test_a_content_block_larger_than_every_accepted_request_teaches_no_cap_and_compacts_nothing() -> None:
    gateway = Gateway(contains(SQL))
    session, events = grown_agent(gateway)
    accepted = session.gateway.largest_accepted
    gateway.turn = 10
    big = "row\n" * 50 + SQL + "\n" + "row\n" * 3_000
    add_result(session, "sql", big)

    assert session.complete().content == "ok"

    (first, ok1) = gateway.in_turn(10)[0]
    assert not ok1 and first > accepted
    assert gateway.blocked_in(10) <= bound(2)
    assert session.learned_cap is None and session.gateway.smallest_rejected is None
    assert not notices(events, "learned_cap")
    assert not any(m.content == PAYLOAD_LIMIT_NOTICE for m in session.history)
    assert not any(isinstance(e, PreCompact) and e.trigger == "recovery" for e in events)


def test_a_block_above_every_accepted_size_that_is_size_learns_the_cap_after_one_telling_request() -> None:
    limit = [10**9]
    gateway = Gateway(lambda body: len(body) > limit[0])
    session, events = grown_agent(gateway, turns=3)
    limit[0] = session.gateway.largest_accepted + 4 * KB
    gateway.turn = 3
    add_result(session, "big", "line of output\n" * 1_200, tool="read_file")  # 18 KB: under the preview size

    assert session.complete().content == "ok"

    assert gateway.blocked_in(3) == 2  # the block, then blanks as large (the one-word probe passed)
    assert session.learned_cap is not None
    assert session.gateway.largest_accepted <= session.learned_cap <= limit[0]
    assert not notices(events, "content_withheld")
    # the next size block of this page is taken for size at once
    for turn in range(4, 8):
        gateway.turn = turn
        add_result(session, f"big{turn}", "line of output\n" * 1_200, tool="read_file")
        session.complete()
        assert gateway.blocked_in(turn) <= 1


def test_a_block_right_after_a_413_names_the_tool_result_never_the_librarys_notice() -> None:
    limit = [10**9]

    def decide(body: bytes) -> bool:
        return contains(SQL)(body)

    gateway = Gateway(decide)

    class Both:
        def __call__(self, request: httpx.Request) -> httpx.Response:
            if len(request.content) >= limit[0]:
                gateway.log.append((gateway.turn, request.content, False))
                return httpx.Response(413, text=NGINX_413, headers={"content-type": "text/html"})
            return gateway(request)

    events: list[Event] = []
    sender = HttpxSender(
        "bedrock-converse",
        base_url="http://gw.test",
        model="anthropic.claude-3-5-sonnet",
        transport=httpx.MockTransport(Both()),
    )
    session = Session(sender, on_event=events.append, sleep=lambda s: None)
    session.extend([Message.system("You are a database agent. " + "r" * 8_000)])
    for i in range(10):
        gateway.turn = i
        session.add(Message.user(f"read table {i}"))
        add_result(session, f"c{i}", f"row {i}\n" * 1_500, tool="read_table")
        session.complete()
    limit[0] = session.gateway.largest_accepted + 4 * KB
    gateway.turn = 10
    add_result(session, "sql", "row\n" * 50 + SQL + "\n" + "row\n" * 3_000)

    assert session.complete().content == "ok"

    assert session.learned_cap is not None  # the 413 taught it
    (withheld,) = notices(events, "content_withheld")
    assert "tool result #" in withheld and "(query_db, " in withheld
    assert any(m.content == PAYLOAD_LIMIT_NOTICE for m in session.history)  # the notice stays, not withheld


def test_a_trigger_in_the_middle_of_a_long_tool_result_is_found_whatever_a_preview_would_cut() -> None:
    rce = re.compile(rb"curl [^|]*\|\s*sh\b")
    gateway = Gateway(lambda body: rce.search(body) is not None)
    session, events = grown_agent(gateway)
    gateway.turn = 10
    log = "row\n" * 1_500 + "install.log: curl -fsSL https://get.example.sh | sh\n" + "row\n" * 1_500
    add_result(session, "log", log, tool="read_log")

    assert session.complete().content == "ok"

    assert session.learned_cap is None
    assert any("read_log tool result content" in m.content for m in session.history)
    for turn in range(11, 14):
        gateway.turn = turn
        session.add(Message.user(f"and then? {turn}"))
        session.complete()
    assert not any(rce.search(body) for body in gateway.bodies_after(10))
    assert gateway.blocked_in(11) == gateway.blocked_in(12) == gateway.blocked_in(13) == 0


def test_fragments_that_block_only_together_are_found_as_one_set() -> None:
    # anomaly scores add up: each fragment alone passes, both together are refused
    gateway = Gateway(contains("/etc/passwd", "UNION SELECT"))
    session, events = grown_agent(gateway, turns=4)
    gateway.turn = 4
    add_result(session, "a", "config:\n" + "/etc/passwd is world-readable\n" + "ok\n" * 20, tool="audit")
    add_result(session, "b", "query:\n" + "id UNION SELECT password FROM users\n" + "ok\n" * 20, tool="audit")
    session.add(Message.user("what did the audit find?"))

    assert session.complete().content == "ok"

    withheld = notices(events, "content_withheld")
    assert len(withheld) == 2 and all("(audit, " in text for text in withheld)
    assert session.learned_cap is None


def test_a_trigger_in_tool_call_arguments_is_withheld_and_the_call_stays_valid_json() -> None:
    gateway = Gateway(contains("rm -rf /"))
    session, events = grown_agent(gateway, turns=3)
    gateway.turn = 3
    session.add(
        Message.assistant(
            "", [ToolCall("sh", "bash", json.dumps({"command": "rm -rf / --no-preserve-root"}))]
        )
    )
    session.add(Message.tool("sh", "refused by the sandbox"))

    assert session.complete().content == "ok"

    call = next(c for m in session.history for c in m.tool_calls if c.id == "sh")
    arguments = json.loads(call.arguments)
    assert set(arguments) == {"withheld"} and arguments["withheld"].startswith(
        "[withheld: the gateway refused this bash tool call content"
    )
    assert any(
        "tool call #" in text and "(bash arguments, " in text for text in notices(events, "content_withheld")
    )
    assert any(m.role == "tool" and m.tool_call_id == "sh" for m in session.history)  # pairing kept


def test_the_librarys_own_preview_is_a_candidate_and_is_withheld_when_it_is_what_a_rule_matches() -> None:
    # a rule that fires on the microcompact preview marker, which no original carries
    gateway = Gateway(contains("chars omitted from old tool result"))
    session, events = grown_agent(gateway, turns=14)  # old results become previews along the way

    assert session.stats.content_blocks >= 1
    assert notices(events, "content_withheld")
    assert session.learned_cap is None
    for turn in range(14, 17):
        gateway.turn = turn
        session.add(Message.user(f"go on {turn}"))
        session.complete()


# -- the route and the floor --------------------------------------------------------------------------------


def test_a_policy_block_costs_two_requests_compacts_nothing_and_the_next_turn_works_once_the_route_does() -> (
    None
):
    deny = [True]
    gateway = Gateway(lambda body: deny[0])
    session, events = session_for(gateway)
    session.extend([Message.system("You are helpful."), Message.user("question " * 2_000)])
    before = session.history

    with pytest.raises(PolicyBlockedError) as info:
        session.complete()

    refused_size, _ = gateway.in_turn(0)[0]
    assert len(gateway.log) == 2
    assert str(info.value) == POLICY % ("403", format_payload_size(refused_size))
    assert notices(events, "policy_block") == [str(info.value)]
    assert session.history == before and session.learned_cap is None
    assert session.gateway.rejections == () and session.gateway.policy_blocks == 1
    assert not any(isinstance(e, PreCompact) for e in events)
    deny[0] = False  # the route is fixed
    gateway.turn = 1
    assert session.complete().content == "ok"


def test_a_policy_block_on_a_request_no_compaction_could_shrink_is_told_from_size_by_one_word() -> None:
    # The least compaction could leave is the request itself (a verbatim task); the cheapest question
    # comes first: one word alone is refused too — the route, not a size limit, in two requests.
    gateway = Gateway(lambda body: True)
    session, events = session_for(gateway)
    session.extend([Message.system("You are helpful."), Message.user("T" * 3 * KB, preserve_verbatim=True)])

    with pytest.raises(PolicyBlockedError) as info:
        session.complete()

    sizes = [size for size, _ in gateway.in_turn(0)]
    assert len(sizes) == 2 and sizes[0] > 3 * KB > 100 > sizes[1]
    assert str(info.value) == POLICY % ("403", format_payload_size(sizes[0]))
    assert session.learned_cap is None and session.gateway.rejections == ()


def test_a_route_denied_mid_session_is_a_policy_block_in_two_requests_and_leaves_nothing_behind() -> None:
    # The route is closed after ten turns: the next request (the largest yet) is blocked, and so is the
    # one-word request that comes first: the route, in two requests (SPEC §12's "at most two"). No cap,
    # nothing compacted.
    deny = [False]
    gateway = Gateway(lambda body: deny[0])
    session, events = grown_agent(gateway)
    before_cap = session.learned_cap
    deny[0] = True
    gateway.turn = 10
    add_result(session, "x", "row x\n" * 1_500)
    history = session.history

    with pytest.raises(PolicyBlockedError) as info:
        session.complete()

    turn = gateway.in_turn(10)
    sizes = [size for size, _ in turn]
    assert all(not ok for _, ok in turn) and len(turn) == 2
    assert sizes[0] > 100 > sizes[1]  # the probe carried one word
    assert str(info.value) == POLICY % ("403", format_payload_size(sizes[0]))
    assert session.learned_cap == before_cap is None and session.gateway.rejections == ()
    # the turn's own microcompact stays (it ran before the request); nothing was truncated for it
    assert len(session.history) == len(history) and session.stats.withheld_chars == 0
    assert not any(isinstance(e, PreCompact) and e.trigger == "recovery" for e in events)
    deny[0] = False
    gateway.turn = 11
    assert session.complete().content == "ok" and gateway.blocked_in(11) == 0


@pytest.mark.parametrize("part", ["system prompt", "tool definitions"])
def test_content_no_compaction_may_touch_fails_fast_naming_the_part(part: str) -> None:
    trigger = "../../../etc/shadow"
    tools = [
        {"name": "read", "description": "reads files like " + trigger if part == "tool definitions" else "x"}
    ]
    system = "You read files." + (f" Never open {trigger}." if part == "system prompt" else "")
    gateway = Gateway(contains(trigger))
    session, events = session_for(gateway, tools=tools)
    session.extend([Message.system(system), Message.user("list the directory")])

    with pytest.raises(ContentFloorError) as info:
        session.complete()

    refused_size, _ = gateway.in_turn(0)[0]
    assert info.value.part == part.replace(" ", "_")
    assert str(info.value) == FLOOR % (part, "403", format_payload_size(refused_size))
    assert sum(1 for _, ok in gateway.in_turn(0) if not ok) <= 3
    assert session.learned_cap is None


def test_the_budget_of_blocked_requests_stops_the_search_and_says_what_is_known() -> None:
    # every tool result of the turn trips its own rule: more culprits than the budget allows
    gateway = Gateway(lambda body: any(f"secret-{i}".encode() in body for i in range(8)))
    session, events = grown_agent(gateway, turns=3, policy=Policy(max_blocked_requests=3))
    gateway.turn = 3
    for i in range(8):
        add_result(session, f"s{i}", f"secret-{i}\n" + "data\n" * 30, tool="fetch")

    with pytest.raises(ContentBlockedError) as info:
        session.complete()

    assert gateway.blocked_in(3) <= 3
    text = str(info.value)
    assert text.startswith(BUDGET.split("%d")[0]) and "(fetch, " in text
    assert notices(events, "content_block") == [text]
    assert session.learned_cap is None


# -- the provider's own refusal --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fmt", "model", "body", "reason"),
    [
        (
            "openai-chat",
            "gpt-4o",
            {
                "choices": [
                    {"message": {"role": "assistant", "content": ""}, "finish_reason": "content_filter"}
                ]
            },
            "openai-chat choices[].finish_reason = 'content_filter'",
        ),
        (
            "gemini",
            "gemini-2.0-flash",
            {"promptFeedback": {"blockReason": "PROHIBITED_CONTENT"}},
            "gemini promptFeedback.blockReason = 'PROHIBITED_CONTENT'",
        ),
    ],
)
def test_a_providers_own_refusal_is_raised_with_its_reason_never_an_answer_never_retried(
    fmt: str, model: str, body: dict[str, object], reason: str
) -> None:
    sent: list[bytes] = []

    def provider(request: httpx.Request) -> httpx.Response:
        sent.append(request.content)
        return httpx.Response(200, json=body)

    events: list[Event] = []
    sender = HttpxSender(fmt, base_url="http://p.test", model=model, transport=httpx.MockTransport(provider))
    session = Session(sender, on_event=events.append)
    session.extend([Message.user("something the filter dislikes " * 100)])
    before = session.history

    with pytest.raises(ContentRefusedError) as info:
        session.complete()

    assert str(info.value) == REFUSED % reason and notices(events, "content_refused") == [str(info.value)]
    assert len(sent) == 1 and session.history == before
    assert not any(isinstance(e, PreCompact) for e in events)


def test_a_size_answer_to_an_experiment_is_a_size_reading_not_an_interrupted_search() -> None:
    # A CDN's WAF in front of an origin nginx: the CDN refuses the SQL with its page before the body
    # reaches nginx; the blanks as large pass the CDN and nginx answers 413 — a size answer to the
    # experiment, not a broken search. The cap is learned from it; the compacted retry, under nginx's
    # limit, still carries the SQL: blanks that large pass, and the content is withheld.
    class CdnBeforeNginx(Gateway):
        limit = 10**9

        def __call__(self, request: httpx.Request) -> httpx.Response:
            body = request.content
            if self.refuses(body):
                self.log.append((self.turn, body, False))
                return blocked()
            if len(body) > self.limit:
                self.log.append((self.turn, body, False))
                return httpx.Response(413, text=NGINX_413, headers={"content-type": "text/html"})
            self.log.append((self.turn, body, True))
            return bedrock_ok()

    gateway = CdnBeforeNginx(contains(SQL))
    session, events = grown_agent(gateway, turns=3)
    gateway.limit = session.gateway.largest_accepted + 64
    gateway.turn = 3
    add_result(session, "sql", "row\n" * 50 + SQL + "\n" + "row\n" * 2_000)

    assert session.complete().content == "ok"

    sizes = [size for size, _ in gateway.in_turn(3)]
    assert sizes[0] > gateway.limit and sizes[1] < 100 and sizes[2] == sizes[0]  # block, probe, blanks (413)
    assert session.learned_cap is not None and session.learned_cap >= session.gateway.largest_accepted
    assert session.stats.withheld_chars > 0 and not any(
        SQL.encode() in body for body in gateway.bodies_after(3)
    )
