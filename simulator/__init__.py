"""The ctxrecover fault-injection simulator: mock providers, proxy middleboxes, transcript replay.

``simulator.sweep(...)`` runs policies (presets and peer baselines) × knob grids ×
scenarios and returns one DataFrame row per run (see :mod:`simulator.sweep`).
"""

from __future__ import annotations

from simulator.sweep import sweep

__all__ = ["sweep"]
