"""Stage 6, the intermediate representation: a spec lowered to resolved models, GPUs, length buckets and the
node topology (``lower``), the only input the cost model and the optimisation see."""
