"""Pieces every job shares: the model from its config, start sequences, the resampled window."""

from __future__ import annotations

import hashlib
import math
import os
import platform
from collections.abc import Sequence
from pathlib import Path

import torch
import transformers
from torch import Tensor

from .._provenance import generated_by
from ..models.base import Denoiser
from ..models.huggingface import MaskedLMDenoiser, TextCodec
from ..models.pretrained import (
    EXAMPLE_ANTIBODIES,
    ResidueCodec,
    antiberty_weights_dir,
    english_mlm_dir,
    load_antiberty,
    load_english_mlm,
)
from .config import DTYPES, TOY_SOURCES, ConfigError, ModelConfig, check_device

Codec = TextCodec | ResidueCodec


def machine_threads(cap: int = 16) -> int:
    """The intra-op threads this process may really use: the CPUs it is allowed to run on, within the cgroup's CPU
    quota (``/sys/fs/cgroup/cpu.max``, a container's limit, which torch's own default ignores), at most ``cap``."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    try:
        quota, period = Path("/sys/fs/cgroup/cpu.max").read_text().split()[:2]
        if quota != "max":
            cpus = min(cpus, max(1, math.ceil(int(quota) / int(period))))
    except (OSError, ValueError):
        pass
    return max(1, min(cpus, cap))


def job_deadline(budget: float | None, started: float) -> float:
    """The ``time.perf_counter()`` at which a job given ``budget`` seconds from ``started`` must stop (``inf``
    without a budget); a ConfigError naming ``--budget`` unless it is a finite number of seconds > 0."""
    if budget is None:
        return math.inf
    if isinstance(budget, bool) or not isinstance(budget, (int, float)) or not math.isfinite(budget) or budget <= 0:
        raise ConfigError(f"--budget must be a number of seconds > 0, got {budget!r}")
    return started + budget


def build_model(spec: ModelConfig) -> tuple[Denoiser, Codec]:
    """The denoiser and its codec (``encode``/``decode``) described by ``spec`` (validated already)."""
    device = check_device("model.device", spec.device)
    dtype = DTYPES[spec.dtype]
    if spec.source == "antiberty":
        return load_antiberty(device=device, dtype=dtype, num_layers=spec.num_layers)
    if spec.num_layers is not None:
        raise ConfigError("model.num_layers applies to the bundled antiberty only; use a smaller model instead")
    if spec.source == "english":
        return load_english_mlm(device=device, dtype=dtype)
    assert spec.name_or_path is not None  # checked by ModelConfig.validate
    try:
        return MaskedLMDenoiser.from_pretrained(spec.name_or_path, device=device, dtype=dtype)
    except (FileNotFoundError, ValueError) as error:
        raise ConfigError(f"model.name_or_path: {error}") from None


def start_tokens(sequences: Sequence[str] | None, num_chains: int, codec: Codec, *, max_length: int | None = None,
                 key: str = "chains.sequences") -> Tensor:
    """``[num_chains, L]`` ids of ``sequences`` cycled over the chains (default: the first bundled antibody); a
    ConfigError naming ``key`` for a sequence the codec refuses, of unequal lengths, or longer than ``max_length``
    tokens (the model's limit)."""
    texts = list(sequences) if sequences is not None else [EXAMPLE_ANTIBODIES[0]]
    try:
        encoded = [codec.encode(text) for text in texts]
    except ValueError as error:
        raise ConfigError(f"{key}: {error}") from None
    too_long = [len(e) for e in encoded if max_length is not None and len(e) > max_length]
    if too_long:
        raise ConfigError(f"{key}: a sequence encodes to {max(too_long)} tokens, above the model's maximum of "
                          f"{max_length}")
    lengths = sorted({len(e) for e in encoded})
    if len(lengths) != 1:
        raise ConfigError(f"{key} must encode to equal lengths (chains run as one batch), got {lengths}")
    return torch.tensor([encoded[c % len(encoded)] for c in range(num_chains)])


def crop_context(denoiser: Denoiser, tokens: Tensor, start: int, stop: int, crop: int, *, key: str
                 ) -> tuple[Tensor, int, str]:
    """Keep the frame tokens and the resampleable positions ``[start - crop, stop + crop)`` of ``tokens [B, L]``.

    The rows must share one layout of resampleable positions. Returns the cropped tokens, the window's new start
    among their resampleable positions, and a note for the report: cropping changes the conditionals, since the
    model no longer sees the rest of the sequence and, with absolute position embeddings, sees the window at other
    positions. ``key`` names the option in the note.
    """
    sites = denoiser.resampleable_sites(tokens)
    if (sites != sites[:1]).any():
        raise ConfigError(f"{key}: cropping needs start sequences with the same layout of resampleable positions")
    all_sites = sites[0].tolist()
    if not 0 <= start < stop <= len(all_sites):
        raise ConfigError(f"{key}: the window [{start}, {stop}) must lie within the {len(all_sites)} resampleable "
                          "positions of the start sequences")
    low, high = max(start - crop, 0), min(stop + crop, len(all_sites))
    kept, resampleable = all_sites[low:high], set(all_sites)
    # Inside the kept span only its resampleable positions stay; outside it only the frame (special tokens).
    keep = [p for p in range(tokens.shape[1]) if (p in resampleable) == (kept[0] <= p <= kept[-1])]
    note = (f"context cropped to {len(kept)} of {len(all_sites)} resampleable positions around the window ({key} = "
            f"{crop}); the rest of the sequence is dropped and the kept tokens move to new positions")
    return tokens[:, keep], start - low, note


def window_sites(denoiser: Denoiser, tokens: Tensor, window: Sequence[int] | None) -> Tensor:
    """The resampleable positions ``[B, n]``, restricted to the ``[start, stop)`` slice ``window`` of them."""
    sites = denoiser.resampleable_sites(tokens)
    if window is None:
        return sites
    start, stop = window
    if stop > sites.shape[1]:
        raise ConfigError(f"chains.window must lie within the {sites.shape[1]} resampleable positions of the start "
                          f"sequences, got {list(window)}")
    return sites[:, start:stop]


def weights_digest(directory: Path) -> str:
    """First 16 hex digits of the SHA-256 of the weight files (``*.safetensors``, ``*.bin``) in ``directory``, in
    name order; ``""`` when there are none."""
    digest = hashlib.sha256()
    files = sorted(p for p in directory.glob("*") if p.suffix in (".safetensors", ".bin"))
    for path in files:
        with path.open("rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()[:16] if files else ""


def provenance(spec: ModelConfig, denoiser: Denoiser) -> dict[str, str]:
    """Where a result comes from: the model (source, name or path, weights digest where the weights are local), the
    package and library versions, the device, the machine, the date and the command line."""
    name = spec.name_or_path or spec.source
    if spec.source in TOY_SOURCES:
        name = f"{spec.source} (coupling {getattr(spec, 'coupling', '')})"
    folder = {"antiberty": antiberty_weights_dir, "english": english_mlm_dir}.get(spec.source)
    local = folder() if folder is not None else Path(spec.name_or_path) if spec.name_or_path else None
    device = denoiser.device
    machine = (torch.cuda.get_device_name(device) if device.type == "cuda"
               else platform.processor() or platform.machine())
    made = generated_by()
    return {"model": name, "weights_sha256": weights_digest(local) if local is not None and local.is_dir() else "",
            "mlm_dynamics": made["mlm_dynamics"], "torch": str(torch.__version__),
            "transformers": transformers.__version__, "python": platform.python_version(), "device": str(device),
            "device_name": machine, "threads": str(torch.get_num_threads()), "platform": platform.platform(),
            "date": made["date"], "command": made["command"]}


__all__ = ["Codec", "build_model", "crop_context", "provenance", "start_tokens", "weights_digest", "window_sites"]
