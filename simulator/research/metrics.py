"""The run schema (one record per request attempt) and the metrics computed from it.

:data:`RUN_COLUMNS` is the schema: column → (pandas dtype, meaning). A replay emits
:class:`AttemptRecord` values; :func:`records_to_frame` turns them into a typed
DataFrame; :func:`episodes`, :func:`summarize_run` and :func:`summary_table` condense it.
Retention probes (chars lost, fact survival) are in :mod:`simulator.research.retention`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd


__all__ = [
    "AttemptRecord",
    "CACHE_READ_MULTIPLIER",
    "CACHE_WRITE_MULTIPLIER",
    "DEFAULT_INPUT_PRICE_PER_MTOK",
    "EPISODE_COLUMNS",
    "OUTCOMES",
    "RUN_COLUMNS",
    "SUMMARY_COLUMNS",
    "continues_episode",
    "episodes",
    "is_rejection",
    "records_to_frame",
    "rejected_per_episode",
    "summarize_run",
    "summary_table",
]


# -- the schema --------------------------------------------------------------------------
RUN_COLUMNS: Mapping[str, tuple[str, str]] = MappingProxyType(
    {
        "run_id": ("string", "unique id of one replay (transcript × scenario × policy × seed)"),
        "transcript": ("string", "transcript name"),
        "transcript_sha256": ("string", "sha256 of the transcript's canonical JSONL"),
        "scenario": ("string", "fault scenario name"),
        "policy": ("string", "policy (preset or sweep point) name"),
        "seed": ("Int64", "seed of the run; NA when the run is not seeded"),
        "turn": ("int64", "0-based index of the user turn being replayed"),
        "attempt": ("int64", "1-based request attempt within the turn"),
        "request_bytes": ("int64", "real UTF-8 size of the request body sent on the wire"),
        "history_weight": ("int64", "ctxrecover.sizes.total_weight of the history sent"),
        "message_count": ("int64", "messages in the history sent"),
        "estimated_tokens": ("int64", "estimated input tokens of the request"),
        "proxy_cap": ("Int64", "body-size cap of the simulated proxy in bytes; NA when uncapped"),
        "learned_cap": ("Int64", "payload cap the session had learned when sending; NA when none"),
        "context_window": ("Int64", "model context window in tokens the session assumed"),
        "max_tokens": ("Int64", "max output tokens requested; NA when unset"),
        "outcome": ("string", "what the attempt ended in, see OUTCOMES"),
        "failure_kind": ("string", "ctxrecover FailureKind of a rejection or truncation; NA when ok"),
        "compaction_level": (
            "Int64",
            "deepest planned-compaction step right before this attempt: 1 trim, 2 summary, 3 truncation "
            "(simulator.research.levels); NA when none",
        ),
        "recovery_level": (
            "Int64",
            "recovery ladder level (1–3) applied right before this attempt, after a rejection; NA when none",
        ),
        "summarizer_calls": ("int64", "summarizer calls spent right before this attempt"),
        "summarizer_tokens": ("int64", "summarizer input + output tokens spent right before this attempt"),
        "summarizer_cost_usd": ("float64", "summarizer USD spent right before this attempt"),
        "provider_cost_usd": ("float64", "provider USD charged for this attempt (0 when rejected)"),
        "chars_archived": ("int64", "chars put in the CCR archive right before this attempt"),
        "chars_lost": ("int64", "original chars irrecoverably lost so far (cumulative; must stay 0)"),
        "notices": ("string", "notices emitted right before/for this attempt, joined by newlines"),
        "elapsed_ms": ("float64", "wall time of the attempt, compaction included, in ms"),
        "identical_retry": (
            "bool",
            "same payload as a request already rejected on this turn, recall keys normalised",
        ),
    }
)
OUTCOME_OK = "ok"
OUTCOME_FAILED = "failed"
OUTCOME_FLOOR = "fail_fast_floor"
OUTCOME_TRUNCATED = "truncated"
REJECTED_PREFIX = "rejected:"
RECOVERED_PREFIX = "recovered@L"
EXPERIMENT_PASSED = "experiment:passed"
EXPERIMENT_BLOCKED = "experiment:blocked"
OUTCOMES: Mapping[str, str] = MappingProxyType(
    {
        OUTCOME_OK: "accepted; no recovery was needed on this turn",
        f"{REJECTED_PREFIX}<kind>": "rejected, recoverable: recovery and another attempt follow",
        f"{RECOVERED_PREFIX}<1|2|3>": "accepted after recovery at that recovery level on this turn",
        OUTCOME_FAILED: "rejected, and the turn gave up (attempts spent or the kind is unrecoverable)",
        OUTCOME_FLOOR: "rejected, and the floor diagnosis stopped recovery (system prompt too big)",
        OUTCOME_TRUNCATED: "accepted, but the answer was cut at max_tokens (an escalation may follow)",
        EXPERIMENT_PASSED: "a block experiment (SPEC §12: size, content or policy?) the gateway let through",
        EXPERIMENT_BLOCKED: "a block experiment the gateway refused: a rejected request of its episode",
    }
)
OUTCOME_RE = re.compile(
    r"ok|failed|fail_fast_floor|truncated|rejected:[a-z_]+|recovered@L[123]|experiment:(passed|blocked)"
)
TERMINAL_REJECTIONS = frozenset({OUTCOME_FAILED, OUTCOME_FLOOR})
EPISODE_COLUMNS: Mapping[str, str] = MappingProxyType(
    {
        "run_id": "string",
        "turn": "int64",
        "first_failure_kind": "string",
        "rejected_requests": "int64",
        "wasted_retries": "int64",
        "recovered": "bool",
        "final_level": "Int64",
    }
)
SUMMARY_COLUMNS: tuple[str, ...] = (
    "runs",
    "turns",
    "failures_by_kind",
    "recovered",
    "failed",
    "rejected_requests",
    "wasted_retries",
    "wire_bytes",
    "summarizer_cost_usd",
    "cache_adjusted_cost_usd",
    "chars_lost",
)
# -- prompt-cache cost model (Anthropic's published multipliers of the base input price) ---------
CACHE_WRITE_MULTIPLIER = 1.25  # a 5-minute cache write costs 1.25× base input
CACHE_READ_MULTIPLIER = 0.10  # a cache hit costs 0.1× base input
DEFAULT_INPUT_PRICE_PER_MTOK = 3.00  # claude-sonnet-4 list price, USD per million input tokens


@dataclass(frozen=True, slots=True, kw_only=True)
class AttemptRecord:
    """One request attempt of a replay; fields are :data:`RUN_COLUMNS` in order."""

    run_id: str
    transcript: str
    transcript_sha256: str
    scenario: str
    policy: str
    seed: int | None = None
    turn: int
    attempt: int
    request_bytes: int
    history_weight: int = 0
    message_count: int = 0
    estimated_tokens: int = 0
    proxy_cap: int | None = None
    learned_cap: int | None = None
    context_window: int | None = None
    max_tokens: int | None = None
    outcome: str
    failure_kind: str | None = None
    compaction_level: int | None = None
    recovery_level: int | None = None
    summarizer_calls: int = 0
    summarizer_tokens: int = 0
    summarizer_cost_usd: float = 0.0
    provider_cost_usd: float = 0.0
    chars_archived: int = 0
    chars_lost: int = 0
    notices: str = ""
    elapsed_ms: float = 0.0
    identical_retry: bool = False

    def __post_init__(self) -> None:
        if not OUTCOME_RE.fullmatch(self.outcome):
            raise ValueError(
                f"AttemptRecord.outcome {self.outcome!r} is not one of {', '.join(OUTCOMES)} "
                f"(run {self.run_id!r}, turn {self.turn}, attempt {self.attempt})"
            )
        if self.turn < 0 or self.attempt < 1:
            raise ValueError(
                f"AttemptRecord needs turn >= 0 and attempt >= 1 (attempts are 1-based); "
                f"got turn={self.turn}, attempt={self.attempt}"
            )

    def to_row(self) -> dict[str, Any]:
        """The record as ``{column: value}`` in :data:`RUN_COLUMNS` order."""
        return {name: getattr(self, name) for name in RUN_COLUMNS}


def records_to_frame(records: Iterable[AttemptRecord]) -> pd.DataFrame:
    """A DataFrame of ``records`` with exactly the :data:`RUN_COLUMNS` columns and dtypes."""
    import pandas as pd

    rows = list(records)
    return pd.DataFrame(
        {
            name: pd.Series([getattr(row, name) for row in rows], dtype=dtype)
            for name, (dtype, _meaning) in RUN_COLUMNS.items()
        }
    )


# -- episodes and summaries -------------------------------------------------------------------
def is_rejection(outcome: str) -> bool:
    """A rejected request: ``rejected:*``, ``failed``, ``fail_fast_floor`` or ``experiment:blocked``."""
    return (
        outcome.startswith(REJECTED_PREFIX) or outcome in TERMINAL_REJECTIONS or outcome == EXPERIMENT_BLOCKED
    )


def _is_accepted(outcome: str) -> bool:
    return not is_rejection(outcome) and outcome != EXPERIMENT_PASSED


def continues_episode(outcome: str) -> bool:
    """An attempt after which its turn's episode goes on: a rejection retried, or an experiment."""
    return outcome.startswith(REJECTED_PREFIX) or outcome in (EXPERIMENT_PASSED, EXPERIMENT_BLOCKED)


