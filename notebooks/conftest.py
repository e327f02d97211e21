"""Notebook cells collected by nbval are slow tests: ``pytest -m "not slow"`` leaves them out."""

from __future__ import annotations

import pytest


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every notebook cell ``slow`` (the marker is declared in pyproject.toml)."""
    for item in items:
        if item.path.suffix == ".ipynb":
            item.add_marker(pytest.mark.slow)
