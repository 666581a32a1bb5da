"""Plans over time (docs/online.md): rate profiles per window, the schedule MILP with switching costs, its
planner, per-window checks, and re-planning from a running plan after drift or failures."""
