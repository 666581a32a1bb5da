"""A third spec generator: small specs that combine the spec's features, to find the shapes nobody plans.

    from benchmarks.specgen_mix import SIZES, generate, generate_files, features, parse_size
    text = generate(SIZES["mix"], seed=3)             # YAML text; the same (size, seed), the same text
    files = generate_files(SIZES["mix"], seed=3)      # {file name: text}: the CSV / JSONL files it names
    python benchmarks/plan_families.py --generator mix --sizes mix --n 20

Why a third generator: ``benchmarks/specgen.py`` and ``benchmarks/specgen_alt.py`` draw large fleets of
plain workloads (lengths, rates, SLOs, adapter populations) to time the planner; neither ever draws a
``schedule``, ``kv_tiers``, explicit ``nodes`` with racks, ``redundancy: n+1``, ``max_goodput``, a budget, a
trace, ``stages``, ``shared_prefix``, SGLang or TensorRT-LLM, an fp4 KV cache or a pool of 0 GPUs. Issue 35
counts "a spec shape the benchmarks never draw crashes" as a defect, and the features meet in ways no example
shows (tenants with a schedule, n+1 with adapters, an offload tier on explicit nodes with little host memory).
So this one draws, per seed, a random SUBSET of the features at sizes that plan in seconds, and the outcome
that matters is not the plan's cost but that every spec ends in a documented exit code with a clear message:
combinations the loader refuses (a schedule with a trace, or with adapters or tenants) are expected and fine,
a traceback never is. It shares only ``Size`` and the size syntax with specgen; every draw below is its own.

A size is an upper bound here, not the shape: each seed draws 2..``workloads`` workloads, 1..``gpu_types``
GPU types and 8..``gpus`` GPUs in all (presets: ``mix`` = 12 / 4 / 256, ``mix-small`` = 4 / 2 / 32).

Features (each drawn with its own probability; ``features(size, seed)`` lists the ones a seed drew, and the
YAML's first line repeats them as a comment):

* ``tenants``: tenants, dedicated or not shared with others, owning some workloads (now and then a workload
  names a tenant the list lacks: an input error);
* ``lora``: explicit adapter lists (ranks 8-128, target modules, weights) or ``adapters_from`` populations
  (Zipf or uniform), with ``adapter: "*"`` and single-adapter workloads;
* ``kv``: ``defaults.kv_tiers`` auto, offload or experimental-live, with ``prefix`` or ``shared_prefix``
  reuse so that a tier has something to hold;
* ``pd``: a long-prompt, tight-TPOT workload on a 70B-class model with H100 and H200 on offer, the shape where
  prefill/decode disaggregation pays (the spec has no P/D switch: the planner decides);
* ``nodes``: explicit node groups per pool with racks, NIC, host memory, PCIe and NVLink domains, plus
  ``network.inter_rack_gbps``; now and then too few nodes for a pool or an NVLink domain that does not divide
  the node (input errors);
* ``budget``: ``budget_usd_per_hour``, sometimes far too small (infeasible, exit 3);
* ``goodput``: ``objective: max_goodput`` (with a budget, mostly);
* ``n+1``: ``redundancy: n+1``;
* ``schedule``: a schedule of 3-8 windows and ``rate_profile``s (declared rates with per-window ``cv``, or a
  ServeGen-shaped rate file written beside the spec);
* ``trace``: a workload replaying a CSV or Mooncake trace written beside the spec (with ``rate_scale`` or
  ``rate_rps``; Mooncake ones with ``prefix: {from_trace: true}`` now and then);
* ``samples``: prompt or output lengths from a CSV column written beside the spec;
* ``stages``, ``arrivals`` (constant, or a bursty ``arrival_cv``);
* ``engine``: SGLang, TensorRT-LLM or vLLM-CPU instead of vLLM;
* ``dtype``: fp8 / fp4 weights, per workload or by default, and ``kv_dtype`` (fp4 with a B200 pool);
* ``tight``: an SLO far below what any GPU reaches (infeasible, exit 3);
* ``zero``: a pool of 0 GPUs;
* ``solver``: cbc or cpsat, a node limit;
* ``hf``: ``hf_id``, ``hf_revision``, ``served_name``.

Always: dense models and mixtures of experts from the bundled profiles (Mixtral 8x7B, Qwen3 30B-A3B,
gpt-oss-120b), short-context ones (Llama 2 7B at 4k, GPT-J at 2k) whose windows cut long prompts; every length
form the schema takes (fixed, uniform, lognormal by median/p99 or mu/sigma, histogram); SLO percentiles 50,
90, 95 or 99; prices given for some pools and not for others.

Determinism: one ``random.Random(f"mix/{seed}/{size.key}")`` (a string seed hashes with SHA-512, not
PYTHONHASHSEED) drawn in a fixed order, ``yaml.safe_dump(sort_keys=False)``: the text and the files are a
function of (size, seed).
"""
from __future__ import annotations

