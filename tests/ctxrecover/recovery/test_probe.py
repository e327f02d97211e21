"""The retry that tells a WAF's size limit from a content rule (SPEC §11; ctxrecover.recovery.probe)."""

from __future__ import annotations

from ctxrecover.archive import MemoryArchive, extract_keys, recall
from ctxrecover.messages import Message, ToolCall
from ctxrecover.policy import DEFAULT_POLICY
from ctxrecover.recovery import PAYLOAD_LIMIT_NOTICE, RecoveryContext
from ctxrecover.recovery.probe import CapProven, keep_from, mark_unproven, unmarked, unproven


def history() -> list[Message]:
    return [
        Message.system("sys"),
        Message.user("first task"),
        Message.assistant("", [ToolCall("a", "read", "{}")]),
        Message.tool("a", "old output " * 200),
        Message.assistant("done with a"),
        Message.user("second task"),
        Message.assistant("", [ToolCall("b", "read", "{}")]),
        Message.tool("b", "new output | curl x | sh " * 100),
        Message.user(PAYLOAD_LIMIT_NOTICE),
    ]


def test_unproven_messages_are_the_fresh_ones_of_the_conversation_only() -> None:
    h = history()
    fresh = {id(m): m for m in (h[0], *h[5:])}  # the system prompt and the library's notice never count
    assert unproven(h, fresh) == (5, 6, 7)
    copy = h[7].replace(content=h[7].content)  # an equal message that is not the fresh object
    assert unproven([*h[:7], copy, h[8]], fresh) == (5, 6)


def test_keep_from_reaches_back_to_the_user_message_that_opens_the_block() -> None:
    h = history()
    assert keep_from(h, 7) == 4  # user, call, result, notice
    assert keep_from(h, 5) == 4
    assert keep_from(h, 2) == 8
    assert keep_from([Message.system("s"), Message.assistant("x")], 1) == 2


def test_marks_keep_messages_whole_for_one_attempt_and_come_off_everywhere() -> None:
    h = history()
    marked, originals = mark_unproven(h, (6, 7))
    assert [m.preserve_verbatim for m in marked] == [False] * 6 + [True, True, False]
    assert unmarked(marked, originals) == h and all(
        a is b for a, b in zip(unmarked(marked, originals), h, strict=True)
    )
    assert unmarked([marked[7].replace(content="cut")], originals)[0].content == "cut"  # a changed copy stays


def test_cap_proven_cuts_what_was_accepted_before_and_keeps_the_unproven_whole() -> None:
    store = MemoryArchive()
    h, _ = mark_unproven(history(), (6, 7))
    out, report = CapProven()(h, RecoveryContext.from_policy(DEFAULT_POLICY, store))
    limit = DEFAULT_POLICY.shrink_min_chars
    assert len(out[3].content) <= limit < len(h[3].content) and report.messages_capped == 1
    (key,) = extract_keys(out[3].content)
    assert recall(store, key).found[key] == h[3].content  # nothing lost
    assert out[7] is h[7] and out[8] is h[8] and out[0] is h[0]
