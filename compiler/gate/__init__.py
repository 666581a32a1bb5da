"""Stage 12, the gate: a plan held against its spec, analytically (``analytic``), by simulation at unused
seeds (``simulated``), window by window (``windows``), node by node (``nodeloss``), adapters (``lora``)."""
