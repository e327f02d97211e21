"""Research tables and report folders: run summaries, comparison tables, markdown, and ``write_report``.

The figures themselves are in :mod:`simulator.research.figures`. :func:`write_report` saves
PNGs without the timestamped metadata, so two reports of one run directory are byte-identical.

>>> from simulator.research.metrics import AttemptRecord, records_to_frame
>>> frame = records_to_frame([AttemptRecord(run_id="r", transcript="t", transcript_sha256="0", scenario="waf",
...     policy="default", turn=0, attempt=1, request_bytes=900, outcome="ok")])
>>> comparison_table(run_summaries(frame))[["runs", "episodes", "chars_lost"]].to_dict("records")
[{'runs': 1, 'episodes': 0, 'chars_lost': 0}]
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from simulator.research.metrics import (
    EPISODE_COLUMNS,
    OUTCOME_TRUNCATED,
    RUN_COLUMNS,
    episodes,
    summarize_run,
)

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.figure import Figure
from simulator.research.figures import (
    ATTEMPTS_HINT,
    FIGURE_DPI,
    NA_TEXT,
    SUMMARY_HINT,
    SUMMARY_NEEDS,
    aggregate_runs,
    budget_curve,
    is_na,
    outcome_matrix,
    rejected_per_episode,
    require_columns,
    summarizer_cost,
)
from simulator.research.objectives import knob_response
from simulator.research.pareto import cost_vs_fact_survival
from simulator.research.response import RESPONSE_FILE, knob_response_figure

__all__ = [
    "ATTEMPTS_CSV",
    "COMPARISON_COLUMNS",
    "FIGURE_FILES",
    "MANIFEST_JSON",
    "REPORT_DIR",
    "RunData",
    "SUMMARY_CSV",
    "archived_by_source",
    "budget_stem",
    "comparison_table",
    "failure_counts",
    "load_run",
    "markdown_table",
    "policy_episodes",
    "read_attempts",
    "run_summaries",
    "write_report",
]


# -- files of a run directory (names shared with simulator.research.run_files and the sweep) -------
ATTEMPTS_CSV = "attempts.csv"
MANIFEST_JSON = "manifest.json"
SUMMARY_CSV = "summary.csv"  # optional per-run summaries (a sweep writes them)
REPORT_DIR = "report"
# One name per run's budget curve, for `ctxsim run --figures` and `ctxsim report` alike.
BUDGET_FILE = "budget-{scenario}--{transcript}--{policy}--s{seed}"
FIGURE_FILES: Mapping[str, str] = MappingProxyType(
    {
        "outcome_matrix": "outcome-matrix",
        "summarizer_cost": "summarizer-cost",
        "rejected_per_episode": "rejected-per-episode",
        "cost_vs_fact_survival": "cost-vs-fact-survival",
    }
)
TABLE_STEMS: tuple[str, ...] = ("comparison", "runs", "episodes")  # each written as .csv and .md
RESPONSE_TABLE = "knob-response"  # a sweep's or tune's knobs against each objective (.csv and .md)
TUNE_DEFAULT, TUNE_TRIAL = "default", "trial-{number}"  # how a tune's run directory names its policies
# A CSV may leave timing out; one written before recovery levels had their own column lacks them.
ADDED_LATER: tuple[str, ...] = ("recovery_level",)  # read as NA from an older table
OPTIONAL_ATTEMPT_COLUMNS = frozenset({"notices", "elapsed_ms", *ADDED_LATER})
MANIFEST_RUN_FIELDS: tuple[str, ...] = ("fact_survival", "outcome", "expected_outcome")  # + chars_lost
UNSAFE_FILENAME_CHARS = re.compile(r"[^A-Za-z0-9._-]+")
SAVE_METADATA: Mapping[str, Mapping[str, None]] = MappingProxyType(
    {"png": {"Software": None}, "svg": {"Date": None}, "pdf": {"CreationDate": None}}
)
SVG_HASH_SALT = "ctxsim-report"  # fixed ids inside SVG files
EPISODE_SOURCE_COLUMNS: tuple[str, ...] = (
    "run_id",
    "policy",
    "scenario",
    "turn",
    "outcome",
    "failure_kind",
    "recovery_level",
    "identical_retry",
)
# SessionStats' breakdown of archived chars by source (planned, recovery, microcompact, dedup, tool
# budget, context editing): a mapping field, or one integer field per source.
ARCHIVE_SOURCES_FIELD = "chars_archived_by_source"
ARCHIVE_SOURCE_PREFIX = "chars_archived_"
COMPARISON_COLUMNS: Mapping[str, str] = MappingProxyType(
    {
        "runs": "runs of the policy on the scenario",
        "episodes": "failure episodes (consecutive rejected attempts of one turn)",
        "recovered_pct": "episodes that ended in an accepted request, % (NA: no failure to recover)",
        "rejected_per_episode": "rejected requests per failure episode (the floor is 1)",
        "summarizer_usd_per_100_turns": "summarizer USD per 100 turns",
        "cache_adjusted_usd_per_100_turns": "provider input USD per 100 turns with prompt caching",
        "fact_survival_pct": "tagged facts still in the history or recallable at the end, mean over runs, %",
        "chars_lost": "original chars irrecoverably lost, summed over runs (must stay 0)",
    }
)


@dataclass(frozen=True, slots=True)
class RunData:
    """A run directory read back: the attempt table, the manifest, the per-run summaries."""

    attempts: pd.DataFrame
    manifest: dict[str, Any]
    summaries: pd.DataFrame


def failure_counts(attempts: pd.DataFrame) -> dict[str, int]:
    """Failures of one run by kind: each failure episode by its first kind, plus every truncated answer.

    A truncated answer (``truncated``: accepted, cut at ``max_tokens``) opens no episode — an
    escalation follows, not a recovery — yet it is a failure of that attempt: it counts as
    ``output_truncated``, once per truncated attempt.
    """
    first_kinds = episodes(attempts)["first_failure_kind"].value_counts()
    counts = {str(kind): int(n) for kind, n in first_kinds.items()}
    truncated = attempts.loc[attempts["outcome"] == OUTCOME_TRUNCATED, "failure_kind"]
    for kind in truncated.fillna("output_truncated"):
        counts[str(kind)] = counts.get(str(kind), 0) + 1
    return dict(sorted(counts.items()))


def archived_by_source(stats: object) -> dict[str, int]:
    """Chars a session archived, by source, when its ``SessionStats`` breaks them down; else ``{}``.

    Reads a ``chars_archived_by_source`` mapping, or integer fields named
    ``chars_archived_<source>`` (the total ``chars_archived`` is not a source).
    """
    values = stats.to_dict() if hasattr(stats, "to_dict") else dict(getattr(stats, "__dict__", {}))
    breakdown = values.get(ARCHIVE_SOURCES_FIELD)
    if isinstance(breakdown, Mapping):
        return {str(source): int(chars) for source, chars in breakdown.items()}
    return {
        name.removeprefix(ARCHIVE_SOURCE_PREFIX): int(value)
        for name, value in values.items()
        if name.startswith(ARCHIVE_SOURCE_PREFIX)
        and name != ARCHIVE_SOURCES_FIELD
        and isinstance(value, int)
        and not isinstance(value, bool)
    }


def comparison_table(summary_frame: pd.DataFrame) -> pd.DataFrame:
    """Policy × scenario comparison, :data:`COMPARISON_COLUMNS`, indexed by ``(policy, scenario)``.

    Sums over runs, rates over the sums (episodes, turns); ``fact_survival_pct`` is NA
    when the summaries carry no ``fact_survival`` and ``recovered_pct`` /
    ``rejected_per_episode`` are NA without failure episodes. First-seen order.
    """
    require_columns(summary_frame, SUMMARY_NEEDS, "comparison_table", SUMMARY_HINT)
    return aggregate_runs(summary_frame, ["policy", "scenario"])[list(COMPARISON_COLUMNS)]


def policy_episodes(attempts: pd.DataFrame) -> pd.DataFrame:
    """:func:`simulator.research.metrics.episodes` of every run, with its ``policy`` and ``scenario``."""
    require_columns(attempts, EPISODE_SOURCE_COLUMNS, "policy_episodes", ATTEMPTS_HINT)
    found = episodes(attempts)
    identity = attempts.drop_duplicates("run_id").set_index("run_id")
    return found.assign(
        policy=found["run_id"].map(identity["policy"]).astype("string"),
        scenario=found["run_id"].map(identity["scenario"]).astype("string"),
    )[["run_id", "policy", "scenario", *[c for c in EPISODE_COLUMNS if c != "run_id"]]]


def run_summaries(attempts: pd.DataFrame, *, manifest: Mapping[str, Any] | None = None) -> pd.DataFrame:
    """Per-run summaries, one row per run in first-seen order, for the summary figures and tables.

    Columns: :func:`simulator.research.metrics.summarize_run`'s keys, then ``fact_survival``,
    ``outcome`` and ``expected_outcome`` from the manifest's ``runs`` entry of the run
    (NA without one; its ``chars_lost`` wins over the column's), then any extra (swept
    knob) columns of the attempt table. ``failures_by_kind`` reads ``kind=count, ...``.
    """
    import pandas as pd

    require_columns(attempts, ("run_id",), "run_summaries", ATTEMPTS_HINT)
    by_run = {
        entry["run_id"]: entry
        for entry in (manifest or {}).get("runs", ())
        if isinstance(entry, Mapping) and "run_id" in entry
    }
    knobs = [name for name in attempts.columns if name not in RUN_COLUMNS]
    rows = []
    for run_id, run in attempts.groupby("run_id", sort=False):
        entry = by_run.get(run_id, {})
        summary = summarize_run(run, chars_lost=entry.get("chars_lost"))
        summary["failures_by_kind"] = ", ".join(f"{k}={n}" for k, n in failure_counts(run).items())
        summary.update({name: entry.get(name) for name in MANIFEST_RUN_FIELDS})
        summary.update({name: run[name].iloc[0] for name in knobs})
        rows.append(summary)
    frame = pd.DataFrame(rows)
    return frame.astype(
        {
            "fact_survival": "Float64",
            "outcome": "string",
            "expected_outcome": "string",
            "seed": "Int64",
            "run_id": "string",
            "transcript": "string",
            "scenario": "string",
            "policy": "string",
        }
    )


# -- tables as text -------------------------------------------------------------------------------
def _default_index(frame: pd.DataFrame) -> bool:
    """Whether the index is pandas' unnamed ``0..n-1`` (so a table need not show it)."""
    import pandas as pd

    index = frame.index
    return isinstance(index, pd.RangeIndex) and index.start == 0 and index.step == 1 and index.name is None


