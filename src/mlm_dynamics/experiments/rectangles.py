"""The ``rectangle-table`` job: how prevalent incompatibility is across masked LMs (the paper's table).

For every model: ``contexts`` natural contexts (antibody sequences for AntiBERTy, held-out corpus sentences for
English models, random states for the toys), ``pairs_per_context`` site pairs each, the top ``num_tokens`` candidates
per site; the prevalence of rectangles with ``|R|`` above the float tolerance and the quantiles of ``|R|``, overall
and for near (``|i - j| <= near_distance``) and far pairs. Controls: a compatible toy MRF (its conditionals come
from a joint, so the prevalence must be 0) and an incompatible one.
"""

from __future__ import annotations

import math
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import ClassVar

import torch

from .._random import as_generator
from ..corpus import sample_sentences
from ..diagnostics.rectangle import RectangleReport, sample_rectangles
from ..models.base import Denoiser
from ..models.cost import CostLedger
from ..models.pretrained import EXAMPLE_ANTIBODIES
from ..models.toy import PairwiseMRFDenoiser
from .common import build_model
from .config import MODEL_SOURCES, ModelConfig, check_device, check_seed, require

TOY_CONTROLS = ("toy-compatible", "toy-incompatible")


@dataclass
class TableModel:
    """One row of the table: ``source`` is a model source of the ``run`` job or a toy control."""

    name: str
    source: str
    name_or_path: str | None = None
    num_layers: int | None = None


@dataclass
class RectangleTableConfig:
    """The ``rectangle-table`` job: ``contexts`` natural contexts per model, ``pairs_per_context`` site pairs each with
    the top ``num_tokens`` candidates; pairs within ``near_distance`` positions are reported apart."""

    JOB: ClassVar[str] = "rectangle-table"

    models: list[TableModel] = field(default_factory=lambda: [
        TableModel("AntiBERTy", "antiberty"), TableModel("English MLM (bundled)", "english"),
        TableModel("toy MRF, compatible", "toy-compatible"), TableModel("toy MRF, incompatible", "toy-incompatible")])
    contexts: int = 8
    pairs_per_context: int = 8
    num_tokens: int = 4
    near_distance: int = 3
    device: str = "cpu"
    seed: int = 0

    def validate(self) -> None:
        """Validate every section; raise :class:`ConfigError` naming the first bad key."""
        require(len(self.models) > 0, "models", "be a non-empty list", self.models)
        for k, model in enumerate(self.models):
            sources = (*MODEL_SOURCES, *TOY_CONTROLS)
            require(model.source in sources, f"models[{k}].source", f"be one of {list(sources)}", model.source)
            if model.source not in TOY_CONTROLS:
                ModelConfig(model.source, model.name_or_path, model.num_layers, self.device).validate(f"models[{k}]")
        for key in ("contexts", "pairs_per_context", "near_distance"):
            require(getattr(self, key) >= 1, key, "be >= 1", getattr(self, key))
        require(self.num_tokens >= 2, "num_tokens", "be >= 2", self.num_tokens)
        check_seed("seed", self.seed)
        check_device("device", self.device)


@dataclass
class TableRow:
    """One row of ``table.csv``: a model's rectangle statistics, overall and by site distance."""
    name: str
    source: str
    report: RectangleReport
    near_distance: int

    def summary(self) -> dict[str, float | str]:
        """The row as a flat dict for the CSV and ``report.json``."""
        near = self.report.distances <= self.near_distance
        parts = {"near": near, "far": ~near}
        out: dict[str, float | str] = {"model": self.name, "source": self.source, **self.report.summary()}
        for label, chosen in parts.items():
            subset = RectangleReport(self.report.values[chosen], self.report.distances[chosen],
                                     self.report.tolerance[chosen])
            out[f"{label}_prevalence"] = subset.prevalence if chosen.any() else math.nan
        return out


def run_rectangle_table(config: RectangleTableConfig, *, ledger: CostLedger | None = None) -> list[TableRow]:
    """The rectangle test on each model of ``config.models`` with one protocol; the toy controls included. Each
    model's loading and rectangles are charged to ``ledger`` (phases ``{name}: load`` and ``{name}: rectangles``);
    its bare forward is the first model's, at 8 rows of its first context."""
    config.validate()
    rows = []
    for spec in config.models:
        with nullcontext() if ledger is None else ledger.phase(f"{spec.name}: load"):
            denoiser, contexts = _contexts(spec, config)
        if ledger is not None and ledger.bare_forward_seconds is None:
            ledger.time_bare_forward(denoiser, contexts[0][None].expand(8, -1))
        generator = as_generator(config.seed, "rectangles", device=denoiser.device)
        with nullcontext() if ledger is None else ledger.phase(f"{spec.name}: rectangles"):
            reports = [sample_rectangles(denoiser, context[None], pairs_per_context=config.pairs_per_context,
                                         num_tokens=config.num_tokens, generator=generator) for context in contexts]
        rows.append(TableRow(spec.name, spec.source, RectangleReport.concatenate(reports), config.near_distance))
    return rows


def _contexts(spec: TableModel, config: RectangleTableConfig) -> tuple[Denoiser, list[torch.Tensor]]:
    """The model and its natural contexts (one ``[L]`` tensor each; lengths may differ)."""
    if spec.source in TOY_CONTROLS:
        toy = PairwiseMRFDenoiser.random(8, 5, scale=1.0, compatible=spec.source == "toy-compatible",
                                         generator=as_generator(config.seed, "toy-model")).to(config.device)
        states = torch.randint(5, (config.contexts, 8), generator=as_generator(config.seed, "toy-contexts"))
        return toy, list(states.to(config.device))
    denoiser, codec = build_model(ModelConfig(spec.source, spec.name_or_path, spec.num_layers, config.device))
    if spec.source == "antiberty":
        texts = [EXAMPLE_ANTIBODIES[k % len(EXAMPLE_ANTIBODIES)] for k in range(config.contexts)]
    else:
        texts = sample_sentences(config.contexts, config.seed, split="heldout")
    return denoiser, [torch.tensor(codec.encode(text), device=denoiser.device) for text in texts]


__all__ = ["TOY_CONTROLS", "RectangleTableConfig", "TableModel", "TableRow", "run_rectangle_table"]
