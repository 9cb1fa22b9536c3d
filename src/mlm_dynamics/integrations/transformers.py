"""The diagnostics in a Hugging Face ``Trainer``: one ``TrainerCallback`` over :class:`~mlm_dynamics.ScheduledProbe`.

    trainer = Trainer(model=model, args=args, train_dataset=data, data_collator=collator,
                      processing_class=tokenizer, callbacks=[DiagnosticsCallback()])

**The model** is the one being trained (``Trainer.model``, never a copy), wrapped as
:class:`~mlm_dynamics.MaskedLMDenoiser` with the ids read from the Trainer's tokenizer (``processing_class``) or,
without one, from the model's config; ``denoiser_fn(model)`` builds any other :class:`~mlm_dynamics.Denoiser` (a
diffusion backbone through :class:`~mlm_dynamics.FullSequenceDenoiser`, say).

**Start states** are the first rows of the latest training batch as the model received it (collator output: masked
positions restored from ``labels``, padding left out through ``attention_mask``), read by a forward pre-hook that
only looks at the inputs; ``start_tokens=`` fixes them instead.

**Schedule**: every ``every_n_steps`` optimizer steps (``state.global_step``: gradient accumulation runs once per
optimizer step) and after each evaluation (``at_evaluate``), within ``overhead`` (default 5 %) of the fine-tune's
wall-clock time, evaluations included: a due run that would exceed it is skipped and counted (``skipped_runs``; a
first run that does not fit runs smaller instead where the probe has a smaller run: ``run_fraction``), a run
that outlasts its estimate is stopped at the budget's end (``stopped_runs``; meeting times kept censored there), and the
expected cost of a run is logged when training starts. A run that fails is warned about once, counted (``failed_runs``)
and the fine-tune goes on (``strict=True`` raises instead). Each run is isolated as everywhere in the package (modes,
global random state and grad mode restored; its own generator), so the fit is the fit without the callback.
With several processes every rank runs at the same steps and pooled probes reduce across ranks.

**Logging**: the values go to every ``report_to`` integration of the Trainer (W&B, TensorBoard, MLflow, ...)
through its callback handler (the Trainer's own logging untouched), as ``{prefix}{group}/{stage}/{name}`` at
``state.global_step`` (the integrations add their own ``train/`` prefix), and into ``state.log_history``.

**Checkpoints**: with each Trainer checkpoint the callback writes its state (schedule, budget, random streams) to
``checkpoint-{step}/mlm_dynamics_diagnostics.pt`` and reads it back when training resumes from that checkpoint,
wherever it is (``trainer.train(resume_from_checkpoint=path)``, ``args.resume_from_checkpoint``, or
``output_dir/checkpoint-{step}``); a resume that finds no state says so and restarts the diagnostics.
"""

from __future__ import annotations

import io
import itertools
import sys
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn
from transformers import TrainerCallback
from transformers.trainer_callback import CallbackHandler, TrainerControl, TrainerState
from transformers.training_args import TrainingArguments
from transformers.utils import logging

from .._io import atomic_write
from ..models.base import Denoiser, check_overhead
from ..models.families import denoiser_for, detect_family, is_masked_lm
from ..models.huggingface import MaskedLMDenoiser
from ..probes.base import Probe, ScheduledProbe, append_draws, check_every
from ..probes.mixing import MeetingTimeProbe, RectangleProbe
from ..report.writers import finite

logger = logging.get_logger(__name__)

STATE_FILE = "mlm_dynamics_diagnostics.pt"
BATCH_KEYS = ("input_ids", "attention_mask", "labels")


def default_probes() -> list[Probe]:
    """What one-line attaching runs: coupled chains (meeting times, censoring) and the rectangle test."""
    return [MeetingTimeProbe(max_steps=200), RectangleProbe()]


def config_ids(config: Any, tokenizer: Any = None) -> dict[str, Any]:
    """Denoiser ids from a model config when the tokenizer gives no mask id: ``mask_token_id`` is required; CLS,
    SEP, BOS, EOS and PAD ids are frame positions (never resampled) and, with the mask id, never proposed."""
    mask_id = getattr(config, "mask_token_id", None)
    if mask_id is None:
        had = ("the Trainer has no tokenizer (processing_class)" if tokenizer is None else
               f"the tokenizer ({type(tokenizer).__name__}) defines no mask token")
        raise ValueError(f"DiagnosticsCallback: {had} and the model config has no mask_token_id; pass a tokenizer "
                         "with a mask token as processing_class, set model.config.mask_token_id, or pass denoiser_fn=")
    frame = sorted({i for name in ("cls_token_id", "sep_token_id", "bos_token_id", "eos_token_id", "pad_token_id")
                    if isinstance(i := getattr(config, name, None), int)})
    return {"mask_id": mask_id, "special_ids": [*frame, mask_id], "frame_ids": frame,
            "pad_id": getattr(config, "pad_token_id", None)}