def markdown_table(frame: pd.DataFrame, *, float_format: str = "{:.4g}") -> str:
    """``frame`` as a GitHub markdown table (no tabulate needed); numbers right-aligned.

    The index is written as leading columns unless it is the default ``0..n-1``;
    NA reads ``—``; ``|`` is escaped and newlines become spaces.

    >>> import pandas as pd
    >>> print(markdown_table(pd.DataFrame({"policy": ["a", "b"], "pct": [100.0, 2 / 3]})))
    | policy |    pct |
    | ------ | -----: |
    | a      |    100 |
    | b      | 0.6667 |
    """
    from pandas.api.types import is_bool_dtype, is_numeric_dtype

    table = frame if _default_index(frame) else frame.reset_index()
    headers = [str(name) for name in table.columns]
    numeric = [is_numeric_dtype(table[c]) and not is_bool_dtype(table[c]) for c in table.columns]

    def cell(value: object) -> str:
        if is_na(value):
            return NA_TEXT
        if isinstance(value, float):
            return float_format.format(value)
        return str(value).replace("|", "\\|").replace("\n", " ")

    rows = [[cell(value) for value in row] for row in table.itertuples(index=False)]
    widths = [max([3, len(header)] + [len(row[i]) for row in rows]) for i, header in enumerate(headers)]

    def line(cells: Sequence[str]) -> str:
        return (
            "| "
            + " | ".join(
                text.rjust(width) if right else text.ljust(width)
                for text, width, right in zip(cells, widths, numeric, strict=True)
            )
            + " |"
        )

    rule = [
        "-" * (width - 1) + ":" if right else "-" * width
        for width, right in zip(widths, numeric, strict=True)
    ]
    return "\n".join([line(headers), "| " + " | ".join(rule) + " |", *(line(row) for row in rows)])


