"""Where the bundled data lives: one resolver for every loader of scenarios, pages, transcripts and errors.

The data is the repository's top-level ``fixtures/`` folder. A clone or an editable install
(``pip install -e .``) reads it in place; a wheel carries a copy of it as package data
(``simulator/_data/fixtures``, mapped by hatch's ``force-include`` in ``pyproject.toml``),
found with :mod:`importlib.resources`. :func:`data_dir` picks the first that exists, so
``python -m simulator run`` works from any directory with either kind of install.

>>> data_dir("scenarios").name
'scenarios'
"""

from __future__ import annotations

from functools import cache
from importlib import resources
from pathlib import Path

__all__ = ["DATA_KINDS", "ResourceError", "data_dir", "data_root"]

# The folders of fixtures/ a loader may ask for.
DATA_KINDS: tuple[str, ...] = ("errors", "pages", "scenarios", "transcripts", "waf")
# A source checkout: the repository root holds the project file and fixtures/ beside the package.
CHECKOUT_MARKER = "pyproject.toml"
FIXTURES = "fixtures"
# Inside the wheel: simulator/_data/fixtures (keep in step with [tool.hatch...force-include]).
PACKAGE = "simulator"
PACKAGED_PARTS: tuple[str, ...] = ("_data", FIXTURES)


class ResourceError(FileNotFoundError):
    """The bundled data cannot be found: neither a source checkout nor a complete wheel install."""


def _checkout_root() -> Path | None:
    root = Path(__file__).resolve().parents[1]
    if (root / CHECKOUT_MARKER).is_file() and (root / FIXTURES).is_dir():
        return root / FIXTURES
    return None


def _packaged_root() -> Path | None:
    packaged = resources.files(PACKAGE).joinpath(*PACKAGED_PARTS)
    # Wheels install unpacked, so the traversable is a real directory; a zip import would not be.
    if isinstance(packaged, Path) and packaged.is_dir():
        return packaged
    return None


@cache
def data_root() -> Path:
    """The ``fixtures/`` folder: the checkout's when running from one, else the wheel's copy."""
    root = _checkout_root() or _packaged_root()
    if root is None:
        raise ResourceError(
            f"the simulator's bundled data is missing: no {FIXTURES}/ beside a source checkout and no "
            f"{PACKAGE}/{'/'.join(PACKAGED_PARTS)} in the installed package; reinstall ctxrecover"
        )
    return root


def data_dir(kind: str) -> Path:
    """One folder of the bundled data (:data:`DATA_KINDS`), e.g. ``data_dir("scenarios")``."""
    if kind not in DATA_KINDS:
        raise ValueError(f"unknown data folder {kind!r}; use one of {', '.join(DATA_KINDS)}")
    return data_root() / kind
