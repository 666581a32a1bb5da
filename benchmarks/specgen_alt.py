"""A second spec-family generator, written apart from ``benchmarks/specgen.py`` to draw what it does not.

    from benchmarks.specgen_alt import SIZES, generate, parse_size
    text = generate(SIZES["target"], seed=3)          # YAML text; the same (size, seed), the same text
    python benchmarks/plan_families.py --generator alt --sizes target --n 20

Why a second generator: issue 35 asks the planner to be fast "over several independent generators (yours
plus at least one written to differ from it)". A planner tuned, session after session, on one generator's
families learns that generator's habits (its length shapes, its SLO headroom per model size, its rate law);
this one draws the spec the issue's author drew and specgen never does, so a speed-up that only fits
specgen's habits shows up as a gap between the two tables. It shares only ``Size`` and the size syntax with
specgen (one implementation of the plumbing); every draw below is its own:

* models: eight in turn (workload j is served by model j mod 8), from a catalogue that leans on what specgen
  leaves out: Llama 2 7B (4k context), Llama 3 70B (8k), Qwen3 30B-A3B and gpt-oss-120b (MoE), next to
  Llama 3.1 8B/70B and Qwen; Llama 3.1 405B in every fleet of >= 1,024 GPUs;
* length shapes: ``chat`` lognormal prompts and outputs with p99 at 5-6x the median (specgen: 3-16x),
  ``bimodal`` histograms (short questions and pasted documents in one stream), ``gen`` (fixed short
  prompts, long lognormal outputs: drafting), ``rag`` (fixed short questions plus k retrieved 512-token
  chunks: a histogram stepped by chunk count, short outputs); lengths scaled into short context windows;
* SLOs: TPOT 50-150 ms at p90 or p99 whatever the model (specgen scales its SLOs up for large models; 405B
  gets 70-150 ms so that one tight draw does not make a 100-workload spec infeasible), TTFT from the
  prompt's length (a base plus a per-token allowance), not from a menu;
* rates: even seeds uniform 0.5-20 rps (specgen: log-uniform, cut to a quarter on large models), odd seeds a
  heavy-tailed Zipf law (s 1.0-1.2) over a random order of the workloads with the same mean total, so a few
  workloads carry most of the traffic;
* GPU pools: eight types (one with large HBM, two with room for 405B) with uneven counts in whole 8-GPU nodes
  summing to the size's GPUs, and explicit prices: public on-demand list prices jittered per seed by
  0.8-1.25x (specgen takes the profiles' default prices and splits the GPUs evenly);
* adapters (``Size.adapters > 0``): hundreds of LoRA adapters on ONE base model (Llama 3.1 8B; more bases
  only when ``Size.base_models`` asks, up to four), ranks 8-64 per adapter, Zipf popularity as per-adapter
  weights, ``rate_rps`` in all split over a chat and a RAG ``adapter: "*"`` workload; H100, A100 and L40S on
  offer (specgen: populations of one rank over several bases, plus tenants).

Determinism: one ``random.Random(f"alt/{seed}/{size.key}")`` (string seeds hash with SHA-512, not
PYTHONHASHSEED), ``yaml.safe_dump(sort_keys=False)``: the text is a function of (size, seed).
"""
from __future__ import annotations

import random

import yaml

from benchmarks.specgen import SIZES as _SPECGEN_SIZES, Size, parse_size as _parse_size

# Context windows of the catalogue (profiles/models/*.yaml, max_context_tokens).
CONTEXT = {"llama-3.1-8b": 131072, "llama-2-7b": 4096, "mistral-7b": 32768, "qwen3-8b": 40960,
           "qwen3-14b": 40960, "qwen3-30b-a3b": 40960, "gpt-oss-120b": 131072, "llama-3-70b": 8192,
           "llama-3.1-70b": 131072, "qwen2.5-72b": 32768, "qwen3-32b": 40960, "llama-3.1-405b": 131072}
CATALOGUE = tuple(m for m in CONTEXT if m != "llama-3.1-405b")
HUGE = "llama-3.1-405b"
# Public-ish on-demand prices, $/GPU-hour (cloud list prices of 2025-26; the L4, A10G and H100).
PRICES = {"h100-sxm": 7.516, "h200": 4.99, "b200": 6.25, "mi300x": 3.49, "a100-80gb": 3.67, "a100-40gb": 1.99,
          "h100-pcie": 3.29, "l40s": 1.86, "l4": 0.70, "a10g": 1.01}
BIG_HBM = ("h200", "b200", "mi300x", "h100-sxm")  # hold 405B in one or two 8-GPU nodes
LORA_GPUS = ("h100-sxm", "a100-80gb", "l40s")
LORA_BASES = ("llama-3.1-8b", "qwen2.5-7b", "mistral-7b", "qwen3-8b")
SHAPES = ("chat", "bimodal", "gen", "rag")
SHAPE_WEIGHTS = (0.4, 0.2, 0.2, 0.2)

