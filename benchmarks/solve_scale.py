"""Solver scale benchmark: generated specs of growing size; median stage times, gap and peak memory.

    python benchmarks/solve_scale.py                 # the size ladder up to the target
    python benchmarks/solve_scale.py --repeat 3 --solver highs --sweep   # also one dimension at a time

Target (issue 6): 20 models, 100 workloads, 8 GPU types, 4,096 GPUs in <= 10 s with gap <= 1 %.
Models beyond the bundled profiles are synthetic Llama-like ``config.json`` files written to a temporary
folder (the spec's ``models[].config``), so every size uses real lowering, candidates, MILP and extraction.
Timing is of ``trimtab.api.plan(..., validate=False)`` (the analytic planner; simulation is a separate
stage with its own benchmark). Generation is seeded: the same arguments give the same specs.
"""
from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
import resource
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import yaml  # noqa: E402

from trimtab.api import plan  # noqa: E402
from trimtab.errors import TrimtabError  # noqa: E402
from trimtab.spec.load import load_spec  # noqa: E402

GPU_TYPES = ["h100-sxm", "a100-80gb", "l40s", "l4", "h200", "a100-40gb", "b200", "a10g"]
BUNDLED = ["llama-3.1-8b", "mistral-7b", "qwen2.5-7b", "llama-3.1-70b", "qwen2.5-32b", "qwen2.5-72b",
           "mixtral-8x7b"]
# (layers, hidden, heads, kv heads, intermediate) of synthetic dense models, 1B..14B-ish
SYNTH = [(16, 2048, 16, 8, 8192), (24, 2048, 16, 8, 8192), (28, 3072, 24, 8, 8192), (32, 3072, 24, 8, 9216),
         (32, 4096, 32, 8, 11008), (36, 4096, 32, 8, 12288), (40, 5120, 40, 8, 13824),
         (28, 2560, 20, 4, 6912),
         (24, 4096, 32, 8, 14336), (30, 3584, 28, 4, 18944), (36, 2048, 16, 8, 11008),
         (20, 2048, 16, 16, 5632), (48, 5120, 40, 8, 13824)]
LENGTHS = [({"fixed": 512}, {"fixed": 64}), ({"lognormal": {"median": 1000, "p99": 8000}}, {"fixed": 256}),
           ({"uniform": {"min": 200, "max": 4000}}, {"lognormal": {"median": 200, "p99": 1200}}),
           ({"histogram": {"edges": [0, 256, 1024, 4096], "weights": [0.5, 0.4, 0.1]}}, {"fixed": 32})]


def make_spec(models: int, workloads: int, gpu_types: int, gpus: int, folder: Path, seed: int = 0,
              kv_tiers: str = "off") -> Path:
    rng = random.Random(seed)
    mrefs, names = [], []
    for i in range(models):
        if i < len(BUNDLED):
            mrefs.append({"name": BUNDLED[i]})
            names.append(BUNDLED[i])
            continue
        layers, hidden, heads, kv, inter = SYNTH[(i - len(BUNDLED)) % len(SYNTH)]
        cfg = {"num_hidden_layers": layers, "hidden_size": hidden, "num_attention_heads": heads,
               "num_key_value_heads": kv, "intermediate_size": inter, "vocab_size": 128256,
               "max_position_embeddings": 32768}
        (folder / f"m{i}.json").write_text(json.dumps(cfg))
        mrefs.append({"name": f"synth-{i}", "config": f"m{i}.json"})
        names.append(f"synth-{i}")
    per = gpus // gpu_types
    pools = [{"type": GPU_TYPES[g], "count": per
              + (1 if g < gpus - per * gpu_types else 0)} for g in range(gpu_types)]
    ws = []
    for j in range(workloads):
        isl, osl = LENGTHS[j % len(LENGTHS)]
        big = names[j % models] in ("llama-3.1-70b", "qwen2.5-72b", "qwen2.5-32b", "mixtral-8x7b")
        ws.append({"name": f"w{j:03d}", "model": names[j % models],
                   "rate_rps": round(rng.uniform(0.5, 6.0), 2), "input_tokens": isl, "output_tokens": osl,
                   "slo": {"ttft_ms": rng.choice([2000, 4000, 8000]) * (2 if big else 1),
                           "tpot_ms": rng.choice([60, 100, 150]), "percentile": rng.choice([90, 99])}})
    spec = {"version": 1, "name": f"scale-m{models}-w{workloads}-g{gpu_types}-n{gpus}", "gpus": pools,
            "models": mrefs, "workloads": ws, "solver": {"time_limit_s": 60}}
    if kv_tiers != "off":
        spec["defaults"] = {"kv_tiers": kv_tiers}
    p = folder / f"{spec['name']}.yaml"
    p.write_text(yaml.safe_dump(spec, sort_keys=False))
    return p


