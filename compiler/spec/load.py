"""Read a spec from YAML: syntax, schema, then cross-references, each problem with its field path and line.

Entry point: ``load_spec(path_or_text, profiles=None) -> Spec``. Raises ``InputError`` listing every problem.
"""
from __future__ import annotations

from pathlib import Path

from trimtab.errors import InputError, Problem
from trimtab.spec.lora import cross_check as lora_cross_check
from trimtab.profiles.loader import ProfileSet, fp4_kv_problem, load_profiles, model_from_hf_config
from trimtab.spec.schema import Spec
from trimtab.util.validation import validate
from trimtab.util.yamlio import LineMap, line_for, load_yaml_with_lines, read_yaml_file
from trimtab.spec.nodes import node_problems
from trimtab.spec.rates import profile_problems


def load_spec(source: str | Path, profiles: ProfileSet | None = None, *, text: str | None = None,
              profile_dir: str | Path | None = None) -> Spec:
    """Load and validate a spec file (or ``text``, reported as coming from ``source``). ``profile_dir``: a
    folder of the user's own profiles (the command line's ``--profiles``), replacing the spec's ``profiles``.
    """
    if text is None:
        data, lines = read_yaml_file(source)
        base = str(Path(source).resolve().parent)
    else:
        data, lines = load_yaml_with_lines(text, str(source))
        base = "."
    return spec_from_data(data, lines, str(source), base, profiles, profile_dir)


def spec_from_data(data, lines: LineMap, source: str, base_dir: str, profiles: ProfileSet | None = None,
                   profile_dir: str | Path | None = None) -> Spec:
    if not isinstance(data, dict):
        raise InputError([Problem("", "a spec is a YAML mapping (version, name, "
                                      "gpus, models, workloads)", source, 1)])
    spec = validate(Spec, data, lines, source, "spec")
    where = ("profiles", source, line_for(lines, ("profiles",)))
    if profile_dir is not None:  # relative to where the command runs; kept absolute in the spec it replaces
        where = ("--profiles", None, None)
        spec = spec.model_copy(update={"profiles": str(Path(profile_dir).resolve())})
    spec._base_dir = base_dir
    if profiles is None:
        profiles = spec_profiles(spec, where)
    problems = cross_check(spec, lines, source, profiles)
    if problems:
        raise InputError(problems, "spec")
    return spec


PROFILE_KINDS = ("gpus", "models", "engines")


def profile_dir_of(spec: Spec) -> Path | None:
    """The folder of the user's own profiles: the spec's ``profiles`` (relative to the spec file;
    ``--profiles`` stores an absolute path there), or None for the bundled profiles alone."""
    return None if spec.profiles is None else Path(spec.base_dir) / spec.profiles


def spec_profiles(spec: Spec, where: tuple = ("profiles", None, None)) -> ProfileSet:
    """The profiles a spec is planned with: the bundled ones, each replaced by the user's profile of the same
    name in ``profile_dir_of(spec)`` (every stage that lowers a spec reads them here). A missing folder, one
    with no profile folder inside, or a bad profile in it is invalid input naming ``where`` (the field, or the
    option) and the profile file's line."""
    d = profile_dir_of(spec)
    return load_profiles() if d is None else load_profile_folder(d, where)


def load_profile_folder(d: str | Path, where: tuple = ("--profiles", None, None)) -> ProfileSet:
    """The bundled profiles with those of the user's folder ``d`` in their place: the one reading of a profile
    folder (a spec's, or a command's ``--profiles``); problems named by ``where`` = (field or option, file,
    line)."""
    d = Path(d)
    field, source, line = where
    if not d.is_dir():
        raise InputError([Problem(field, f"profile folder not found: {d}", source, line)], "spec")
    if not any((d / k).is_dir() for k in PROFILE_KINDS):
        raise InputError([Problem(field, f"{d} holds no gpus/, models/ or engines/ folder of profiles "
                                         "(trimtab calibrate writes them there)", source, line)], "spec")
    try:
        return load_profiles((d,))
    except InputError as exc:  # the profile's own file:line, and which folder brought it in
        raise InputError([Problem(f"{field} ({d}): {p.where}" if p.where else f"{field} ({d})", p.message,
                                  p.file, p.line) for p in exc.problems], "profile") from None


