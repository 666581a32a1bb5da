"""Seeded generators of random spec families, for benchmarks over specs the planner has not been tuned on.

    from benchmarks.specgen import SIZES, generate, parse_size
    text = generate(SIZES["target"], seed=3)          # YAML text of a spec; the same (size, seed), the same
    text spec = load_spec("gen.yaml", text=text)

Why families and not one spec: the scale work was measured on ``benchmarks/solve_scale.py``'s one spec per
size, whose regular lengths and SLOs the correction rounds happen to like; a spec it has not seen can be ten
times slower (issue 16). A family draws, per seed, what real fleets mix:

* models from the bundled profiles only (real architectures): small dense (Llama 3.1 8B, Qwen2.5/Qwen3 7-14B,
  Mistral 7B), large dense (Llama 3.1 70B, Qwen2.5 32B/72B, Qwen3 32B), Llama 3.1 405B and the MoE Mixtral
  8x7B; 405B only in fleets large enough to hold it on GPUs with room for it;
* workload kinds: ``chat`` (lognormal prompts and answers with heavy tails, p99 4-16x the median),
  ``short`` (autocomplete-like histograms, tight TTFT), ``batch`` (uniform long prompts, fixed outputs, loose
  SLOs), ``long`` (16k-60k-token prompts, long-context models only) and ``pd`` (long prompts and a tight TPOT
  on a 70B-class model, where prefill/decode disaggregation pays, as in ``examples/disaggregated.yaml``; the
  fleet then holds H100 and H200);
* rates log-uniform (0.5-20 rps, a quarter of that on large models), percentiles 90/95/99;
* adapter families (``Size.adapters > 0``): ``adapters_from`` populations with Zipf traffic over
  ``Size.base_models`` base models, one ``adapter: "*"`` workload per base model (the total rate split by
  the population sizes), plus two tenant-owned adapters (one tenant dedicated), as in
  ``examples/multi-lora.yaml``.

Determinism: everything is drawn from ``random.Random(f"{seed}/{size.key}")`` (string seeds hash with SHA-512,
not PYTHONHASHSEED) and dumped with ``yaml.safe_dump(sort_keys=False)``, so the text is a function of
(size, seed). Generated specs are meant to be mostly feasible, not all: an infeasible one is a result too
(the benchmark counts it).
"""
from __future__ import annotations

import math
import random
from dataclasses import dataclass

import yaml

# Bundled model profiles by role (profiles/models/*.yaml). Context windows: 8B/70B/405B 128k, Qwen2.5 32k,
# Qwen3 40k, Mistral/Mixtral 32k: all hold a 16k prompt, the 128k ones up to 60k.
SMALL_DENSE = ("llama-3.1-8b", "qwen2.5-7b", "qwen3-8b", "mistral-7b", "qwen3-14b")
LARGE_DENSE = ("llama-3.1-70b", "qwen2.5-32b", "qwen2.5-72b", "qwen3-32b")
MOE = ("mixtral-8x7b",)
HUGE = ("llama-3.1-405b",)
LONG_CONTEXT = {"llama-3.1-8b": 131072, "llama-3.1-70b": 131072, "llama-3.1-405b": 131072}
LARGE = set(LARGE_DENSE) | set(HUGE) | set(MOE)
# GPU types with the HBM to hold 405B in one 8-GPU node at fp8 or two at bf16.
BIG_HBM = ("h100-sxm", "h200", "b200", "mi300x")
GPU_TYPES = ("h100-sxm", "h200", "a100-80gb", "l40s", "l4", "a100-40gb", "b200", "a10g", "mi300x",
             "h100-pcie")
# The adapter families' base models: the issue-16 case (Llama 3.1 8B/70B, Qwen2.5 7B/32B/72B, Mistral 7B,
# Mixtral 8x7B), then more small ones.
LORA_BASES = ("llama-3.1-8b", "llama-3.1-70b", "qwen2.5-7b", "qwen2.5-32b", "qwen2.5-72b", "mistral-7b",
              "mixtral-8x7b", "qwen3-8b", "qwen3-14b", "qwen3-32b")
KINDS = ("chat", "short", "batch", "long", "pd")
KIND_WEIGHTS = (0.45, 0.2, 0.15, 0.1, 0.1)


@dataclass(frozen=True)
class Size:
    """One point of a family: ``workloads`` over ``models`` models, ``gpu_types`` types and ``gpus`` GPUs in
    all; ``adapters > 0`` makes an adapter family (``base_models`` bases, ``rate_rps`` in all)."""

    workloads: int
    gpu_types: int
    gpus: int
    models: int = 0  # 0: about one per five workloads, at most 8
    adapters: int = 0
    base_models: int = 0
    rate_rps: float = 200.0  # adapter families: the total rate

    @property
    def key(self) -> str:
        if self.adapters:
            return f"lora{self.adapters}x{self.base_models}-g{self.gpu_types}-n{self.gpus}-r{self.rate_rps:g}"
        return f"w{self.workloads}-m{self.n_models}-g{self.gpu_types}-n{self.gpus}"

    @property
    def n_models(self) -> int:
        return self.models or min(8, max(1, math.ceil(self.workloads / 5)))


