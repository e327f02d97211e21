"""What figures cost the main command: ``python -m simulator run`` against ``--no-figures`` and ``--figures``.

The three commands run as a user runs them (a fresh interpreter each, every bundled scenario, the
default policy), alternately, ``--repeats`` times each. ``run`` draws no figure (they are drawn on
demand by ``ctxsim report``); ``--figures`` draws the quick look in a worker process while the
replays run (:class:`simulator.research.run_files.FigureWriter`). Reported: the median wall time of
each, ``run`` ÷ ``run --no-figures`` (target ≤ 1.2) and ``run --figures`` ÷ ``run --no-figures``,
the CPU time of each command's own process, and the machine's load average before the runs — the
overlap of ``--figures`` needs a free core, so a busy machine shows in its ratio.

    python bench/bench_figures.py [--repeats 5] [--write]   # --write updates BENCHMARKS.md's section
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
BENCHMARKS_MD = ROOT / "BENCHMARKS.md"
START_MARKER = "<!-- figures:start -->"
END_MARKER = "<!-- figures:end -->"
TARGET_RATIO = 1.2
DEFAULT_REPEATS = 5
CONTENDERS: dict[str, tuple[str, ...]] = {
    "run": ("run",),
    "run --no-figures": ("run", "--no-figures"),
    "run --figures": ("run", "--figures"),
}


def _children_cpu() -> float:  # the figure worker is not a direct child: its CPU is not counted
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def time_command(args: Sequence[str], out: Path) -> tuple[float, float]:
    """(wall seconds, CPU seconds of its process) of ``python -m simulator ARGS --out OUT``."""
    cpu_before = _children_cpu()
    start = time.perf_counter()
    command = [sys.executable, "-m", "simulator", *args, "--out", str(out)]
    subprocess.run(command, cwd=ROOT, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start, _children_cpu() - cpu_before


def run(repeats: int = DEFAULT_REPEATS) -> dict[str, Any]:
    """Alternate the contenders ``repeats`` times; medians, the ratio, CPU times and the load."""
    load_before = os.getloadavg()
    walls: dict[str, list[float]] = {name: [] for name in CONTENDERS}
    cpus: dict[str, list[float]] = {name: [] for name in CONTENDERS}
    with tempfile.TemporaryDirectory(prefix="bench-figures-") as scratch:
        for index in range(repeats):
            order = list(CONTENDERS) if index % 2 == 0 else list(reversed(CONTENDERS))
            for name in order:
                wall, cpu = time_command(CONTENDERS[name], Path(scratch) / f"{index}-{len(walls[name])}")
                walls[name].append(wall)
                cpus[name].append(cpu)
    medians = {name: statistics.median(values) for name, values in walls.items()}
    ratio = medians["run"] / medians["run --no-figures"]
    return {
        "figures_ratio": medians["run --figures"] / medians["run --no-figures"],
        "repeats": repeats,
        "wall_s": medians,
        "cpu_s": {name: statistics.median(values) for name, values in cpus.items()},
        "ratio": ratio,
        "target": TARGET_RATIO,
        "met": ratio <= TARGET_RATIO,
        "cpus": os.cpu_count(),
        "load_before": load_before,
        "load_after": os.getloadavg(),
    }


def section(result: dict[str, Any]) -> list[str]:
    """The BENCHMARKS.md lines for ``result``."""
    wall, cpu = result["wall_s"], result["cpu_s"]
    load = " / ".join(f"{value:.1f}" for value in result["load_before"])
    verdict = "met" if result["met"] else "missed"
    return [
        "| command | median wall time | CPU time of the command's process |",
        "|---|---:|---:|",
        *(
            f"| `python -m simulator {name}` | {wall[name]:.2f} s | {cpu[name]:.2f} s |"
            for name in CONTENDERS
        ),
        "",
        f"Ratio `run` ÷ `run --no-figures`: **{result['ratio']:.2f}** "
        f"(target ≤ {result['target']}: {verdict}); `run --figures` ÷ `run --no-figures`: "
        f"{result['figures_ratio']:.2f}; "
        f"median of {result['repeats']} alternated runs each, {result['cpus']} cores, load average "
        f"{load} (1/5/15 min) before the runs.",
    ]


def _rewrite(path: Path, lines: Sequence[str]) -> None:
    text = path.read_text(encoding="utf-8")
    head, _, rest = text.partition(START_MARKER)
    _, _, tail = rest.partition(END_MARKER)
    if not rest:
        raise SystemExit(f"{path}: no {START_MARKER} … {END_MARKER} section to rewrite")
    body = "\n".join(lines)
    path.write_text(f"{head}{START_MARKER}\n{body}\n{END_MARKER}{tail}", encoding="utf-8")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--repeats", type=int, default=DEFAULT_REPEATS, help="runs of each command")
    parser.add_argument("--write", action="store_true", help=f"rewrite the section of {BENCHMARKS_MD.name}")
    args = parser.parse_args(argv)
    result = run(args.repeats)
    lines = section(result)
    print("\n".join(lines))
    if args.write:
        _rewrite(BENCHMARKS_MD, lines)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