# Presets: specgen's dense sizes (the numbers) plus the adapter family specgen does not draw.
SIZES: dict[str, Size] = {k: v for k, v in _SPECGEN_SIZES.items() if not v.adapters}
SIZES["lora-one"] = Size(0, 3, 192, adapters=300, base_models=1, rate_rps=40.0)  # issue 35, item 5


def parse_size(text: str) -> Size:
    """This generator's presets first, then specgen's size syntax (``W/G/N[/M]``, ``lora:A/B[/RATE]``)."""
    return SIZES[text] if text in SIZES else _parse_size(text)


def _pool(rng: random.Random, types: list[str], total: int) -> list[dict]:
    """Uneven counts in whole 8-GPU nodes (where the total allows), each type at least one unit, summing to
    ``total``; prices jittered per seed."""
    unit = 8 if total % 8 == 0 and total >= 8 * len(types) else 1
    units = total // unit
    shares = [rng.uniform(0.3, 1.7) for _ in types]
    free = units - len(types)
    counts = [1 + int(free * s / sum(shares)) for s in shares]
    for i in range(units - sum(counts)):  # what the flooring left: round robin from the largest share
        counts[sorted(range(len(types)), key=lambda k: -shares[k])[i % len(types)]] += 1
    return [{"type": t, "count": c * unit, "usd_per_hour": round(PRICES[t] * rng.uniform(0.8, 1.25), 2)}
            for t, c in zip(types, counts)]


def _models(rng: random.Random, size: Size) -> list[str]:
    n = size.n_models
    pool = list(CATALOGUE)
    rng.shuffle(pool)
    if n >= 4 and size.gpus >= 1024:
        return pool[:n - 1] + [HUGE]
    return pool[:n]


def _fit(ctx: int, need: float) -> float:
    """Scale a shape whose long tail reaches ``need`` tokens (prompt plus output) into 90 % of the window."""
    return min(1.0, 0.9 * ctx / need)


def _lengths(rng: random.Random, shape: str, ctx: int) -> tuple[dict, dict, float]:
    """(input_tokens, output_tokens, a long prompt in tokens for the TTFT allowance)."""
    if shape == "bimodal":
        short, long_ = rng.choice((128, 256, 512)), rng.choice((4096, 6144, 8192))
        f = _fit(ctx, long_ + 600)
        edges = [16, int(short * f), int(2 * short * f), int(long_ * f / 2), int(long_ * f)]
        edges = sorted(set(max(17, e) if i else e for i, e in enumerate(edges)))
        weights = [0.55, 0.05, 0.1, 0.3][:len(edges) - 1]
        osl = {"lognormal": {"median": rng.choice((150, 250)), "p99": 0}}
        osl["lognormal"]["p99"] = int(osl["lognormal"]["median"] * rng.uniform(5, 6))
        return {"histogram": {"edges": edges, "weights": weights}}, osl, edges[-1]
    if shape == "gen":  # short fixed prompt, long answers (drafting, code generation)
        out_med = rng.choice((600, 1000, 1500))
        tail = rng.uniform(5, 6)
        f = _fit(ctx, out_med * tail + 512)
        isl = {"fixed": rng.choice((64, 128, 256, 512))}
        return isl, {"lognormal": {"median": int(out_med * f), "p99": int(out_med * tail * f)}}, isl["fixed"]
    if shape == "rag":  # a short question plus 2-12 retrieved chunks of 512 tokens
        q = rng.choice((32, 64, 128))
        k_max = max(2, min(12, int(0.8 * ctx / 512) - 1))
        edges = [q + 512 * k for k in range(1, k_max + 2)]
        weights = [round(1.0 / (1 + abs(k - k_max / 2)), 3) for k in range(1, k_max + 1)]
        return ({"histogram": {"edges": edges, "weights": weights}}, {"fixed": rng.choice((128, 256, 384))},
                edges[-1])
    med_in, med_out = rng.choice((400, 800, 1500, 3000)), rng.choice((120, 250, 500))
    t_in, t_out = rng.uniform(5, 6), rng.uniform(5, 6)
    f = _fit(ctx, med_in * t_in + med_out * t_out)
    isl = {"lognormal": {"median": int(med_in * f), "p99": int(med_in * t_in * f)}}
    osl = {"lognormal": {"median": int(med_out * f), "p99": int(med_out * t_out * f)}}
    return isl, osl, isl["lognormal"]["p99"]


