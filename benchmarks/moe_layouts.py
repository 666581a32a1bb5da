"""MoE predictions across layouts and precisions (docs/moe.md).

For each model, GPU and dtype, every single-node layout (tp, dp, ep) that fits, its KV capacity and its
closed-loop TPOT and output tokens/s per GPU at the same load per GPU (``--per-gpu`` requests in flight per
GPU, at most what the KV cache holds); the layout with the most tokens/s per GPU within ``--tpot-ms`` is
marked. Cost model only (no simulation, no solver).

    PYTHONPATH=. python benchmarks/moe_layouts.py [--isl 1000] [--osl 1000] [--per-gpu 32] [--tpot-ms 50]
        [--models deepseek-v3,...]
"""
from __future__ import annotations

import argparse

from trimtab.cost.predict import replica
from trimtab.profiles.loader import load_profiles

MODELS = ("qwen3-30b-a3b", "qwen3-235b-a22b", "deepseek-v3", "llama-4-scout", "llama-4-maverick",
          "gpt-oss-120b", "mixtral-8x7b")
GPUS = ("h100-sxm", "h200", "b200")
DTYPES = ("bf16", "fp8", "fp4")
LAYOUTS = [(tp, 1, 1) for tp in (1, 2, 4, 8)] + [(tp, 1, tp) for tp in (2, 4, 8)] + \
          [(tp, dp, tp * dp) for tp in (1, 2, 4) for dp in (2, 4, 8) if tp * dp <= 8]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--isl", type=int, default=1000)
    ap.add_argument("--osl", type=int, default=1000)
    ap.add_argument("--per-gpu", type=int, default=32, help="requests in flight per GPU")
    ap.add_argument("--tpot-ms", type=float, default=50.0, help="TPOT bound for the marked layout")
    ap.add_argument("--models", default=",".join(MODELS))
    a = ap.parse_args()
    P = load_profiles()
    print(f"isl {a.isl}, osl {a.osl}, {a.per_gpu} requests in flight per GPU (vllm engine profile); "
          f"* = most tokens/s per GPU with TPOT <= {a.tpot_ms:g} ms")
    print(f"{'model':18s} {'gpu':9s} {'dtype':5s} {'layout':14s} {'GPUs':>4s} "
          f"{'KV tokens':>11s} {'conc':>5s} "
          f"{'TPOT ms':>8s} {'tok/s/GPU':>9s}")
    for m in a.models.split(","):
        for g in GPUS:
            for dt in DTYPES:
                rows = []
                for tp, dp, ep in LAYOUTS:
                    if P.models[m].num_attention_heads.value % tp:
                        continue
                    try:
                        rm = replica(P, m, g, tp=tp, dtype=dt, dp=dp, ep=ep)
                    except ValueError:
                        continue  # fp4 on a GPU without FP4 tensor cores, ep beyond the experts
                    if rm.memory.kv_cache_tokens // dp < a.isl + a.osl:
                        continue
                    conc = min(a.per_gpu * rm.gpus, rm.max_concurrency(a.isl, a.osl))
                    pr = rm.predict_closed_loop(a.isl, a.osl, conc)
                    rows.append((pr.output_tokens_per_s_per_gpu, f"tp{tp} dp{dp} ep{ep}", rm.gpus,
                                 rm.memory.kv_cache_tokens, conc, pr.tpot_ms))
                ok = [r[0] for r in rows if r[5] <= a.tpot_ms]
                best = max(ok) if ok else None
                for tput, lay, gpus, kv, conc, tpot in rows:
                    mark = " *" if tput == best else ""
                    print(f"{m:18s} {g:9s} {dt:5s} {lay:14s} {gpus:4d} {kv:11,d} {conc:5d} {tpot:8.1f} "
                          f"{tput:9.0f}{mark}")


if __name__ == "__main__":
    main()
