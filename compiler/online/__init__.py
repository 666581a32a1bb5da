"""Stage 18, online: re-planning a running deployment after drift or failures (``replan``), from the plan in
service, with switching costs (docs/online.md)."""