# -- run directories ------------------------------------------------------------------------------
def read_attempts(path: Path) -> pd.DataFrame:
    """An attempt CSV (``ctxsim run``/sweep) back as a typed frame: :data:`RUN_COLUMNS` dtypes.

    Only empty cells are NA (a policy named ``None`` stays a name); extra columns (swept
    knobs) keep pandas' inferred types; ``notices`` and ``elapsed_ms`` may be absent.
    """
    import pandas as pd

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no attempt table; `ctxsim run --out DIR` writes {ATTEMPTS_CSV}")
    header = pd.read_csv(path, nrows=0).columns
    missing = [name for name in RUN_COLUMNS if name not in header and name not in OPTIONAL_ATTEMPT_COLUMNS]
    if missing:
        raise ValueError(
            f"{path}: the attempt table lacks columns {', '.join(missing)} (see metrics.RUN_COLUMNS)"
        )
    dtypes = {name: dtype for name, (dtype, _meaning) in RUN_COLUMNS.items() if name in header}
    frame = pd.read_csv(path, dtype=dtypes, keep_default_na=False, na_values=[""])
    if "notices" in frame:
        frame["notices"] = frame["notices"].fillna("")
    for name in ADDED_LATER:
        if name not in frame:
            dtype = RUN_COLUMNS[name][0]
            frame.insert(
                list(RUN_COLUMNS).index(name), name, pd.Series(pd.NA, index=frame.index, dtype=dtype)
            )
    return frame


