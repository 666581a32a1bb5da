"""Stage 17, the field: measuring real GPUs and engines (bench, calibrate, engine runs and fits) and load
tests against running servers."""