def _missing(value: object) -> bool:
    import pandas as pd

    return value is None or value is pd.NA or (isinstance(value, float) and value != value)


@dataclass(slots=True)
class _Episode:
    run_id: str
    turn: int
    first_failure_kind: str
    rejected_requests: int = 0
    wasted_retries: int = 0
    recovered: bool = False
    final_level: int | None = None

    def add(self, outcome: str, level: object, identical_retry: bool) -> None:
        self.rejected_requests += is_rejection(outcome)
        self.wasted_retries += bool(identical_retry)
        if outcome.startswith(RECOVERED_PREFIX):
            self.final_level = int(outcome.removeprefix(RECOVERED_PREFIX))
        elif not _missing(level):
            self.final_level = max(self.final_level or 0, int(level))  # type: ignore[call-overload]


def _failure_kind(outcome: str, kind: object) -> str:
    if not _missing(kind) and kind:
        return str(kind)
    return outcome.removeprefix(REJECTED_PREFIX)


def episodes(frame: pd.DataFrame) -> pd.DataFrame:
    """Failure episodes: each run of consecutive rejected attempts of one turn, with how it ended.

    An episode opens at a rejected attempt of any kind (``rejected:*``, ``failed``,
    ``fail_fast_floor``: a 413 or a WAF page as much as a reset, a 431, a content block or a
    max_tokens error) and closes at the next attempt of that turn that is neither ``rejected:*`` nor a
    block experiment (``experiment:*``, whose refusals count as the episode's rejected requests):
    accepted (``recovered``) or ``failed``/``fail_fast_floor`` (not recovered); a run ending
    mid-episode is not recovered. ``wasted_retries`` counts identical payloads resent;
    ``final_level`` is the ``recovered@L`` level, else the highest recovery level seen.
    Rows are read in frame order (chronological within a run).
    """
    import pandas as pd

    open_episodes: dict[tuple[str, int], _Episode] = {}
    closed: list[_Episode] = []
    columns = ["run_id", "turn", "outcome", "failure_kind", "recovery_level", "identical_retry"]
    for run_id, turn, outcome, kind, level, identical in frame[columns].itertuples(index=False):
        key = (run_id, int(turn))
        episode = open_episodes.get(key)
        if episode is None:
            if not is_rejection(outcome):
                continue
            episode = open_episodes[key] = _Episode(run_id, int(turn), _failure_kind(outcome, kind))
        episode.add(outcome, level, identical)
        if continues_episode(outcome):
            continue
        episode.recovered = _is_accepted(outcome)
        closed.append(open_episodes.pop(key))
    closed.extend(open_episodes.values())
    return pd.DataFrame(
        {
            name: pd.Series([getattr(episode, name) for episode in closed], dtype=dtype)
            for name, dtype in EPISODE_COLUMNS.items()
        }
    )


