"""The diagnostic callbacks: each builds one probe of :mod:`mlm_dynamics.probes` and schedules it in Lightning."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from lightning.pytorch import Trainer
from lightning.pytorch.loggers import WandbLogger
from matplotlib.figure import Figure

from ..diagnostics.parallel import DEFAULT_RULES
from ..embedders.base import Codec, EmbedderBase, EmbeddingFunction
from ..probes.chains import Anchors, DriftProbe, TrapProbe
from ..probes.decoding import ParallelDecodingProbe
from ..probes.mixing import DobrushinProbe, MeetingTimeProbe, RectangleProbe
from ..report import figures as report_figures
from .base import DiagnosticCallback


class MixingDiagnostics(DiagnosticCallback):
    """Coupled chains from the batch's sequences and from random fillings: meeting times, censoring, TV bounds.

    Logs :class:`~mlm_dynamics.probes.MeetingTimeProbe`'s metrics under ``{prefix}mixing/{stage}/``:
    ``meeting_time_median`` and ``meeting_time_q90`` with their intervals and achieved coverage (a quantile beyond
    the budget is not logged; ``..._lower_bound`` is), the restricted mean, ``censored_fraction``, ``budget``,
    ``num_pairs``; with ``lag`` also ``lagged/...`` and ``lagged/tv_bound_t{t}`` for each ``t`` in ``t_values``.
    Cost per run: at most ``max_steps`` forwards of ``<= 2 num_starts`` rows (twice with ``lag``).

    Examples:
        Attached to a fit, it measures the model being trained every 2 optimizer steps, from the batches' rows:

        >>> import lightning as L, torch
        >>> from torch.utils.data import DataLoader
        >>> from mlm_dynamics import MixingDiagnostics
        >>> from mlm_dynamics.training.masked_lm import MaskedDenoiserModule, tiny_bert_denoiser
        >>> module = MaskedDenoiserModule(tiny_bert_denoiser(generator=0))   # has a ``denoiser`` attribute
        >>> rows = torch.randint(5, 24, (8, 10), generator=torch.Generator().manual_seed(0))
        >>> rows[:, 0], rows[:, -1] = 1, 2
        >>> trainer = L.Trainer(max_steps=4, logger=False, enable_checkpointing=False, enable_progress_bar=False,
        ...                     enable_model_summary=False,
        ...                     callbacks=[MixingDiagnostics(every_n_train_steps=2, max_steps=50,
        ...                                                  overhead=None)])  # every due run (default: <= 5 %)
        >>> trainer.fit(module, DataLoader(rows, batch_size=4))
        >>> metrics = trainer.callback_metrics
        >>> float(metrics["mixing/train/num_pairs"]), float(metrics["mixing/train/meeting_time_median_confidence"])
        (4.0, 0.875)
        >>> median = "mixing/train/meeting_time_median"   # logged, or (censored) only its lower bound
        >>> (median in metrics) != (f"{median}_lower_bound" in metrics)
        True
    """

    def __init__(self, *, temperature: float = 1.0, max_steps: int = 200, lag: int | None = None,
                 t_values: Sequence[int] = (0, 50, 100), **kwargs: Any) -> None:
        super().__init__(MeetingTimeProbe(temperature=temperature, max_steps=max_steps, lag=lag, t_values=t_values),
                         **kwargs)

    def figures(self) -> dict[str, Figure]:
        """The figures of the latest run by name (survival curves), for loggers that take images."""
        assert isinstance(self.probe, MeetingTimeProbe)
        if self.probe.latest is None:
            return {}
        return {"mixing/survival": report_figures.ladder_survival({self.probe.temperature: self.probe.latest})}


class RectangleTest(DiagnosticCallback):
    """Rectangle statistics on the batch's sequences: prevalence of incompatibility and ``|R|`` quantiles.

    Cost per run: ``num_starts * pairs_per_context * (2 num_tokens + 2)`` forward rows.
    """

    def __init__(self, *, pairs_per_context: int = 4, num_tokens: int = 4, max_distance: int | None = None,
                 temperature: float = 1.0, **kwargs: Any) -> None:
        super().__init__(RectangleProbe(pairs_per_context=pairs_per_context, num_tokens=num_tokens,
                                        max_distance=max_distance, temperature=temperature), **kwargs)

    def figures(self) -> dict[str, Figure]:
        """The figures of the latest run by name (the ``|R|`` histogram), for loggers that take images."""
        assert isinstance(self.probe, RectangleProbe)
        if self.probe.latest is None:
            return {}
        return {"rectangle/histogram": report_figures.rectangle_histogram(self.probe.latest)}


class InfluenceProbe(DiagnosticCallback):
    """Influence coefficients on the first ``max_sites`` sites of the batch's sequences, over a temperature grid.

    Logs the Dobrushin coefficient per temperature, the grid and sensitivity estimates of tau*, and the implied
    mixing-time bound. The sums run over the probed sites and sampled replacements only, so they are lower
    estimates of the full Dobrushin sums (a value below 1 is no certificate). Cost per run:
    ``num_starts * n (1 + replacements (n - 1))`` forward rows, n = ``max_sites``.
    """

    def __init__(self, *, temperatures: Sequence[float] = (0.5, 1.0, 2.0), max_sites: int = 8,
                 replacements: int = 1, **kwargs: Any) -> None:
        super().__init__(DobrushinProbe(temperatures=temperatures, max_sites=max_sites, replacements=replacements),
                         **kwargs)


class ParallelDecoding(DiagnosticCallback):
    """How parallel-decodable the model being trained is: a masked window of the batch's sequences, its ``n`` most
    confident positions committed at once against one at a time (``n = 1 .. window``), and the confidence rules'
    sets with their certificates checked; see :class:`~mlm_dynamics.probes.decoding.ParallelDecodingProbe`.

    Logs under ``{prefix}parallel/{stage}/``: ``tv_k{n}``, ``tv_high_k{n}``, ``first_order_k{n}``,
    ``certificate_k{n}``, ``{rule}/k``, ``{rule}/tv``, ``{rule}/violated``, and with ``num_starts >= 29`` (what a
    guarantee needs) ``k_for_tv{target}``, ``threshold_for_tv{target}``. Cost per run: at most
    ``num_starts (1 + sum_{n=2}^{window} (2 + samples (n - 1) + n top_m))`` forward rows.
    """

    def __init__(self, *, window: int = 4, temperature: float = 1.0,
                 rules: Sequence[tuple[str, float]] = DEFAULT_RULES,
                 targets: Sequence[float] = (0.01, 0.05), samples: int = 32, top_m: int = 4,
                 **kwargs: Any) -> None:
        super().__init__(ParallelDecodingProbe(window=window, temperature=temperature, rules=rules, targets=targets,
                                               samples=samples, top_m=top_m), **kwargs)


class _ChainCallback(DiagnosticCallback):
    """Long-run chains: W&B also gets a table of the current chain states and each chain's drift so far."""

    probe: DriftProbe

    def __init__(self, probe: DriftProbe, *, codec: Codec | None = None, table_rows: int = 8, **kwargs: Any) -> None:
        super().__init__(probe, **kwargs)
        self.codec, self.table_rows = codec, table_rows

    def log_extras(self, trainer: Trainer, stage: str) -> None:
        super().log_extras(trainer, stage)
        wandb_loggers = [logger for logger in trainer.loggers if isinstance(logger, WandbLogger)]
        state, monitor = self.probe.chain_state, self.probe.monitor
        if not wandb_loggers or state is None or monitor is None or monitor.drift.latest is None:
            return
        drift = monitor.drift.latest
        rows = []
        for chain, tokens in enumerate(state.tokens[: self.table_rows].tolist()):
            text = self.codec.decode(tokens) if self.codec is not None else " ".join(map(str, tokens))
            rows.append([state.step, chain, float(drift[chain]), text])
        key = f"{self.prefix}{self.probe.group}/{stage}/"
        steps = [entry["step"] for entry in monitor.history]
        trajectories = torch.stack(monitor.projections["drift"], 1)[: self.table_rows] if steps else None
        for logger in wandb_loggers:
            logger.log_table(key=f"{key}states", columns=["step", "chain", "drift", "state"], data=rows,
                             step=trainer.global_step)
            if trajectories is not None:
                import wandb

                plot = wandb.plot.line_series(xs=steps, ys=trajectories.tolist(),
                                              keys=[f"chain {c}" for c in range(len(trajectories))],
                                              title=f"{key}drift trajectories", xname="chain step")
                logger.experiment.log({f"{key}drift_trajectories": plot, "trainer/global_step": trainer.global_step})