def _slo(rng: random.Random, model: str, prompt: float) -> dict:
    tpot = rng.randrange(70 if model == HUGE else 50, 151, 10)
    # TTFT: a queueing base plus a prefill allowance per prompt token at the tail (0.3-1 ms per token)
    ttft = rng.choice((500, 1000, 2000)) + prompt * rng.uniform(0.3, 1.0)
    return {"ttft_ms": float(round(ttft, -1)), "tpot_ms": float(tpot), "percentile": rng.choice((90, 99))}


def _rates(rng: random.Random, n: int, law: str) -> list[float]:
    if law == "uniform":
        return [rng.uniform(0.5, 20.0) for _ in range(n)]
    s = rng.uniform(1.0, 1.2)
    order = list(range(n))
    rng.shuffle(order)
    weights = [(order[j] + 1) ** -s for j in range(n)]
    total = 10.25 * n  # the uniform law's mean total
    return [max(0.1, total * w / sum(weights)) for w in weights]


def _dense(rng: random.Random, size: Size, seed: int) -> dict:
    models = _models(rng, size)
    law = "zipf" if seed % 2 else "uniform"
    rates = _rates(rng, size.workloads, law)
    ws = []
    for j in range(size.workloads):
        model = models[j % len(models)]
        shape = rng.choices(SHAPES, SHAPE_WEIGHTS)[0]
        isl, osl, prompt = _lengths(rng, shape, CONTEXT[model])
        ws.append({"name": f"{shape}-{j:03d}", "model": model, "rate_rps": round(rates[j], 3),
                   "input_tokens": isl, "output_tokens": osl, "slo": _slo(rng, model, prompt)})
    types = list(PRICES)
    rng.shuffle(types)
    k = max(1, size.gpu_types)
    # one type with large HBM in every pool (two with room for 405B), then the rest in the shuffled order: a
    # small pool of L4 and A10G alone leaves a 70B or a 30B MoE at these SLOs infeasible, not a benchmark
    big = [t for t in types if t in BIG_HBM][:2 if HUGE in models else 1]
    types = big + [t for t in types if t not in big]
    gpus = _pool(rng, types[:k], size.gpus)
    return {"version": 1, "name": f"alt-{size.key}-{law}-s{seed}", "gpus": gpus,
            "models": [{"name": m} for m in models], "workloads": ws}


def _adapters(rng: random.Random, size: Size, seed: int) -> dict:
    bases = LORA_BASES[:max(1, size.base_models)]
    per, extra = divmod(size.adapters, len(bases))
    models, ws = [], []
    for b, base in enumerate(bases):
        s = round(rng.uniform(0.9, 1.3), 2)
        count = max(1, per + (1 if b < extra else 0))
        width = len(str(count))
        adapters = [{"name": f"{base}-ft{i:0{width}d}", "rank": rng.choices((8, 16, 32, 64), (4, 3, 2, 1))[0],
                     "weight": round(i ** -s, 6)} for i in range(1, count + 1)]
        models.append({"name": base, "adapters": adapters})
        rate = size.rate_rps * count / size.adapters
        chat_share = rng.uniform(0.6, 0.8)
        for shape, share in (("chat", chat_share), ("rag", 1 - chat_share)):
            isl, osl, prompt = _lengths(rng, shape, CONTEXT[base])
            ws.append({"name": f"{base}-{shape}", "model": base, "adapter": "*",
                       "rate_rps": round(rate * share, 3), "input_tokens": isl, "output_tokens": osl,
                       "slo": _slo(rng, base, prompt)})
    gpus = _pool(rng, list(LORA_GPUS)[:max(1, size.gpu_types)], size.gpus)
    return {"version": 1, "name": f"alt-{size.key}-s{seed}", "gpus": gpus, "models": models, "workloads": ws}


def generate_data(size: Size, seed: int) -> dict:
    """The spec as a dict (see ``generate``)."""
    rng = random.Random(f"alt/{seed}/{size.key}")
    return _adapters(rng, size, seed) if size.adapters else _dense(rng, size, seed)


def generate(size: Size, seed: int) -> str:
    """The spec's YAML text: a function of (size, seed) only."""
    return yaml.safe_dump(generate_data(size, seed), sort_keys=False, width=110, default_flow_style=None)


def family(size: Size, n: int, seed: int = 0) -> list[tuple[str, str]]:
    """``n`` specs of one size: (name, YAML text) for seeds ``seed .. seed + n - 1``."""
    out = []
    for s in range(seed, seed + n):
        d = generate_data(size, s)
        out.append((d["name"], yaml.safe_dump(d, sort_keys=False, width=110, default_flow_style=None)))
    return out


if __name__ == "__main__":  # print one spec: python -m benchmarks.specgen_alt target 3
    import sys

    print(generate(parse_size(sys.argv[1] if len(sys.argv) > 1 else "small"),
                   int(sys.argv[2]) if len(sys.argv) > 2 else 0), end="")
