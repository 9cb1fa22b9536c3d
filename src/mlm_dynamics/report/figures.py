"""Figures: each function takes a result object and returns a :class:`matplotlib.figure.Figure`.

Built on the object API with the Agg canvas (no pyplot state, no display), so callbacks can hand the same figures
to TensorBoard (``add_figure``) and W&B (``wandb.Image``). Every number drawn comes from the result's ``summary()``
or its raw samples, the same numbers ``report.json`` holds.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import torch
from matplotlib.axes import Axes
from matplotlib.axis import Axis
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, NullFormatter, ScalarFormatter
from torch import Tensor

from ..diagnostics.influence import InfluenceEstimate
from ..diagnostics.margins import LocalMargins
from ..diagnostics.meeting import MeetingTimes
from ..diagnostics.parallel import ConfidenceProfile
from ..diagnostics.rectangle import RectangleReport

COLORMAP = "viridis"


LEGEND_POINTS = 9  # the smallest text a figure carries, at its saved size
SERIES_MARKERS = ("o", "s", "D", "v", "P", "X", "*", "h")  # one per overlaid series; "^" (open) means censored


def new_figure(width: float = 7.6, height: float = 4.2) -> Figure:
    """An empty figure on the Agg canvas (no pyplot state); wide enough for a legend beside the axes."""
    figure = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(figure)
    return figure


def legend_outside(axes: Axes, *, below: bool = False) -> None:
    """The legend beside ``axes`` (right, or ``below``), outside the data area so it covers no series; the
    constrained layout makes room for it."""
    if below:
        axes.legend(loc="upper center", bbox_to_anchor=(0.5, -0.22), borderaxespad=0.0, fontsize=LEGEND_POINTS,
                    frameon=False)
    else:
        axes.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0, fontsize=LEGEND_POINTS,
                    frameon=False)


def readable(figure: Figure) -> Figure:
    """``figure`` with plain tick labels (no offset or ``1e-5`` multiplier the eye misses) on every linear axis;
    applied wherever a figure is saved or logged."""
    for axes in figure.axes:
        for axis in (axes.xaxis, axes.yaxis):
            formatter = axis.get_major_formatter()
            if isinstance(formatter, ScalarFormatter):
                formatter.set_useOffset(False)
                formatter.set_scientific(False)
    return figure


def temperature_axis(axis: Axis, values: Sequence[float]) -> None:
    """A log axis with ticks at ``values`` (at least 25 % apart, so their labels do not run into each other),
    labelled plainly (``0.5``, not ``5 x 10^-1``)."""
    axis.axes.set_xscale("log") if axis is axis.axes.xaxis else axis.axes.set_yscale("log")
    ticks: list[float] = []
    for value in sorted({float(v) for v in values if v and v > 0}):
        if not ticks or value >= 1.25 * ticks[-1]:
            ticks.append(value)
    if ticks:
        axis.set_ticks(ticks)
    axis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
    axis.set_minor_formatter(NullFormatter())


def rectangle_histogram(report: RectangleReport) -> Figure:
    """Histogram of ``log10 |R|`` with the median float tolerance marked."""
    magnitudes = report.values.abs().double().clamp_min(1e-12).log10().cpu().numpy()
    figure = new_figure()
    axes = figure.add_subplot()
    axes.hist(magnitudes, bins=40, color="C0")
    summary = report.summary()
    axes.axvline(math.log10(summary["tolerance_median"]), color="C3", ls="--", label="float tolerance")
    axes.set_xlabel("log10 |R| (nats)")
    axes.set_ylabel("rectangles")
    axes.set_title(f"Rectangle test: {summary['prevalence']:.3f} of {int(summary['num_rectangles'])} certify "
                   "incompatibility")
    legend_outside(axes)
    return figure


def margin_distribution(margins: Mapping[str, LocalMargins]) -> Figure:
    """Histograms of the local margins ``Delta_i`` (one per named set of states, e.g. start and final)."""
    figure = new_figure()
    axes = figure.add_subplot()
    for name, value in margins.items():
        axes.hist(value.margin.flatten().double().cpu().numpy(), bins=30, alpha=0.6, label=name)
    axes.axvline(0.0, color="grey", lw=1)
    axes.set_xlabel("local margin Delta (logit of the current token minus the best rival)")
    axes.set_ylabel("sites")
    legend_outside(axes)
    return figure


def pca_landscape(embeddings: Tensor, chain: Tensor, basin: Tensor | None = None,
                  groups: Sequence[str] = ()) -> Figure:
    """2-D PCA of embedding trajectories ``[N, D]`` (``chain [N]`` ids); trap states coloured by ``basin [N]``
    (``-1``: not trapped). ``groups[c]`` labels chain ``c`` (e.g. its temperature): one colour and one legend entry
    per group. The semantic landscape of the chains."""
    centred = embeddings.double() - embeddings.double().mean(0)
    _, _, directions = torch.linalg.svd(centred, full_matrices=False)  # exact PCA: [N, D] with D in the hundreds
    points = (centred @ directions[:2].T).cpu().numpy()
    figure = new_figure()
    axes = figure.add_subplot()
    ids = chain.unique().tolist()
    names = [groups[c] if c < len(groups) else f"chain {c}" for c in ids]
    distinct = list(dict.fromkeys(names))
    palette = dict(zip(distinct, colors(len(distinct)), strict=True))
    for c, name in zip(ids, names, strict=True):
        rows = (chain == c).cpu().numpy()
        axes.plot(points[rows, 0], points[rows, 1], "-", lw=0.6, alpha=0.5, color=palette[name])
    for name in distinct:
        axes.plot([], [], "-", color=palette[name], label=name)
    if basin is not None and (basin >= 0).any():
        basins = sorted(set(basin[basin >= 0].tolist()))
        shades = basin_colors(len(basins))  # reds: never a temperature's colour
        for b, shade in zip(basins, shades, strict=True):  # a legend entry per basin (no colour bar for one basin)
            where = (basin == b).cpu().numpy()
            axes.scatter(points[where, 0], points[where, 1], color=shade, s=14, edgecolors="black", linewidths=0.3,
                         zorder=3, label=f"trapped, basin {b}")
    axes.set_xlabel("PC 1")
    axes.set_ylabel("PC 2")
    axes.set_title("Semantic landscape: embedding trajectories (points: trapped states)")
    legend_outside(axes)
    return figure


def landscape_by_temperature(embeddings: Tensor, basins: Tensor, temperatures: Sequence[float]) -> Figure:
    """:func:`pca_landscape` of observations ``embeddings [observations, chains, D]`` with ``basins
    [observations, chains]``, the chains grouped by their ``temperatures``."""
    chains = embeddings.shape[1]
    return pca_landscape(embeddings.flatten(0, 1), torch.arange(chains).repeat(embeddings.shape[0]),
                         basins.flatten(), [f"tau={t:g}" for t in temperatures])


def colors(count: int) -> list[tuple[float, float, float, float]]:
    """``count`` distinguishable colours (viridis), one per temperature or basin."""
    from matplotlib import colormaps

    cmap = colormaps[COLORMAP]
    return [cmap(k / max(count - 1, 1)) for k in range(count)]


def basin_colors(count: int) -> list[tuple[float, float, float, float]]:
    """``count`` shades of red for basins (the temperatures have viridis): one meaning, one colour family."""
    from matplotlib import colormaps

    cmap = colormaps["Reds"]
    return [cmap(0.95 - 0.5 * k / max(count - 1, 1)) for k in range(count)]


def survival_steps(times: MeetingTimes) -> tuple[Tensor, Tensor]:
    """Steps ``0..budget`` and ``P(T > t)`` there (censored pairs count as not met): the Kaplan-Meier curve when every
    censoring is at the budget."""
    steps = torch.arange(int(times.budget) + 1, device=times.times.device)
    return steps.cpu(), times.survival(steps).cpu()


def ladder_survival(times: Mapping[float, MeetingTimes]) -> Figure:
    """``P(T_meet > t)`` of coupled pairs at each temperature of a ladder (the run job's coupling section)."""
    figure = new_figure()
    axes = figure.add_subplot()
    drawn: dict[bytes, str] = {}
    for (tau, value), color in zip(sorted(times.items()), colors(len(times)), strict=True):
        steps, survival = survival_steps(value)
        label, dashed = overlap_label(drawn, survival, f"tau={tau:g}")
        axes.step(steps.cpu().numpy(), survival.cpu().numpy(), where="post", color=color, label=label,
                  ls="--" if dashed else "-")
    axes.set_ylim(-0.02, 1.02)
    axes.set_xlabel("step t")
    axes.set_ylabel("P(T_meet > t)")
    axes.set_title("Coupled pairs (start vs random residues): fraction not yet met")
    legend_outside(axes)
    return figure


def overlap_label(drawn: dict[bytes, str], values: Tensor, label: str) -> tuple[str, bool]:
    """``label``, or ``"{label} (same as {earlier})"`` with ``True`` (draw it dashed) when ``values`` equal a series
    already drawn, which would otherwise hide under it; records the series in ``drawn``."""
    key = values.double().cpu().numpy().tobytes()
    if key in drawn:
        return f"{label} (same as {drawn[key]})", True
    drawn[key] = label
    return label, False


def dobrushin_curve(estimate: InfluenceEstimate) -> Figure:
    """Dobrushin coefficient ``max_j sum_i alpha_ij(tau)`` against tau, with the contraction level 1."""
    figure = new_figure()
    axes = figure.add_subplot()
    axes.plot(estimate.temperatures.cpu().numpy(), estimate.dobrushin.cpu().numpy(), "o-",
              label="alpha(tau) (column sums)")
    axes.plot(estimate.temperatures.cpu().numpy(), estimate.row_sums.amax(1).cpu().numpy(), "s--", label="max row sum")
    axes.axhline(1.0, color="C3", lw=1, label="contraction: alpha < 1")
    temperature_axis(axes.xaxis, estimate.temperatures.tolist())
    axes.set_xlabel("temperature tau")
    axes.set_ylabel("influence sum")
    axes.set_title(f"Dobrushin coefficient on {len(estimate.sites)} sites (lower estimates)")
    legend_outside(axes)
    return figure


def drift_over_time(steps: Sequence[int], drift: Tensor, scale: float, temperatures: Sequence[float]) -> Figure:
    """Drift ``[observations, chains]`` of each chain, in units of the distance from the start to random fillings,
    coloured by the chain's temperature (thick: the mean per temperature)."""
    figure = new_figure()
    axes = figure.add_subplot()
    relative = (drift / scale).cpu().numpy()
    ladder = sorted(set(temperatures))
    for tau, color in zip(ladder, colors(len(ladder)), strict=True):
        chains = [c for c, t in enumerate(temperatures) if t == tau]
        for chain in chains:
            axes.plot(steps, relative[:, chain], color=color, lw=0.8, alpha=0.5)
        axes.plot(steps, relative[:, chains].mean(1), color=color, lw=2.5, label=f"tau={tau:g}")
    axes.set_xlabel("step")
    axes.set_ylabel("drift / distance to random fillings")
    axes.set_title("Drift of each chain in hidden-state space (resampled sites)")
    legend_outside(axes)
    return figure


def chain_traces(steps: Sequence[int], values: Tensor, temperatures: Sequence[float], num_sites: int, *,
                 ylabel: str = "positions changed\nsince the start", what: str = "chain") -> Figure:
    """Trace view, one panel per temperature: a distance in positions ``values [observations, columns]`` (by default
    each chain's Hamming distance to its start; ``what`` names a column) over ``steps``, in the temperature of each
    column's colour (thick: the mean), on ``[0, num_sites]``. A chain that mixes climbs to a plateau and wanders
    across it; a trapped one stays flat near its start (a coupled pair that meets falls to 0)."""
    ladder = sorted(set(temperatures))
    columns = min(len(ladder), 4)
    rows = math.ceil(len(ladder) / columns)
    figure = new_figure(max(7.6, 2.6 * columns), 2.8 * rows)
    panels = figure.subplots(rows, columns, sharex=True, sharey=True, squeeze=False).ravel()
    data = values.double().cpu().numpy()
    for axes, tau, color in zip(panels, ladder, colors(len(ladder)), strict=False):
        chains = [c for c, t in enumerate(temperatures) if t == tau]
        for chain in chains:
            axes.plot(steps, data[:, chain], color=color, lw=0.8, alpha=0.6)
        axes.plot(steps, data[:, chains].mean(1), color=color, lw=2.5)
        axes.set_title(f"tau={tau:g} ({len(chains)} {what}{'s' if len(chains) > 1 else ''})",
                       fontsize=LEGEND_POINTS + 1)
        axes.set_ylim(0, num_sites)
        axes.set_xlabel("step")
    for axes in panels[len(ladder):]:
        axes.set_visible(False)
    for axes in panels[::columns]:
        axes.set_ylabel(ylabel)
    return figure


def topic_fractions_over_time(steps: Sequence[int], near: Tensor, temperatures: Sequence[float],
                              topics: Sequence[str], base_rates: Mapping[str, float]) -> Figure:
    """Per topic, the running fraction of observations near it (pooled over the chains of each temperature), with the
    corpus base rate dashed; ``near [observations, chains, topics]``."""
    ladder = sorted(set(temperatures))
    figure = new_figure(3.0 * len(topics), 3.2)
    for k, topic in enumerate(topics):
        axes = figure.add_subplot(1, len(topics), k + 1)
        for tau, color in zip(ladder, colors(len(ladder)), strict=True):
            chains = [c for c, t in enumerate(temperatures) if t == tau]
            hits = near[:, chains, k].double().mean(1)
            running = hits.cumsum(0) / torch.arange(1, len(hits) + 1)
            axes.plot(steps, running.cpu().numpy(), color=color, label=f"tau={tau:g}")
        axes.axhline(base_rates[topic], color="grey", ls="--", lw=1, label="corpus base rate")
        axes.set_title(topic)
        axes.set_xlabel("step")
        if k == 0:
            axes.set_ylabel("fraction of observations near the topic")
            legend_outside(axes)
    return figure


def dwell_distribution(dwell: Mapping[float, Sequence[float]]) -> Figure:
    """Histograms of trap dwell times per temperature (open traps counted up to the last observation)."""
    figure = new_figure()
    axes = figure.add_subplot()
    ladder = sorted(dwell)
    for tau, color in zip(ladder, colors(len(ladder)), strict=True):
        axes.hist(list(dwell[tau]), bins=20, alpha=0.6, color=color, label=f"tau={tau:g} ({len(dwell[tau])} traps)")
    axes.set_xlabel("dwell time (steps)")
    axes.set_ylabel("traps")
    axes.set_title("Trap dwell times")
    legend_outside(axes)
    return figure


def parallel_error_by_k(profiles: Mapping[str, ConfidenceProfile]) -> Figure:
    """Error of committing the ``K`` most confident positions at once against ``K`` (mean over rows, with the
    interval of the mean), per model; the mean Frechet-Hoeffding certificate dashed and the influence estimate
    dotted in the same colour."""
    figure = new_figure()
    axes = figure.add_subplot()
    for index, (name, profile) in enumerate(profiles.items()):
        color = f"C{index}"
        k = list(range(1, profile.max_k + 1))
        axes.plot(k, profile.tv.mean(0).cpu().numpy(), "o-", color=color, label=f"{name}: error")
        axes.fill_between(k, profile.tv_low.mean(0).cpu().numpy(), profile.tv_high.mean(0).cpu().numpy(),
                          color=color, alpha=0.2)
        axes.plot(k, profile.certificate.mean(0).clamp_max(1).cpu().numpy(), "--", color=color,
                  label=f"{name}: certificate")
        axes.plot(k, profile.first_order.mean(0).cpu().numpy(), ":", color=color, label=f"{name}: influence est.")
    axes.set_xlabel("K, positions committed at once (most confident first)")
    axes.set_ylabel("TV(parallel, sequential)")
    axes.set_ylim(0, 1)
    legend_outside(axes)
    return figure


def parallel_error_by_threshold(profiles: Mapping[str, ConfidenceProfile], thresholds: Sequence[float]) -> Figure:
    """For each confidence threshold: the measured error of the set the threshold rule commits (mean over rows, with
    its interval) and the rule's certificate (dashed), per model; the mean K committed in the second panel."""
    figure = new_figure(height=5.6)
    error_axes, k_axes = figure.subplots(2, 1, sharex=True)
    for index, (name, profile) in enumerate(profiles.items()):
        color = f"C{index}"
        outcomes = [profile.rule_outcome("threshold", t) for t in thresholds]
        error_axes.plot(thresholds, [float(o["tv"].mean()) for o in outcomes], "o-", color=color, label=name)
        error_axes.fill_between(thresholds, [float(o["tv_low"].mean()) for o in outcomes],
                                [float(o["tv_high"].mean()) for o in outcomes], color=color, alpha=0.2)
        error_axes.plot(thresholds, [min(1.0, float(o["certificate"].mean())) for o in outcomes], "--", color=color,
                        label=f"{name}: certificate")
        k_axes.plot(thresholds, [float(o["k"].double().mean()) for o in outcomes], "o-", color=color, label=name)
    error_axes.set_ylabel("error of the committed set")
    k_axes.set_ylabel("K committed")
    k_axes.set_xlabel("confidence threshold")
    legend_outside(error_axes)
    return figure


__all__ = ["COLORMAP", "LEGEND_POINTS", "SERIES_MARKERS", "basin_colors", "chain_traces", "colors", "dobrushin_curve",
           "drift_over_time", "dwell_distribution", "ladder_survival", "landscape_by_temperature", "legend_outside",
           "margin_distribution", "new_figure", "overlap_label", "parallel_error_by_k", "parallel_error_by_threshold",
           "pca_landscape", "readable", "rectangle_histogram", "survival_steps", "temperature_axis",
           "topic_fractions_over_time"]
