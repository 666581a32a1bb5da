"""YAML reading with line numbers, and canonical writing.

``load_yaml_with_lines`` returns the plain data plus a map from a key path (tuple of keys and list
indices) to the 1-based line it came from, so validation errors can point at the user's file.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from trimtab.errors import InputError, Problem

LineMap = dict[tuple[Any, ...], int]


class _Loader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # libyaml when PyYAML has it: 3-5x faster
    """SafeLoader that rejects duplicate mapping keys instead of silently keeping the last one."""


def _construct_mapping(loader: _Loader, node: yaml.MappingNode, deep: bool = False) -> dict:
    seen: dict[Any, int] = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=True)
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r} (first on line {seen[key]})", key_node.start_mark
            )
        seen[key] = key_node.start_mark.line + 1
    return loader.construct_mapping(node, deep=deep)


_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def _walk(node: yaml.Node, path: tuple, out: LineMap) -> None:
    out[path] = node.start_mark.line + 1
    if isinstance(node, yaml.MappingNode):
        for k, v in node.value:
            key = k.value if isinstance(k, yaml.ScalarNode) else str(k)
            out[path + (key,)] = k.start_mark.line + 1
            _walk(v, path + (key,), out)
            out[path + (key,)] = k.start_mark.line + 1
    elif isinstance(node, yaml.SequenceNode):
        for i, v in enumerate(node.value):
            _walk(v, path + (i,), out)


def load_yaml_with_lines(text: str, source: str) -> tuple[Any, LineMap]:
    """Parse YAML text; raise InputError (with the line) on syntax errors or duplicate keys."""
    try:
        loader = _Loader(text)
        try:  # parse once: the node tree gives the line numbers, and the data is constructed from it
            node = loader.get_single_node()
            data = loader.construct_document(node) if node is not None else None
        finally:
            loader.dispose()
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else None
        msg = getattr(exc, "problem", None) or str(exc)
        ctx = getattr(exc, "context", None)
        raise InputError([Problem("", "YAML syntax error: "
                                      f"{msg}" + (f" ({ctx})" if ctx else ""), source, line)])
    lines: LineMap = {}
    if node is not None:
        _walk(node, (), lines)
    return data, lines


def read_yaml_file(path: str | Path) -> tuple[Any, LineMap]:
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError([Problem("", "file not found", str(p))])
    except (IsADirectoryError, PermissionError, UnicodeDecodeError) as exc:
        raise InputError([Problem("", f"cannot read: {exc.__class__.__name__}", str(p))])
    return load_yaml_with_lines(text, str(p))


def line_for(lines: LineMap, loc: tuple) -> int | None:
    """Line of the deepest prefix of ``loc`` that exists in the file."""
    for n in range(len(loc), -1, -1):
        if tuple(loc[:n]) in lines:
            return lines[tuple(loc[:n])]
    return None


def dump_canonical(data: Any) -> str:
    """Deterministic YAML: insertion-ordered keys, no aliases, fixed width."""

    class _Dumper(yaml.SafeDumper):
        def ignore_aliases(self, data: Any) -> bool:  # noqa: ARG002 - signature fixed by PyYAML
            return True

    def _list(dumper: yaml.SafeDumper, value: list) -> yaml.Node:
        # Short lists of numbers (GPU indices) read best on one line.
        flow = bool(value) and all(isinstance(v, int) and not isinstance(v, bool) for v in value)
        return dumper.represent_sequence("tag:yaml.org,2002:seq", value, flow_style=flow)

    _Dumper.add_representer(list, _list)

    return yaml.dump(data, Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=100,
                     allow_unicode=True)
