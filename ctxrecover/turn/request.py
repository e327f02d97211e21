"""A turn's request (SPEC §3, §5, §7): the turn-boundary passes, pre-flight, planned compaction to the
budget and to the cap in real bytes, and the outgoing copy.

:func:`prepare_request` is a flow (planned compaction may ask the summarizer); everything else
here is a function of the conversation's state that returns a value.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from ctxrecover.cancel import CancelToken
from ctxrecover.messages import Message
from ctxrecover.passes.parts import archive_images
from ctxrecover.passes.truncate import leading_system_count
from ctxrecover.passes.withhold import part_keys, parts_of, withhold
from ctxrecover.recovery import CONTENT_WITHHELD_CODE, WITHHELD_AGAIN_NOTICE, body_key, preflight
from ctxrecover.sizes import char_budget as base_char_budget
from ctxrecover.sizes import total_weight
from ctxrecover.summarize.context_editing import context_management_request
from ctxrecover.transport import ChatRequest
from ctxrecover.turn.actions import Flow
from ctxrecover.turn.answer import input_tokens
from ctxrecover.turn.conversation import LIVE_OUTGOING, Conversation
from ctxrecover.wire import DEFAULT_ANTHROPIC_MAX_TOKENS, WireFormat, encode_request, request_size

__all__ = [
    "char_budget",
    "request_body_key",
    "withhold_known",
    "compact_to",
    "history_request_bytes",
    "outgoing",
    "prepare_request",
    "request_bytes",
]

BYTE_FIT_ROUNDS = 4  # planned compaction rounds to bring real wire bytes under a cap
BYTE_FIT_MARGIN = 0.95
BYTE_FIT_MIN_KEEP = 2  # fewest recent messages a byte-fit round keeps (keep_recent halves each round)
#: The share of the room under the learned cap that the retry after a size rejection fills
#: (SPEC §12: at least 75 % of the cap when the history holds that much), in place of the
#: ``payload_cap_headroom`` an ordinary turn keeps.
RETRY_CAP_SHARE = 0.8


def char_budget(
    conv: Conversation,
    budget_ratio: float | None = None,
    *,
    max_tokens: int | None = None,
    fill: bool = False,
) -> int:
    """The char budget the history must fit at ``budget_ratio`` (the mode's by default).

    When the request asks for ``max_tokens`` (Anthropic always does), the
    provider reserves them inside the window: the budget never exceeds the
    mode's ratio of the window minus that reservation (the ratio is the
    headroom for chars per token, an estimate that varies from message to message).

    Under a payload cap, the budget keeps ``1 − policy.payload_cap_headroom``
    (30%) of the room the cap leaves *beyond the non-compactable base*
    (system prompt, tool definitions): ``system weight + 70% × (cap − base)``.
    **Decision (SPEC §11):** with §1.3's ``70% × cap`` a system prompt over 30%
    of the cap made every turn compact to a budget it could never reach.
    With ``fill`` (the retry after a size rejection) the share is :data:`RETRY_CAP_SHARE`
    when it is larger: SPEC §12 has that retry fill the cap, not a fraction of it.
    """
    ratio = budget_ratio if budget_ratio is not None else conv.mode_ratio
    budget = base_char_budget(
        conv.context_window, ratio, chars_per_token=conv.chars_per_token, reserved_chars=conv.reserved_chars
    )
    reserve = _reserve(conv, max_tokens)
    room = conv.context_window - reserve
    if reserve and room > 0:  # the mode's ratio of that room: chars per token is an estimate, per message
        budget = min(budget, int(room * ratio * conv.chars_per_token) - conv.reserved_chars)
    cap = conv.gateway.effective_cap
    if not cap:
        return budget
    system = conv.history[: leading_system_count(conv.history)]
    room = max(0, cap - history_request_bytes(conv, system, max_tokens))
    # The policy's headroom, not sizes' module default: the knob must take effect.
    share = conv.policy.payload_cap_headroom
    if fill:
        share = max(share, RETRY_CAP_SHARE)
    return min(budget, total_weight(system) + int(room * share))


def _reserve(conv: Conversation, max_tokens: int | None) -> int:
    """The tokens the provider reserves inside the window for the answer (Anthropic always asks)."""
    return max_tokens or (DEFAULT_ANTHROPIC_MAX_TOKENS if conv.wire_format is WireFormat.ANTHROPIC else 0)


def history_request_bytes(conv: Conversation, history: Sequence[Message], max_tokens: int | None) -> int:
    """Real bytes of a request carrying ``history`` (encoded from scratch: for small lists)."""
    return request_size(history, conv.wire_format, model=conv.model, max_tokens=max_tokens, tools=conv.tools)


def request_bytes(conv: Conversation, request: ChatRequest) -> int:
    """Real bytes of ``request`` on the wire, from the conversation's incremental sizes."""
    return conv.passes.request_bytes(
        request.messages, max_tokens=request.max_tokens, tools=request.tools, extra=request.extra or None
    )


def request_body_key(conv: Conversation, request: ChatRequest) -> str:
    """The body key of ``request`` (recall keys normalised): what a refused body is remembered by."""
    body = encode_request(
        request.messages,
        conv.wire_format,
        model=conv.model,
        max_tokens=request.max_tokens,
        tools=request.tools,
        extra=request.extra or None,
    )
    return body_key(body)