SIZES: dict[str, Size] = {
    "small": Size(5, 2, 64),
    "medium": Size(20, 4, 512),
    "large": Size(50, 6, 2048),
    "target": Size(100, 8, 4096),  # issue 16: <= 10 s median, <= 20 s p90
    "lora-small": Size(0, 3, 256, adapters=100, base_models=3, rate_rps=40.0),
    "lora": Size(0, 3, 768, adapters=1000, base_models=7, rate_rps=200.0),  # issue 16: <= 30 s
}


def parse_size(text: str) -> Size:
    """A preset name (``SIZES``), ``W/G/N`` (workloads / GPU types / GPUs, optionally ``/M`` models) or
    ``lora:A/B`` (adapters / base models, optionally ``/RATE``). ValueError naming the form otherwise."""
    if text in SIZES:
        return SIZES[text]
    try:
        if text.startswith("lora:"):
            parts = [float(x) for x in text[5:].split("/")]
            a, b = int(parts[0]), int(parts[1])
            return Size(0, 3, 768, adapters=a, base_models=b, rate_rps=parts[2] if len(parts) > 2 else 200.0)
        parts = [int(x) for x in text.split("/")]
        return Size(parts[0], parts[1], parts[2], models=parts[3] if len(parts) > 3 else 0)
    except (ValueError, IndexError):
        raise ValueError(f"size {text!r}: use one of {', '.join(SIZES)}, "
                         "W/G/N[/M] or lora:A/B[/RATE]") from None


def _lognormal(median: float, tail: float) -> dict:
    return {"lognormal": {"median": int(round(median)), "p99": int(round(median * tail))}}


def _pick_gpus(rng: random.Random, size: Size, need_pd: bool, need_huge: bool) -> list[dict]:
    types = [rng.choice(("h100-sxm", "h200"))]
    if need_pd or need_huge:
        types += [t for t in ("h100-sxm", "h200") if t not in types]
    rest = [t for t in GPU_TYPES if t not in types]
    rng.shuffle(rest)
    types = (types + rest)[:max(1, size.gpu_types)]
    per, extra = divmod(size.gpus, len(types))
    return [{"type": t, "count": per + (1 if i < extra else 0)} for i, t in enumerate(types)]


def _pick_models(rng: random.Random, size: Size) -> list[str]:
    """Small dense first, then large dense, Mixtral and (fleets of >= 1,024 GPUs) 405B, then more of
    either."""
    n = size.n_models
    small, large = list(SMALL_DENSE), list(LARGE_DENSE)
    rng.shuffle(small)
    rng.shuffle(large)
    order = [small[0]]
    if n >= 2:
        order.append(large[0])
    if n >= 3:
        order.append(MOE[0])
    if n >= 4 and size.gpus >= 1024:
        order.append(HUGE[0])
    pool = small[1:] + large[1:]
    rng.shuffle(pool)
    order += pool
    return order[:n]


def _workload(rng: random.Random, j: int, model: str, kind: str) -> dict:
    big = model in LARGE
    huge = model in HUGE
    scale = 0.25 if big else 1.0
    rate = math.exp(rng.uniform(math.log(0.5), math.log(20.0))) * scale
    pct = rng.choice((90, 95, 99))
    slow = 2.5 if huge else (1.6 if big else 1.0)  # SLO headroom for models that step slowly
    if kind == "short":
        isl = {"histogram": {"edges": [0, 128, 512, 2048], "weights": [0.5, 0.4, 0.1]}}
        osl = {"fixed": rng.choice((16, 32, 64))}
        slo = {"ttft_ms": rng.choice((400, 600, 1000)) * slow, "tpot_ms": rng.choice((30, 40, 60)) * slow}
    elif kind == "batch":
        lo = rng.choice((1000, 2000, 3000))
        isl = {"uniform": {"min": lo, "max": lo * rng.choice((2, 3, 4))}}
        osl = {"fixed": rng.choice((100, 200, 400))}
        slo = {"ttft_ms": rng.choice((4000, 8000, 15000)) * slow,
               "tpot_ms": rng.choice((80, 120, 200)) * slow}
    elif kind == "long":
        med = rng.choice((12000, 16000, 24000))
        isl = {"lognormal": {"median": med, "p99": min(60000, med * rng.choice((2, 3)))}}
        osl = _lognormal(rng.choice((150, 300)), rng.uniform(3, 6))
        slo = {"ttft_ms": rng.choice((10000, 20000)) * slow, "tpot_ms": rng.choice((60, 100)) * slow}
        rate *= 0.25
    elif kind == "pd":
        isl = _lognormal(rng.choice((4000, 6000, 8000)), rng.uniform(2.5, 3.5))
        osl = _lognormal(rng.choice((300, 400, 500)), rng.uniform(2.5, 3.5))
        slo = {"ttft_ms": rng.choice((5000, 8000)), "tpot_ms": rng.choice((35, 40, 45))}
        pct = 99
    else:  # chat: heavy-tailed both ways
        isl = _lognormal(rng.choice((300, 600, 1000, 2000)), rng.uniform(4, 16))
        osl = _lognormal(rng.choice((100, 200, 400)), rng.uniform(3, 8))
        slo = {"ttft_ms": rng.choice((1000, 2000, 4000)) * slow, "tpot_ms": rng.choice((40, 60, 100)) * slow}
    slo = {k: round(v, 1) for k, v in slo.items()}
    return {"name": f"{kind}-{j:03d}", "model": model, "rate_rps": round(rate, 3), "input_tokens": isl,
            "output_tokens": osl, "slo": {**slo, "percentile": pct}}