def cross_check(spec: Spec, lines: LineMap, source: str, profiles: ProfileSet) -> list[Problem]:
    """Duplicate names and references to unknown models or GPU types."""
    out: list[Problem] = []

    def bad(loc: tuple, where: str, msg: str) -> None:
        out.append(Problem(where, msg, source, line_for(lines, loc)))

    for what, items, key in (("gpus", spec.gpus, "type"), ("models", spec.models, "name"),
                             ("workloads", spec.workloads, "name")):
        first: dict[str, int] = {}
        for i, it in enumerate(items):
            v = getattr(it, key)
            if v in first:
                bad((what, i, key), f"{what}[{i}].{key}", f"duplicate {key} {v!r} (also {what}[{first[v]}])")
            first.setdefault(v, i)
    for i, g in enumerate(spec.gpus):
        if g.type not in profiles.gpus:
            bad(("gpus", i, "type"), f"gpus[{i}].type", f"unknown GPU type {g.type!r}; known: "
                                                        f"{', '.join(sorted(profiles.gpus))}")
    for i, m in enumerate(spec.models):
        if m.config is not None:
            p = Path(spec.base_dir) / m.config
            if not p.is_file():
                bad(("models", i, "config"), f"models[{i}] ({m.name}).config", f"file not found: {p}")
        elif m.name not in profiles.models:
            bad(("models", i, "name"), f"models[{i}].name",
                f"unknown model {m.name!r}; known: {', '.join(sorted(profiles.models))} (or give "
                "config: path/to/config.json)")
    names = {m.name for m in spec.models}
    for i, w in enumerate(spec.workloads):
        if w.model not in names:
            bad(("workloads", i, "model"), f"workloads[{i}] ({w.name}).model",
                f"model {w.model!r} is not listed under models ({', '.join(sorted(names))})")
    kv_dtype_check(spec, profiles, bad)
    lora_cross_check(spec, bad)

    for loc, where, msg in profile_problems(spec):
        bad(loc, where, msg)
    if spec.budget_usd_per_hour is not None and all(g.count == 0 for g in spec.gpus):
        bad(("gpus",), "gpus", "every GPU pool has count 0")
    for loc, where, msg in kind_problems(spec):  # (also in trimtab.ir.lower, for specs built in code)
        bad(loc, where, msg)

    per_node = {k: int(p.gpus_per_node.value) for k, p in profiles.gpus.items()}
    for loc, where, msg in node_problems(spec, per_node):
        bad(loc, where, msg)
    return out


def kind_problems(spec: Spec) -> list[tuple[tuple, str, str]]:
    """(location, field, message) of each pair of spec kinds that do not compose yet. A schedule's planner
    sizes every window to its whole rate: with ``max_goodput`` it served nothing and wrote a 0 $/h
    schedule."""
    out = []
    if spec.redundancy == "n+1" and spec.schedule is not None:
        out.append((("redundancy",), "redundancy", "n+1 is not supported with a schedule yet: the "
                                                   "schedule MILP has no survival rows per window and its "
                                                   "validation simulates no node loss (docs/online.md, "
                                                   "\"Redundancy\"); plan without one of them"))
    if spec.schedule is not None and (spec.tenants or any(w.adapter or w.tenant for w in spec.workloads)):
        # its windows are planned by the unified planner, which routes adapter traffic to deployments without
        # LoRA and ignores tenant isolation: `check` refuses every window
        out.append((("schedule",), "schedule", "LoRA adapters and tenants are not supported with a schedule "
                                               "yet: its windows are planned without adapter placement or "
                                               "tenant isolation (docs/online.md); plan without one of them"))
    if spec.objective == "max_goodput" and spec.schedule is not None:
        out.append((("objective",), "objective", "max_goodput is not supported with a schedule yet: the "
                                                 "schedule MILP sizes every window to its whole rate, with "
                                                 "no served-rate objective (docs/online.md); plan it with "
                                                 "objective: min_cost"))
    return out


def kv_dtype_check(spec: Spec, profiles: ProfileSet, bad) -> None:
    """``workloads[].kv_dtype: fp4`` (an NVFP4 KV cache): a GPU of the spec and the workload's model must be
    able to hold it (``trimtab.profiles.loader.fp4_kv_problem``). With LoRA adapters too: the adapter planner
    prices its replicas' KV cache at the workload's kv_dtype (``trimtab.planning.lora_candidates``)."""
    gpus = [profiles.gpus[g.type] for g in spec.gpus if g.type in profiles.gpus]
    models = {m.name: m for m in spec.models}
    for i, w in enumerate(spec.workloads):
        m = models.get(w.model)
        if w.kv_dtype is None or m is None:
            continue
        why = None
        if w.kv_dtype == "fp4":
            fp4 = [g for g in gpus if g.fp4_tflops is not None]
            try:
                prof = (model_from_hf_config(Path(spec.base_dir) / m.config, m.name) if m.config is not None
                        else profiles.models.get(m.name))
            except (ValueError, OSError):
                prof = None  # the model's own check reports it
            if not fp4:
                why = (f"an fp4 KV cache needs FP4 tensor cores (fp4_tflops: B200); none of the spec's gpus "
                       f"({', '.join(g.type for g in spec.gpus)}) has them")
            elif prof is not None:
                why = fp4_kv_problem(prof, fp4[0])
        if why:
            bad(("workloads", i, "kv_dtype"), f"workloads[{i}] ({w.name}).kv_dtype", why)