def withhold_known(conv: Conversation) -> None:
    """Withhold, before it is sent, new content identical to what this gateway refused before (the
    same file read again, SPEC §12): archived, stubbed, said once each."""
    withheld = set(conv.gateway.withheld)
    if not withheld or not conv.unproven:
        return
    history = conv.history
    fresh = {id(m) for m in conv.unproven.values()}
    indices = [i for i, m in enumerate(history) if id(m) in fresh]
    again = [part for part in parts_of(history, indices) if withheld.intersection(part_keys(history, part))]
    if not again:
        return
    with conv.archive.attributed("set_aside"):
        conv.history, done = withhold(history, again, archive=conv.archive)
    for item in done:
        conv.stats.withheld_chars += item.size
        label = item.label[:1].upper() + item.label[1:]
        conv.events.notice(CONTENT_WITHHELD_CODE, WITHHELD_AGAIN_NOTICE % label)


def outgoing(conv: Conversation, max_tokens: int | None) -> ChatRequest:
    """The request for the history: pairing repair and the tool-result budget applied to a copy,
    never to the history itself (SPEC §3.1, §3.2)."""
    copy = conv.passes.outgoing(
        conv.history, budget_chars=conv.tool_result_budget_chars, max_chars=conv.tool_result_max_chars
    )
    conv.archive.track(LIVE_OUTGOING, copy)  # the model sees the previews' markers: keep them too
    headers: dict[str, str] = {}
    extra: dict[str, Any] = {}
    if conv.context_editing:
        headers, extra = context_management_request()
    return ChatRequest(tuple(copy), max_tokens=max_tokens, tools=conv.tools, headers=headers, extra=extra)


def prepare_request(
    conv: Conversation, max_tokens: int | None, cancel: CancelToken | None, *, fill: bool = False
) -> Flow[ChatRequest]:
    """The turn's request, SPEC §3's order: microcompact, dedup, skill aging, pre-flight, planned
    compaction to the budget, then to the cap in real bytes, and the outgoing copy. ``fill`` is
    the retry after a size rejection: its budget fills the cap (:func:`char_budget`)."""
    passes = conv.passes
    withhold_known(conv)
    history, micro = passes.microcompact(conv.history)
    if micro.truncated or micro.summarized:
        conv.events.notice("microcompact", micro.notice)
    history = passes.dedup(history)
    history, aging = passes.age_skills(history)
    if aging.blocks_archived:
        conv.events.notice("skill_aging", aging.notice)
    conv.history = history

    system_count = leading_system_count(history)
    base = history_request_bytes(conv, history[:system_count], max_tokens)
    size = passes.history_bytes(history, max_tokens=max_tokens, tools=conv.tools)
    check = preflight(size, conv.gateway, conv.policy, base_bytes=base)
    conv.gateway = check.gateway
    if check.notice is not None:
        conv.events.emit(check.notice)
    budget = char_budget(conv, check.budget_ratio_override, max_tokens=max_tokens, fill=fill)
    if passes.weight(conv.history) > budget:
        yield from compact_to(conv, budget, "auto", cancel)
    request = outgoing(conv, max_tokens)
    # Under a payload cap the real bytes decide. Each round tightens the budget to the
    # measured overshoot and, when the kept recent messages alone are over it (every
    # other message already at the shrink floor), keeps fewer of them: never send a
    # request the conversation already knows is over its own cap while compaction can help.
    cap = conv.gateway.effective_cap
    keep = conv.keep_recent
    for _ in range(BYTE_FIT_ROUNDS):
        size = request_bytes(conv, request)
        if not cap or size <= cap:
            break
        budget = int(min(budget, passes.weight(conv.history)) * cap / size * BYTE_FIT_MARGIN)
        changed = yield from compact_to(conv, budget, "auto", cancel, keep_recent=keep)
        if not changed and keep <= BYTE_FIT_MIN_KEEP:
            break
        keep = max(BYTE_FIT_MIN_KEEP, keep // 2)
        request = outgoing(conv, max_tokens)
    over_window = input_tokens(conv, request) + _reserve(conv, max_tokens) > conv.context_window
    if (cap and request_bytes(conv, request) > cap) or over_window:
        # The last resort before a request known to be over the cap or the window: images too
        # large for it, the newest included, go to the archive behind their notes.
        with conv.archive.attributed("images"):
            history, images = archive_images(conv.history, archive=conv.archive, keep_recent=0)
        if images.images_archived:
            conv.events.notice("images_archived", images.notice)
            conv.history = history
            request = outgoing(conv, max_tokens)
    return request


def compact_to(
    conv: Conversation,
    budget: int,
    trigger: Literal["auto", "manual"],
    cancel: CancelToken | None,
    *,
    keep_recent: int | None = None,
) -> Flow[bool]:
    """Planned compaction to ``budget``; inline images outside the kept messages are archived
    first (so compaction never drops a pixel), which may be enough. True when anything changed."""
    keep = conv.keep_recent if keep_recent is None else keep_recent
    with conv.archive.attributed("images"):
        history, images = archive_images(
            conv.history, archive=conv.archive, keep_recent=keep, user_first=False
        )
    if images.images_archived:
        conv.events.notice("images_archived", images.notice)
        conv.history = history
        if conv.passes.weight(history) <= budget:
            return True
    result = yield from conv.compactor.compact_flow(
        conv.history, budget_chars=budget, keep_recent=keep, trigger=trigger, cancel=cancel
    )
    changed = result.history is not conv.history and result.history != conv.history
    conv.history = result.history
    return changed or bool(images.images_archived)
