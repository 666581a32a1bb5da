"""A profile's YAML text with some entries replaced: the rest of the file (comments, quoting, number formats)
stays as written, so a refitted profile's diff shows only what the fit changed (``trimtab calibrate --from
aiconfigurator``)."""
from __future__ import annotations

import yaml


def _dump(key: str, value) -> list[str]:
    text = yaml.safe_dump({key: value}, sort_keys=False, default_flow_style=None, width=10**6,
                          allow_unicode=True)
    return text.rstrip("\n").split("\n")


def merge_yaml(text: str, prof: dict, base: dict) -> str:
    """``text`` (the base profile's YAML) with the entries of ``prof`` that differ from ``base`` replaced or
    appended, line by line: the rest of the file (comments, quoting, number formats) stays as written."""
    lines = text.rstrip("\n").split("\n")

    def block(i: int, indent: int) -> int:  # end of the entry starting at line i (its deeper-indented lines)
        j = i + 1
        while j < len(lines) and (not lines[j].strip() or len(lines[j]) - len(lines[j].lstrip()) > indent):
            j += 1
        return j

    start = next(i for i, line in enumerate(lines) if line.startswith("sources:"))
    end = block(start, 0)
    for key in set(base.get("sources", {})) - set(prof["sources"]):  # no field names it any more
        at = next(i for i in range(start + 1, end) if lines[i].startswith(f"  {key}:"))
        del lines[at:block(at, 2)]
        end = block(start, 0)
    for key, src in prof["sources"].items():
        if base.get("sources", {}).get(key) == src:
            continue
        new = ["  " + line for line in _dump(key, src)]
        at = next((i for i in range(start + 1, end) if lines[i].startswith(f"  {key}:")), None)
        if at is None:
            lines[end:end] = new
            end += len(new)
        else:
            lines[at:block(at, 2)] = new
            end = block(start, 0)
    for key, value in prof.items():
        if key in ("name", "description", "sources") or base.get(key) == value:
            continue
        new = _dump(key, value)
        at = next((i for i, line in enumerate(lines) if line.startswith(f"{key}:")), None)
        if at is None:
            lines += new
        else:
            lines[at:block(at, 0)] = new
    return "\n".join(lines) + "\n"
