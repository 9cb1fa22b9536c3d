"""Figures: each function takes a result object and returns a :class:`matplotlib.figure.Figure`.

Built on the object API with the Agg canvas (no pyplot state, no display), so callbacks can hand the same figures
to TensorBoard (``add_figure``) and W&B (``wandb.Image``). Every number drawn comes from the result's ``summary()``
or its raw samples, the same numbers ``report.json`` holds.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
import torch
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle
from matplotlib.ticker import NullFormatter, ScalarFormatter
from torch import Tensor

from ..diagnostics.influence import InfluenceEstimate
from ..diagnostics.margins import LocalMargins
from ..diagnostics.meeting import MeetingTimes
from ..diagnostics.rectangle import RectangleReport
from ..experiments.sweep import SweepResult

COLORMAP = "viridis"


def _figure(width: float = 6.4, height: float = 4.2) -> Figure:
    figure = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(figure)
    return figure


def _grid(result: SweepResult) -> tuple[list[float], list[int]]:
    return sorted({c.temperature for c in result.cells}), sorted({c.num_sites for c in result.cells})


def phase_matrix(result: SweepResult) -> tuple[np.ndarray, np.ndarray]:
    """``(values, censored)`` ``[lengths, temperatures]``: median meeting time / (n log n), and median censored."""
    temperatures, lengths = _grid(result)
    values = np.full((len(lengths), len(temperatures)), np.nan)
    censored = np.zeros_like(values, dtype=bool)
    for cell in result.cells:
        row, col = lengths.index(cell.num_sites), temperatures.index(cell.temperature)
        summary = cell.meeting.summary()
        values[row, col] = summary["meeting_time_median"] / (cell.num_sites * math.log(cell.num_sites))
        censored[row, col] = summary["censored_fraction"] >= 0.5
    return values, censored


def phase_diagram(result: SweepResult) -> Figure:
    """Heatmap over (tau, n) of median meeting time / (n log n); cells whose median is censored are hatched (the
    value there is a lower bound), and the boundary tau_c(n) is drawn where it lies inside the grid."""
    temperatures, lengths = _grid(result)
    values, censored = phase_matrix(result)
    figure = _figure()
    axes = figure.add_subplot()
    image = axes.imshow(np.log10(values), origin="lower", aspect="auto", cmap=COLORMAP)
    figure.colorbar(image, ax=axes, label="log10 median meeting time / (n log n)")
    for row, col in zip(*np.nonzero(censored), strict=True):
        axes.add_patch(_hatch(col, row))
    log_t = np.log(temperatures)
    points = [(np.interp(math.log(b.temperature), log_t, np.arange(len(temperatures))), lengths.index(b.num_sites))
              for b in result.boundary if b.status == "interpolated"]
    if points:
        xs, ys = zip(*points, strict=True)
        axes.plot(xs, ys, "w-o", lw=2, label="tau_c(n): half the pairs censored")
        axes.legend(loc="upper right", fontsize=8)
    axes.set_xticks(range(len(temperatures)), [f"{t:g}" for t in temperatures])
    axes.set_yticks(range(len(lengths)), [str(n) for n in lengths])
    axes.set_xlabel("temperature tau")
    axes.set_ylabel("resampled sites n")
    axes.set_title("Coupling time over (tau, n); hatched: median beyond the step budget")
    return figure


def _hatch(col: int, row: int) -> Rectangle:
    return Rectangle((col - 0.5, row - 0.5), 1, 1, fill=False, hatch="xx", edgecolor="white", lw=0)


def survival_curves(result: SweepResult, max_panels: int = 4) -> Figure:
    """``P(T_meet > t)`` per temperature, one panel per length (the largest ``max_panels``); it bounds the total
    variation between the chains started at the two starts."""
    temperatures, lengths = _grid(result)
    shown = lengths[-max_panels:]
    figure = _figure(3.2 * len(shown), 3.4)
    colors = _colors(len(temperatures))
    for k, n in enumerate(shown):
        axes = figure.add_subplot(1, len(shown), k + 1)
        for tau, color in zip(temperatures, colors, strict=True):
            steps, survival = survival_curve(result.cell(tau, n).meeting)
            axes.step(steps, survival, where="post", color=color, label=f"tau={tau:g}")
        axes.set_title(f"n = {n}")
        axes.set_xlabel("step t")
        axes.set_ylim(-0.02, 1.02)
        if k == 0:
            axes.set_ylabel("P(T_meet > t)")
            axes.legend(fontsize=7)
    return figure


def survival_curve(times: MeetingTimes) -> tuple[np.ndarray, np.ndarray]:
    """Steps ``0..budget`` and ``P(T > t)`` there (censored pairs count as not met)."""
    steps = torch.arange(int(times.budget) + 1, device=times.times.device)
    return steps.cpu().numpy(), times.survival(steps).cpu().numpy()


def scaling_constants(result: SweepResult) -> Figure:
    """``C(tau)`` of ``E T = C n log n`` with bootstrap intervals; open markers where pairs were censored (lower
    estimates)."""
    temperatures = sorted(result.fits)
    figure = _figure()
    axes = figure.add_subplot()
    for tau in temperatures:
        fit = result.fits[tau]
        axes.errorbar([tau], [fit.C], yerr=[[fit.C - fit.C_low], [fit.C_high - fit.C]], fmt="o", color="C0",
                      mfc="C0" if fit.censored_fraction == 0 else "white", capsize=3)
    axes.set_xscale("log")
    axes.set_yscale("log")
    for axis in (axes.xaxis, axes.yaxis):
        axis.set_major_formatter(ScalarFormatter())
        axis.set_minor_formatter(NullFormatter())
    axes.set_xticks(temperatures)
    axes.set_xlabel("temperature tau")
    axes.set_ylabel("C(tau)")
    axes.set_title("E T_meet = C(tau) n log n (open: censored pairs, lower estimates)", fontsize=10)
    if result.influence is not None:
        tau_star = result.influence.contraction_temperature()
        if math.isfinite(tau_star):
            axes.axvline(tau_star, color="C3", ls="--", label=f"Dobrushin tau* = {tau_star:.3g}")
            axes.legend(fontsize=8)
    return figure


def tv_bounds(result: SweepResult) -> Figure:
    """L-lag upper bounds on ``TV(mu_0 P^t, pi)`` against t, per temperature, for the largest length."""
    temperatures, lengths = _grid(result)
    n = lengths[-1]
    figure = _figure()
    axes = figure.add_subplot()
    for tau, color in zip(temperatures, _colors(len(temperatures)), strict=True):
        lagged = result.cell(tau, n).lagged
        if lagged is None:
            continue
        steps = torch.arange(0, int(lagged.budget) + 1, max(1, int(lagged.budget) // 200))
        axes.plot(steps.numpy(), lagged.tv_upper_bound(steps).numpy(), color=color, label=f"tau={tau:g}")
    axes.set_xlabel("step t")
    axes.set_ylabel("upper bound on TV(mu_0 P^t, pi)")
    axes.set_title(f"L-lag coupling bounds, n = {n}")
    axes.legend(fontsize=8)
    return figure


def drift_curves(result: SweepResult, every: int) -> Figure:
    """Mean drift of the drift chains against steps, per temperature, for the largest length."""
    temperatures, lengths = _grid(result)
    n = lengths[-1]
    figure = _figure()
    axes = figure.add_subplot()
    for tau, color in zip(temperatures, _colors(len(temperatures)), strict=True):
        curve = result.cell(tau, n).drift_curve
        axes.plot(np.arange(len(curve)) * every, curve, color=color, label=f"tau={tau:g}")
    for threshold in result.config.drift.thresholds:
        axes.axhline(threshold, color="grey", ls=":", lw=1)
    axes.set_xlabel("step")
    unit = " / distance to random fillings" if result.config.drift.relative else ""
    axes.set_ylabel(f"drift from the start ({result.config.drift.distance}{unit})")
    axes.set_title(f"Drift chains, n = {n} (dotted: hitting thresholds)")
    axes.legend(fontsize=8)
    return figure


def rectangle_histogram(report: RectangleReport) -> Figure:
    """Histogram of ``log10 |R|`` with the median float tolerance marked."""
    magnitudes = report.values.abs().double().clamp_min(1e-12).log10().cpu().numpy()
    figure = _figure()
    axes = figure.add_subplot()
    axes.hist(magnitudes, bins=40, color="C0")
    summary = report.summary()
    axes.axvline(math.log10(summary["tolerance_median"]), color="C3", ls="--", label="float tolerance")
    axes.set_xlabel("log10 |R| (nats)")
    axes.set_ylabel("rectangles")
    axes.set_title(f"Rectangle test: {summary['prevalence']:.3f} of {int(summary['num_rectangles'])} certify "
                   "incompatibility")
    axes.legend(fontsize=8)
    return figure


def margin_distribution(margins: Mapping[str, LocalMargins]) -> Figure:
    """Histograms of the local margins ``Delta_i`` (one per named set of states, e.g. start and final)."""
    figure = _figure()
    axes = figure.add_subplot()
    for name, value in margins.items():
        axes.hist(value.margin.flatten().double().numpy(), bins=30, alpha=0.6, label=name)
    axes.axvline(0.0, color="grey", lw=1)
    axes.set_xlabel("local margin Delta (logit of the current token minus the best rival)")
    axes.set_ylabel("sites")
    axes.legend(fontsize=8)
    return figure


def pca_landscape(embeddings: Tensor, chain: Tensor, basin: Tensor | None = None,
                  groups: Sequence[str] = ()) -> Figure:
    """2-D PCA of embedding trajectories ``[N, D]`` (``chain [N]`` ids); trap states coloured by ``basin [N]``
    (``-1``: not trapped). ``groups[c]`` labels chain ``c`` (e.g. its temperature): one colour and one legend entry
    per group. The semantic landscape of the chains."""
    centred = embeddings.double() - embeddings.double().mean(0)
    _, _, directions = torch.linalg.svd(centred, full_matrices=False)  # exact PCA: [N, D] with D in the hundreds
    points = (centred @ directions[:2].T).numpy()
    figure = _figure()
    axes = figure.add_subplot()
    ids = chain.unique().tolist()
    names = [groups[c] if c < len(groups) else f"chain {c}" for c in ids]
    distinct = list(dict.fromkeys(names))
    palette = dict(zip(distinct, _colors(len(distinct)), strict=True))
    for c, name in zip(ids, names, strict=True):
        rows = (chain == c).numpy()
        axes.plot(points[rows, 0], points[rows, 1], "-", lw=0.6, alpha=0.5, color=palette[name])
    for name in distinct:
        axes.plot([], [], "-", color=palette[name], label=name)
    if basin is not None and (basin >= 0).any():
        trapped = (basin >= 0).numpy()
        scatter = axes.scatter(points[trapped, 0], points[trapped, 1], c=basin[basin >= 0].numpy(), cmap="tab10",
                               s=14, edgecolors="black", linewidths=0.3, zorder=3)
        figure.colorbar(scatter, ax=axes, label="basin")
    axes.set_xlabel("PC 1")
    axes.set_ylabel("PC 2")
    axes.set_title("Semantic landscape: embedding trajectories (points: trapped states)")
    axes.legend(fontsize=8, loc="best")
    return figure


def landscape_by_temperature(embeddings: Tensor, basins: Tensor, temperatures: Sequence[float]) -> Figure:
    """:func:`pca_landscape` of observations ``embeddings [observations, chains, D]`` with ``basins
    [observations, chains]``, the chains grouped by their ``temperatures``."""
    chains = embeddings.shape[1]
    return pca_landscape(embeddings.flatten(0, 1), torch.arange(chains).repeat(embeddings.shape[0]),
                         basins.flatten(), [f"tau={t:g}" for t in temperatures])


def _colors(count: int) -> list[tuple[float, float, float, float]]:
    from matplotlib import colormaps

    cmap = colormaps[COLORMAP]
    return [cmap(k / max(count - 1, 1)) for k in range(count)]


def ladder_survival(times: Mapping[float, MeetingTimes]) -> Figure:
    """``P(T_meet > t)`` of coupled pairs at each temperature of a ladder (the run job's coupling section)."""
    figure = _figure()
    axes = figure.add_subplot()
    for (tau, value), color in zip(sorted(times.items()), _colors(len(times)), strict=True):
        steps, survival = survival_curve(value)
        axes.step(steps, survival, where="post", color=color, label=f"tau={tau:g}")
    axes.set_ylim(-0.02, 1.02)
    axes.set_xlabel("step t")
    axes.set_ylabel("P(T_meet > t)")
    axes.set_title("Coupled pairs (start vs random residues): fraction not yet met")
    axes.legend(fontsize=8)
    return figure


def dobrushin_curve(estimate: InfluenceEstimate) -> Figure:
    """Dobrushin coefficient ``max_j sum_i alpha_ij(tau)`` against tau, with the contraction level 1."""
    figure = _figure()
    axes = figure.add_subplot()
    axes.plot(estimate.temperatures.numpy(), estimate.dobrushin.numpy(), "o-", label="alpha(tau) (column sums)")
    axes.plot(estimate.temperatures.numpy(), estimate.row_sums.amax(1).numpy(), "s--", label="max row sum")
    axes.axhline(1.0, color="C3", lw=1, label="contraction: alpha < 1")
    axes.set_xscale("log")
    axes.set_xlabel("temperature tau")
    axes.set_ylabel("influence sum")
    axes.set_title(f"Dobrushin coefficient on {len(estimate.sites)} sites (lower estimates)")
    axes.legend(fontsize=8)
    return figure


def drift_over_time(steps: Sequence[int], drift: Tensor, scale: float, temperatures: Sequence[float]) -> Figure:
    """Drift ``[observations, chains]`` of each chain, in units of the distance from the start to random fillings,
    coloured by the chain's temperature (thick: the mean per temperature)."""
    figure = _figure()
    axes = figure.add_subplot()
    relative = (drift / scale).numpy()
    ladder = sorted(set(temperatures))
    for tau, color in zip(ladder, _colors(len(ladder)), strict=True):
        chains = [c for c, t in enumerate(temperatures) if t == tau]
        for chain in chains:
            axes.plot(steps, relative[:, chain], color=color, lw=0.8, alpha=0.5)
        axes.plot(steps, relative[:, chains].mean(1), color=color, lw=2.5, label=f"tau={tau:g}")
    axes.set_xlabel("step")
    axes.set_ylabel("drift / distance to random fillings")
    axes.set_title("Drift of each chain in hidden-state space (resampled sites)")
    axes.legend(fontsize=8)
    return figure


def topic_fractions_over_time(steps: Sequence[int], near: Tensor, temperatures: Sequence[float],
                              topics: Sequence[str], base_rates: Mapping[str, float]) -> Figure:
    """Per topic, the running fraction of observations near it (pooled over the chains of each temperature), with the
    corpus base rate dashed; ``near [observations, chains, topics]``."""
    ladder = sorted(set(temperatures))
    figure = _figure(3.0 * len(topics), 3.2)
    for k, topic in enumerate(topics):
        axes = figure.add_subplot(1, len(topics), k + 1)
        for tau, color in zip(ladder, _colors(len(ladder)), strict=True):
            chains = [c for c, t in enumerate(temperatures) if t == tau]
            hits = near[:, chains, k].double().mean(1)
            running = hits.cumsum(0) / torch.arange(1, len(hits) + 1)
            axes.plot(steps, running.numpy(), color=color, label=f"tau={tau:g}")
        axes.axhline(base_rates[topic], color="grey", ls="--", lw=1, label="corpus base rate")
        axes.set_title(topic)
        axes.set_xlabel("step")
        if k == 0:
            axes.set_ylabel("fraction of observations near the topic")
            axes.legend(fontsize=7)
    return figure


def dwell_distribution(dwell: Mapping[float, Sequence[float]]) -> Figure:
    """Histograms of trap dwell times per temperature (open traps counted up to the last observation)."""
    figure = _figure()
    axes = figure.add_subplot()
    ladder = sorted(dwell)
    for tau, color in zip(ladder, _colors(len(ladder)), strict=True):
        axes.hist(list(dwell[tau]), bins=20, alpha=0.6, color=color, label=f"tau={tau:g} ({len(dwell[tau])} traps)")
    axes.set_xlabel("dwell time (steps)")
    axes.set_ylabel("traps")
    axes.set_title("Trap dwell times")
    axes.legend(fontsize=8)
    return figure