import json
import math
import random

import yaml

from benchmarks.specgen import Size, parse_size as _parse_size

SIZES: dict[str, Size] = {
    "mix": Size(12, 4, 256),
    "mix-small": Size(4, 2, 32),
}
# Context windows (profiles/models/*.yaml, max_context_tokens) of the models drawn; dense and MoE.
CONTEXT = {"llama-3.1-8b": 131072, "qwen2.5-7b": 32768, "mistral-7b": 32768, "qwen3-8b": 40960,
           "llama-2-7b": 4096, "gpt-j-6b": 2048, "qwen3-14b": 40960, "llama-3.1-70b": 131072,
           "qwen2.5-32b": 32768, "mixtral-8x7b": 32768, "qwen3-30b-a3b": 40960, "gpt-oss-120b": 131072}
DENSE = ("llama-3.1-8b", "qwen2.5-7b", "mistral-7b", "qwen3-8b", "llama-2-7b", "gpt-j-6b", "qwen3-14b",
         "llama-3.1-70b", "qwen2.5-32b")
MOE = ("mixtral-8x7b", "qwen3-30b-a3b", "gpt-oss-120b")
LORA_BASES = ("llama-3.1-8b", "qwen2.5-7b", "mistral-7b", "qwen3-8b", "llama-3.1-70b")
GPU_TYPES = ("h100-sxm", "h200", "a100-80gb", "a100-40gb", "l40s", "l4", "a10g", "b200", "mi300x",
             "h100-pcie")
MODULES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
# (feature, probability per seed), drawn in this order
FEATURES = (("tenants", 0.3), ("lora", 0.35), ("kv", 0.3), ("pd", 0.2), ("nodes", 0.35), ("budget", 0.3),
            ("goodput", 0.15), ("n+1", 0.15), ("schedule", 0.25), ("trace", 0.2), ("samples", 0.2),
            ("stages", 0.15), ("arrivals", 0.25), ("engine", 0.35), ("dtype", 0.3), ("tight", 0.15),
            ("zero", 0.2), ("solver", 0.1), ("hf", 0.15))


def parse_size(text: str) -> Size:
    """This generator's presets first, then specgen's size syntax (``W/G/N[/M]``), read as upper bounds."""
    return SIZES[text] if text in SIZES else _parse_size(text)


class _Draw:
    """One seed's spec under construction: the dict, the files it names, the features drawn."""

    def __init__(self, size: Size, seed: int):
        self.rng = random.Random(f"mix/{seed}/{size.key}")
        self.seed = seed
        self.size = size
        self.files: dict[str, str] = {}
        rng = self.rng
        self.on = {f for f, p in FEATURES if rng.random() < p}
        self.n_work = rng.randint(2, max(2, size.workloads))
        self.n_types = rng.randint(1, max(1, size.gpu_types))
        self.n_gpus = rng.randint(8, max(8, size.gpus))


