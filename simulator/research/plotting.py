"""Matplotlib helpers the research figures share: new figures, binary byte units, labels that never overlap.

Figures use matplotlib's object API (``Figure()``, never pyplot) on the Agg canvas: nothing
needs a display and nothing accumulates in a global registry.

>>> binary_unit(130_000)
('KiB', 1024)
>>> format_binary(128_000)
'125.0 KiB'
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure
    from matplotlib.text import Annotation

__all__ = ["BINARY_UNITS", "FIGURE_DPI", "binary_unit", "format_binary", "new_figure", "place_labels"]

FIGURE_DPI = 100
# Byte units by powers of 1024, named as such (a KiB is not a KB), largest first.
BINARY_UNITS: tuple[tuple[str, int], ...] = (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024), ("B", 1))
# Where a point's label may go, in points from the point: right, left, below, then stacked further out.
LABEL_OFFSETS: tuple[tuple[float, float, str], ...] = (
    (6, 4, "left"),
    (6, -11, "left"),
    (-6, 4, "right"),
    (-6, -11, "right"),
    (0, 9, "center"),
    (0, -17, "center"),
)
LABEL_STACK_STEP = 11  # points between stacked labels of nearby points
LABEL_MARGIN_PX = 2.0  # label boxes keep this far apart
LEADER_FROM = 16  # a label this many points away from its point gets a leader line


Layout = Literal["constrained", "compressed", "tight"]


def new_figure(width: float, height: float, *, layout: Layout | None = "constrained") -> Figure:
    """A figure on the Agg canvas (so it can be measured and saved headless).

    ``layout=None`` keeps the positions the caller sets (``subplots_adjust``): a figure drawn
    once per run skips the constrained layout's extra pass, about half its drawing time.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(width, height), dpi=FIGURE_DPI, layout=layout)
    FigureCanvasAgg(figure)
    return figure


def binary_unit(top: float) -> tuple[str, int]:
    """The largest binary unit in which ``top`` bytes is at least 1 (``B`` below 1 KiB)."""
    for name, size in BINARY_UNITS:
        if top >= size:
            return name, size
    return BINARY_UNITS[-1]


def format_binary(n_bytes: float) -> str:
    """``n_bytes`` in its binary unit with one decimal: ``125.0 KiB``, ``1.5 MiB``, ``512 B``."""
    name, size = binary_unit(n_bytes)
    return f"{n_bytes:.0f} B" if size == 1 else f"{n_bytes / size:.1f} {name}"


def _candidates(count: int) -> list[tuple[float, float, str]]:
    stacked = [(6, 4 + LABEL_STACK_STEP * k * sign, "left") for k in range(1, count + 2) for sign in (1, -1)]
    return [*LABEL_OFFSETS, *stacked]


def place_labels(ax: Axes, points: Sequence[tuple[str, float, float]], *, fontsize: str = "x-small") -> None:
    """Annotate each ``(label, x, y)`` point where its label overlaps no other label and no point.

    Greedy, in the given order: each label takes the first free spot among a few around its
    point, else the nearest free spot in a stack above or below (with a leader line). The
    figure's layout is computed first and then frozen, so the boxes measured here are the
    boxes that get drawn.
    """
    from matplotlib.figure import Figure
    from matplotlib.transforms import Bbox

    figure = ax.get_figure()
    assert isinstance(figure, Figure)
    figure.draw_without_rendering()
    figure.set_layout_engine("none")
    renderer = figure.canvas.get_renderer()  # type: ignore[attr-defined]
    to_pixels = ax.transData.transform
    taken: list[Bbox] = []
    for _label, x, y in points:  # the points themselves stay readable
        px, py = to_pixels((x, y))
        taken.append(Bbox.from_extents(px - 4, py - 4, px + 4, py + 4))
    frame = figure.bbox
    for label, x, y in points:
        chosen: Annotation | None = None
        for dx, dy, align in _candidates(len(points)):
            far = abs(dy) >= LEADER_FROM
            text = ax.annotate(
                label,
                (x, y),
                textcoords="offset points",
                xytext=(dx, dy),
                ha=align,
                va="center",
                fontsize=fontsize,
                arrowprops={"arrowstyle": "-", "lw": 0.5, "color": "0.5"} if far else None,
            )
            box = text.get_window_extent(renderer).padded(LABEL_MARGIN_PX)
            inside = frame.x0 <= box.x0 and box.x1 <= frame.x1 and frame.y0 <= box.y0 and box.y1 <= frame.y1
            if inside and not any(box.overlaps(other) for other in taken):
                chosen = text
                taken.append(box)
                break
            text.remove()
        if chosen is None:  # nowhere free: keep the last stacked spot rather than lose the label
            text = ax.annotate(
                label,
                (x, y),
                textcoords="offset points",
                xytext=(dx, dy),
                ha=align,
                va="center",
                fontsize=fontsize,
                arrowprops={"arrowstyle": "-", "lw": 0.5, "color": "0.5"},
            )
            taken.append(text.get_window_extent(renderer).padded(LABEL_MARGIN_PX))
