"""Random sessions behind a gateway whose rules change between turns hold SPEC §11–§12's invariants.

A hypothesis state machine drives a real :class:`~ctxrecover.session.Session` through turns of user
text and tool rounds (results of varied sizes, some holding trigger strings, some triggers in the
tool-call arguments) while the gateway in front of Bedrock changes its rules between turns: a size
limit (a 413, or the WAF's HTML 403 page above N bytes), single content rules (a trigger anywhere in
the body → the 403 page), additive content rules (two fragments refused only together, as CRS anomaly
scores sum) and policy denials (every request refused, then the route reopens). The gateway knows why
it refused each body; the session does not. After every turn:

1. **Blocks never become caps.** No size evidence (``gateway.rejections``) is recorded, and no learned
   cap set or lowered, in a turn the gateway refused nothing for size, and the evidence recorded is a
   size the gateway's limit really refuses; ``learned_cap``, when set, is never below the largest
   request the gateway accepted.
2. **The request budget.** A turn's block pages (every 403) are at most
   ``policy.max_blocked_requests + 1`` (:func:`block_page_bound`), whatever the budget.
3. **Nothing is lost**: every original text (contents, tool-call arguments) is in the history or
   recallable from the session's archive (:func:`simulator.research.retention.chars_lost` is 0).
4. **Withheld content is never resent** through that gateway: no later body carries it, raw,
   JSON-escaped or base64; nor a trigger it held that no message still in play carries.
5. **The turn completes or raises a documented typed error**; :class:`PolicyBlockedError` exactly
   when the route is denied, and never a cap or a compaction for it.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field

import httpx
from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.control import currently_in_test_context
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule, run_state_machine_as_test

from ctxrecover.archive import MemoryArchive
from ctxrecover.errors import (
    ContentBlockedError,
    ContentFloorError,
    PayloadFloorError,
    PolicyBlockedError,
    RecoveryExhausted,
)
from ctxrecover.events import Event, Notice, PreCompact
from ctxrecover.messages import Message, ToolCall
from ctxrecover.policy import Policy
from ctxrecover.session import Session
from ctxrecover.sizes import format_payload_size
from ctxrecover.transport import HttpxSender
from simulator.research.retention import chars_lost

KB = 1024
WAF_PAGE = (
    "<html><head><title>403 Forbidden</title></head><body><h1>Forbidden</h1><p>You don't have permission "
    "to access this resource.</p><hr><address>Apache Server</address></body></html>"
)
NGINX_413 = (
    "<html><head><title>413 Request Entity Too Large</title></head><body><center><h1>413 Request Entity "
    "Too Large</h1></center><hr><center>nginx</center></body></html>"
)
#: What a single rule refuses anywhere in the body (CRS-like: SQL, LFI, shell, XSS).
TRIGGERS = ("UNION SELECT password", "../../../etc/shadow", "rm -rf / --no-preserve-root", "<script>alert(1)")
#: Fragments harmless alone; an additive rule refuses a body holding both of its pair.
FRAGMENTS = ("xp_cmdshell", "0x3c7363726970", "WAITFOR DELAY", "${jndi:ldap")
#: A trigger the system prompt itself holds: a rule on it is the content floor (SPEC §12).
SYSTEM_TRIGGER = "/bin/bash -c"
SYSTEM = f"You are a coding agent. Run commands with {SYSTEM_TRIGGER} when asked. " + "Be careful. " * 300
#: The typed errors a turn may end with (SPEC §6, §11, §12).
TYPED_ERRORS = (
    PolicyBlockedError,
    ContentFloorError,
    ContentBlockedError,
    PayloadFloorError,
    RecoveryExhausted,
)


def block_page_bound(policy: Policy) -> int:
    """Invariant 2 (SPEC §12): the search sends no blocked test once the turn's count reaches
    ``max_blocked_requests``, and a block page past the budget (a retry refused again) ends the turn;
    the one page the budget cannot prevent is the rejection of the next request after the last test."""
    return policy.max_blocked_requests + 1


def escaped(text: str) -> bytes:
    return json.dumps(text)[1:-1].encode()


def encodings(text: str) -> list[bytes]:
    """Every form the library could put ``text`` in a body: raw, JSON-escaped, base64."""
    return [text.encode(), escaped(text), base64.b64encode(text.encode())]


def bedrock_ok() -> httpx.Response:
    message = {"role": "assistant", "content": [{"text": "ok"}]}
    usage = {"inputTokens": 100, "outputTokens": 2, "totalTokens": 102}
    return httpx.Response(
        200, json={"output": {"message": message}, "stopReason": "end_turn", "usage": usage}
    )


@dataclass
class Sent:
    turn: int
    body: bytes
    why: str  # "ok", or what the gateway refused it for: "size", "content", "policy"


@dataclass
class RuleGateway:
    """A WAF in front of Bedrock with rules that change between turns; it knows why it refuses."""

    size_limit: int | None = None
    size_page: str = "413"  # or "403": the WAF's own page for an oversized body
    singles: set[str] = field(default_factory=set)
    pairs: set[tuple[str, str]] = field(default_factory=set)
    deny: bool = False
    turn: int = 0
    log: list[Sent] = field(default_factory=list)

    def why(self, body: bytes) -> str:
        if self.deny:
            return "policy"
        if self.size_limit is not None and len(body) > self.size_limit:
            return "size"
        if any(escaped(t) in body for t in self.singles):
            return "content"
        if any(escaped(a) in body and escaped(b) in body for a, b in self.pairs):
            return "content"
        return "ok"

    def __call__(self, request: httpx.Request) -> httpx.Response:
        why = self.why(request.content)
        self.log.append(Sent(self.turn, request.content, why))
        if why == "ok":
            return bedrock_ok()
        if why == "size" and self.size_page == "413":
            return httpx.Response(413, text=NGINX_413, headers={"content-type": "text/html"})
        return httpx.Response(403, text=WAF_PAGE, headers={"content-type": "text/html"})

    @property
    def largest_accepted(self) -> int:
        return max((len(s.body) for s in self.log if s.why == "ok"), default=0)

    def in_turn(self, turn: int) -> list[Sent]:
        return [s for s in self.log if s.turn == turn]

    def pages_in(self, turn: int) -> list[Sent]:
        """The block pages (403s) of ``turn``: a 413 is a size answer, not a block."""
        return [
            s
            for s in self.in_turn(turn)
            if s.why != "ok" and not (s.why == "size" and self.size_page == "413")
        ]

    def has_rules(self) -> bool:
        return self.deny or self.size_limit is not None or bool(self.singles or self.pairs)


@st.composite
def tool_results(draw: st.DrawFn) -> tuple[int, str | None, bool]:
    """(size, what it holds: a trigger, a fragment or nothing, whether it sits in the call's arguments)."""
    size = draw(st.sampled_from([200, 2 * KB, 9 * KB, 30 * KB]))
    held = draw(st.one_of(st.none(), st.sampled_from(TRIGGERS + FRAGMENTS)))
    return size, held, held is not None and draw(st.booleans()) and draw(st.booleans())


class BlockMachine(RuleBasedStateMachine):
    """One session, one gateway; rules change between turns (see the module docstring)."""

    def __init__(self) -> None:
        super().__init__()
        self.gateway = RuleGateway()
        self.archive = MemoryArchive()
        self.turn = 0
        self.serial = 0
        self.originals: list[Message] = []
        self.added_in: list[int] = []  # per original: the turn it was added before (sent from turn + 1)
        self.withheld: dict[str, int] = {}  # archive key → the turn it was withheld in
        self.outcomes: list[str] = []
        self.events: list[Event] = []

    # budgets below the default too: the bound holds whatever the budget
    @initialize(budget=st.sampled_from([2, 3, 6, 8]))
    def start(self, budget: int) -> None:
        self.policy = Policy(max_blocked_requests=budget)
        sender = HttpxSender(
            "bedrock-converse",
            base_url="http://gateway.test",
            model="anthropic.claude-3-5-sonnet",
            transport=httpx.MockTransport(self.gateway),
        )
        self.session = Session(
            sender,
            policy=self.policy,
            archive=self.archive,
            sleep=lambda s: None,
            on_event=self.events.append,
        )
        self.add(Message.system(SYSTEM))

    def add(self, message: Message) -> None:
        self.originals.append(message)
        self.added_in.append(self.turn)
        self.session.add(message)

    # -- the conversation ---------------------------------------------------------------------------------

    @rule(words=st.integers(1, 400), held=st.one_of(st.none(), st.sampled_from(TRIGGERS + FRAGMENTS)))
    def user_says(self, words: int, held: str | None) -> None:
        self.serial += 1
        text = f"question {self.serial}: " + "please look " * words + (f"\n{held}\n" if held else "")
        self.add(Message.user(text))

    @rule(results=st.lists(tool_results(), min_size=1, max_size=3))
    def tool_round(self, results: list[tuple[int, str | None, bool]]) -> None:
        calls, outputs = [], []
        for size, held, in_arguments in results:
            self.serial += 1
            call = f"call{self.serial}"
            command = f"step {self.serial}" + (f" {held}" if in_arguments else "")
            calls.append(ToolCall(call, "bash", json.dumps({"command": command})))
            lines = [f"line {n} of output {self.serial}\n" for n in range(size // 24 + 1)]
            if held and not in_arguments:
                lines.insert(len(lines) // 2, f"found: {held}\n")
            outputs.append(Message.tool(call, "".join(lines)))
        self.add(Message.assistant("", calls))
        for output in outputs:
            self.add(output)

    # -- the gateway's rules, between turns ------------------------------------------------------------

    @rule(headroom=st.sampled_from([1 * KB, 6 * KB, 25 * KB]), page=st.sampled_from(["413", "403"]))
    def limit_size(self, headroom: int, page: str) -> None:
        # above every body it accepted: a lower limit would refuse a size it accepted, which SPEC §11
        # reads as content, by design
        self.gateway.size_limit = max(self.gateway.largest_accepted, len(SYSTEM) + 2 * KB) + headroom
        self.gateway.size_page = page

    @rule()
    def lift_size_limit(self) -> None:
        self.gateway.size_limit = None

    @rule(trigger=st.sampled_from((*TRIGGERS, SYSTEM_TRIGGER)))
    def add_single_rule(self, trigger: str) -> None:
        self.gateway.singles.add(trigger)

    @rule(pair=st.lists(st.sampled_from(FRAGMENTS), min_size=2, max_size=2, unique=True))
    def add_additive_rule(self, pair: list[str]) -> None:
        self.gateway.pairs.add((pair[0], pair[1]))

    @rule()
    def drop_content_rules(self) -> None:
        self.gateway.singles.clear()
        self.gateway.pairs.clear()

    @rule()
    def deny_route(self) -> None:
        self.gateway.deny = True

    @rule()
    def reopen_route(self) -> None:
        self.gateway.deny = False

    # -- a turn, and what must hold after it ---------------------------------------------------------

    @rule()
    def complete_turn(self) -> None:
        history = self.session.history
        if not history or history[-1].role in ("assistant", "system") or self.outcomes[-1:] != ["ok"]:
            self.serial += 1
            self.add(Message.user(f"go on {self.serial}"))
        self.turn += 1
        gateway = self.gateway
        gateway.turn = self.turn
        before = self.session.gateway
        denied = gateway.deny
        withheld_before = self.session.stats.withheld_chars
        events_before = len(self.events)
        error: Exception | None = None
        try:
            self.session.complete()
        except TYPED_ERRORS as exc:
            error = exc
        self.outcomes.append(type(error).__name__ if error else "ok")
        sent = gateway.in_turn(self.turn)
        after = self.session.gateway
        refused = sorted({s.why for s in sent if s.why != "ok"})
        if currently_in_test_context():  # the statistics of --hypothesis-show-statistics
            event(f"turn: {self.outcomes[-1]}, refused for {'+'.join(refused) or 'nothing'}")

        # 5: the route denied → a policy block, nothing else; a policy block only when it is denied
        if denied:
            assert isinstance(error, PolicyBlockedError), self.outcomes
            recovered = [
                e
                for e in self.events[events_before:]
                if isinstance(e, PreCompact) and e.trigger == "recovery"
            ]
            if not any(s.why == "size" for s in sent):  # a size refusal before the denial is recovered from
                assert not recovered, "a policy block compacts nothing"
            assert self.session.stats.withheld_chars == withheld_before, "a policy block withholds nothing"
            assert after.learned_cap == before.learned_cap and after.rejections == before.rejections
        else:
            assert not isinstance(error, PolicyBlockedError), "a policy block on an open route"
        if not gateway.has_rules():
            assert error is None, f"a turn through a gateway with no rules failed: {error!r}"

        # 1: blocks never become caps
        size_refused = [s for s in sent if s.why == "size"]
        new_evidence = [r for r in after.rejections if r not in before.rejections]
        if not size_refused:
            assert not new_evidence, f"size evidence without a size refusal: {new_evidence} {self.outcomes}"
            assert after.learned_cap is None or (
                before.learned_cap is not None and after.learned_cap >= before.learned_cap
            ), f"a cap learned without a size refusal: {before.learned_cap} → {after.learned_cap}"
        limit = gateway.size_limit
        for rejection in new_evidence:
            assert limit is not None and rejection.smallest_bytes > limit, (rejection, limit)
        if after.learned_cap is not None:
            assert after.learned_cap >= gateway.largest_accepted, (
                after.learned_cap,
                gateway.largest_accepted,
            )

        # 2: the budget of block pages (every 403; a 413 is a size answer, not a block)
        pages = gateway.pages_in(self.turn)
        assert len(pages) <= block_page_bound(self.policy), (
            f"{len(pages)} block pages in one turn (budget {self.policy.max_blocked_requests}): "
            f"{[(len(s.body), s.why) for s in sent]}"
        )

        # 4: withheld content is recorded here, checked against every later body (the invariant below)
        for key in after.withheld:
            self.withheld.setdefault(key, self.turn)

    @invariant()
    def nothing_is_lost(self) -> None:
        if self.originals:
            assert chars_lost(self.originals, self.session.history, self.archive) == 0

    @invariant()
    def withheld_content_is_never_resent(self) -> None:
        in_play = "\x00".join(
            text for m in self.session.history for text in (m.content, *(c.arguments for c in m.tool_calls))
        )
        for key, turn in self.withheld.items():
            content = self.archive.get(key)
            assert content is not None, f"withheld {key} is not archived"
            later = [s.body for s in self.gateway.log if s.turn > turn]
            for body in later:
                assert not any(form in body for form in encodings(content)), f"withheld {key} resent"
            added_since = "\x00".join(
                text
                for m, added in zip(self.originals, self.added_in, strict=True)
                if added >= turn
                for text in (m.content, *(c.arguments for c in m.tool_calls))
            )
            for trigger in (*TRIGGERS, *FRAGMENTS):
                if trigger in content and trigger not in in_play and trigger not in added_since:
                    assert not any(form in body for body in later for form in encodings(trigger)), (
                        f"{trigger!r} of withheld {key} resent"
                    )


def test_random_sessions_behind_changing_gateway_rules_hold_the_block_invariants() -> None:
    # derandomized: the same 40 sequences on every machine, so a red run is a regression, not luck; what
    # random runs found beyond them is pinned below until it is fixed
    run_state_machine_as_test(
        BlockMachine,
        settings=settings(
            max_examples=40,
            stateful_step_count=12,
            derandomize=True,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
        ),
    )


# -- what the machine found, as plain regression tests -------------------------------------------------


def machine_after(turns: int, budget: int = 6) -> BlockMachine:
    machine = BlockMachine()
    machine.start(budget=budget)
    for _ in range(turns):
        machine.complete_turn()
    return machine


def test_a_route_denied_where_compaction_cannot_reach_the_accepted_size_is_a_policy_block_not_a_floor() -> (
    None
):
    # Found by the machine: one turn accepted, then the route is denied. The block (the largest request
    # yet) and an experiment keeping the old content used to be refused — a size reading that compaction
    # could not bring under the largest accepted size, so the turn ended in PayloadFloorError with a cap
    # learned from a policy block, and every later turn failed on that cap. The one-word probe now comes
    # first.
    machine = machine_after(1)
    machine.deny_route()
    machine.complete_turn()  # its invariants: PolicyBlockedError, no cap, nothing compacted

    pages = machine.gateway.pages_in(2)
    assert machine.outcomes == ["ok", "PolicyBlockedError"]
    assert [s.why for s in pages] == ["policy"] * 2 and b'"text":"Hi"' in pages[-1].body
    assert machine.session.learned_cap is None and machine.session.gateway.rejections == ()
    machine.reopen_route()
    machine.complete_turn()
    assert machine.outcomes[-1] == "ok" and machine.gateway.pages_in(3) == []


def test_a_rule_added_mid_session_over_old_content_is_content_not_a_size_floor() -> None:
    # Found by the machine: a rule added after a turn was accepted fires on the system prompt, sent and
    # accepted before. The experiment that kept the old content with blanks for the new was refused too —
    # read as size, a cap learned, and PayloadFloorError ended the turn. Blanks alone as large pass:
    # content; every conversation part withheld is still refused: the system prompt, the content floor.
    machine = machine_after(1)
    machine.add_single_rule(trigger=SYSTEM_TRIGGER)
    machine.complete_turn()  # its invariants: no size evidence without a size refusal, within budget

    assert machine.outcomes == ["ok", "ContentFloorError"]
    assert machine.session.learned_cap is None and machine.session.gateway.rejections == ()
    assert len(machine.gateway.pages_in(2)) <= block_page_bound(machine.policy)


def test_a_small_budget_bounds_the_block_pages_of_a_mid_session_policy_denial() -> None:
    # SPEC §12's budget bounds a turn; with a budget of 2 a mid-session denial once cost 4 pages (read as
    # size first: the request, an experiment keeping the old content, the compacted retry, the probe).
    machine = machine_after(7, budget=2)
    machine.deny_route()
    machine.complete_turn()
    assert machine.outcomes[-1] == "PolicyBlockedError"
    assert len(machine.gateway.pages_in(8)) <= block_page_bound(machine.policy)


def test_a_retry_refused_past_the_budget_ends_the_turn_with_what_is_known() -> None:
    # Found by the machine with a budget of 2: a 403 size limit and a rule on the system prompt. The
    # block and blanks as large are refused (size); the compacted retry, under the limit, is refused for
    # the system prompt — the budget's last page: nothing more is sent, and the notice says so.
    machine = machine_after(1, budget=2)
    machine.add_single_rule(trigger=SYSTEM_TRIGGER)
    machine.limit_size(headroom=1 * KB, page="403")
    machine.user_says(words=241, held=None)
    machine.complete_turn()

    sent = machine.gateway.in_turn(2)
    assert machine.outcomes == ["ok", "RecoveryExhausted"]
    assert [s.why for s in sent] == ["size", "ok", "size", "content"]
    budget = [e.message for e in machine.events if isinstance(e, Notice) and e.code == "block_budget"]
    assert budget == [
        "✖ The gateway blocked 3 requests of this turn (budget 2, CHATCLI_MAX_BLOCKED_REQUESTS), the last "
        f"at {format_payload_size(len(sent[-1].body))}: nothing more is sent this turn — compact or set "
        "aside what it carries, or ask your security team which rule matched"
    ]