def _length(d: _Draw, lo: int, hi: int) -> dict:
    """A length distribution of any form the schema takes, around [lo, hi] tokens."""
    rng = d.rng
    kind = rng.choice(("fixed", "uniform", "lognormal", "mu-sigma", "histogram"))
    med = int(round(lo * (hi / lo) ** rng.random())) if hi > lo else lo
    if kind == "fixed":
        return {"fixed": med}
    if kind == "uniform":
        a = rng.randint(lo, med)
        return {"uniform": {"min": a, "max": rng.randint(a, max(a, hi))}}
    if kind == "lognormal":
        return {"lognormal": {"median": med, "p99": int(med * rng.choice((1.5, 3, 8, 20)))}}
    if kind == "mu-sigma":
        return {"lognormal": {"mu": round(math.log(med), 3), "sigma": rng.choice((0.2, 0.6, 1.0, 1.8))}}
    bins = rng.randint(1, 5)
    edges = sorted(rng.sample(range(max(0, lo // 2), max(hi, lo // 2 + bins + 1) + 1), bins + 1))
    # a zero weight now and then (all of them zero, rarely: an input error)
    return {"histogram": {"edges": edges, "weights": [rng.choice((0.0, 0.1, 0.5, 1.0, 1.0, 3.0, 3.0))
                                                      for _ in range(bins)]}}


def _samples(d: _Draw, name: str, lo: int, hi: int) -> dict:
    """A ``samples`` distribution whose CSV is written beside the spec."""
    rng = d.rng
    col = rng.choice(("tokens", "prompt_tokens"))
    rows = [str(rng.randint(lo, hi)) for _ in range(rng.randint(20, 200))]
    d.files[f"{name}.csv"] = "\n".join([col, *rows]) + "\n"
    return {"samples": {"path": f"{name}.csv", "column": col}}


def _trace(d: _Draw, name: str, rate: float, lo: int, hi: int) -> dict:
    """A CSV or Mooncake trace written beside the spec: a minute or so of Poisson arrivals."""
    rng = d.rng
    fmt = rng.choice(("csv", "mooncake"))
    t, rows = 0.0, []
    n = rng.randint(50, 300)
    for i in range(n):
        t += rng.expovariate(rate)
        isl, osl = rng.randint(lo, hi), rng.randint(8, 400)
        if fmt == "csv":
            rows.append(f"{t:.4f},{isl},{osl}")
        else:
            blocks = -(-isl // 512)
            shared = rng.randint(0, blocks)  # the first blocks come from one of three system prompts
            group = rng.randint(0, 2)
            ids = ([group * 1000 + b for b in range(shared)]
                   + [10**6 + i * 100 + b for b in range(blocks - shared)])
            rows.append(json.dumps({"timestamp": int(t * 1000), "input_length": isl, "output_length": osl,
                                    "hash_ids": ids}))
    path = f"{name}.{'csv' if fmt == 'csv' else 'jsonl'}"
    head = "timestamp,input_tokens,output_tokens\n" if fmt == "csv" else ""
    d.files[path] = head + "\n".join(rows) + "\n"
    ref = {"path": path, "format": fmt}
    if rng.random() < 0.4:
        ref["rate_scale"] = rng.choice((0.5, 2.0, 10.0))
    return ref


def _gpus(d: _Draw, need: list[str]) -> list[dict]:
    rng = d.rng
    rest = [t for t in GPU_TYPES if t not in need]
    rng.shuffle(rest)
    types = (need + rest)[:max(d.n_types, len(need))]
    shares = [rng.uniform(0.2, 1.0) for _ in types]
    counts = [max(1, round(d.n_gpus * s / sum(shares))) for s in shares]  # about n_gpus in all
    if "zero" in d.on:
        counts[rng.randrange(len(types))] = 0
    pools = []
    for t, c in zip(types, counts):
        p = {"type": t, "count": c}
        if rng.random() < 0.5:
            p["usd_per_hour"] = round(rng.uniform(0.3, 9.0), 2)
        pools.append(p)
    return pools


def _nodes(d: _Draw, pools: list[dict]) -> list[dict]:
    rng = d.rng
    groups = []
    racks = [f"rack{i}" for i in range(rng.randint(1, 3))]
    for p in pools:
        if p["count"] == 0:
            continue
        gpn = rng.choice((None, 8, 4, 2))
        per = gpn or 8
        n = -(-p["count"] // per)
        if rng.random() < 0.1:
            n = max(1, n - 1)  # too few nodes now and then: an error naming both fields
        g = {"name": f"{p['type']}-srv", "gpu": p["type"], "count": n}
        if gpn:
            g["gpus_per_node"] = gpn
        if rng.random() < 0.4:
            g["nvlink_domain"] = rng.choice((1, 2, 4, 3))  # 3 divides no node: an error
        if rng.random() < 0.5:
            g["nic_gbps"] = rng.choice((12.5, 50, 100, 400))
        if rng.random() < 0.4:
            g["cpu_memory_gib"] = rng.choice((16, 256, 2048))
        if rng.random() < 0.3:
            g["pcie_gbps"] = rng.choice((8, 32, 64))
        if rng.random() < 0.7:
            g["rack"] = rng.choice(racks)
        groups.append(g)
    return groups


def _slo(d: _Draw, model: str, tight: bool) -> dict:
    rng = d.rng
    big = model in ("llama-3.1-70b", "qwen2.5-32b", "gpt-oss-120b")
    if tight:
        return {"ttft_ms": rng.choice((1, 5, 20)), "tpot_ms": rng.choice((0.5, 2, 4)),
                "percentile": rng.choice((50, 90, 99))}
    slo = {"ttft_ms": rng.choice((500, 1000, 2000, 5000, 30000)) * (2 if big else 1),
           "tpot_ms": rng.choice((25, 40, 60, 100, 200)) * (1.5 if big else 1)}
    pct = rng.choice((None, 50, 90, 95, 99))
    if pct is not None:
        slo["percentile"] = pct
    return slo


def generate_data(size: Size, seed: int) -> tuple[dict, dict[str, str], list[str]]:
    """The spec as a dict, the files it names ({name: text}) and the features drawn (see ``generate``)."""
    d = _Draw(size, seed)
    rng, on = d.rng, d.on
    spec: dict = {"version": 1, "name": f"mix-{size.key}-s{seed}"}

    # models: lora bases first (a lora spec serves adapters on them), dense and MoE mixed
    n_models = rng.randint(1, min(4, d.n_work))
    names: list[str] = []
    if "pd" in on:
        names.append("llama-3.1-70b")
    if "lora" in on:
        names.append(rng.choice([m for m in LORA_BASES if m not in names]))
    pool = [m for m in DENSE + MOE if m not in names]
    rng.shuffle(pool)
    names += pool[:max(0, n_models - len(names))]
    models = []
    for i, m in enumerate(names):
        ref: dict = {"name": m}
        if "lora" in on and i == (1 if "pd" in on else 0):
            if rng.random() < 0.5:
                ref["adapters"] = [{"name": f"{m.split('-')[0]}-ad{k}", "rank": rng.choice((8, 16, 64, 128))}
                                   for k in range(rng.randint(1, 6))]
                for a in ref["adapters"]:
                    if rng.random() < 0.3:
                        picked = rng.sample(MODULES, rng.randint(1, 7))
                        a["target_modules"] = sorted(picked, key=MODULES.index)
                    if rng.random() < 0.3:
                        a["weight"] = rng.choice((0.5, 2.0, 10.0))
            else:
                pop = {"count": rng.choice((2, 10, 50, 300)), "rank": rng.choice((8, 16, 32))}
                if rng.random() < 0.6:
                    pop["traffic"] = {"zipf": {"s": rng.choice((0.0, 0.8, 1.1, 2.0))}}
                if rng.random() < 0.3:
                    pop["prefix"] = "tune-"
                if rng.random() < 0.3:
                    pop["target_modules"] = ["q_proj", "v_proj"]
                ref["adapters_from"] = pop
        if "hf" in on and rng.random() < 0.6:
            ref["hf_id"] = f"acme/{m}-ft"
            if rng.random() < 0.5:
                ref["hf_revision"] = rng.choice(("v2", "0123abcd"))
            if rng.random() < 0.5:
                ref["served_name"] = f"acme/{m}:latest"
        models.append(ref)

    # GPUs: pd wants H100 and H200, an fp4 KV cache a B200
    need = ["h100-sxm", "h200"] if "pd" in on else []
    want_fp4 = "dtype" in on and rng.random() < 0.4
    if want_fp4 and "b200" not in need:
        need.append("b200")
    gpus = _gpus(d, need)

    if "budget" in on:
        spec["budget_usd_per_hour"] = rng.choice((0.5, 5, 40, 400, 4000))
    if "goodput" in on:
        spec["objective"] = "max_goodput"
        if "budget" not in on and rng.random() < 0.7:
            spec["budget_usd_per_hour"] = rng.choice((10, 100))
    defaults: dict = {}
    if "engine" in on:
        defaults["engine"] = rng.choice(("sglang", "trt-llm", "sglang", "trt-llm", "vllm-cpu"))
    if "dtype" in on and rng.random() < 0.5:
        defaults["dtype"] = rng.choice(("fp8", "bf16", "fp4"))
    if "kv" in on:
        defaults["kv_tiers"] = rng.choice(("auto", "offload", "experimental-live"))
    if defaults:
        spec["defaults"] = defaults
    if "solver" in on:
        spec["solver"] = {"backend": rng.choice(("cbc", "cpsat", "highs"))}
        if rng.random() < 0.5:
            spec["solver"]["node_limit"] = rng.choice((0, 10, 5000))
    if "n+1" in on:
        spec["redundancy"] = "n+1"
    spec["gpus"] = gpus
    spec["models"] = models

    windows = rng.randint(3, 8)
    servegen = "schedule" in on and rng.random() < 0.3
    if "schedule" in on:
        sched: dict = {"window_s": 1800 if servegen else rng.choice((600, 1800, 3600))}
        if rng.random() < 0.4:
            sched["min_lifetime_windows"] = rng.randint(1, 3)
        if rng.random() < 0.4:
            sched["max_changes_per_window"] = rng.randint(0, 6)
        if rng.random() < 0.3:
            sched["cyclic"] = False
        if rng.random() < 0.3:
            sched["startup"] = {"load_gbps": rng.choice((1.0, 5.0)), "warmup_s": rng.choice((0, 60, 600))}
        if rng.random() < 0.3:
            sched["validate_windows"] = rng.randint(1, 4)
        spec["schedule"] = sched
        if servegen:
            # 3 ten-minute rows per 1800-s window: as many windows as the declared profiles (fold none)
            rows = ["window_start_s,rate"] + [f"{600 * i},{rng.uniform(0.1, 5):.3f}"
                                              for i in range(3 * windows)]
            d.files["rates.csv"] = "\n".join(rows) + "\n"

    tenants = [f"t{i}" for i in range(rng.randint(1, 3))] if "tenants" in on else []
    adapters_of = {m["name"]: ([a["name"] for a in m.get("adapters", [])] or
                               (["*"] if "adapters_from" in m else [])) for m in models}

    workloads = []
    traced = samples_done = False
    for j in range(d.n_work):
        model = names[j % len(names)]
        w: dict = {"name": f"w{j}", "model": model}
        ctx = CONTEXT[model]
        pd_here = "pd" in on and j == 0
        spans = ((16, 256), (200, 2000), (1000, 8000), (8000, 60000))
        lo, hi = (4000, 16000) if pd_here else rng.choice(spans)
        if rng.random() < 0.9:  # mostly within the context window; else the window cuts it, or refuses it
            hi = min(hi, int(ctx * 0.8))
            lo = min(lo, hi // 2)
        rate = round(rng.uniform(0.2, 12), 2)
        # a trace under a schedule is refused (its arrivals are not split into windows): drawn less often
        if ("trace" in on and not traced and rng.random() < 0.5
                and ("schedule" not in on or rng.random() < 0.3)):
            traced = True
            w["trace"] = _trace(d, f"trace{j}", rate, min(lo, ctx // 2), min(hi, ctx - 64))
            if "rate_scale" not in w["trace"] and rng.random() < 0.5:
                w["rate_rps"] = rate
            if w["trace"]["format"] == "mooncake" and rng.random() < 0.5:
                w["prefix"] = {"from_trace": True}
        elif "schedule" in on:
            if servegen and rng.random() < 0.5:
                # fold: day would make a day of windows out of the file's few; the declared profiles have
                # `windows`, so day is a mismatch the loader must name (drawn now and then)
                w["rate_profile"] = {"servegen": "rates.csv", "peak_rps": rate,
                                     "fold": "day" if rng.random() < 0.15 else "none"}
            else:
                rps = [round(rate * rng.uniform(0.2, 1.0), 2) for _ in range(windows)]
                w["rate_profile"] = {"rps": rps}
                if rng.random() < 0.3:
                    w["rate_profile"]["cv"] = [rng.choice((1.0, 2.0, 4.0)) for _ in rps]
        elif "stages" in on and rng.random() < 0.6:
            w["stages"] = [{"rate_rps": round(rate * rng.uniform(0.2, 1.5), 2),
                            "duration_s": rng.choice((30, 300, 3600))} for _ in range(rng.randint(1, 4))]
        else:
            w["rate_rps"] = rate
        if "trace" not in w or rng.random() < 0.3:
            if "samples" in on and not samples_done and rng.random() < 0.5:
                samples_done = True
                w["input_tokens"] = _samples(d, f"len{j}", lo, hi)
            else:
                w["input_tokens"] = _length(d, lo, hi)
            w["output_tokens"] = ({"lognormal": {"median": 400, "p99": 1200}} if pd_here
                                  else _length(d, 8, rng.choice((64, 512, 2048))))
        w["slo"] = ({"ttft_ms": 5000, "tpot_ms": 35, "percentile": 99} if pd_here
                    else _slo(d, model, "tight" in on and j == d.n_work - 1))
        if "dtype" in on and rng.random() < 0.4:
            w["dtype"] = rng.choice(("fp8", "bf16", "fp4"))
        if want_fp4 and rng.random() < 0.5:
            w["kv_dtype"] = "fp4"
        elif "dtype" in on and rng.random() < 0.2:
            w["kv_dtype"] = rng.choice(("fp8", "bf16"))
        ads = adapters_of.get(model, [])
        if ads and rng.random() < 0.7:
            w["adapter"] = rng.choice(ads + ["*"])
        if tenants and rng.random() < 0.6:
            w["tenant"] = rng.choice(tenants + (["ghost"] if rng.random() < 0.1 else []))
        if "arrivals" in on and "trace" not in w:
            if rng.random() < 0.5:
                w["arrivals"] = "constant"
            else:
                w["arrival_cv"] = rng.choice((0.5, 2.0, 6.0))
        if "kv" in on and "prefix" not in w and rng.random() < 0.6:
            if rng.random() < 0.5:
                w["prefix"] = {"hit_rate": rng.choice((0.0, 0.3, 0.8, 0.95)),
                               "cached_tokens": rng.choice((512, 20000, 2_000_000))}
            else:
                w["shared_prefix"] = {"prefix_tokens": rng.choice((64, 512, 2048)),
                                      "groups": rng.randint(1, 20), "users_per_group": rng.randint(1, 50)}
                if rng.random() < 0.3:
                    w["shared_prefix"]["prompts_repeat"] = True
        workloads.append(w)
    spec["workloads"] = workloads

    if "nodes" in on:
        spec["nodes"] = _nodes(d, gpus)
        if rng.random() < 0.6:
            spec["network"] = {"inter_rack_gbps": rng.choice((1, 12.5, 100))}
    if tenants:
        ts = []
        for t in tenants:
            e: dict = {"name": t}
            if rng.random() < 0.4:
                e["dedicated"] = True
            others = [o for o in tenants if o != t]
            if others and rng.random() < 0.4:
                e["not_shared_with"] = rng.sample(others, rng.randint(1, len(others)))
            ts.append(e)
        spec["tenants"] = ts
    drawn = [f for f, _ in FEATURES if f in on]
    return spec, d.files, drawn


def features(size: Size, seed: int) -> list[str]:
    """The features a seed drew, in ``FEATURES`` order."""
    return generate_data(size, seed)[2]


def generate(size: Size, seed: int) -> str:
    """The spec's YAML text: a function of (size, seed) only; its first line lists the features drawn."""
    spec, _, drawn = generate_data(size, seed)
    return (f"# specgen_mix features: {', '.join(drawn) or 'none'}\n"
            + yaml.safe_dump(spec, sort_keys=False, width=110, default_flow_style=None))


def generate_files(size: Size, seed: int) -> dict[str, str]:
    """The files the spec names (samples CSVs, traces, a ServeGen rate file): {name beside the spec: text}."""
    return generate_data(size, seed)[1]


def family(size: Size, n: int, seed: int = 0) -> list[tuple[str, str]]:
    """``n`` specs of one size: (name, YAML text) for seeds ``seed .. seed + n - 1`` (their files:
    ``generate_files``)."""
    return [(f"mix-{size.key}-s{s}", generate(size, s)) for s in range(seed, seed + n)]


if __name__ == "__main__":  # print one spec: python -m benchmarks.specgen_mix mix 3
    import sys

    print(generate(parse_size(sys.argv[1] if len(sys.argv) > 1 else "mix"),
                   int(sys.argv[2]) if len(sys.argv) > 2 else 0), end="")