def _dense(rng: random.Random, size: Size, seed: int) -> dict:
    models = _pick_models(rng, size)
    kinds = rng.choices(KINDS, KIND_WEIGHTS, k=size.workloads)
    ws = []
    for j, kind in enumerate(kinds):
        model = models[j % len(models)]
        if kind == "long" and model not in LONG_CONTEXT:
            kind = "chat"
        if kind == "pd" and (model not in ("llama-3.1-70b", "qwen2.5-72b") or size.gpu_types < 2):
            kind = "chat"
        ws.append(_workload(rng, j, model, kind))
    need_pd = any(w["name"].startswith("pd-") for w in ws)
    gpus = _pick_gpus(rng, size, need_pd, "llama-3.1-405b" in models)
    return {"version": 1, "name": f"gen-{size.key}-s{seed}", "gpus": gpus,
            "models": [{"name": m} for m in models], "workloads": ws}


def _adapters(rng: random.Random, size: Size, seed: int) -> dict:
    bases = list(LORA_BASES[:max(1, size.base_models)])
    n = len(bases)
    per, extra = divmod(size.adapters, n)
    counts = [per + (1 if i < extra else 0) for i in range(n)]
    models, ws = [], []
    for i, (m, c) in enumerate(zip(bases, counts)):
        entry = {"name": m, "adapters_from": {"count": max(1, c), "rank": rng.choice((8, 16, 32)),
                                              "traffic": {"zipf": {"s": round(rng.uniform(0.8, 1.3), 2)}}}}
        if i == 0 and n >= 2:  # two tenant-owned adapters on the first base (isolation rules)
            entry["adapters"] = [{"name": "acme-legal", "rank": 32}, {"name": "globex-support", "rank": 16}]
        models.append(entry)
        share = max(1, c) / size.adapters
        w = _workload(rng, i, m, "chat")
        w.update(name=f"{m}-lora", adapter="*",
                 rate_rps=round(size.rate_rps * share * (0.5 if m in LARGE else 1), 3))
        ws.append(w)
    if n >= 2:
        for name, tenant, rate in (("acme-legal", "acme", 2.0), ("globex-support", "globex", 3.0)):
            w = _workload(rng, len(ws), bases[0], "chat")
            w.update(name=name, adapter=name, tenant=tenant, rate_rps=rate)
            ws.append(w)
    gpus = _pick_gpus(rng, size, False, False)
    spec = {"version": 1, "name": f"gen-{size.key}-s{seed}", "gpus": gpus, "models": models, "workloads": ws}
    if n >= 2:
        spec["tenants"] = [{"name": "acme", "dedicated": True}, {"name": "globex"}]
    return spec


def generate_data(size: Size, seed: int) -> dict:
    """The spec as a dict (see ``generate``)."""
    rng = random.Random(f"{seed}/{size.key}")
    return _adapters(rng, size, seed) if size.adapters else _dense(rng, size, seed)


def generate(size: Size, seed: int) -> str:
    """The spec's YAML text: a function of (size, seed) only."""
    return yaml.safe_dump(generate_data(size, seed), sort_keys=False, width=120)


def family(size: Size, n: int, seed: int = 0) -> list[tuple[str, str]]:
    """``n`` specs of one size: (name, YAML text) for seeds ``seed .. seed + n - 1``."""
    out = []
    for s in range(seed, seed + n):
        text = generate(size, s)
        out.append((f"gen-{size.key}-s{s}", text))
    return out
