"""Re-fit the shipped A100 and H100 profiles to Vidur's measured per-operator timings.

usage: python benchmarks/calibrate_vidur.py [SHARED_DIR] [--write]   (default ../shared)

A thin wrapper over ``trimtab calibrate`` (``trimtab.field.calibrate``), which reads the Vidur CSV format; it
prints the fitted parameters and the fit error per operation for both GPUs. With ``--write`` it rewrites
``profiles/gpus/{a100-80gb,h100-sxm}.yaml`` in place (the same as running, from the repository root,
``trimtab calibrate ../shared/profiling/vidur/compute/h100 ../shared/profiling/vidur/network/h100_dgx
-o profiles/gpus/h100-sxm.yaml --base h100-sxm`` and likewise for a100 / a100-80gb). The data is not
committed.
"""
from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from trimtab.field.calibrate import calibrate, format_errors  # noqa: E402

GPUS = {"h100": "h100-sxm", "a100": "a100-80gb"}


def main(argv: list[str]) -> int:
    args = [a for a in argv if not a.startswith("-")]
    shared = Path(args[0]) if args else Path("../shared")
    vidur = shared / "profiling" / "vidur"
    for gpu, profile in GPUS.items():
        dirs = [vidur / "compute" / gpu, vidur / "network" / f"{gpu}_dgx"]
        out = ROOT / "profiles" / "gpus" / f"{profile}.yaml"
        if "--write" not in argv:
            out = Path(tempfile.mkdtemp()) / f"{profile}.yaml"
        r = calibrate([os.path.relpath(d) for d in dirs], out, profile)
        print(f"{gpu} -> {out}")
        for line in format_errors(r.fit):
            print("  " + line)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
