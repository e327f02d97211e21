"""(Re)execute the notebooks in place, keeping their outputs: nbval compares every checked cell against them.

    .venv/bin/python notebooks/execute.py                      # every notebook here
    .venv/bin/python notebooks/execute.py 04_corporate_proxy_incident.ipynb

Each notebook runs top to bottom in a fresh kernel of the current interpreter, from this
directory (as nbval runs it). Outputs are kept; only ``metadata.widgets`` (widget state:
model ids that change on every run, which nbval never reads) is stripped, and no
per-cell timing is recorded: re-executing an unchanged notebook changes only widget model ids.
Prints the wall time of each notebook (each must stay under :data:`BUDGET_S` on a
2-core machine).

Needs nbclient (``pip install nbclient``), which is not a project dependency: in CI,
nbval executes the notebooks itself.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path

HERE = Path(__file__).resolve().parent
CELL_TIMEOUT_S = 120
BUDGET_S = 60.0
KERNEL_NAME = "python3"


def execute(path: Path) -> float:
    """Execute ``path`` in place; return its wall time in seconds."""
    import nbformat
    from nbclient import NotebookClient

    notebook = nbformat.read(path, as_version=4)
    client = NotebookClient(
        notebook,
        timeout=CELL_TIMEOUT_S,
        kernel_name=KERNEL_NAME,
        record_timing=False,
        resources={"metadata": {"path": str(path.parent)}},
    )
    start = time.perf_counter()
    client.execute()
    elapsed = time.perf_counter() - start
    notebook.metadata.pop("widgets", None)
    nbformat.validate(notebook)
    nbformat.write(notebook, path)
    return elapsed


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("notebooks", nargs="*", help="notebook files (default: every *.ipynb here)")
    args = parser.parse_args(argv)
    paths = [Path(name) if Path(name).is_file() else HERE / name for name in args.notebooks]
    paths = paths or sorted(HERE.glob("*.ipynb"))
    slow = []
    for path in paths:
        elapsed = execute(path)
        print(f"{path.name}: {elapsed:.1f} s")
        if elapsed > BUDGET_S:
            slow.append(path.name)
    if slow:
        print(f"over the {BUDGET_S:.0f} s budget: {', '.join(slow)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