def rejected_per_episode(episode_table: pd.DataFrame) -> dict[str, float]:
    """Rejected requests per failure episode of an :func:`episodes` table: ``"all"`` episodes, whatever
    their kind, then each first failure kind (sorted); empty for a table without episodes."""
    if not len(episode_table):
        return {}
    by_kind = episode_table.groupby("first_failure_kind", sort=True)["rejected_requests"].mean()
    return {
        "all": float(episode_table["rejected_requests"].mean()),
        **{str(kind): float(mean) for kind, mean in by_kind.items()},
    }


def _cache_costs(frame: pd.DataFrame, price_per_mtok: float) -> tuple[float, float, int]:
    """``(uncached input cost, cache-adjusted input cost, cache rebuilds)`` of one run.

    Only accepted attempts reach the provider's cache. The first request writes its
    whole prompt; a request after a compaction or a recovery (a level on it or on a
    rejected attempt since the last accepted one) rewrites the whole prefix — a
    rebuild; otherwise the previous prompt is read from cache and the rest written.
    """
    uncached = cached = 0.0
    rebuilds = 0
    previous_tokens: int | None = None
    compacted = False
    columns = ["outcome", "estimated_tokens", "compaction_level", "recovery_level"]
    for outcome, tokens, level, recovery in frame[columns].itertuples(index=False):
        compacted = compacted or not _missing(level) or not _missing(recovery)
        if not _is_accepted(outcome):
            continue
        tokens = int(tokens)
        if previous_tokens is None or compacted:
            read, rebuilds = 0, rebuilds + (previous_tokens is not None)
        else:
            read = min(previous_tokens, tokens)
        uncached += tokens
        cached += read * CACHE_READ_MULTIPLIER + (tokens - read) * CACHE_WRITE_MULTIPLIER
        previous_tokens, compacted = tokens, False
    scale = price_per_mtok / 1_000_000
    return uncached * scale, cached * scale, rebuilds


