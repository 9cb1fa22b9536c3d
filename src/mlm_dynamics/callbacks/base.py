"""The shared shape of every diagnostic callback: schedule, model access, eval/inference mode, budget, logging, state.

Finding the denoiser: ``denoiser_fn(pl_module)`` when given, else the module's attribute ``denoiser_attr`` (default
``denoiser``; dotted paths such as ``"model.denoiser"`` work): any :class:`~mlm_dynamics.Denoiser`, e.g. a
:class:`~mlm_dynamics.MaskedLMDenoiser` around the model being trained.

Start states: ``start_tokens`` when given (a tensor, a list of token-id lists, or the path of a JSON/YAML file
holding one), else the first rows of the latest train/validation/predict batch, read by ``batch_to_tokens``
(default: the batch itself if it is a tensor, else ``batch["input_ids"]``). Every argument can be written in a
LightningCLI YAML file.

Schedule: every ``every_n_train_steps`` optimizer steps (once per optimizer step: with gradient accumulation the
batches that only accumulate never trigger a run), at the end of validation, and/or at the end of predict; never
during the sanity check. Each run happens under ``torch.inference_mode`` with the module in eval mode, restoring
train mode afterwards, and stops scheduling once ``budget_seconds`` of diagnostics have been spent.

Weights: runs every N training steps see the weights being trained; a module that swaps in EMA weights for validation
would give runs at validation end other weights under the same metric names. Pass ``weights=`` (a function of the
module returning a context manager, e.g. ``lambda m: m.ema_scope()``) to run every measurement on the same weights.

DDP: every rank reaches each run at the same optimizer step, and the budget is decided on the maximum of the ranks'
diagnostic seconds (an all-reduce), so no rank enters a collective alone. Callbacks whose results pool across ranks
(``pooled = True``: meeting times, rectangles) measure on every rank's batch and log the pooled torchmetrics value;
the others (influence, long-run chains) measure on rank 0 only and log from there.
"""

from __future__ import annotations

import abc
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any

import torch
import yaml
from lightning.pytorch import Callback, LightningModule, Trainer
from lightning.pytorch.loggers import TensorBoardLogger, WandbLogger
from lightning.pytorch.utilities import rank_zero_warn
from matplotlib.figure import Figure
from torch import Tensor
from typing_extensions import override

from ..models.base import Denoiser, require_integer
from ..report.writers import finite


def log_figure(trainer: Trainer, tag: str, figure: Figure) -> None:
    """``figure`` to every logger that takes images: TensorBoard (``add_figure``) and W&B (``wandb.Image``)."""
    for logger in trainer.loggers:
        if isinstance(logger, TensorBoardLogger):
            logger.experiment.add_figure(tag, figure, global_step=trainer.global_step, close=False)
        elif isinstance(logger, WandbLogger):
            import wandb

            logger.experiment.log({tag: wandb.Image(figure), "trainer/global_step": trainer.global_step})


def load_tokens(tokens: Tensor | list[list[int]] | str | None) -> Tensor | None:
    """Start tokens from a tensor, a list of id lists (equal lengths), or a JSON/YAML file holding such a list."""
    if tokens is None or isinstance(tokens, Tensor):
        return tokens
    if isinstance(tokens, str):
        path = Path(tokens)
        if not path.is_file():
            raise ValueError(f"start_tokens: no such file {tokens!r}")
        tokens = yaml.safe_load(path.read_text())  # JSON is YAML
    if not isinstance(tokens, list) or not tokens or len({len(row) for row in tokens}) != 1:
        raise ValueError("start_tokens must be a non-empty list of equal-length lists of token ids")
    if not all(isinstance(i, int) and not isinstance(i, bool) for row in tokens for i in row):
        raise ValueError("start_tokens must hold integer token ids")
    return torch.tensor(tokens)


def default_batch_to_tokens(batch: Any) -> Tensor:
    if isinstance(batch, Tensor):
        return batch
    if isinstance(batch, dict) and "input_ids" in batch:
        return batch["input_ids"]
    raise ValueError("batch_to_tokens: batches are neither token tensors nor dicts with 'input_ids'; "
                     "pass batch_to_tokens= or start_tokens=")


