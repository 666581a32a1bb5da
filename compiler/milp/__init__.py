"""Stage 10, the optimisation: candidate deployments per workload bucket, the MILP over them (formulation,
decomposition, solve), the solver inverse read back into a plan (``extract``), and placement on nodes."""
