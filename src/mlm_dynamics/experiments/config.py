"""Run configuration: YAML files under ``configs/`` with ``--set a.b=value`` overrides, checked before any work."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import torch
import yaml

from .denoiser import Denoiser, MaskedLMDenoiser

DEFAULTS: dict[str, Any] = {
    "model": {"source": "antiberty", "name_or_path": None, "num_layers": None, "device": "cpu"},
    "chains": {"sequences": None, "num_chains": 8, "window": None, "seed": 0},
    "sampler": {"temperature": 1.0, "scan": "random", "block_size": 1, "top_k": None, "top_p": None},
    "run": {"num_steps": 200, "record_every": 10, "checkpoint_every": None},
    "coupling": {"enabled": True, "num_pairs": 4, "max_steps": 200},
    "rectangle": {"enabled": True, "pairs_per_context": 4, "num_tokens": 4, "max_distance": None},
    "margins": {"enabled": True},
    "influence": {"enabled": False, "num_contexts": 1, "max_sites": 8, "replacements": 1,
                  "temperatures": [0.5, 1.0, 2.0, 4.0]},
}


def _merge(base: dict, update: dict, path: str = "") -> dict:
    merged = copy.deepcopy(base)
    for key, value in update.items():
        where = f"{path}{key}"
        if key not in base:
            raise ValueError(f"config: unknown key {where!r}; known keys at this level: {sorted(base)}")
        if isinstance(base[key], dict):
            if not isinstance(value, dict):
                raise ValueError(f"config: {where!r} must be a mapping, got {value!r}")
            merged[key] = _merge(base[key], value, f"{where}.")
        else:
            merged[key] = value
    return merged


def load_config(path: str | Path | None, overrides: list[str] = (), defaults: dict = DEFAULTS) -> dict:
    """Defaults, updated by the YAML file at ``path``, updated by ``key.sub=value`` overrides (YAML values)."""
    config = copy.deepcopy(defaults)
    if path is not None:
        loaded = yaml.safe_load(Path(path).read_text()) or {}
        if not isinstance(loaded, dict):
            raise ValueError(f"config: {path} must hold a mapping at the top level")
        config = _merge(config, loaded)
    for item in overrides:
        key, sep, raw = item.partition("=")
        if not sep:
            raise ValueError(f"--set expects key.sub=value, got {item!r}")
        update: dict = {}
        cursor = update
        parts = key.split(".")
        for part in parts[:-1]:
            cursor = cursor.setdefault(part, {})
        cursor[parts[-1]] = yaml.safe_load(raw)
        config = _merge(config, update)
    return config


def build_model(spec: dict) -> tuple[Denoiser, Any]:
    """The denoiser and its codec (``encode``/``decode``) from ``config['model']``."""
    device = torch.device(spec["device"])
    if spec["source"] == "antiberty":
        from .models import load_antiberty

        return load_antiberty(device=device, num_layers=spec["num_layers"])
    if spec["source"] == "huggingface":
        if not spec["name_or_path"]:
            raise ValueError("config: model.name_or_path is required when model.source is 'huggingface'")
        return MaskedLMDenoiser.from_pretrained(spec["name_or_path"], device=device)
    raise ValueError(f"config: model.source must be 'antiberty' or 'huggingface', got {spec['source']!r}")