class DiagnosticCallback(Callback, abc.ABC):
    """Base class; subclasses implement :meth:`measure` and, if stateful, ``extra_state``/``load_extra_state``."""

    def __init__(self, *, every_n_train_steps: int | None = None, on_validation_end: bool = True,
                 on_predict_end: bool = False, denoiser_fn: Callable[[LightningModule], Denoiser] | None = None,
                 start_tokens: Tensor | list[list[int]] | str | None = None,
                 batch_to_tokens: Callable[[Any], Tensor] = default_batch_to_tokens, num_starts: int = 4,
                 budget_seconds: float | None = None, seed: int = 0, prefix: str = "", log_figures: bool = False,
                 weights: Callable[[LightningModule], AbstractContextManager[Any]] | None = None,
                 denoiser_attr: str = "denoiser") -> None:
        if every_n_train_steps is not None and every_n_train_steps < 1:
            raise ValueError(f"every_n_train_steps must be >= 1 or None, got {every_n_train_steps}")
        if num_starts < 1:
            raise ValueError(f"num_starts must be >= 1, got {num_starts}")
        if budget_seconds is not None and not budget_seconds > 0:
            raise ValueError(f"budget_seconds must be > 0 or None (no budget), got {budget_seconds}; a budget of "
                             "zero would never run the diagnostics")
        start_tokens = load_tokens(start_tokens)
        if start_tokens is not None:
            require_integer("start_tokens", start_tokens)
        self.every_n_train_steps, self.at_validation_end, self.at_predict_end = (
            every_n_train_steps, on_validation_end, on_predict_end)
        self.denoiser_fn, self.start_tokens, self.batch_to_tokens = denoiser_fn, start_tokens, batch_to_tokens
        self.num_starts, self.budget_seconds, self.prefix = num_starts, budget_seconds, prefix
        self.log_figures, self.weights, self.denoiser_attr = log_figures, weights, denoiser_attr
        self.last_step = -1
        self.generator = torch.Generator().manual_seed(seed)
        self.latest_tokens: Tensor | None = None
        self.runs = 0
        self.seconds_used = 0.0
        self.last_metrics: dict[str, float] = {}

    @abc.abstractmethod
    def measure(self, denoiser: Denoiser, starts: Tensor, trainer: Trainer) -> dict[str, float]:
        """Compute the diagnostics (called in eval + inference mode); returns scalars to log."""

    @property
    def state_key(self) -> str:
        return self._generate_state_key(prefix=self.prefix)

    # -- model and data access -------------------------------------------------------------------------------------
    def denoiser(self, pl_module: LightningModule) -> Denoiser:
        found: Any = pl_module
        if self.denoiser_fn is not None:
            found = self.denoiser_fn(pl_module)
        else:
            for name in self.denoiser_attr.split("."):
                found = getattr(found, name, None)
        denoiser = found
        if not isinstance(denoiser, Denoiser):
            raise AttributeError(f"{type(self).__name__}: give the LightningModule a {self.denoiser_attr!r} attribute "
                                 "(an mlm_dynamics.Denoiser), or pass denoiser_attr= or denoiser_fn=")
        return denoiser

    def _capture(self, batch: Any) -> None:
        if self.start_tokens is None:
            self.latest_tokens = self.batch_to_tokens(batch)[: self.num_starts].detach().clone()

    def starts(self, device: torch.device) -> Tensor:
        tokens = self.start_tokens if self.start_tokens is not None else self.latest_tokens
        if tokens is None:
            raise RuntimeError(f"{type(self).__name__}: no start tokens yet (no batch seen and no start_tokens)")
        return tokens[: self.num_starts].to(device).long()

    # -- hooks -----------------------------------------------------------------------------------------------------
    @override
    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        self.denoiser(pl_module)  # a module without a denoiser fails when fit starts, not at the first run

    @override
    def on_train_batch_end(self, trainer: Trainer, pl_module: LightningModule, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        self._capture(batch)
        step = trainer.global_step
        if self.every_n_train_steps and step > 0 and step % self.every_n_train_steps == 0 and step != self.last_step:
            self.last_step = step  # accumulation batches see the same step again: run once
            self._run(trainer, pl_module, "train")

    @override
    def on_validation_batch_end(self, trainer: Trainer, pl_module: LightningModule, outputs: Any, batch: Any,
                                batch_idx: int, dataloader_idx: int = 0) -> None:
        if not trainer.sanity_checking:
            self._capture(batch)

    @override
    def on_validation_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if self.at_validation_end and not trainer.sanity_checking:
            self._run(trainer, pl_module, "validation")

    @override
    def on_predict_batch_end(self, trainer: Trainer, pl_module: LightningModule, outputs: Any, batch: Any,
                             batch_idx: int, dataloader_idx: int = 0) -> None:
        self._capture(batch)

    @override
    def on_predict_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if self.at_predict_end:
            self._run(trainer, pl_module, "predict")

    pooled = False  # True: measure on every rank and pool through torchmetrics; False: rank 0 only

    def _run(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        self.seconds_used = self._max_over_ranks(trainer, pl_module, self.seconds_used)
        if self.budget_seconds is not None and self.seconds_used >= self.budget_seconds:
            return
        if not self.pooled and trainer is not None and trainer.global_rank != 0:
            return
        denoiser = self.denoiser(pl_module)
        was_training = pl_module.training
        pl_module.eval()
        started = time.perf_counter()
        try:
            with torch.inference_mode(), (self.weights(pl_module) if self.weights is not None else nullcontext()):
                metrics = self.measure(denoiser, self.starts(denoiser.device), trainer)
        finally:
            pl_module.train(was_training)
        self.seconds_used += time.perf_counter() - started
        self.runs += 1
        if self.budget_seconds is not None and self.seconds_used >= self.budget_seconds:
            rank_zero_warn(f"{type(self).__name__}: diagnostics budget of {self.budget_seconds}s spent; "
                           "no further runs")
        self.last_metrics = metrics
        self._log(trainer, pl_module, stage, metrics)
        if self.log_figures and stage == "validation":
            for name, figure in self.figures().items():
                log_figure(trainer, f"{self.prefix}{name}", figure)

    def figures(self) -> dict[str, Figure]:
        """Figures of the latest run, by metric-style name (subclasses override); logged at validation end when
        ``log_figures`` is set."""
        return {}

    def _log(self, trainer: Trainer, pl_module: LightningModule, stage: str, metrics: dict[str, float]) -> None:
        metrics = finite(metrics)  # undefined values (no contraction on the grid, say) are not logged
        if stage == "predict":  # LightningModule.log is not available in predict
            for logger in trainer.loggers:
                logger.log_metrics(metrics, step=trainer.global_step)
            return
        for name, value in metrics.items():  # pooled values are equal on every rank; the rest exist on rank 0
            pl_module.log(name, float(value), on_step=stage == "train", on_epoch=stage != "train", batch_size=1,
                          rank_zero_only=not self.pooled)

    @staticmethod
    def _max_over_ranks(trainer: Trainer | None, pl_module: LightningModule, seconds: float) -> float:
        """The largest ``seconds`` over the ranks (every rank calls this at the same points)."""
        if trainer is None or trainer.world_size == 1:
            return seconds
        value = torch.tensor(seconds, dtype=torch.float64, device=pl_module.device)
        return float(trainer.strategy.reduce(value, reduce_op="max"))

    # -- state -----------------------------------------------------------------------------------------------------
    def extra_state(self) -> dict:
        return {}

    def load_extra_state(self, state: dict) -> None:
        del state

    def state_dict(self) -> dict[str, Any]:
        return {"runs": self.runs, "seconds_used": self.seconds_used, "last_step": self.last_step,
                "rng": self.generator.get_state(),
                "latest_tokens": self.latest_tokens, "last_metrics": dict(self.last_metrics), **self.extra_state()}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.runs, self.seconds_used = state_dict["runs"], state_dict["seconds_used"]
        self.last_step = state_dict.get("last_step", -1)
        self.generator.set_state(state_dict["rng"])
        self.latest_tokens, self.last_metrics = state_dict["latest_tokens"], dict(state_dict["last_metrics"])
        self.load_extra_state(state_dict)

    def next_seed(self) -> int:
        return int(torch.randint(2**62, (1,), generator=self.generator))
