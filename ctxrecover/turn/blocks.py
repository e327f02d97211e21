"""A block page is a question, not an answer (SPEC §12): size, content or policy — settled by experiments.

:mod:`ctxrecover.turn.rejection` hands every block page (a WAF, CDN or proxy refusal at any status)
here. Every blocked request is a security event in someone's SIEM, so each experiment is the
cheapest request that tells the remaining hypotheses apart:

1. **The route first**: unless a request of the turn passed already, :func:`probe_route` sends a
   one-word request carrying no conversation content. Refused → *policy*
   (:class:`PolicyBlockedError`: two blocked requests in all, nothing compacted, no cap). When
   nothing was accepted yet through this gateway, :func:`probe_base` then sends the non-compactable
   base (system prompt and tool definitions with that word): refused → the base itself is the
   content (:class:`ContentFloorError`, naming the part), unless blanks as large are refused too.
2. **Above every accepted size**, :func:`blank_refused` sends blanks as large as the refused request,
   with nothing of the conversation: refused → size (the cap is learned then, not before); passed →
   content, wherever it is in the request (old content a rule added since refuses too). A page that
   turned out to be size before (:meth:`~ctxrecover.recovery.GatewayModel.reading`) is taken for size
   without the blanks.
3. **Content**: :func:`find_and_withhold` searches the refused request's parts — those new since
   the last accepted request, then the library's own text, then the rest — withholding a whole
   tier first (a request that passes tells the culprit is in it), then narrowing it with delta
   debugging (:func:`~ctxrecover.recovery.culprit.ddmin`): about 1 + ⌈log2 n⌉ blocked requests
   for one culprit among n parts. The culprit set is withheld in the history (archived, replaced
   by the SPEC §12 stub, one notice each) and never resent through this gateway
   (:func:`~ctxrecover.turn.request.withhold_known` withholds identical content before it is sent).

A turn spends at most ``policy.max_blocked_requests`` blocked requests (the first included);
past it the search stops and says what it knows. Nothing is re-encoded, split or escaped to get
past the gateway: what it refused is simply not sent.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

from ctxrecover.archive import archive_key
from ctxrecover.errors import ContentBlockedError, ContentFloorError, PolicyBlockedError, UnrecoverableFailure
from ctxrecover.failure import Failure, FailureKind
from ctxrecover.messages import Message
from ctxrecover.passes.truncate import leading_system_count
from ctxrecover.passes.withhold import Part, part_keys, part_label, parts_of, withhold
from ctxrecover.recovery import (
    BLOCK_BUDGET_NOTICE,
    BLOCK_NOT_REPRODUCED_CODE,
    BLOCK_NOT_REPRODUCED_NOTICE,
    CONTENT_BLOCK_CODE,
    CONTENT_FLOOR_CODE,
    CONTENT_FLOOR_NOTICE,
    CONTENT_WITHHELD_CODE,
    CONTENT_WITHHELD_NOTICE,
    POLICY_BLOCK_CODE,
    POLICY_BLOCK_NOTICE,
)
from ctxrecover.recovery.culprit import ddmin, tiers
from ctxrecover.recovery.diagnosis import is_library_message
from ctxrecover.sizes import format_payload_size
from ctxrecover.transport import ChatRequest, ChatResponse
from ctxrecover.turn.actions import Flow, Send, Sleep, is_provider_failure
from ctxrecover.turn.conversation import Conversation
from ctxrecover.turn.request import request_bytes

__all__ = [
    "MINIMAL_PROMPT",
    "BlockSearch",
    "find_and_withhold",
    "new_parts",
    "blank_refused",
    "probe_base",
    "probe_route",
    "raise_floor",
    "size_or_content",
]

#: The one word of the requests that carry no conversation content (the route and floor probes).
MINIMAL_PROMPT = "Hi"
#: What an experiment's refusal must read as to count as this gateway's block.
BLOCK_KINDS = frozenset({FailureKind.WAF_REJECTION, FailureKind.POLICY_BLOCK})
TRANSIENT_BACKOFF_S = 1.0  # an experiment the network dropped is tried once more after this


@dataclass(slots=True)
class BlockSearch:
    """What one turn's block experiments share: the refused request's status and size (for the
    notices), the blocked requests the turn has cost the gateway so far, and its budget."""

    conv: Conversation
    status: str
    size: int
    blocked: int
    failure: Failure
    signature: str
    route_open: bool  # a request of this turn passed: the route is not what refuses

    @classmethod
    def start(
        cls,
        conv: Conversation,
        failure: Failure,
        size: int,
        blocked: int,
        signature: str,
        *,
        route_open: bool,
    ) -> BlockSearch:
        """The search of one block (its failure, the refused size, the turn's blocked count so far,
        whether a request of the turn passed)."""
        status = str(failure.status) if failure.status is not None else failure.kind.value
        return cls(conv, status, size, blocked, failure, signature, route_open)

    @property
    def spent(self) -> bool:
        """True when another blocked test would exceed ``policy.max_blocked_requests``."""
        return self.blocked >= self.conv.policy.max_blocked_requests


# -- the route and the floor -----------------------------------------------------------------------------


def probe_route(search: BlockSearch) -> Flow[None]:
    """A one-word request carrying no conversation content, unless a request of the turn passed already.
    Refused too → the route itself is refused (:class:`PolicyBlockedError`): two blocked requests in
    all, nothing compacted, no cap."""
    if search.route_open:
        return
    probe = _experiment(search.conv, (Message.user(MINIMAL_PROMPT),), tools=None)
    if (yield from _test(search, probe, proves=False)):
        _raise_policy(search)
    search.route_open = True


def probe_base(search: BlockSearch) -> Flow[int | None]:
    """The non-compactable base (system prompt, tool definitions) with one word: None when it passes;
    refused, the size of a request as large without the base that was refused too (a size limit at or
    under the base, for the caller's floor diagnosis) — else :class:`ContentFloorError`."""
    conv = search.conv
    system = tuple(conv.history[: leading_system_count(conv.history)])
    if not system and not conv.tools:
        return None
    base = _experiment(conv, (*system, Message.user(MINIMAL_PROMPT)), tools=conv.tools)
    if not (yield from _test(search, base, proves=False)):
        return None
    size = request_bytes(conv, base)
    if not (yield from blank_refused(search, size)):
        yield from raise_floor(search)
    return size


def blank_refused(search: BlockSearch, size: int) -> Flow[bool]:
    """A request of ``size`` bytes of blanks, without the base and without the conversation: True when
    it is refused too — a size limit at or under that size, whatever the content."""
    word = Message.user(MINIMAL_PROMPT)
    pad = size - request_bytes(search.conv, _experiment(search.conv, (word,), tools=None))
    blank = _experiment(search.conv, (word.replace(content=word.content + " " * max(pad, 0)),), tools=None)
    return (yield from _test(search, blank, proves=False))


def raise_floor(search: BlockSearch) -> Flow[None]:
    """The base's own content is refused: :class:`ContentFloorError` naming the part."""
    yield from _raise_floor(search, tuple(search.conv.history[: leading_system_count(search.conv.history)]))


def _raise_policy(search: BlockSearch) -> None:
    conv = search.conv
    gateway = conv.gateway.read_block(search.signature, "policy")
    conv.gateway = gateway.replace(policy_blocks=gateway.policy_blocks + 1)
    message = POLICY_BLOCK_NOTICE % (search.status, format_payload_size(search.size))
    conv.events.notice(POLICY_BLOCK_CODE, message)
    raise PolicyBlockedError(
        message, failure=dataclasses.replace(search.failure, kind=FailureKind.POLICY_BLOCK)
    )


def _raise_floor(search: BlockSearch, system: tuple[Message, ...]) -> Flow[None]:
    """The base with one word was refused: name the part (one more test when both could be it)."""
    conv = search.conv
    word = Message.user(MINIMAL_PROMPT)
    part = "system prompt" if system else "tool definitions"
    if (
        system
        and conv.tools
        and not (yield from _test(search, _experiment(conv, (*system, word), tools=None), proves=False))
    ):
        part = "tool definitions"
    message = CONTENT_FLOOR_NOTICE % (part, search.status, format_payload_size(search.size))
    conv.events.notice(CONTENT_FLOOR_CODE, message)
    raise ContentFloorError(message, part=part.replace(" ", "_"), failure=search.failure)


# -- size or content ----------------------------------------------------------------------------------------


def new_parts(conv: Conversation, request: ChatRequest) -> list[Part]:
    """The parts of ``request`` the last accepted request did not carry as they are now (the first
    suspects): new messages, and new forms of old ones — a preview, a stub, a summary the library
    wrote since. Compared by content key, so a part sent unchanged is proven whatever its object."""
    carried = conv.last_accepted
    proven = {key for part in parts_of(carried, range(len(carried))) for key in part_keys(carried, part)}
    positions = _history_positions(conv.history, request.messages)
    return [
        p
        for p in parts_of(request.messages, positions)
        if not proven.issuperset(part_keys(request.messages, p))
    ]


def size_or_content(search: BlockSearch, request: ChatRequest, new: Sequence[Part]) -> Flow[bool]:
    """The request as large as refused but without its new content (blanks in its place): True when
    that is refused too — a size reading; False when it passes — the content."""
    padded = _padded_without(search.conv, request, new, search.size)
    return (yield from _test(search, padded))


# -- the culprit ------------------------------------------------------------------------------------------


def find_and_withhold(
    search: BlockSearch, request: ChatRequest, *, scope: Sequence[Part] | None = None
) -> Flow[ChatRequest]:
    """Find what the gateway refused in ``request`` and withhold it in the history; return the request
    without it. ``scope`` is a set of parts already shown to hold the culprit (else the tiers are tried).
    A block no test reproduces (every narrowing test passed, and so did the culprit set alone) withholds
    nothing: ``request`` is returned as it is, with a notice."""
    conv = search.conv
    positions = _history_positions(conv.history, request.messages)
    candidates = parts_of(request.messages, positions)
    if scope is None:
        new = set(new_parts(conv, request))
        ordered = tiers(
            candidates,
            is_new=lambda p: p in new,
            is_ours=lambda p: _is_ours(conv.history[positions[p.index]], request.messages[p.index]),
        )
        widened: list[Part] = []
        for tier in ordered:
            widened += tier
            if search.spent:
                _raise_budget(search, request, widened)
            if not (yield from _test(search, _without(conv, request, widened))):
                scope = widened
                break
        if scope is None:
            yield from _floor_or_policy(search)
    culprit = yield from _narrow(search, request, list(scope or ()))
    if culprit is None:
        message = BLOCK_NOT_REPRODUCED_NOTICE % (search.status, format_payload_size(search.size))
        conv.events.notice(BLOCK_NOT_REPRODUCED_CODE, message)
        return request
    conv.gateway = conv.gateway.read_block(search.signature, "content")
    return _withhold_in_history(search, request, culprit, positions)


def _narrow(search: BlockSearch, request: ChatRequest, scope: list[Part]) -> Flow[tuple[Part, ...] | None]:
    """A 1-minimal blocking set in ``scope`` (everything outside it present), within the budget; None
    when no test blocked and the set found, tested alone, passes: the block did not reproduce."""
    if len(scope) <= 1:
        return tuple(scope)
    narrowing = ddmin(scope)
    present = next(narrowing)
    smallest: tuple[Part, ...] = tuple(scope)
    reproduced = tested = 0
    while True:
        if not reproduced and tested == 2 and not (yield from _reproduces(search, request, scope, scope)):
            return None  # both halves passed: before narrowing further, the whole must still block
        if search.spent:
            _raise_budget(search, request, smallest)
        refused = yield from _test(
            search, _without(search.conv, request, [p for p in scope if p not in present])
        )
        tested += 1
        reproduced += refused
        if refused and len(present) < len(smallest):
            smallest = tuple(p for p in scope if p in present)
        try:
            present = narrowing.send(refused)
        except StopIteration as done:
            found: tuple[Part, ...] = done.value
            break
    if reproduced or tested > 2 or (yield from _reproduces(search, request, scope, found)):
        return found
    return None


def _reproduces(
    search: BlockSearch, request: ChatRequest, scope: list[Part], present: Sequence[Part]
) -> Flow[bool]:
    """Only the refused request itself supports ``present`` (no narrowing test blocked): test it again."""
    if search.spent:
        _raise_budget(search, request, present)
    return (yield from _test(search, _without(search.conv, request, [p for p in scope if p not in present])))


def _floor_or_policy(search: BlockSearch) -> Flow[None]:
    """Withholding every conversation part was refused too: the route, or the base."""
    conv = search.conv
    yield from probe_route(search)
    yield from _raise_floor(search, tuple(conv.history[: leading_system_count(conv.history)]))
    raise AssertionError("unreachable: the floor is raised")  # pragma: no cover


def _raise_budget(search: BlockSearch, request: ChatRequest, suspects: Sequence[Part]) -> None:
    labels = ", ".join(part_label(request.messages, p) for p in suspects[:3]) + (
        " …" if len(suspects) > 3 else ""
    )
    message = BLOCK_BUDGET_NOTICE % (
        search.blocked,
        search.conv.policy.max_blocked_requests,
        labels or "the request",
    )
    search.conv.events.notice(CONTENT_BLOCK_CODE, message)
    positions = _history_positions(search.conv.history, request.messages)
    first = positions.get(suspects[0].index, -1) if suspects else -1
    raise ContentBlockedError(
        message,
        failure=search.failure,
        message_index=first,
        request_bytes=search.size,
        largest_accepted=search.conv.gateway.largest_accepted,
    )


def _withhold_in_history(
    search: BlockSearch, request: ChatRequest, culprit: Sequence[Part], positions: dict[int, int]
) -> ChatRequest:
    """Withhold ``culprit`` in the history (archived, stubbed, one notice each); its keys join the
    gateway's withheld content. Returns the request with it withheld."""
    conv = search.conv
    history = conv.history
    in_history = [dataclasses.replace(p, index=positions[p.index]) for p in culprit]
    keys = [key for p in in_history for key in part_keys(history, p)]
    with conv.archive.attributed("set_aside"):
        conv.history, done = withhold(history, in_history, archive=conv.archive)
    conv.gateway = conv.gateway.withhold(keys)
    for item in done:
        conv.stats.withheld_chars += item.size
        notice = CONTENT_WITHHELD_NOTICE % (search.status, format_payload_size(search.size), item.label)
        conv.events.notice(CONTENT_WITHHELD_CODE, notice)
    sent, _ = withhold(request.messages, culprit, archive=conv.archive)
    return dataclasses.replace(request, messages=tuple(sent))


# -- the requests ------------------------------------------------------------------------------------


class _KeysOnly:
    """An archive that stores nothing: a test request's stubs carry the keys the real withholding
    stores under, and nothing is stored for a request whose answer is thrown away."""

    def put(self, content: str) -> str:
        return archive_key(content)

    def archive(self, content: str) -> str | None:
        return archive_key(content)

    def get(self, key: str) -> str | None:
        return None

    def __contains__(self, key: object) -> bool:
        return False


def _without(conv: Conversation, request: ChatRequest, parts: Sequence[Part]) -> ChatRequest:
    """An experiment: ``request`` with ``parts`` withheld."""
    messages, _ = withhold(request.messages, parts, archive=_KeysOnly())
    return _experiment(conv, tuple(messages), tools=request.tools, like=request)


def _padded_without(
    conv: Conversation, request: ChatRequest, parts: Sequence[Part], size: int
) -> ChatRequest:
    """``request`` with ``parts`` withheld and blanks where they were, as large as ``size`` bytes."""
    stripped = _without(conv, request, parts)
    missing = size - request_bytes(conv, stripped)
    if missing <= 0 or not parts:
        return stripped
    messages = list(stripped.messages)
    last = max(p.index for p in parts)
    messages[last] = messages[last].replace(content=messages[last].content + " " * missing)
    return dataclasses.replace(stripped, messages=tuple(messages))


def _experiment(
    conv: Conversation, messages: tuple[Message, ...], *, tools: object, like: ChatRequest | None = None
) -> ChatRequest:
    """A request whose answer is not kept: only its first ``policy.experiment_max_tokens`` are asked for."""
    limit = conv.policy.experiment_max_tokens
    wanted = like.max_tokens if like is not None and like.max_tokens is not None else limit
    return ChatRequest(
        messages,
        max_tokens=min(wanted, limit),
        tools=tools,
        headers=like.headers if like is not None else {},
        extra=like.extra if like is not None else {},
        purpose="experiment",
    )


def _test(search: BlockSearch, request: ChatRequest, *, proves: bool = True) -> Flow[bool]:
    """Send an experiment: True when the gateway blocked it (counted against the turn's budget). When it
    passes and ``proves`` (it carries conversation content), what it carried is proven."""
    conv = search.conv
    size = request_bytes(conv, request)
    for attempt in range(2):
        conv.stats.requests += 1
        conv.stats.block_experiments += 1
        try:
            response: ChatResponse = yield Send(request)
        except Exception as exc:
            if not is_provider_failure(exc):
                raise
            seen = conv.classify(
                exc, request_bytes=size, large_history_chars=conv.policy.suspected_payload_history_chars
            )
            if seen.kind in BLOCK_KINDS:
                search.blocked += 1
                conv.stats.rejected_requests += 1
                return True
            if seen.kind is FailureKind.PAYLOAD_TOO_LARGE:
                conv.stats.rejected_requests += 1
                return True  # refused as too large: a size answer, not a block page (no security event)
            if seen.kind is FailureKind.TRANSIENT_NETWORK and attempt == 0:
                yield Sleep(TRANSIENT_BACKOFF_S)
                continue
            raise UnrecoverableFailure(
                f"the experiments that tell a block apart were interrupted: {seen.kind}: {seen.evidence}",
                failure=seen,
            ) from exc
        conv.gateway = conv.gateway.accepted(response.request_bytes, policy=conv.policy)
        if proves:
            conv.last_accepted = request.messages  # what passed is proven
        return False
    raise AssertionError("unreachable: the second attempt returns or raises")  # pragma: no cover


def _history_positions(history: Sequence[Message], messages: Sequence[Message]) -> dict[int, int]:
    """Index in ``messages`` (a request) → index in ``history`` of the message it was made from: the
    same object, or — for a tool result the outgoing copy previewed — the history's result for the
    same call at the same place. Synthetic messages (a repaired pairing's) have none."""
    where = {id(m): i for i, m in enumerate(history)}
    aligned = len(history) == len(messages)
    positions: dict[int, int] = {}
    for i, msg in enumerate(messages):
        j = where.get(id(msg))
        if (
            j is None
            and aligned
            and msg.role == history[i].role
            and msg.tool_call_id == history[i].tool_call_id
        ):
            j = i
        if j is not None:
            positions[i] = j
    return positions


def _is_ours(original: Message, sent: Message) -> bool:
    """Whether what was sent of a message is the library's own text (a preview, a stub, a summary)."""
    return is_library_message(original) or sent is not original or "<<ccr:" in sent.content
