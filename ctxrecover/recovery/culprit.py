"""Finding what a gateway's content rule refused, in few blocked requests (SPEC §12).

:func:`ddmin` is Zeller's delta debugging as a sans-IO generator: it yields the set of
candidates to keep present in the next test request (the others withheld) and is sent whether
that request was blocked; it returns a 1-minimal blocking set — anomaly scores add up, so
several fragments may block only together. For one culprit among n candidates it costs
⌈log2 n⌉ blocked tests (each halving costs one: the half that holds the culprit is blocked).

:func:`tiers` orders the candidates as the search widens: the parts new since the last
accepted request, then the library's own text (previews, stubs, summaries), then the rest.

>>> search, tests = ddmin(list("abcdefgh")), 0
>>> present = next(search)
>>> while True:
...     try:
...         tests += "f" in present
...         present = search.send("f" in present)    # a rule that matches "f"
...     except StopIteration as done:
...         culprit = done.value
...         break
>>> culprit, tests                                    # ⌈log2 8⌉ blocked tests
(('f',), 3)
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Hashable, Sequence
from typing import TypeVar

from ctxrecover.errors import ConfigError

__all__ = ["ddmin", "tiers"]

_U = TypeVar("_U", bound=Hashable)


def _split(items: Sequence[_U], n: int) -> list[list[_U]]:
    size, extra = divmod(len(items), n)
    out, start = [], 0
    for i in range(n):
        end = start + size + (1 if i < extra else 0)
        out.append(list(items[start:end]))
        start = end
    return [chunk for chunk in out if chunk]


def ddmin(candidates: Sequence[_U]) -> Generator[frozenset[_U], bool, tuple[_U, ...]]:
    """A 1-minimal subset of ``candidates`` whose presence alone (every other candidate withheld) is
    blocked, given that all of them present is blocked and none present passes.

    Yields each test's present set; is sent ``True`` when that test was blocked. A set already
    tested is never yielded again.
    """
    if not candidates:
        raise ConfigError("ddmin needs at least one candidate (the blocked request's parts)")
    seen: dict[frozenset[_U], bool] = {frozenset(candidates): True, frozenset(): False}

    def blocked(present: list[_U]) -> Generator[frozenset[_U], bool, bool]:
        key = frozenset(present)
        if key not in seen:
            seen[key] = bool((yield key))
        return seen[key]

    current, n = list(candidates), 2
    while len(current) >= 2:
        chunks = _split(current, n)
        narrowed = False
        for chunk in chunks:
            if (yield from blocked(chunk)):
                current, n, narrowed = chunk, 2, True
                break
        if not narrowed and len(chunks) > 2:
            for chunk in chunks:
                rest = [c for c in current if c not in chunk]
                if (yield from blocked(rest)):
                    current, n, narrowed = rest, max(n - 1, 2), True
                    break
        if not narrowed:
            if n >= len(current):
                break
            n = min(len(current), 2 * n)
    return tuple(current)


def tiers(
    candidates: Sequence[_U], *, is_new: Callable[[_U], bool], is_ours: Callable[[_U], bool]
) -> list[list[_U]]:
    """The candidates in the order the search widens: new since the last accepted request, then the
    library's own text, then the rest (empty tiers left out; each keeps the candidates' order)."""
    new = [c for c in candidates if is_new(c)]
    ours = [c for c in candidates if not is_new(c) and is_ours(c)]
    rest = [c for c in candidates if not is_new(c) and not is_ours(c)]
    return [tier for tier in (new, ours, rest) if tier]
