"""``trimtab profiles list`` and ``trimtab profiles show``: the bundled GPU, model and engine profiles (or a
``--profiles`` folder's), with the source of every number (logic in ``trimtab.profiles``)."""
from __future__ import annotations

import json
import sys
from typing import Annotated

import typer
import yaml
from rich.table import Table

from trimtab.cli.common import Fmt, ProfilesOpt, TableOrJson, _expected_errors, out
from trimtab.errors import InputError, Problem
from trimtab.profiles.loader import load_profiles
from trimtab.spec.load import load_profile_folder

profiles_app = typer.Typer(no_args_is_help=True, help="List and show GPU, model and engine profiles.")


@profiles_app.command("list")
@_expected_errors
def profiles_list(
    fmt: Annotated[TableOrJson, typer.Option("--format",
                                             help="table, or json (the document "
                                                  "alone on stdout).")] = TableOrJson.table,
    profiles: ProfilesOpt = None,
) -> None:
    """List the GPU, model and engine profiles (the bundled ones, with --profiles DIR's in their place).

    Example: trimtab profiles list
    """
    p = load_profiles() if profiles is None else load_profile_folder(profiles)
    if fmt == TableOrJson.json:
        q = lambda prof: {f: v.value for f, v in prof if hasattr(v, "value")}  # noqa: E731
        sys.stdout.write(json.dumps({"gpus": {n: q(g) for n, g in sorted(p.gpus.items())},
                                     "models": {n: {**q(m), "hf": m.hf.model_dump() if m.hf else None}
                                                for n, m in sorted(p.models.items())},
                                     "engines": {n: q(e) for n, e in sorted(p.engines.items())}},
                                    indent=2) + "\n")
        return
    t = Table(title="GPUs")
    for c in ("name", "memory GiB", "HBM GB/s", "bf16 TFLOPS", "fp8 TFLOPS", "link", "per node", "$/h"):
        t.add_column(c, justify="left" if c in ("name", "link") else "right")
    for n, g in sorted(p.gpus.items()):
        t.add_row(n, f"{g.memory_gib.value:g}", f"{g.hbm_bandwidth_gbps.value:g}", f"{g.bf16_tflops.value:g}",
                  f"{g.fp8_tflops.value:g}", g.interconnect, f"{g.gpus_per_node.value:g}",
                  f"{g.usd_per_hour.value:.2f}")
    out.print(t)
    m = Table(title="models")
    for c in ("name", "params B", "active B", "layers", "hidden", "heads", "KV heads", "context"):
        m.add_column(c, justify="left" if c == "name" else "right")
    for n, x in sorted(p.models.items()):
        m.add_row(n, f"{x.params_billion.value:g}", f"{x.active_params_billion.value:g}",
                  f"{x.num_layers.value:g}", f"{x.hidden_size.value:g}", f"{x.num_attention_heads.value:g}",
                  f"{x.num_kv_heads.value:g}", f"{x.max_context_tokens.value:g}")
    out.print(m)
    out.print("engines: " + ", ".join(sorted(p.engines)))


@profiles_app.command("show")
@_expected_errors
def profiles_show(
    name: Annotated[str, typer.Argument(help="A GPU, model or engine profile name.")],
    fmt: Annotated[Fmt, typer.Option("--format", help="yaml or json.")] = Fmt.yaml,
    profiles: ProfilesOpt = None,
) -> None:
    """Show one profile with the source of every number.

    Example: trimtab profiles show llama-3.1-70b
    """
    p = load_profiles() if profiles is None else load_profile_folder(profiles)
    prof = p.gpus.get(name) or p.models.get(name) or p.engines.get(name)
    if prof is None:
        known = sorted(p.gpus) + sorted(p.models) + sorted(p.engines)
        raise InputError([Problem("NAME", f"no profile named {name!r}; known: {', '.join(known)}")])
    rows = {}
    for field, val in prof:
        if hasattr(val, "value"):
            src = prof.sources[val.source]
            rows[field] = {"value": val.value, "source": f"{src.kind}: {src.ref}"}
        elif hasattr(val, "repo"):  # a model's Hugging Face repo (HfRepo)
            src = prof.sources[val.source]
            rows[field] = {"repo": val.repo, "revision": val.revision, "source": f"{src.kind}: {src.ref}"}
        elif field != "sources":
            rows[field] = val
    if fmt == Fmt.json:
        sys.stdout.write(json.dumps(rows, indent=2) + "\n")
    else:
        sys.stdout.write(yaml.safe_dump(rows, sort_keys=False, width=120))
