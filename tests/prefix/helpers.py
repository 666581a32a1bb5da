"""Small Mooncake-format traces written by the tests (tests never read ../shared)."""
from __future__ import annotations

import json

import numpy as np


def write_mooncake(path, rows) -> None:
    """rows: (timestamp ms, input tokens, output tokens, hash_ids or None)."""
    with open(path, "w") as fh:
        for t, i, o, h in rows:
            d = {"timestamp": t, "input_length": i, "output_length": o}
            if h is not None:
                d["hash_ids"] = list(h)
            fh.write(json.dumps(d) + "\n")


def shared_prefix_trace(path, n=3000, prompts=8, prefix_blocks=6, suffix_blocks=4, rate=5.0, seed=0) -> None:
    """Every request starts with one of ``prompts`` shared prefixes (``prefix_blocks`` blocks of 512 tokens)
    and ends with ``suffix_blocks`` blocks of its own; Poisson arrivals at ``rate``."""
    rng = np.random.default_rng(seed)
    t = np.cumsum(rng.exponential(1000.0 / rate, n))
    rows, next_id = [], prompts * prefix_blocks
    for k in range(n):
        p = int(rng.integers(prompts))
        h = [p * prefix_blocks + j for j in range(prefix_blocks)] \
            + list(range(next_id, next_id + suffix_blocks))
        next_id += suffix_blocks
        rows.append((int(t[k]), 512 * (prefix_blocks + suffix_blocks), 64, h))
    write_mooncake(path, rows)
