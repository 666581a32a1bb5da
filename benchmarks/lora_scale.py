"""Multi-LoRA planning at scale: N adapters (Zipf traffic) over M base models, wall time of ``trimtab plan``.

usage: python benchmarks/lora_scale.py [--adapters 1000] [--models 10] [--no-validate] [--write SPEC]

Generates the spec (one ``adapters_from`` population and one ``adapter: '*'`` workload per base model, three
GPU types), plans it in-process (validation by simulation included unless --no-validate) and prints the stage
times, the plan's cost, deployments and adapters held. The target: 1,000 adapters over 10 base models in under
30 s (docs/multi-lora.md has the figure).
"""
from __future__ import annotations

import argparse
import time

import yaml

MODELS = ("llama-3.1-8b", "mistral-7b", "qwen2.5-7b", "qwen3-8b", "llama-2-7b", "gpt-j-6b", "qwen3-14b",
          "qwen2.5-32b", "qwen3-32b", "llama-3.1-70b")


def make_spec(adapters: int, models: int) -> dict:
    per = adapters // models
    ms = MODELS[:models]
    return {
        "version": 1, "name": f"lora-scale-{adapters}x{models}",
        "gpus": [{"type": "h100-sxm", "count": 256}, {"type": "a100-80gb", "count": 256},
                 {"type": "l40s", "count": 256}],
        "models": [{"name": m, "adapters_from": {"count": per + (1 if i < adapters % models else 0),
                                                 "rank": 16,
                                                 "traffic": {"zipf": {"s": 1.1}}}} for i, m in enumerate(ms)],
        "workloads": [{"name": f"{m}-lora", "model": m, "adapter": "*", "rate_rps": 6 if "70b" in m else 20,
                       "input_tokens": {"lognormal": {"median": 600, "p99": 4000}},
                       "output_tokens": {"lognormal": {"median": 150, "p99": 800}},
                       "slo": {"ttft_ms": 2000, "tpot_ms": 80, "percentile": 99}} for m in ms],
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--adapters", type=int, default=1000)
    ap.add_argument("--models", type=int, default=10)
    ap.add_argument("--no-validate", action="store_true")
    ap.add_argument("--write", help="also write the generated spec here")
    args = ap.parse_args()
    data = make_spec(args.adapters, args.models)
    text = yaml.safe_dump(data, sort_keys=False)
    if args.write:
        with open(args.write, "w") as f:
            f.write(text)
    import trimtab as tt

    t0 = time.perf_counter()
    spec = tt.load_spec("lora-scale.yaml", text=text)
    r = tt.plan(spec, validate=not args.no_validate)
    wall = time.perf_counter() - t0
    p = r.plan
    held = sum(len(d.adapters) for d in p.deployments)
    print(f"{args.adapters} adapters over {args.models} base models: planned in {wall:.1f} s "
          f"(candidates {r.seconds['candidates']:.1f} s, solve {r.seconds['solve']:.1f} s, "
          f"rounds {r.rounds})")
    print(f"cost {p.cost_usd_per_hour:.2f} $/h, {sum(p.gpus.values())} GPUs, "
          f"{len(p.deployments)} deployments, "
          f"{held} adapter placements, {len(p.adapter_routes)} adapter routes, "
          f"simulation {'passed' if p.simulation and p.simulation.passed else 'skipped or failed'}")


if __name__ == "__main__":
    main()
