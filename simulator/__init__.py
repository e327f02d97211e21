"""The ctxrecover fault-injection simulator: mock providers, proxy middleboxes, transcript replay.

``simulator.research.sweep(...)`` runs policies (presets and peer baselines) × knob grids ×
scenarios and returns one DataFrame row per run (see :mod:`simulator.research.sweep`).
"""

from __future__ import annotations

from simulator.research.sweep import sweep

__all__ = ["sweep"]
