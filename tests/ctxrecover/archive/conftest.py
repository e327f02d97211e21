"""Fixtures shared by the archive tests: a disk store's path, a disk store, and both stores."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from ctxrecover.archive import Archive, MemoryArchive
from ctxrecover.archive.disk import DiskArchive


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "ccr" / "archive.sqlite"


@pytest.fixture
def disk(db_path: Path) -> Iterator[DiskArchive]:
    with DiskArchive(db_path) as store:
        yield store


@pytest.fixture(params=["memory", "disk"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Archive]:
    if request.param == "memory":
        yield MemoryArchive()
    else:
        with DiskArchive(tmp_path / "store.sqlite") as disk_store:
            yield disk_store