def run_one(path: Path, solver: str, repeat: int) -> dict:
    rows = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        try:
            r = plan(load_spec(path), backend=solver, validate=False)
            err = None
        except TrimtabError as exc:
            r, err = None, exc.lines[0]
        total = time.perf_counter() - t0
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB; process peak so far
        rows.append((total, r, err, peak))
    total = statistics.median(x[0] for x in rows)
    r, err, peak = rows[-1][1], rows[-1][2], max(x[3] for x in rows)
    if r is None:
        return {"total_s": total, "error": err, "peak_mib": peak}
    return {"total_s": total, "candidates_s": r.seconds.get("candidates", 0.0), "solve_s": r.solve.seconds,
            "rounds": r.rounds, "gap": r.solve.gap, "status": r.solve.status.value,
            "cost": r.plan.cost_usd_per_hour,
            "candidates": len(r.candidates.candidates), "pruned": len(r.candidates.pruned), "peak_mib": peak}


LADDER = [(2, 5, 2, 64), (5, 20, 4, 512), (10, 50, 6, 2048), (20, 100, 8, 4096)]
SWEEP = [(20, w, 8, 4096) for w in (25, 50, 100)] + [(m, 100, 8, 4096) for m in (5, 10)] + \
        [(20, 100, g, 4096) for g in (2, 4)] + [(20, 100, 8, n) for n in (512, 1024)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--solver", default="highs")
    ap.add_argument("--repeat", type=int, default=3, help="runs per size; the median time is reported")
    ap.add_argument("--sweep", action="store_true",
                    help="also vary one dimension at a time around the target")
    ap.add_argument("--sizes", default="", help="semicolon-separated m,w,g,n tuples instead of the ladder")
    ap.add_argument("--kv-tiers", default="off", choices=["off", "auto", "offload", "experimental-live"],
                    help="defaults.kv_tiers of the generated specs (docs/kv-tiers.md)")
    args = ap.parse_args()
    sizes = [tuple(int(x) for x in s.split(",")) for s in args.sizes.split(";") if s] or LADDER
    if args.sweep:
        sizes += [s for s in SWEEP if s not in sizes]
    print(f"| models | workloads | GPU types | GPUs | total s (median of {args.repeat}) | "
          "candidates s | solve s "
          f"| rounds | status | gap | cands kept/pruned | peak RSS MiB |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as tmp:
        for m, w, g, n in sizes:
            d = run_one(make_spec(m, w, g, n, Path(tmp), kv_tiers=args.kv_tiers), args.solver, args.repeat)
            if "error" in d:
                print(f"| {m} | {w} | {g} | {n} | {d['total_s']:.2f} | | | | error: {d['error'][:60]} | | | "
                      f"{d['peak_mib']:.0f} |")
                continue
            gap = "-" if d["gap"] is None else f"{d['gap']:.2%}"
            print(f"| {m} | {w} | {g} | {n} | {d['total_s']:.2f} | {d['candidates_s']:.2f} | "
                  f"{d['solve_s']:.2f} | "
                  f"{d['rounds']} | {d['status']} | {gap} | {d['candidates']}/{d['pruned']} | "
                  f"{d['peak_mib']:.0f} |", flush=True)


if __name__ == "__main__":
    main()
