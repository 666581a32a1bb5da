"""Stage 16, studies over many plans: sweeps over grids and sampled scenarios, robust plans, Pareto
frontiers."""
