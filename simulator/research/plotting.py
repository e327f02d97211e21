"""Matplotlib helpers the research figures share: new figures, binary byte units, labels that never overlap.

Figures use matplotlib's object API (``Figure()``, never pyplot) on the Agg canvas: nothing
needs a display and nothing accumulates in a global registry.

>>> binary_unit(130_000)
('KiB', 1024)
>>> format_binary(128_000)
'125.0 KiB'
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = [
    "BINARY_UNITS",
    "FIGURE_DPI",
    "binary_unit",
    "format_binary",
    "format_tokens",
    "new_figure",
    "place_labels",
    "rotate_tick_labels",
]

FIGURE_DPI = 100
# Byte units by powers of 1024, named as such (a KiB is not a KB), largest first.
BINARY_UNITS: tuple[tuple[str, int], ...] = (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024), ("B", 1))
# Where a point's label may go: beside its point first (points from the point to the label's nearer
# edge: right, left, above, below), then on rings of growing radius around it with a leader line.
LABEL_GAP_PT = 5.0
RING_STEP_PT = 11.0
RING_COUNT = 14
RING_ANGLES_DEG: tuple[int, ...] = tuple(range(0, 360, 20))
LABEL_MARGIN_PX = 2.0  # label boxes keep this far apart
POINT_HALF_PX = 4.0  # a point's marker, kept free of labels
LEADER_FROM = 16  # a label centred this many points away from its point gets a leader line
TICK_ROTATION = 30  # degrees of rotated category labels
# Token counts on every token axis, by thousands and millions (one format: 0, 500, 1.5k, 100k, 1M).
TOKEN_UNITS: tuple[tuple[str, int], ...] = (("M", 1_000_000), ("k", 1000))


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


def format_tokens(value: float) -> str:
    """A token count as every token axis shows it: ``0``, ``500``, ``1.5k``, ``100k``, ``1M``.

    >>> [format_tokens(v) for v in (0, 500, 1500, 100_000, 1_000_000)]
    ['0', '500', '1.5k', '100k', '1M']
    """
    for suffix, size in TOKEN_UNITS:
        if abs(value) >= size:
            return f"{value / size:g}{suffix}"
    return f"{value:g}"


def rotate_tick_labels(ax: Axes, *, fontsize: str = "small") -> None:
    """Rotate the x tick labels so each one *ends* at its tick (right-aligned, anchored there):
    a centred rotated label ends under the neighbouring tick."""
    for label in ax.get_xticklabels():
        label.set_rotation(TICK_ROTATION)
        label.set_horizontalalignment("right")
        label.set_rotation_mode("anchor")
        label.set_fontsize(fontsize)


def _offsets(width_pt: float, height_pt: float) -> list[tuple[float, float]]:
    """Candidate centres of a label, in points from its point: beside it, then on rings around it."""
    half_w, half_h = width_pt / 2, height_pt / 2
    beside = [
        (LABEL_GAP_PT + half_w, 0.0),
        (-LABEL_GAP_PT - half_w, 0.0),
        (0.0, LABEL_GAP_PT + half_h),
        (0.0, -LABEL_GAP_PT - half_h),
        (LABEL_GAP_PT + half_w, LABEL_GAP_PT + half_h),
        (-LABEL_GAP_PT - half_w, LABEL_GAP_PT + half_h),
        (LABEL_GAP_PT + half_w, -LABEL_GAP_PT - half_h),
        (-LABEL_GAP_PT - half_w, -LABEL_GAP_PT - half_h),
    ]
    rings = [
        (
            (half_w + ring * RING_STEP_PT) * math.cos(math.radians(angle)),
            (half_h + ring * RING_STEP_PT) * math.sin(math.radians(angle)),
        )
        for ring in range(1, RING_COUNT + 1)
        for angle in RING_ANGLES_DEG
    ]
    return [*beside, *rings]


def place_labels(
    ax: Axes, points: Sequence[tuple[str, float, float]], *, fontsize: str = "x-small"
) -> list[str]:
    """Annotate each ``(label, x, y)`` point where its label overlaps no other label and no point,
    inside the axes (leader lines included); return the labels that found no such spot.

    Greedy, in the given order: each label takes the first free spot beside its point, else the
    nearest free spot on rings around it (with a leader line); a label with no free spot is left
    out (and returned: the caller names it elsewhere). Boxes are computed, not drawn, per
    candidate; each label is measured once. The figure's
    layout is computed first and then frozen, so the boxes measured here are the boxes that
    get drawn.
    """
    from matplotlib.figure import Figure
    from matplotlib.transforms import Bbox

    figure = ax.get_figure()
    assert isinstance(figure, Figure)
    figure.draw_without_rendering()
    figure.set_layout_engine("none")
    renderer = figure.canvas.get_renderer()  # type: ignore[attr-defined]
    px_per_pt = figure.dpi / 72
    to_pixels = ax.transData.transform
    taken: list[Bbox] = []
    for _label, x, y in points:  # the points themselves stay readable
        px, py = to_pixels((x, y))
        taken.append(
            Bbox.from_extents(px - POINT_HALF_PX, py - POINT_HALF_PX, px + POINT_HALF_PX, py + POINT_HALF_PX)
        )
    frame = ax.bbox
    unplaced: list[str] = []
    for label, x, y in points:
        probe = ax.annotate(label, (x, y), ha="center", va="center", fontsize=fontsize)
        size = probe.get_window_extent(renderer)
        probe.remove()
        width, height = size.width + 2 * LABEL_MARGIN_PX, size.height + 2 * LABEL_MARGIN_PX
        px, py = to_pixels((x, y))
        for dx, dy in _offsets(width / px_per_pt, height / px_per_pt):
            cx, cy = px + dx * px_per_pt, py + dy * px_per_pt
            box = Bbox.from_extents(cx - width / 2, cy - height / 2, cx + width / 2, cy + height / 2)
            inside = frame.x0 <= box.x0 and box.x1 <= frame.x1 and frame.y0 <= box.y0 and box.y1 <= frame.y1
            if inside and not any(box.overlaps(other) for other in taken):
                taken.append(box)
                leader = math.hypot(dx, dy) >= LEADER_FROM
                ax.annotate(
                    label,
                    (x, y),
                    textcoords="offset points",
                    xytext=(dx, dy),
                    ha="center",
                    va="center",
                    fontsize=fontsize,
                    arrowprops={"arrowstyle": "-", "lw": 0.5, "color": "0.5", "shrinkA": 0}
                    if leader
                    else None,
                )
                break
        else:
            unplaced.append(label)
    return unplaced
