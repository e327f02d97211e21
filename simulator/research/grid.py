"""Sweep points: a knob grid's cartesian product, or seeded random points from values and ranges.

>>> expand_grid({"keep_recent": [4, 8], "budget_ratio": [0.6]})
[{'keep_recent': 4, 'budget_ratio': 0.6}, {'keep_recent': 8, 'budget_ratio': 0.6}]
"""

from __future__ import annotations

import itertools
import random as random_module
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ctxrecover.errors import ConfigError

if TYPE_CHECKING:
    pass

__all__ = ["Uniform", "Values", "expand_grid", "random_points"]


UNIFORM_DIGITS = 4  # floats drawn from a Uniform range are rounded to this many decimals


@dataclass(frozen=True, slots=True)
class Uniform:
    """A range a random search draws a knob from: integers when both ends are ints, else floats.

    >>> Uniform(2, 4).sample(random_module.Random(0)) in (2, 3, 4)
    True
    """

    low: float
    high: float

    def __post_init__(self) -> None:
        if isinstance(self.low, bool) or isinstance(self.high, bool) or not self.low <= self.high:
            raise ConfigError(
                f"Uniform(low, high) needs numbers with low <= high, got {self.low!r}, {self.high!r}"
            )

    def sample(self, rng: random_module.Random) -> int | float:
        """One value drawn with ``rng``."""
        if isinstance(self.low, int) and isinstance(self.high, int):
            return rng.randint(self.low, self.high)
        return round(rng.uniform(self.low, self.high), UNIFORM_DIGITS)


Values = Sequence[Any] | Uniform


def checked_values(grid: Mapping[str, Values]) -> dict[str, Values]:
    checked: dict[str, Values] = {}
    for name, values in grid.items():
        if isinstance(values, Uniform):
            checked[name] = values
        elif isinstance(values, str | bytes) or not isinstance(values, Iterable):
            raise ConfigError(
                f"grid knob {name!r}: give a list of values or a Uniform(low, high), got {values!r}"
            )
        else:
            listed = list(values)
            if not listed:
                raise ConfigError(f"grid knob {name!r} has no values")
            checked[name] = listed
    return checked


def expand_grid(grid: Mapping[str, Values] | None) -> list[dict[str, Any]]:
    """Every combination of the grid's values, in the grid's order (one empty point for no grid).

    >>> expand_grid({"keep_recent": [4, 8], "budget_ratio": [0.5]})
    [{'keep_recent': 4, 'budget_ratio': 0.5}, {'keep_recent': 8, 'budget_ratio': 0.5}]
    """
    values = checked_values(grid or {})
    ranges = [name for name, v in values.items() if isinstance(v, Uniform)]
    if ranges:
        raise ConfigError(f"grid knob {ranges[0]!r} is a range: ranges need a random search (random=N)")
    lists = [v for v in values.values() if not isinstance(v, Uniform)]
    return [dict(zip(values, combo, strict=True)) for combo in itertools.product(*lists)]


def random_points(grid: Mapping[str, Values], n: int, seed: int = 0) -> list[dict[str, Any]]:
    """``n`` points, each knob drawn from its values (or :class:`Uniform` range) with ``Random(seed)``."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ConfigError(f"random search needs a number of points >= 1, got {n!r}")
    values = checked_values(grid)
    if not values:
        raise ConfigError("random search needs a grid of knobs to draw from")
    rng = random_module.Random(seed)
    return [
        {name: v.sample(rng) if isinstance(v, Uniform) else rng.choice(v) for name, v in values.items()}
        for _ in range(n)
    ]
