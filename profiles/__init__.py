"""Bundled profile data (GPUs, models, engines) shipped in the wheel.

This package holds data only; the schema and loader live in :mod:`trimtab.profiles.loader`.
"""
from __future__ import annotations

from importlib import resources
from pathlib import Path


def data_dir() -> Path:
    """Folder holding ``gpus/``, ``models/`` and ``engines/`` YAML files."""
    return Path(str(resources.files(__name__)))