def _read_manifest(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no run manifest; `ctxsim run --out DIR` writes {MANIFEST_JSON}")
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as error:
        raise ValueError(f"{path}:{error.lineno}: the manifest is not valid JSON ({error.msg})") from error
    if not isinstance(document, dict):
        raise ValueError(f"{path}: the manifest must be a JSON object, got {type(document).__name__}")
    return document


def _read_summaries(path: Path) -> pd.DataFrame:
    import pandas as pd

    frame = pd.read_csv(
        path, keep_default_na=False, na_values=[""], dtype={"policy": "string", "scenario": "string"}
    )
    missing = [name for name in SUMMARY_NEEDS if name not in frame.columns]
    if missing:
        raise ValueError(f"{path}: the run summary table lacks columns {', '.join(missing)}")
    return frame


def load_run(run_dir: Path) -> RunData:
    """Read a run or sweep directory: :data:`ATTEMPTS_CSV`, :data:`MANIFEST_JSON`, and
    :data:`SUMMARY_CSV` when present (else the summaries are computed from the attempts)."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise FileNotFoundError(f"{run_dir}: no such run directory")
    attempts = read_attempts(run_dir / ATTEMPTS_CSV)
    manifest = _read_manifest(run_dir / MANIFEST_JSON)
    if attempts.empty:
        raise ValueError(f"{run_dir / ATTEMPTS_CSV}: the attempt table has no rows")
    summary_path = run_dir / SUMMARY_CSV
    if summary_path.is_file():
        summaries = _read_summaries(summary_path)
    else:
        summaries = run_summaries(attempts, manifest=manifest)
    return RunData(attempts=attempts, manifest=manifest, summaries=summaries)


def _save(figure: Figure, stem: Path, formats: Sequence[str]) -> list[Path]:
    from matplotlib import rc_context

    paths = []
    with rc_context({"svg.hashsalt": SVG_HASH_SALT}):
        for fmt in formats:
            path = stem.with_name(f"{stem.name}.{fmt}")
            figure.savefig(path, format=fmt, dpi=FIGURE_DPI, metadata=dict(SAVE_METADATA[fmt]))
            paths.append(path)
    return paths


def _write_table(frame: pd.DataFrame, stem: Path) -> list[Path]:
    csv_path = stem.with_name(f"{stem.name}.csv")
    md_path = stem.with_name(f"{stem.name}.md")
    frame.to_csv(csv_path, index=not _default_index(frame), lineterminator="\n")
    md_path.write_text(markdown_table(frame) + "\n", encoding="utf-8")
    return [csv_path, md_path]


def _provider_windows(manifest: Mapping[str, Any]) -> dict[str, int]:
    """Each scenario's provider context window, from the manifest (``ctxsim run`` records them)."""
    windows = {}
    for scenario in manifest.get("scenarios", ()):
        provider = scenario.get("provider") if isinstance(scenario, Mapping) else None
        if isinstance(provider, Mapping) and isinstance(provider.get("context_window"), int):
            windows[str(scenario.get("name"))] = provider["context_window"]
    return windows


def _safe_part(name: object) -> str:
    return UNSAFE_FILENAME_CHARS.sub("_", str(name)).strip("_") or "run"


def budget_stem(*, scenario: str, transcript: str, policy: str, seed: int | None) -> str:
    """The file name (without suffix) of one run's budget curve, the same for ``ctxsim run --figures``
    and ``ctxsim report``: scenario first (files sort by scenario), then transcript, policy and seed.

    >>> budget_stem(scenario="corporate-128k-waf", transcript="chat-50k", policy="keep_recent=6", seed=0)
    'budget-corporate-128k-waf--chat-50k--keep_recent_6--s0'
    """
    return BUDGET_FILE.format(
        scenario=_safe_part(scenario),
        transcript=_safe_part(transcript),
        policy=_safe_part(policy),
        seed="-" if seed is None or is_na(seed) else int(seed),
    )


def write_report(
    run_dir: Path, *, formats: Sequence[str] = ("png",), out_dir: Path | None = None
) -> list[Path]:
    """Regenerate the report of a run or sweep directory from its files; return the paths written.

    Writes into ``out_dir`` (default ``run_dir/report``): a budget curve per run (with the
    scenario's provider window when the manifest records it), the outcome matrix (when runs
    carry their expected outcome, or there are failure episodes), rejected requests per
    episode (when there are failure episodes), the summarizer cost, the cost/fact-survival
    Pareto scatter (when runs carry ``fact_survival`` and there are several policies), for a sweep or
    tune each knob against each objective (``knob-response`` table and one figure per objective), and
    the ``comparison``, ``runs`` and ``episodes`` tables as CSV and markdown. A tune's budget curves are
    its default's and its chosen trial's. Deterministic: the same directory gives the same bytes.
    """
    unknown = [fmt for fmt in formats if fmt not in SAVE_METADATA]
    if unknown or not formats:
        raise ValueError(
            f"write_report formats must be among {', '.join(SAVE_METADATA)}; got {list(formats)}"
        )
    data = load_run(Path(run_dir))
    target = Path(run_dir) / REPORT_DIR if out_dir is None else Path(out_dir)
    target.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    windows = _provider_windows(data.manifest)
    identity = data.attempts.drop_duplicates("run_id").set_index("run_id")
    drawn = _budget_policies(data.manifest)
    for run_id, run in identity.iterrows():
        if drawn is not None and str(run["policy"]) not in drawn:
            continue
        window = windows.get(str(run["scenario"]))
        figure = budget_curve(data.attempts, run_id=str(run_id), provider_window=window)
        stem = budget_stem(
            scenario=run["scenario"], transcript=run["transcript"], policy=run["policy"], seed=run["seed"]
        )
        written += _save(figure, target / stem, formats)
    found = policy_episodes(data.attempts)
    summaries = data.summaries
    judged = "expected_outcome" in summaries and summaries["expected_outcome"].notna().any()
    if judged or not found.empty:
        written += _save(outcome_matrix(summaries), target / FIGURE_FILES["outcome_matrix"], formats)
    if not found.empty:
        written += _save(rejected_per_episode(found), target / FIGURE_FILES["rejected_per_episode"], formats)
    written += _save(summarizer_cost(summaries), target / FIGURE_FILES["summarizer_cost"], formats)
    several = summaries["policy"].nunique() > 1  # one policy's "front" is a single dot
    if several and "fact_survival" in summaries and summaries["fact_survival"].notna().any():
        written += _save(
            cost_vs_fact_survival(summaries), target / FIGURE_FILES["cost_vs_fact_survival"], formats
        )
    knobs = [name for name in data.manifest.get("knob_columns", ()) if name in summaries]
    if knobs and "seed" in summaries:
        response = knob_response(summaries, knobs)
        written += _write_table(response, target / RESPONSE_TABLE)
        for objective in dict.fromkeys(response["objective"]):
            figure_stem = target / RESPONSE_FILE.format(objective=objective.replace("_", "-"))
            written += _save(knob_response_figure(response, objective), figure_stem, formats)
    for stem, table in zip(TABLE_STEMS, (comparison_table(summaries), summaries, found), strict=True):
        written += _write_table(table, target / stem)
    return written


def _budget_policies(manifest: Mapping[str, Any]) -> set[str] | None:
    """The policies whose runs get budget curves: a tune's default and chosen trial; else every one."""
    if manifest.get("kind") != "tune":
        return None
    chosen = manifest.get("chosen_trial")
    return {TUNE_DEFAULT, *([TUNE_TRIAL.format(number=chosen)] if chosen is not None else [])}
