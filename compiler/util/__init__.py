"""Stage 1, utilities every stage may use: canonical YAML with line numbers, strict-field validation and the
process-level switches (the garbage collector paused while planning)."""