class DiagnosticsCallback(TrainerCallback):
    """Mixing diagnostics on a Hugging Face ``Trainer`` fine-tune (see the module docstring).

    Args:
        probes: the diagnostics (:mod:`mlm_dynamics.probes`); default :func:`default_probes`.
        every_n_steps: run every N optimizer steps (``None``: only after evaluations).
        at_evaluate: also run after each evaluation, under ``{group}/val/``.
        start_tokens: fixed start sequences instead of the batches' rows (tensor, id lists or a JSON/YAML file).
        num_starts: rows taken from a batch.
        budget_seconds: stop running once this many seconds of diagnostics were spent (per probe).
        overhead: the largest fraction of the fine-tune's wall-clock time the diagnostics may take, all probes
            together (each gets an equal share); ``None``: no cap.
        strict: re-raise a failing run (tests, CI) instead of warning, counting and going on.
        seed: seed of the probes' own random streams.
        prefix: prepended to every metric name.
        denoiser_fn: ``denoiser_fn(model) -> Denoiser`` for models that are not ``*ForMaskedLM``.
    """

    def __init__(self, probes: Sequence[Probe] | None = None, *, every_n_steps: int | None = 500,
                 at_evaluate: bool = True, start_tokens: Tensor | list[list[int]] | str | None = None,
                 num_starts: int = 4, budget_seconds: float | None = None, seed: int = 0, prefix: str = "",
                 denoiser_fn: Callable[[nn.Module], Denoiser] | None = None, overhead: float | None = 0.05,
                 strict: bool = False) -> None:
        chosen = default_probes() if probes is None else list(probes)
        if not chosen:
            raise ValueError("probes: pass at least one probe, or None for the default set")
        wrong = [p for p in chosen if not isinstance(p, Probe)]
        if wrong:
            raise ValueError(f"probes must be Probe objects (mlm_dynamics.probes: MeetingTimeProbe(), "
                             f"RectangleProbe(), ...), got {wrong!r}")
        check_every(every_n_steps, "every_n_steps")
        check_overhead(overhead)  # before it is shared out among the probes
        groups = [probe.group for probe in chosen]
        if len(set(groups)) != len(groups):
            raise ValueError(f"probes: two probes log under one group ({groups}); give one a prefix in another "
                             "DiagnosticsCallback")
        self.scheduled = [ScheduledProbe(probe, every_n_steps=every_n_steps, at_validation=at_evaluate,
                                         start_tokens=start_tokens, num_starts=num_starts,
                                         budget_seconds=budget_seconds, seed=seed, prefix=prefix,
                                         overhead=None if overhead is None else overhead / len(chosen),
                                         strict=strict) for probe in chosen]
        self.denoiser_fn = denoiser_fn
        self.denoiser: Denoiser | None = None
        self.latest: dict[str, float] = {}
        self._handler: CallbackHandler | None = None
        self._hook: torch.utils.hooks.RemovableHandle | None = None
        self._running = False

    # -- set-up ----------------------------------------------------------------------------------------------------
    def on_train_begin(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, *,
                       model: nn.Module | None = None, processing_class: Any = None, **kwargs: Any) -> None:
        """Wrap the model, hook its inputs, check every probe against it (logging what a run costs), and restore a
        resumed run's state from wherever the Trainer resumed."""
        self._hook = self._bind(model, processing_class).register_forward_pre_hook(self._capture, with_kwargs=True)
        for scheduled in self.scheduled:
            if scheduled.estimate_line and state.is_world_process_zero:
                logger.info(f"DiagnosticsCallback: {scheduled.estimate_line}")
        if state.global_step > 0:
            candidates = [*_resumed_from(), getattr(args, "resume_from_checkpoint", None),
                          Path(str(args.output_dir)) / f"checkpoint-{state.global_step}"]
            found = [Path(str(c)) / STATE_FILE for c in candidates if c and (Path(str(c)) / STATE_FILE).is_file()]
            if found:
                self.load_state_dict(torch.load(found[0], map_location="cpu", weights_only=True))
            else:
                tried = ", ".join(str(c) for c in candidates if c)
                warnings.warn(f"DiagnosticsCallback: training resumed at step {state.global_step} but no diagnostics "
                              f"state ({STATE_FILE}) was found (looked in {tried}); the diagnostics restart their "
                              "schedule, budget and random streams", RuntimeWarning, stacklevel=2)

    def _bind(self, model: nn.Module | None, processing_class: Any) -> nn.Module:
        """Find the Trainer's callback handler, wrap ``model`` and check every probe against it; the model."""
        if model is None:
            raise ValueError("DiagnosticsCallback: the Trainer passed no model")
        self._handler = _calling_handler()
        self.denoiser = self.build_denoiser(model, processing_class)
        for scheduled in self.scheduled:
            scheduled.prepare(model, self.denoiser)
        return model

    def build_denoiser(self, model: nn.Module, processing_class: Any) -> Denoiser:
        """``denoiser_fn(model)``, or the model as a :class:`MaskedLMDenoiser` with ids from the tokenizer (a
        ``processing_class`` with a ``mask_token_id``) or the model config."""
        if self.denoiser_fn is not None:
            return self.denoiser_fn(model)
        tokenizer = getattr(processing_class, "tokenizer", processing_class)  # a processor holds its tokenizer
        if detect_family(model) is not None:  # LLaDA, Dream, MDLM, ...: the family registry knows its conventions
            return denoiser_for(model, tokenizer)
        output_embeddings = getattr(model, "get_output_embeddings", None)
        head = output_embeddings() if callable(output_embeddings) else None
        if not is_masked_lm(model) or head is None:
            raise ValueError(f"DiagnosticsCallback: the Trainer's model is a {type(model).__name__}, which gives no "
                             "masked-token conditionals (not a *ForMaskedLM with its LM head, nor a known diffusion "
                             "family); attach it to the masked LM, or pass denoiser_fn=model -> Denoiser")
        if tokenizer is not None and getattr(tokenizer, "mask_token_id", None) is not None:
            return MaskedLMDenoiser(model, tokenizer=tokenizer)
        return MaskedLMDenoiser(model, **config_ids(model.config, tokenizer))

    def _capture(self, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """Forward pre-hook: keep the latest training batch's rows (reads the inputs, changes nothing)."""
        if self._running or not module.training:
            return
        batch = {key: kwargs[key] for key in BATCH_KEYS if isinstance(kwargs.get(key), Tensor)}
        if "input_ids" not in batch and args and isinstance(args[0], Tensor):
            batch["input_ids"] = args[0]
        if "input_ids" in batch:
            for scheduled in self.scheduled:
                scheduled.capture(batch)

    # -- runs ------------------------------------------------------------------------------------------------------
    def on_step_end(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, *,
                    model: nn.Module | None = None, **kwargs: Any) -> None:
        """Run the probes that are due at this optimizer step."""
        due = [scheduled for scheduled in self.scheduled if scheduled.due(state.global_step)]
        self._run(due, args, state, control, model, "train")

    def on_evaluate(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, *,
                    model: nn.Module | None = None, processing_class: Any = None, **kwargs: Any) -> None:
        """Run the probes after an evaluation (``{group}/val/...``), also of a Trainer that only evaluates."""
        due = [scheduled for scheduled in self.scheduled if scheduled.at_validation]
        if due and self.denoiser is None:  # trainer.evaluate() without training: bind now
            self._bind(model, processing_class)
        self._run(due, args, state, control, model, "val")

    def _run(self, due: list[ScheduledProbe], args: TrainingArguments, state: TrainerState, control: TrainerControl,
             model: nn.Module | None, stage: str) -> None:
        if not due:
            return
        if model is None or self.denoiser is None:
            raise RuntimeError("DiagnosticsCallback: a run before on_train_begin (attach it to the Trainer)")
        metrics: dict[str, float] = {}
        ran: list[ScheduledProbe] = []
        self._running = True
        try:
            for scheduled in due:
                logged = scheduled.run(model, self.denoiser, stage=stage)
                if logged is not None:
                    metrics.update(logged)
                    ran.append(scheduled)
        finally:
            self._running = False
        with due[-1].charged():  # logging the runs is part of their cost (charged to the last)
            metrics = finite(metrics)
            if not metrics:
                return
            if state.is_world_process_zero:
                for folder, scheduled in itertools.product(_log_folders(self._handler, args), ran):
                    append_draws(folder, state.global_step, f"{scheduled.prefix}{scheduled.probe.group}/{stage}",
                                 self.denoiser, scheduled.probe.draws())
            self.latest.update(metrics)
            state.log_history.append({**metrics, "step": state.global_step})
            if self._handler is not None:  # every report_to integration, as Trainer.log would; not handler.on_log,
                # which clears control.should_log and would cancel the Trainer's own logging at this step
                self._handler.call_event("on_log", args, state, control, logs=dict(metrics))

    # -- state -----------------------------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Each probe's schedule, budget, random stream and state, keyed by its metric group."""
        return {scheduled.probe.group: scheduled.state_dict() for scheduled in self.scheduled}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned (a resumed fine-tune continues the diagnostics' streams)."""
        for scheduled in self.scheduled:
            if scheduled.probe.group in state:
                scheduled.load_state_dict(state[scheduled.probe.group])

    def on_save(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any) -> None:
        """Write the state beside the Trainer's checkpoint of this step (process zero; written atomically)."""
        folder = Path(str(args.output_dir)) / f"checkpoint-{state.global_step}"
        if state.is_world_process_zero and folder.is_dir():
            buffer = io.BytesIO()
            torch.save(self.state_dict(), buffer)
            atomic_write(folder / STATE_FILE, buffer.getvalue())

    def on_train_end(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                     **kwargs: Any) -> None:
        """Remove the input hook: the model is left as it was given; warn about probes that never fitted the
        budget."""
        for scheduled in self.scheduled:
            scheduled.finish()
        if self._hook is not None:
            self._hook.remove()
            self._hook = None


def _resumed_from() -> list[str]:
    """The checkpoint directory the Trainer is resuming from: ``resume_from_checkpoint`` of the ``Trainer.train``
    call up the stack (a callback gets no handle on it), when it is a path."""
    frame = sys._getframe(1)
    while frame is not None:
        value = frame.f_locals.get("resume_from_checkpoint")
        if isinstance(value, str | Path) and Path(str(value)).is_dir():
            return [str(value)]
        frame = frame.f_back  # type: ignore[assignment]
    return []


def _log_folders(handler: CallbackHandler | None, args: TrainingArguments) -> set[str]:
    """The folders the Trainer's TensorBoard and W&B integrations write this run's logs into (where
    ``mlm-dynamics report`` reads them, and the draws go beside them); ``output_dir`` when neither is active."""
    folders = set()
    for callback in [] if handler is None else handler.callbacks:
        if type(callback).__name__ == "TensorBoardCallback":
            writer = getattr(callback, "tb_writer", None)
            folder = (getattr(writer, "log_dir", None) or getattr(writer, "logdir", None)
                      or getattr(callback, "logging_dir", None) or getattr(args, "logging_dir", None))
        elif type(callback).__name__ == "WandbCallback":
            folder = getattr(getattr(getattr(callback, "_wandb", None), "run", None), "dir", None)
        else:
            continue
        if folder:
            folders.add(str(folder))
    return folders or {str(args.output_dir)}


def _calling_handler() -> CallbackHandler | None:
    """The Trainer's ``CallbackHandler`` that is calling this hook.

    A ``TrainerCallback`` gets no handle on the Trainer, and the ``report_to`` integrations come before user callbacks
    in the handler, so values measured in ``on_step_end`` reach them only through the handler's ``on_log``. It is
    the ``self`` of the hook's caller (``CallbackHandler.call_event``); if a future transformers calls hooks
    differently, the values still go to ``state.log_history`` and a warning says that the loggers were not reached.
    """
    frame = sys._getframe(1)  # up from the hook that asks: CallbackHandler.call_event is its caller
    while frame is not None:
        caller = frame.f_locals.get("self")
        if isinstance(caller, CallbackHandler):
            return caller
        frame = frame.f_back  # type: ignore[assignment]
    warnings.warn("DiagnosticsCallback: the Trainer's callback handler was not found; diagnostics go to "
                  "state.log_history only, not to the report_to loggers", RuntimeWarning, stacklevel=3)
    return None


__all__ = ["STATE_FILE", "DiagnosticsCallback", "config_ids", "default_probes"]
