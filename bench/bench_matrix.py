"""The whole matrix: every bundled transcript under every bundled scenario, against the matrix invariants.

::

    python bench/bench_matrix.py                      # every cell; refresh BENCHMARKS.md's matrix table
    python bench/bench_matrix.py --jobs 2             # cells on 2 worker processes
    python bench/bench_matrix.py --transcripts chat-50k,images-2m --scenarios rate-limit-429
                                                      # a subset: prints, writes nothing

Each cell is one in-process replay (:func:`simulator.replay.replay`) condensed by
:func:`simulator.research.workload_matrix.matrix_run`: its invariant violations (0 chars lost, a
``fail_fast_floor`` really over the limit, rejected requests within issue 24's oracle) and its
``[expect]`` problems, those the scenario marks ``own_workload`` apart. Cells stream to
``bench/matrix.jsonl`` as they finish (``--out``), so a long run can be read while it goes.
The table is per scenario: runs, turns completed of all turns, rejected requests, chars lost,
violations per invariant, and ``[expect]`` misses that should hold on any workload vs those that
only describe the scenario's own. Deterministic (mock providers, fixed seeds).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections import Counter
from collections.abc import Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from simulator.proxy.scenario import list_scenarios
from simulator.replay import replay
from simulator.research.workload_matrix import INVARIANTS, MatrixRun, Violation, matrix_run
from simulator.workloads import bundled_transcripts

BENCH_DIR = Path(__file__).resolve().parent
MATRIX_JSONL = BENCH_DIR / "matrix.jsonl"
BENCHMARKS_MD = BENCH_DIR.parent / "BENCHMARKS.md"
START_MARKER = "<!-- matrix:start -->"
END_MARKER = "<!-- matrix:end -->"


def cell(job: tuple[str, str]) -> MatrixRun:
    """One transcript × scenario replay, condensed (a top-level function, so a process pool can run it)."""
    transcript, scenario = job
    return matrix_run(replay(transcript, scenario))


def _as_json(run: MatrixRun) -> str:
    return json.dumps(dataclasses.asdict(run), ensure_ascii=False)


def _row(label: str, rows: Sequence[MatrixRun], *, bold: bool = False) -> str:
    broken = Counter(v.invariant for run in rows for v in run.violations)
    counts = [f"**{broken.get(name, 0)}**" if bold else str(broken.get(name, 0)) for name in INVARIANTS]
    cells = [
        label,
        str(len(rows)),
        f"{sum(r.turns_completed for r in rows):,} / {sum(r.turns for r in rows):,}",
        f"{sum(r.rejected_requests for r in rows):,}",
        f"{sum(r.chars_lost for r in rows):,}",
        *counts,
        str(sum(bool(r.expect_general) for r in rows)),
        str(sum(bool(r.expect_own_workload) for r in rows)),
    ]
    return "| " + " | ".join(cells) + " |"


def table(runs: Sequence[MatrixRun]) -> str:
    """The per-scenario Markdown table, then one line per violation."""
    names = ["scenario", "runs", "turns completed", "rejected", "chars lost", *INVARIANTS]
    names += ["[expect] missed (any workload)", "[expect] missed (own workload only)"]
    lines = ["| " + " | ".join(names) + " |", "|" + "---|" * len(names)]
    for scenario in dict.fromkeys(run.scenario for run in runs):
        lines.append(_row(f"`{scenario}`", [run for run in runs if run.scenario == scenario]))
    lines.append(_row("**all**", runs, bold=True))
    violations = [(run, v) for run in runs for v in run.violations]
    if violations:
        lines += ["", "Violations:", ""]
        lines += [f"- `{run.scenario}` × `{run.transcript}` — {_violation(v)}" for run, v in violations]
    return "\n".join(lines)


def _violation(violation: Violation) -> str:
    return f"{violation.invariant}: {violation.detail}"


def write_markdown(text: str, path: Path = BENCHMARKS_MD) -> None:
    """Replace the table between the matrix markers of BENCHMARKS.md (appended when absent)."""
    document = path.read_text(encoding="utf-8")
    block = f"{START_MARKER}\n{text}\n{END_MARKER}"
    if START_MARKER in document:
        head, rest = document.split(START_MARKER, 1)
        document = head + block + rest.split(END_MARKER, 1)[1]
    else:
        document = document.rstrip("\n") + "\n\n" + block + "\n"
    path.write_text(document, encoding="utf-8")


def run(
    transcripts: Sequence[str], scenarios: Sequence[str], *, jobs: int, out: Path | None
) -> list[MatrixRun]:
    """Every cell (scenario-major), streamed to ``out`` as JSON lines when given."""
    work = [(transcript, scenario) for scenario in scenarios for transcript in transcripts]
    runs: list[MatrixRun] = []
    stream = out.open("w", encoding="utf-8") if out is not None else None
    try:
        results: Iterable[MatrixRun]
        if jobs > 1:
            pool = ProcessPoolExecutor(max_workers=jobs)
            results = pool.map(cell, work)
        else:
            pool, results = None, map(cell, work)
        for done in results:
            runs.append(done)
            if stream is not None:
                stream.write(_as_json(done) + "\n")
                stream.flush()
        if pool is not None:
            pool.shutdown()
    finally:
        if stream is not None:
            stream.close()
    return runs


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--transcripts", default="", help="comma-separated names (default: every bundled one)"
    )
    parser.add_argument("--scenarios", default="", help="comma-separated names (default: every bundled one)")
    parser.add_argument("--jobs", type=int, default=1, help="worker processes (default 1)")
    parser.add_argument(
        "--out", type=Path, default=None, help=f"JSON lines per cell (default {MATRIX_JSONL})"
    )
    args = parser.parse_args(argv)
    subset = bool(args.transcripts or args.scenarios)
    transcripts = [n for n in args.transcripts.split(",") if n] or bundled_transcripts()
    scenarios = [n for n in args.scenarios.split(",") if n] or list_scenarios()
    out = args.out or (None if subset else MATRIX_JSONL)
    runs = run(transcripts, scenarios, jobs=args.jobs, out=out)
    text = table(runs)
    print(text)
    if not subset:
        write_markdown(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
