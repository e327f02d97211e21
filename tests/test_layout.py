"""The architecture as a reader sees it: wings with one-line jobs, one-way imports, no cycles."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LIBRARY_WINGS = (
    "archive",
    "classify",
    "compaction",
    "passes",
    "recovery",
    "session",
    "summarize",
    "transport",
    "turn",
    "wire",
)
SIMULATOR_WINGS = ("cli", "engines", "providers", "proxy", "research", "transcripts")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path) -> set[str]:
    """Absolute module names ``path`` imports (relative imports resolved), those under
    ``if TYPE_CHECKING:`` included: a cycle a type checker needs is a cycle of the design."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = _module_name(path) if path.name == "__init__.py" else _module_name(path).rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                module = ".".join([*base, node.module] if node.module else base)
            else:
                module = node.module or ""
            found.add(module)
            found.update(f"{module}.{alias.name}" for alias in node.names)
    return found


def _modules(package: str) -> dict[str, Path]:
    return {_module_name(p): p for p in sorted((ROOT / package).rglob("*.py"))}


def test_the_library_never_imports_the_simulator() -> None:
    offenders = {
        name: sorted(i for i in _imports(path) if i == "simulator" or i.startswith("simulator."))
        for name, path in _modules("ctxrecover").items()
    }
    assert {name: found for name, found in offenders.items() if found} == {}


@pytest.mark.parametrize("package", ["ctxrecover", "simulator"])
def test_the_module_import_graph_has_no_cycle(package: str) -> None:
    modules = _modules(package)
    graph = {
        name: {i for i in _imports(path) if i in modules and i != name} for name, path in modules.items()
    }
    # a package __init__ that re-exports its modules is not a cycle with them
    graph = {name: {d for d in deps if not (d == name.rpartition(".")[0])} for name, deps in graph.items()}
    visiting: list[str] = []
    done: set[str] = set()

    def visit(name: str) -> None:
        if name in done:
            return
        assert name not in visiting, f"import cycle: {' -> '.join([*visiting[visiting.index(name) :], name])}"
        visiting.append(name)
        for dep in sorted(graph[name]):
            visit(dep)
        visiting.pop()
        done.add(name)

    for name in sorted(graph):
        visit(name)


@pytest.mark.parametrize(
    "wing",
    [f"ctxrecover/{w}" for w in LIBRARY_WINGS] + [f"simulator/{w}" for w in SIMULATOR_WINGS],
)
def test_each_wing_states_its_job_in_one_docstring_line(wing: str) -> None:
    init = ROOT / wing / "__init__.py"
    docstring = ast.get_docstring(ast.parse(init.read_text(encoding="utf-8")))
    assert docstring, f"{init} has no docstring"
    assert docstring.splitlines()[0].strip(), f"{init}: the first docstring line states the wing's job"


def test_the_tests_mirror_the_packages() -> None:
    for package, wings in (("ctxrecover", LIBRARY_WINGS), ("simulator", SIMULATOR_WINGS)):
        for wing in wings:
            assert (ROOT / "tests" / package / wing).is_dir(), f"tests/{package}/{wing} is missing"


def test_no_test_skips_for_a_missing_library_module() -> None:
    """The library is always there: a test guarded by importorskip on it would silently stop running."""
    guarded = [
        f"{path.relative_to(ROOT)}:{number}"
        for path in sorted((ROOT / "tests").rglob("*.py"))
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1)
        if re.search(r"importorskip\(\s*[\"']ctxrecover", line)
    ]
    assert guarded == []
