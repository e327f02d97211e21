"""Every example in the library's and the simulator's docstrings runs and prints what it shows."""

from __future__ import annotations

import doctest
import importlib
import pkgutil
from types import ModuleType

import pytest

import ctxrecover
import simulator


def _modules(package: ModuleType) -> list[str]:
    walked = pkgutil.walk_packages(package.__path__, prefix=f"{package.__name__}.")
    return [package.__name__, *sorted(info.name for info in walked if not info.name.endswith("__main__"))]


def _examples(name: str) -> list[doctest.DocTest]:
    module = importlib.import_module(name)
    found = doctest.DocTestFinder().find(module, name, globs=vars(module).copy())
    return [test for test in found if test.examples]


MODULES = [name for package in (ctxrecover, simulator) for name in _modules(package) if _examples(name)]


def test_the_examples_are_found() -> None:
    assert len(MODULES) > 30  # a broken walk would make the examples test below vacuous


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples_run(name: str) -> None:
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    for test in _examples(name):
        runner.run(test)
    results = runner.summarize(verbose=False)
    assert results.failed == 0, f"{results.failed} of {results.attempted} docstring examples in {name} failed"