def summarize_run(
    frame: pd.DataFrame,
    *,
    chars_lost: int | None = None,
    input_price_per_mtok: float = DEFAULT_INPUT_PRICE_PER_MTOK,
) -> dict[str, Any]:
    """One run's numbers: turns, failures by kind, episodes, wire bytes, costs, chars lost.

    ``chars_lost`` (e.g. from :func:`chars_lost` at the end of the replay) overrides
    the column's last value. Costs: ``summarizer_cost_usd`` and ``provider_cost_usd``
    are column sums; ``input_cost_usd`` prices every accepted request's input at
    ``input_price_per_mtok``; ``cache_adjusted_cost_usd`` prices it with prompt caching
    (writes ×1.25, reads ×0.1; each compaction forces a full rewrite of the prefix,
    counted in ``cache_rebuilds``).
    """
    run_ids = frame["run_id"].unique()
    if len(run_ids) > 1:
        raise ValueError(
            f"summarize_run takes one run, got {len(run_ids)} run_ids; "
            "use summary_table, or frame.groupby('run_id') first"
        )
    if input_price_per_mtok < 0:
        raise ValueError(f"input_price_per_mtok is USD per million tokens (>= 0), got {input_price_per_mtok}")
    first = frame.iloc[0] if len(frame) else None
    eps = episodes(frame)
    input_cost, cached_cost, rebuilds = _cache_costs(frame, input_price_per_mtok)
    failures = eps["first_failure_kind"].value_counts(sort=False)
    lost = chars_lost if chars_lost is not None else int(frame["chars_lost"].max()) if len(frame) else 0

    def identity(name: str) -> Any:
        return None if first is None or _missing(first[name]) else first[name]

    return {
        "run_id": identity("run_id"),
        "transcript": identity("transcript"),
        "scenario": identity("scenario"),
        "policy": identity("policy"),
        "seed": None if identity("seed") is None else int(identity("seed")),
        "turns": int(frame["turn"].nunique()),
        "attempts": len(frame),
        "failures_by_kind": {str(kind): int(count) for kind, count in sorted(failures.items())},
        "recovered_episodes": int(eps["recovered"].sum()),
        "failed_episodes": int((~eps["recovered"]).sum()),
        "rejected_requests": int(frame["outcome"].map(is_rejection).sum()) if len(frame) else 0,
        "wasted_retries": int(frame["identical_retry"].sum()),
        "wire_bytes": int(frame["request_bytes"].sum()),
        "summarizer_calls": int(frame["summarizer_calls"].sum()),
        "summarizer_cost_usd": float(frame["summarizer_cost_usd"].sum()),
        "provider_cost_usd": float(frame["provider_cost_usd"].sum()),
        "input_cost_usd": input_cost,
        "cache_adjusted_cost_usd": cached_cost,
        "cache_rebuilds": rebuilds,
        "chars_archived": int(frame["chars_archived"].sum()),
        "chars_lost": lost,
    }


