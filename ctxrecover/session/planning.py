"""A turn's request: turn-boundary passes, pre-flight, and planned compaction to the budget and the cap."""

from __future__ import annotations

from typing import Literal

from ctxrecover.passes.parts import archive_images
from ctxrecover.passes.truncate import leading_system_count
from ctxrecover.recovery import preflight
from ctxrecover.session.host import LIVE_HISTORY, SessionHost
from ctxrecover.summarize import CancelToken
from ctxrecover.transport import ChatRequest

__all__ = ["RequestPlanner"]

BYTE_FIT_ROUNDS = 4  # planned compaction rounds to bring real wire bytes under a cap
BYTE_FIT_MARGIN = 0.95
BYTE_FIT_MIN_KEEP = 2  # fewest recent messages a byte-fit round keeps (keep_recent halves each round)


class RequestPlanner:
    """What a :class:`~ctxrecover.session.Session` does before each send (SPEC §3): it changes the
    session's history and gateway model and builds the request with ``session._outgoing``."""

    def __init__(self, session: SessionHost) -> None:
        self.session = session

    def prologue(self, max_tokens: int | None, cancel: CancelToken | None) -> ChatRequest:
        """SPEC §3 order: microcompact, dedup, pre-flight, compaction, then the outgoing copy."""
        self.session.archive.track(LIVE_HISTORY, self.session._history)  # messages appended in place since
        policy, passes = self.session.policy, self.session.passes
        history, micro = passes.microcompact(self.session._history)
        if micro.truncated or micro.summarized:
            self.session.events.notice("microcompact", micro.notice)
        history = passes.dedup(history)
        history, aging = passes.age_skills(history)
        if aging.blocks_archived:
            self.session.events.notice("skill_aging", aging.notice)
        self.session._history = history

        system_count = leading_system_count(history)
        base = self.session._request_bytes(history[:system_count], max_tokens)
        size = passes.history_bytes(history, max_tokens=max_tokens, tools=self.session.tools)
        check = preflight(size, self.session._gateway, policy, base_bytes=base)
        self.session._gateway = check.gateway
        if check.notice is not None:
            self.session.events.emit(check.notice)
        budget = self.session.char_budget(check.budget_ratio_override, max_tokens=max_tokens)
        if passes.weight(self.session._history) > budget:
            self._compact_to(budget, "auto", cancel)
        request = self.session._outgoing(max_tokens)
        # Under a payload cap the real bytes decide. Each round tightens the budget to the
        # measured overshoot and, when the kept recent messages alone are over it (every
        # other message already at the shrink floor), keeps fewer of them: never send a
        # request the session already knows is over its own cap while compaction can help.
        cap = self.session._gateway.effective_cap
        keep = self.session._keep_recent
        for _ in range(BYTE_FIT_ROUNDS):
            size = self.session._size_of(request)
            if not cap or size <= cap:
                return request
            budget = int(min(budget, passes.weight(self.session._history)) * cap / size * BYTE_FIT_MARGIN)
            changed = self._compact_to(budget, "auto", cancel, keep_recent=keep)
            if not changed and keep <= BYTE_FIT_MIN_KEEP:
                break
            keep = max(BYTE_FIT_MIN_KEEP, keep // 2)
            request = self.session._outgoing(max_tokens)
        if cap and self.session._size_of(request) > cap:
            # The last resort before a request known to be over the cap: images too large for the
            # gateway, the newest included, go to the archive behind their notes.
            with self.session.archive.attributed("images"):
                history, images = archive_images(
                    self.session._history, archive=self.session.archive, keep_recent=0
                )
            if images.images_archived:
                self.session.events.notice("images_archived", images.notice)
                self.session._history = history
                request = self.session._outgoing(max_tokens)
        return request

    def _compact_to(
        self,
        budget: int,
        trigger: Literal["auto", "manual"],
        cancel: CancelToken | None,
        *,
        keep_recent: int | None = None,
    ) -> bool:
        """Planned compaction to ``budget``; inline images outside the kept messages are archived
        first (so compaction never drops a pixel), which may be enough. True when anything changed."""
        keep = self.session._keep_recent if keep_recent is None else keep_recent
        with self.session.archive.attributed("images"):
            history, images = archive_images(
                self.session._history, archive=self.session.archive, keep_recent=keep, user_first=False
            )
        if images.images_archived:
            self.session.events.notice("images_archived", images.notice)
            self.session._history = history
            if self.session.passes.weight(history) <= budget:
                return True
        result = self.session.compactor.compact(
            self.session._history, budget_chars=budget, keep_recent=keep, trigger=trigger, cancel=cancel
        )
        changed = result.history is not self.session._history and result.history != self.session._history
        self.session._history = result.history
        return changed or bool(images.images_archived)