class SemanticDrift(_ChainCallback):
    """Long-run chains started from batch sequences: drift ``1 - cos(e(X_t), e(X_0))``, threshold hits, Hamming.

    ``embedder`` defaults to mean-pooled hidden states of the model's own encoder (or of ``hidden_module`` for
    full-sequence models); pass a :class:`~mlm_dynamics.embedders.SentenceEmbedder` for text, or any function (its
    rows are normalised). Embeddings are computed every ``every`` steps only. :class:`TrapDetector` logs the same
    drift scalars: use it instead of both to run one set of chains. See :class:`~mlm_dynamics.probes.DriftProbe`.
    """

    def __init__(self, *, embedder: EmbedderBase | EmbeddingFunction | None = None,
                 hidden_module: str | None = None, temperature: float = 1.0, steps_per_run: int = 50, every: int = 10,
                 thresholds: Sequence[float] = (0.1, 0.2, 0.3), codec: Codec | None = None, table_rows: int = 8,
                 **kwargs: Any) -> None:
        super().__init__(DriftProbe(embedder=embedder, hidden_module=hidden_module, temperature=temperature,
                                    steps_per_run=steps_per_run, every=every, thresholds=thresholds),
                         codec=codec, table_rows=table_rows, **kwargs)


class TrapDetector(_ChainCallback):
    """Long-run chains with online trap, basin and topic detection (plus the drift scalars).

    Args:
        radius, dwell, hamming_radius, basin_radius: see :class:`~mlm_dynamics.tracking.TrapTracker`.
        topic_anchors: optional anchors for topic attraction: ``{topic: [D] or [K, D] embeddings}`` (tensors or
            nested lists), ``{topic: [sentences]}`` (embedded with the callback's embedder when the run starts),
            the path of a YAML file ``{threshold: ..., topics: {topic: [sentences]}}``, or the name of a set shipped
            in the package (``"politics"``); their dimension is checked when fit starts.
        topic_threshold: cosine similarity counted as "near" a topic (``None``: the file's, else 0.5).
        with_margins: log local margins (``B n`` forward rows per observation) and attach them to traps.

    The other options are :class:`SemanticDrift`'s; see :class:`~mlm_dynamics.probes.TrapProbe`.
    """

    def __init__(self, *, radius: float = 0.05, dwell: int = 50, hamming_radius: int | None = None,
                 basin_radius: float = 0.1, topic_anchors: Anchors | str | None = None,
                 topic_threshold: float | None = None, with_margins: bool = False,
                 embedder: EmbedderBase | EmbeddingFunction | None = None, hidden_module: str | None = None,
                 temperature: float = 1.0, steps_per_run: int = 50, every: int = 10,
                 thresholds: Sequence[float] = (0.1, 0.2, 0.3), codec: Codec | None = None, table_rows: int = 8,
                 **kwargs: Any) -> None:
        super().__init__(TrapProbe(radius=radius, dwell=dwell, hamming_radius=hamming_radius,
                                   basin_radius=basin_radius, topic_anchors=topic_anchors,
                                   topic_threshold=topic_threshold, with_margins=with_margins, embedder=embedder,
                                   hidden_module=hidden_module, temperature=temperature,
                                   steps_per_run=steps_per_run, every=every, thresholds=thresholds),
                         codec=codec, table_rows=table_rows, **kwargs)


__all__ = ["InfluenceProbe", "MixingDiagnostics", "RectangleTest", "SemanticDrift", "TrapDetector"]
