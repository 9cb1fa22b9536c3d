"""The Lightning adapter over :class:`~mlm_dynamics.probes.ScheduledProbe`: hooks, finding the model, logging.

Finding the denoiser: ``denoiser_fn(pl_module)`` when given, else the module's attribute ``denoiser_attr`` (default
``denoiser``; dotted paths such as ``"model.denoiser"`` work): any :class:`~mlm_dynamics.Denoiser`, typically a
:class:`~mlm_dynamics.MaskedLMDenoiser` around the model being trained (``MaskedLMDenoiser(self.model,
tokenizer=tok)``).

Start states: ``start_tokens`` when given (a tensor, a list of token-id lists, ragged or not, or the path of a
JSON/YAML file holding one), else the first rows of the latest train/validation/predict batch: a token tensor, or a
mapping with ``input_ids`` (a dict, a ``BatchEncoding``; collator output has its masked positions restored from
``labels`` and its padding left out through ``attention_mask``; see :mod:`mlm_dynamics.probes.starts`).
``batch_to_tokens`` maps batches of other shapes to one of these. Every argument can be written in a LightningCLI
YAML file.

Schedule: every ``every_n_train_steps`` optimizer steps (once per optimizer step: batches that only accumulate gradients
never trigger a run), at the end of validation, and/or at the end of predict; never during the sanity check. Everything
a run needs is checked when fit, validation or predict starts, and the expected cost of a run is logged then. The
diagnostics take at most ``overhead`` (default 5 %) of the fit's wall-clock time: a due run that would exceed it is
skipped and counted (``skipped_runs``; a first run that does not fit runs smaller when the probe has a smaller run,
logging ``run_fraction``), and a run that outlasts its estimate is stopped at the budget's end and counted
(``stopped_runs``; meeting times are kept censored at the steps reached); ``budget_seconds`` caps the total on top. The
fraction is each callback's own: three callbacks at ``overhead=0.05`` take up to 15 % together (give each a share). A
run that fails is warned about once, counted (``failed_runs``) and the fit goes on (``strict=True`` raises instead).

Non-interference: a run leaves the fit exactly as it would have been without the callback (per-step losses, weights,
optimizer state, the global random state, every submodule's train/eval mode): see
:mod:`mlm_dynamics.probes.base`.

Weights: runs every N training steps see the weights being trained. ``weights=`` (a function of the module returning
a context manager, e.g. an EMA scope that stores, copies in and restores) measures on other weights; at validation
end it is applied only if the module has not already swapped weights in for validation itself (MDLM's
``on_validation_epoch_start`` does).

Logging: each value once, at the step it was measured, to every logger of the trainer (rank 0), under
``{prefix}{group}/{stage}/{name}`` with stage ``train``, ``val`` or ``predict``; the latest values are also in
``trainer.callback_metrics`` (for checkpoint monitors). ``log_figures=True`` sends the probe's figures to
TensorBoard and W&B at validation end.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

import torch
from lightning.pytorch import Callback, LightningModule, Trainer
from lightning.pytorch.loggers import MLFlowLogger, TensorBoardLogger, WandbLogger
from lightning.pytorch.utilities import rank_zero_info
from matplotlib.figure import Figure
from torch import Tensor
from typing_extensions import override

from ..models.base import Denoiser, check_overhead
from ..probes.base import Probe, ScheduledProbe, append_draws, check_every
from ..probes.keys import tensorboard_layout
from ..report.figures import readable
from ..report.writers import finite


def log_figure(trainer: Trainer, tag: str, figure: Figure) -> None:
    """``figure`` to every logger that takes images: TensorBoard (``add_figure``), W&B (``wandb.Image``) and
    MLflow (an artifact ``{tag}_step{N}.png`` of the run)."""
    readable(figure)
    for logger in trainer.loggers:
        if isinstance(logger, MLFlowLogger):
            logger.experiment.log_figure(logger.run_id, figure, f"{tag}_step{trainer.global_step}.png")
        elif isinstance(logger, TensorBoardLogger):
            logger.experiment.add_figure(tag, figure, global_step=trainer.global_step, close=False)
        elif isinstance(logger, WandbLogger):
            import wandb

            logger.experiment.log({tag: wandb.Image(figure), "trainer/global_step": trainer.global_step})


def write_dashboards(trainer: Trainer, attached: list[DiagnosticCallback]) -> None:
    """Group the attached callbacks' metrics in each logger's dashboard, once when fit is set up: a TensorBoard
    custom-scalars layout (one category per metric group, one chart per quantity with the stages as lines) and W&B
    metric definitions (the group's keys plotted against ``trainer/global_step``, Lightning's step key)."""
    groups: dict[str, list[str]] = {}
    for callback in attached:
        groups.setdefault(callback.prefix, []).append(callback.probe.group)
    for logger in trainer.loggers:
        if isinstance(logger, TensorBoardLogger):
            layout = {}
            for prefix, names in groups.items():
                layout.update(tensorboard_layout(names, prefix))
            logger.experiment.add_custom_scalars(layout)
        elif isinstance(logger, WandbLogger):
            logger.experiment.define_metric("trainer/global_step")
            for prefix, names in groups.items():
                for group in names:
                    logger.experiment.define_metric(f"{prefix}{group}/*", step_metric="trainer/global_step")


class DiagnosticCallback(Callback):
    """A :class:`~mlm_dynamics.probes.Probe` on a Lightning schedule; subclasses build the probe from their options.

    Args:
        probe: the diagnostic.
        every_n_train_steps: run every N optimizer steps (``None``: not during training).
        on_validation_end, on_predict_end: run at the end of validation / predict.
        denoiser_fn, denoiser_attr: how to find the denoiser on the module (see the module docstring).
        start_tokens, batch_to_tokens, num_starts: the start states (see the module docstring).
        budget_seconds: stop once this many seconds of diagnostics were spent.
        overhead: the largest fraction of the fit's wall-clock time the diagnostics may take (``None``: no cap).
        strict: re-raise a failing run (tests, CI) instead of warning, counting and going on.
        seed: seed of the callback's own random stream (checkpointed with it).
        prefix: prepended to every metric name.
        log_figures: log the probe's figures at validation end.
        weights: measure under ``weights(module)`` (e.g. EMA weights).
    """

    def __init__(self, probe: Probe, *, every_n_train_steps: int | None = None, on_validation_end: bool = True,
                 on_predict_end: bool = False, denoiser_fn: Callable[[LightningModule], Denoiser] | None = None,
                 start_tokens: Tensor | list[list[int]] | str | None = None,
                 batch_to_tokens: Callable[[Any], Any] | None = None, num_starts: int = 4,
                 budget_seconds: float | None = None, seed: int = 0, prefix: str = "", log_figures: bool = False,
                 weights: Callable[[LightningModule], AbstractContextManager[Any]] | None = None,
                 denoiser_attr: str = "denoiser", overhead: float | None = 0.05, strict: bool = False) -> None:
        check_every(every_n_train_steps, "every_n_train_steps")
        check_overhead(overhead)
        self.probe = probe
        self.scheduled = ScheduledProbe(probe, every_n_steps=every_n_train_steps, at_validation=on_validation_end,
                                        at_predict=on_predict_end, start_tokens=start_tokens,
                                        batch_to_tokens=batch_to_tokens, num_starts=num_starts,
                                        budget_seconds=budget_seconds, seed=seed, prefix=prefix, weights=weights,
                                        overhead=overhead, strict=strict)
        self.denoiser_fn, self.denoiser_attr, self.log_figures = denoiser_fn, denoiser_attr, log_figures
        self.prefix = prefix
        self._prepared = False

    @property
    def runs(self) -> int:
        """Runs so far (restored from checkpoints)."""
        return self.scheduled.runs

    @property
    def seconds_used(self) -> float:
        """Wall-clock seconds this callback's runs have used so far (against ``budget_seconds``)."""
        return self.scheduled.seconds_used

    @property
    def last_metrics(self) -> dict[str, float]:
        """The values of the latest run, keyed by metric name (empty before the first run)."""
        return self.scheduled.last_metrics

    @property
    def state_key(self) -> str:
        """The key of this callback's state in a Lightning checkpoint (one per class and options)."""
        return self._generate_state_key(prefix=self.prefix)

    # -- model access ----------------------------------------------------------------------------------------------
    def denoiser(self, pl_module: LightningModule) -> Denoiser:
        """The :class:`Denoiser` to measure: ``denoiser_fn(pl_module)``, or the attribute at ``denoiser_attr``."""
        found: Any = pl_module
        if self.denoiser_fn is not None:
            found = self.denoiser_fn(pl_module)
        else:
            for name in self.denoiser_attr.split("."):
                found = getattr(found, name, None)
        if not isinstance(found, Denoiser):
            raise AttributeError(f"{type(self).__name__}: give the LightningModule a {self.denoiser_attr!r} attribute "
                                 "(an mlm_dynamics.Denoiser, e.g. MaskedLMDenoiser(self.model, tokenizer=tok)), or "
                                 "pass denoiser_attr= or denoiser_fn=")
        return found

    def _prepare(self, pl_module: LightningModule) -> None:
        if not self._prepared:
            self.scheduled.prepare(pl_module, self.denoiser(pl_module))
            self._prepared = True
            if self.scheduled.estimate_line:
                rank_zero_info(self.scheduled.estimate_line)

    # -- hooks -----------------------------------------------------------------------------------------------------
    @override
    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        self.denoiser(pl_module)  # a module without a denoiser fails when the trainer starts
        attached = [cb for cb in trainer.callbacks if isinstance(cb, DiagnosticCallback)]  # type: ignore[attr-defined]
        if stage == "fit" and attached[0] is self and trainer.is_global_zero:  # the first sets up all dashboards
            write_dashboards(trainer, attached)

    @override
    def on_fit_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._prepare(pl_module)

    @override
    def on_validation_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._prepare(pl_module)

    @override
    def on_fit_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self.scheduled.finish()

    @override
    def on_predict_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._prepare(pl_module)

    @override
    def on_train_batch_end(self, trainer: Trainer, pl_module: LightningModule, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        self.scheduled.capture(batch)
        if self.scheduled.due(trainer.global_step):
            self._run(trainer, pl_module, "train")

    @override
    def on_validation_batch_end(self, trainer: Trainer, pl_module: LightningModule, outputs: Any, batch: Any,
                                batch_idx: int, dataloader_idx: int = 0) -> None:
        if not trainer.sanity_checking:
            self.scheduled.capture(batch)

    @override
    def on_validation_epoch_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if self.scheduled.at_validation and not trainer.sanity_checking:
            self.scheduled.note_evaluation_start(pl_module)  # before the module's own hook swaps weights in

    @override
    def on_validation_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if self.scheduled.at_validation and not trainer.sanity_checking:
            self._run(trainer, pl_module, "val")

    @override
    def on_predict_batch_end(self, trainer: Trainer, pl_module: LightningModule, outputs: Any, batch: Any,
                             batch_idx: int, dataloader_idx: int = 0) -> None:
        self.scheduled.capture(batch)

    @override
    def on_predict_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if self.scheduled.at_predict:
            self._run(trainer, pl_module, "predict")

    def _run(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        metrics = self.scheduled.run(pl_module, self.denoiser(pl_module), stage=stage)
        if metrics is None:
            return
        with self.scheduled.charged():  # logging a run is part of its cost
            metrics = finite(metrics)  # undefined values (no contraction on the grid, say) are not logged
            if trainer.is_global_zero:  # loggers write on rank 0; pooled values are equal on every rank
                step = trainer.fit_loop.epoch_loop._batches_that_stepped  # the step Lightning logs the module's at
                for logger in trainer.loggers:
                    logger.log_metrics(metrics, step=step)
                denoiser, groups = self.denoiser(pl_module), self.scheduled.probe.draws()
                for folder in {draws_folder(logger) for logger in trainer.loggers}:
                    if folder is not None:
                        append_draws(folder, step, f"{self.prefix}{self.scheduled.probe.group}/{stage}", denoiser,
                                     groups)
                self.log_extras(trainer, stage)
            trainer.callback_metrics.update({name: torch.tensor(value) for name, value in metrics.items()})

    def log_extras(self, trainer: Trainer, stage: str) -> None:
        """After a run, on rank 0: the probe's figures at validation end when ``log_figures`` is set; subclasses add
        tables."""
        if self.log_figures and stage == "val":
            for name, figure in self.figures().items():
                log_figure(trainer, f"{self.prefix}{name}", figure)

    def figures(self) -> dict[str, Figure]:
        """Figures of the latest run, by metric-style name (subclasses override)."""
        return {}

    # -- state -----------------------------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Schedule, budget, random stream and probe state, saved with the trainer's checkpoint."""
        return self.scheduled.state_dict()

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned: a resumed fit continues the diagnostics' schedule and stream."""
        self.scheduled.load_state_dict(state_dict)


def draws_folder(logger: Any) -> str | None:
    """Where a logger keeps a run's files, for the draws beside its values: a W&B run's files folder, a CSV or
    TensorBoard logger's version folder; ``None`` for loggers without a local folder."""
    if isinstance(logger, WandbLogger):
        return str(logger.experiment.dir)
    folder = getattr(logger, "log_dir", None)
    return None if folder is None else str(folder)


__all__ = ["DiagnosticCallback", "log_figure", "write_dashboards"]
