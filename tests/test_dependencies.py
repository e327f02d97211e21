"""Every package a test imports is installed by the extras: CI installs ``.[dev]`` and nothing else.

A test that imports a package no extra declares passes only on machines where something else
happened to install it (botocore came with the AWS CLI here). Each module the collected tests
import is mapped to the distributions that provide it and checked against the requirement
closure of ``dev`` (an ``importorskip`` one against the closure of any extra: its skip
reason names that extra).
"""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from collections.abc import Iterable, Mapping
from functools import cache
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
PROJECT = PYPROJECT["project"]["name"]
EXTRAS: dict[str, list[str]] = PYPROJECT["project"]["optional-dependencies"]
FIRST_PARTY = frozenset({"ctxrecover", "simulator", "tests"})
# Files under tests/ that pytest neither collects nor imports, with the reason.
NOT_RUN_BY_PYTEST = {
    "tests/reliability/atheris_fuzz.py": "coverage-guided fuzzing, run by hand after `pip install atheris`",
}


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_closure(requirements: Iterable[str]) -> frozenset[str]:
    """The distributions ``requirements`` install, transitively (the project's own extras expanded)."""
    names: set[str] = set()
    seen: set[tuple[str, frozenset[str]]] = set()
    stack = [Requirement(text) for text in [*requirements, *PYPROJECT["project"]["dependencies"]]]
    while stack:
        requirement = stack.pop()
        name, extras = _normal(requirement.name), frozenset(requirement.extras)
        if (name, extras) in seen:
            continue
        seen.add((name, extras))
        names.add(name)
        if name == PROJECT:
            stack += [Requirement(text) for extra in extras for text in EXTRAS[extra]]
            continue
        try:
            needs = [Requirement(text) for text in metadata.requires(requirement.name) or ()]
        except metadata.PackageNotFoundError:
            continue  # not installed here: its own dependencies are unknown, the name still counts
        for need in needs:
            if need.marker is None or any(need.marker.evaluate({"extra": e}) for e in extras or {""}):
                stack.append(need)
    return frozenset(names)


def collected_files() -> list[Path]:
    files = sorted(path for path in (ROOT / "tests").rglob("*.py"))
    return [path for path in files if path.relative_to(ROOT).as_posix() not in NOT_RUN_BY_PYTEST]


def imported_modules(path: Path) -> tuple[set[str], set[str]]:
    """(top-level modules ``path`` imports, those it asks ``pytest.importorskip`` for)."""
    imported: set[str] = set()
    skipped: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            imported |= {alias.name.partition(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            imported.add(node.module.partition(".")[0])
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "importorskip"
            and node.args
            and isinstance(node.args[0], ast.Constant)
        ):
            skipped.add(str(node.args[0].value).partition(".")[0])
    return imported, skipped


def third_party(modules: set[str]) -> set[str]:
    local = {path.stem for path in (ROOT / "tests").rglob("*.py")}
    return {m for m in modules if m not in sys.stdlib_module_names and m not in FIRST_PARTY | local}


@cache
def _distributions_of_modules() -> Mapping[str, list[str]]:
    return metadata.packages_distributions()


@cache
def closure_of(extras: tuple[str, ...]) -> frozenset[str]:
    return requirement_closure(text for extra in extras for text in EXTRAS[extra])


def providers(module: str) -> set[str]:
    """The distributions that install ``module`` (its own name when none installed here does)."""
    return {_normal(name) for name in _distributions_of_modules().get(module, [module])}


def test_the_closure_follows_the_project_s_own_extras() -> None:
    dev = closure_of(("dev",))
    assert {"pytest", "openai", "faker", "nbval", "ruff"} <= dev  # through test, sdks, sim, notebooks
    assert "langchain-core" not in dev and "langchain-core" in closure_of(("bench",))


def test_the_scan_sees_imports_and_importorskips() -> None:
    imported, skipped = imported_modules(ROOT / "tests" / "bench" / "test_bench_smoke.py")
    assert "pytest" in imported and "langchain_core" in skipped


@pytest.mark.parametrize("path", collected_files(), ids=lambda path: path.relative_to(ROOT).as_posix())
def test_every_package_a_test_imports_is_installed_by_an_extra(path: Path) -> None:
    dev, any_extra = closure_of(("dev",)), closure_of(tuple(EXTRAS))
    imported, skipped = imported_modules(path)
    missing = sorted(m for m in third_party(imported) if not providers(m) & dev)
    assert missing == [], f"imported but not installed by the 'dev' extra: {missing}"
    unguarded = sorted(m for m in third_party(skipped) if not providers(m) & any_extra)
    assert unguarded == [], f"asked for with importorskip but installed by no extra: {unguarded}"