def _run_summaries(frames_or_summaries: object) -> Iterator[Mapping[str, Any]]:
    import pandas as pd

    items = (
        [frames_or_summaries]
        if isinstance(frames_or_summaries, pd.DataFrame | Mapping)
        else frames_or_summaries
    )
    if not isinstance(items, Iterable):
        raise TypeError(
            "summary_table takes run DataFrames, summarize_run dicts, or an iterable of them; "
            f"got {type(frames_or_summaries).__name__}"
        )
    for item in items:
        if isinstance(item, Mapping):
            yield item
        elif isinstance(item, pd.DataFrame):
            for _run_id, run in item.groupby("run_id", sort=False):
                yield summarize_run(run)
        else:
            raise TypeError(
                f"summary_table items must be DataFrames or summarize_run dicts, got {type(item).__name__}"
            )


def _format_kinds(counts: Mapping[str, int]) -> str:
    return ", ".join(f"{kind}={count}" for kind, count in sorted(counts.items()))


def summary_table(frames_or_summaries: object) -> pd.DataFrame:
    """Per-scenario totals over runs, for the CLI: one row per scenario, :data:`SUMMARY_COLUMNS`.

    Takes run frames (split by ``run_id``), :func:`summarize_run` dicts, or an iterable
    mixing them. ``failures_by_kind`` reads ``kind=count, ...``; scenarios keep the order
    in which they first appear.
    """
    import pandas as pd

    totals: dict[str, dict[str, Any]] = {}
    for summary in _run_summaries(frames_or_summaries):
        scenario = summary["scenario"] or ""
        row = totals.setdefault(scenario, {name: 0 for name in SUMMARY_COLUMNS} | {"failures_by_kind": {}})
        row["runs"] += 1
        row["recovered"] += summary["recovered_episodes"]
        row["failed"] += summary["failed_episodes"]
        for kind, count in summary["failures_by_kind"].items():
            row["failures_by_kind"][kind] = row["failures_by_kind"].get(kind, 0) + count
        for name in SUMMARY_COLUMNS:
            if name not in ("runs", "recovered", "failed", "failures_by_kind"):
                row[name] += summary[name]
    return pd.DataFrame(
        [{**row, "failures_by_kind": _format_kinds(row["failures_by_kind"])} for row in totals.values()],
        index=pd.Index(list(totals), name="scenario", dtype="string"),
        columns=list(SUMMARY_COLUMNS),
    )
