"""Research over replays: the run schema and metrics, sweeps, peer baselines, figures, reports, widgets."""
