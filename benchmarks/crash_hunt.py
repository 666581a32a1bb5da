"""Crash hunt over generated specs, through the CLI as a user runs it (issue 35: "bad or unusual input never
gives a Python traceback"; "a spec shape the benchmarks never draw crashes" is a defect).

    python benchmarks/crash_hunt.py run --generator mix --size mix --seeds 0:80 --out /tmp/hunt-mix
    python benchmarks/crash_hunt.py table /tmp/hunt-mix /tmp/hunt-small > table.md

``run`` writes each seed's spec (and the files it names) into ``OUT/s<seed>/``, runs ``trimtab plan spec.yaml
-o plan.json --format json`` under ``timeout`` (120 s by default), and, where a plan was written, ``trimtab
check --seeds 1`` and ``trimtab emit --to k8s``; every command's stderr is kept beside the spec, and one JSON
row per seed (features drawn, exit codes, seconds, whether a traceback was printed) is appended to
``OUT/rows.jsonl`` and printed. Exit 124 is ``timeout``'s, not trimtab's. ``table`` prints the markdown table
of ``benchmarks/data/specgen_mix_crashhunt.md`` from such folders (a later row of a seed replaces an earlier
one, so a seed re-run after a fix reads as re-run).

Why the CLI and not ``trimtab.api``: the exit code, the message on stderr and the absence of a traceback are
what the user sees, and they are decided in the CLI (``compiler/errors.py``, docs/errors.md).
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks import specgen, specgen_alt, specgen_mix  # noqa: E402

GENERATORS = {"specgen": specgen, "alt": specgen_alt, "mix": specgen_mix}
TRIMTAB = str(Path(sys.executable).parent / "trimtab")


def _run(cmd: list[str], cwd: Path, limit: float) -> tuple[int, float, str]:
    t0 = time.perf_counter()
    p = subprocess.run(["timeout", f"{limit:g}"] + cmd, cwd=cwd, capture_output=True, text=True)
    return p.returncode, time.perf_counter() - t0, p.stderr


def hunt_one(gen, size, seed: int, out: Path, limit: float) -> dict:
    d = out / f"s{seed}"
    d.mkdir(parents=True, exist_ok=True)
    (d / "spec.yaml").write_text(gen.generate(size, seed))
    for name, text in (gen.generate_files(size, seed) if hasattr(gen, "generate_files") else {}).items():
        (d / name).write_text(text)
    (d / "plan.json").unlink(missing_ok=True)
    rc, sec, err = _run([TRIMTAB, "plan", "spec.yaml", "-o", "plan.json", "--format", "json"], d, limit)
    (d / "plan.stderr").write_text(err)
    feats = gen.features(size, seed) if hasattr(gen, "features") else []
    row = {"seed": seed, "features": feats, "plan_rc": rc, "plan_s": round(sec, 1),
           "tb": "Traceback" in err}
    if (d / "plan.json").exists():
        check = [TRIMTAB, "check", "--plan", "plan.json", "--spec", "spec.yaml", "--seeds", "1"]
        rc2, sec2, err2 = _run(check, d, limit)
        (d / "check.stderr").write_text(err2)
        rc3, sec3, err3 = _run([TRIMTAB, "emit", "--plan", "plan.json", "--spec", "spec.yaml", "--to", "k8s",
                                "-o", "k8s"], d, limit)
        (d / "emit.stderr").write_text(err3)
        row.update(check_rc=rc2, check_s=round(sec2, 1), check_tb="Traceback" in err2,
                   emit_rc=rc3, emit_s=round(sec3, 1), emit_tb="Traceback" in err3)
    return row


def message(d: Path, row: dict) -> str:
    """The error's label and its first line, as the user reads them on stderr."""
    err = (d / "plan.stderr").read_text().splitlines() if (d / "plan.stderr").exists() else []
    for i, line in enumerate(err):
        if line.startswith("error ("):
            return line.rstrip(":") + ": " + (err[i + 1].strip() if i + 1 < len(err) else "")
    if row["plan_rc"] == 0:
        return "plan written"
    if row["plan_rc"] == 124:
        return "stopped by timeout (" + (err[-1].strip() if err else "") + ")"
    return err[-1].strip() if err else ""


def table(folders: list[Path]) -> str:
    out = ["| size | seed | features drawn | plan exit | plan s | check exit | emit k8s exit | message "
           "(first line of the error) |", "|---|---:|---|---:|---:|---:|---:|---|"]
    for f in folders:
        rows: dict[int, dict] = {}
        for line in (f / "rows.jsonl").read_text().splitlines():
            r = json.loads(line)
            rows[r["seed"]] = r
        for seed in sorted(rows):
            r = rows[seed]
            m = message(f / f"s{seed}", r).replace("|", "/")
            m = m if len(m) <= 230 else m[:227] + "..."
            out.append(f"| {r.get('size', f.name)} | {seed} | {', '.join(r['features']) or '-'} | "
                       f"{r['plan_rc']} | {r['plan_s']:.1f} | {r.get('check_rc', '-')} | "
                       f"{r.get('emit_rc', '-')} | {m} |")
    return "\n".join(out) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="plan, check and emit generated specs")
    r.add_argument("--generator", choices=sorted(GENERATORS), default="mix")
    r.add_argument("--size", default="mix")
    r.add_argument("--seeds", default="0:60", help="first:last+1")
    r.add_argument("--out", type=Path, required=True)
    r.add_argument("--timeout", type=float, default=120.0, help="seconds per command (timeout(1))")
    t = sub.add_parser("table", help="the markdown table of run folders")
    t.add_argument("folders", type=Path, nargs="+")
    args = ap.parse_args()
    if args.cmd == "table":
        sys.stdout.write(table(args.folders))
        return
    gen = GENERATORS[args.generator]
    size = gen.parse_size(args.size)
    a, b = (int(x) for x in args.seeds.split(":"))
    args.out.mkdir(parents=True, exist_ok=True)
    with (args.out / "rows.jsonl").open("a") as fh:
        for seed in range(a, b):
            row = hunt_one(gen, size, seed, args.out, args.timeout)
            row["size"] = args.size
            fh.write(json.dumps(row) + "\n")
            fh.flush()
            print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
