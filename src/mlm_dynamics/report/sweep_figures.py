"""Figures of a sweep: the phase diagram, Kaplan-Meier curves, C(tau) and the log-log slopes, TV bounds, drift."""

from __future__ import annotations

import math

import numpy as np
import torch
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from ..diagnostics.survival import kaplan_meier
from ..experiments.sweep import SweepResult
from ..sampling.grid import START_KINDS
from .figures import chain_traces, colors, legend_outside, new_figure, overlap_label, temperature_axis


def _grid(result: SweepResult) -> tuple[list[float], list[int]]:
    return sorted({c.temperature for c in result.cells}), sorted({c.num_sites for c in result.cells})


def phase_matrix(result: SweepResult) -> tuple[np.ndarray, np.ndarray]:
    """``(values, censored)`` ``[lengths, temperatures]``: the Kaplan-Meier median meeting time over ``n log n``, and
    whether that median is censored (the value is then its lower bound, ``budget / (n log n)``)."""
    temperatures, lengths = _grid(result)
    values = np.full((len(lengths), len(temperatures)), np.nan)
    censored = np.zeros_like(values, dtype=bool)
    for cell in result.cells:
        row, col = lengths.index(cell.num_sites), temperatures.index(cell.temperature)
        assert cell.survival is not None, "cells are summarised when the sweep finishes"
        median = cell.survival.median
        values[row, col] = (median.lower_bound if median.censored else median.value) / cell.n_log_n
        censored[row, col] = median.censored
    return values, censored


def phase_states(result: SweepResult) -> np.ndarray:
    """``[lengths, temperatures]`` verdict of each cell's bracket: ``slow`` (a witness certifies ``t_mix(1/4)``
    beyond its horizon), ``fast`` (the coupling certifies that the two starts are forgotten) or ``undecided``."""
    temperatures, lengths = _grid(result)
    states = np.full((len(lengths), len(temperatures)), "undecided", dtype=object)
    for cell in result.cells:
        assert cell.bracket is not None, "cells are summarised when the sweep finishes"
        states[lengths.index(cell.num_sites), temperatures.index(cell.temperature)] = cell.bracket.verdict
    return states


VERDICT_COLORS = {"slow": "#7b1f3a", "fast": "#2a9d8f", "undecided": "#d9d9d9"}  # one colour per verdict
VERDICT_TEXT = {"slow": "white", "fast": "white", "undecided": "black"}


def phase_labels(result: SweepResult) -> np.ndarray:
    """``[lengths, temperatures]`` text of each cell: its bracket on ``t_mix(1/4)``
    (:meth:`~mlm_dynamics.diagnostics.bracket.MixingBracket.cell_text`: ``> 80``, ``<= 95``, ``> 80, <= 400``, ``?``),
    for an undecided cell whose witness certifies a smaller distance the lower bound it gives (``d(80) >= 0.14``:
    ``t_mix`` beyond 80 at that distance), over the median meeting time where it is known (``med 73``; nothing where
    censored: no value to show)."""
    temperatures, lengths = _grid(result)
    labels = np.full((len(lengths), len(temperatures)), "", dtype=object)
    for cell in result.cells:
        assert cell.bracket is not None and cell.survival is not None, "cells are summarised when the sweep finishes"
        text = cell.bracket.cell_text()
        if cell.bracket.verdict == "undecided" and cell.witness is not None:
            lower = cell.witness.bound()
            if float(lower.d_lower[-1]) > 0:
                text = f"d({int(lower.times[-1])})\n>= {float(lower.d_lower[-1]):.2f}"
        median = cell.survival.median
        below = "" if median.censored else f"\nmed {median.value:g}"
        labels[lengths.index(cell.num_sites), temperatures.index(cell.temperature)] = text + below
    return labels


def phase_diagram(result: SweepResult) -> Figure:
    """The (tau, n) grid coloured by each cell's verdict (:func:`phase_states`: slow, fast, undecided), its bracket
    on ``t_mix(1/4)`` written in it with the median meeting time where that median is known
    (:func:`phase_labels`); the end of the certified slow region at each length is the thick edge between its last
    slow cell and the next. Nothing is coloured by a censored value."""
    temperatures, lengths = _grid(result)
    states, labels = phase_states(result), phase_labels(result)
    figure = new_figure(max(7.6, 1.2 + 0.95 * len(temperatures)), 1.8 + 0.8 * len(lengths))
    axes = figure.add_subplot()
    for (row, col), state in np.ndenumerate(states):
        axes.add_patch(Rectangle((col - 0.5, row - 0.5), 1, 1, facecolor=VERDICT_COLORS[state], edgecolor="white",
                                 lw=2, hatch="//" if state == "undecided" else None))
        axes.text(col, row, labels[row, col], ha="center", va="center", color=VERDICT_TEXT[state], fontsize=9,
                  fontweight="bold" if state != "undecided" else "normal")
    for row in range(len(lengths)):  # the slow region ends where a slow cell is followed by one that is not
        for col in range(len(temperatures) - 1):
            if states[row, col] == "slow" and states[row, col + 1] != "slow":
                axes.plot([col + 0.5, col + 0.5], [row - 0.5, row + 0.5], color="black", lw=3)
    axes.set_xlim(-0.5, len(temperatures) - 0.5)
    axes.set_ylim(-0.5, len(lengths) - 0.5)
    axes.set_xticks(range(len(temperatures)), [f"{t:g}" for t in temperatures])
    axes.set_yticks(range(len(lengths)), [str(n) for n in lengths])
    axes.set_xlabel("temperature tau")
    axes.set_ylabel("resampled sites n")
    axes.set_title("> t: t_mix(1/4) > t;  <= t: the two starts' laws within 1/4 by t (each side 95 %)", fontsize=10)
    handles = [Rectangle((0, 0), 1, 1, facecolor=VERDICT_COLORS[v], hatch="//" if v == "undecided" else None,
                         label=words) for v, words in (("slow", "slow: t_mix > t (witness)"),
                                                       ("fast", "fast: TV <= 1/4 by t (coupling)"),
                                                       ("undecided", "undecided (?)"))]
    axes.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.25), ncol=3, frameon=False, fontsize=9)
    return figure


def survival_curves(result: SweepResult, max_panels: int = 4) -> Figure:
    """Kaplan-Meier ``P(T_meet > t)`` per temperature, one panel per length (the largest ``max_panels``), solid for
    natural-random pairs and dashed for random-random ones; it bounds the total variation between the chains from
    the two starts."""
    temperatures, lengths = _grid(result)
    shown = lengths[-max_panels:]
    figure = new_figure(4.4 * len(shown), 3.6)
    for k, n in enumerate(shown):
        axes = figure.add_subplot(1, len(shown), k + 1)
        drawn: dict[bytes, str] = {}
        for tau, color in zip(temperatures, colors(len(temperatures)), strict=True):
            cell = result.cell(tau, n)
            for kind, style in zip(range(len(START_KINDS)), ("-", "--"), strict=True):
                chosen = cell.kinds == kind
                if not chosen.any():
                    continue
                steps, survival = kaplan_meier(cell.meeting.times[chosen], cell.meeting.censored[chosen])
                steps = torch.cat([torch.zeros(1, dtype=torch.float64), steps,
                                   torch.tensor([cell.meeting.budget], dtype=torch.float64)])
                survival = torch.cat([torch.ones(1, dtype=torch.float64), survival, survival[-1:] if len(survival)
                                      else torch.ones(1, dtype=torch.float64)])
                name = f"tau={tau:g}" + ("" if kind == 0 else f" {START_KINDS[kind]}")
                label, same = overlap_label(drawn, torch.cat([steps, survival]), name)
                listed = same or kind == 0 or not (cell.kinds == 0).any()  # one entry per temperature, and overlaps
                axes.step(steps.cpu().numpy(), survival.cpu().numpy(), where="post", color=color, ls=style,
                          lw=3.0 if same else 1.2, alpha=0.6 if same else 1.0, label=label if listed else None)
        axes.set_title(f"n = {n}")
        axes.set_xlabel("step t")
        axes.set_ylim(-0.02, 1.02)
        if k == 0:
            axes.set_ylabel("P(T_meet > t) (dashed: random-random)")
        if k == 0 or any("(same as" in str(line.get_label()) for line in axes.get_lines()):
            legend_outside(axes)  # the temperatures once, and wherever a curve hides another
    return figure


def scaling_constants(result: SweepResult) -> Figure:
    """``C(tau)`` of ``T = n (C log n + B)`` where every pair met (the fit on the lengths used) and hollow beside it
    ``C_inf``, extrapolated with a finite-size term ``D / n``; the log-log slope of ``T`` against ``n log n`` (about 1
    where meeting times grow like ``n log n``); each with its Student-t interval."""
    fits = {tau: fit for tau, fit in sorted(result.analysis.fits.items()) if not fit.note}
    figure = new_figure(9.0, 3.6)
    left, right = figure.add_subplot(1, 2, 1), figure.add_subplot(1, 2, 2)
    for tau, fit in fits.items():
        if math.isfinite(fit.C_low):
            left.errorbar([tau], [fit.C], yerr=[[fit.C - fit.C_low], [fit.C_high - fit.C]], fmt="o", color="C0",
                          capsize=3, label="C: on these lengths" if tau == min(fits) else None)
        if math.isfinite(fit.C_inf_low):
            left.errorbar([tau * 1.04], [fit.C_inf], yerr=[[fit.C_inf - fit.C_inf_low], [fit.C_inf_high - fit.C_inf]],
                          fmt="s", mfc="none", color="C2", capsize=3,
                          label="C_inf: + D / n, extrapolated" if tau == min(fits) else None)
        if math.isfinite(fit.slope_low):
            right.errorbar([tau], [fit.slope], yerr=[[fit.slope - fit.slope_low], [fit.slope_high - fit.slope]],
                           fmt="o", color="C1", capsize=3)
    right.axhline(1.0, color="grey", ls=":", lw=1)
    for axes in (left, right):
        temperature_axis(axes.xaxis, list(fits))
        axes.set_xlabel("temperature tau")
    left.set_ylabel("C(tau)")
    left.set_title("T = n (C log n + B), temperatures where every pair met", fontsize=10)
    right.set_ylabel("slope of log T on log(n log n)")
    right.set_title("about 1: T grows like n log n", fontsize=10)
    if result.influence is not None:
        crossing = result.influence.contraction_temperature()
        if math.isfinite(crossing) and crossing > min(result.influence.temperatures.tolist()):
            left.axvline(crossing, color="C3", ls="--", label=f"influence estimate < 1 from {crossing:.3g}")
    if left.get_legend_handles_labels()[0]:
        legend_outside(left, below=True)
    return figure


def tv_bounds(result: SweepResult) -> Figure:
    """L-lag estimates of bounds on ``TV(mu_0 P^t, pi)`` against t, per temperature, for the largest length (1 at
    every t where a pair never met), and dashed their 95 % upper confidence limits."""
    temperatures, lengths = _grid(result)
    n = lengths[-1]
    figure = new_figure()
    axes = figure.add_subplot()
    for tau, color in zip(temperatures, colors(len(temperatures)), strict=True):
        lagged = result.cell(tau, n).lagged
        if lagged is None:
            continue
        steps = torch.arange(0, int(lagged.budget) + 1, max(1, int(lagged.budget) // 200))
        axes.plot(steps.cpu().numpy(), lagged.tv_upper_bound(steps).cpu().numpy(), color=color, label=f"tau={tau:g}")
        axes.plot(steps.cpu().numpy(), lagged.tv_upper_limit(steps).cpu().numpy(), color=color, linestyle="--")
    axes.set_xlabel("step t")
    axes.set_ylabel("bound on TV(mu_0 P^t, pi) (1: a pair never met)")
    axes.set_title(f"L-lag coupling bounds, n = {n}")
    legend_outside(axes)
    return figure


def drift_curves(result: SweepResult, every: int) -> Figure:
    """Mean drift of the drift chains against steps, per temperature, for the largest length."""
    temperatures, lengths = _grid(result)
    n = lengths[-1]
    figure = new_figure()
    axes = figure.add_subplot()
    for tau, color in zip(temperatures, colors(len(temperatures)), strict=True):
        curve = result.cell(tau, n).drift_curve
        axes.plot(np.arange(len(curve)) * every, curve, color=color, label=f"tau={tau:g}")
    for threshold in result.config.drift.thresholds:
        axes.axhline(threshold, color="grey", ls=":", lw=1)
    axes.set_xlabel("step")
    unit = "\n/ distance to random fillings" if result.config.drift.relative else ""
    axes.set_ylabel(f"drift from the start\n({result.config.drift.distance}{unit})")
    axes.set_title(f"Drift chains, n = {n} (dotted: hitting thresholds)")
    legend_outside(axes)
    return figure


def coupling_traces(result: SweepResult) -> Figure:
    """Per temperature, at the largest length: each coupled pair's number of sites where its chains differ, against
    steps (:func:`~.figures.chain_traces`): a pair that meets falls to 0; one that ends above 0 never met."""
    temperatures, lengths = _grid(result)
    cells = [result.cell(tau, lengths[-1]) for tau in temperatures]
    traces = [cell.coupling_trace for cell in cells]
    if any(trace is None for trace in traces):
        raise ValueError("coupling_traces: a cell has no coupling trace (a sweep from before the traces were kept)")
    values = torch.cat([trace for trace in traces if trace is not None], dim=1)
    steps = [k * cells[0].trace_every for k in range(values.shape[0])]
    owners = [cell.temperature for cell in cells for _ in range(cell.meeting.times.numel())]
    return chain_traces(steps, values, owners, lengths[-1], ylabel=f"sites where the pair\ndiffers (n = {lengths[-1]})",
                        what="pair")


__all__ = ["VERDICT_COLORS", "coupling_traces", "drift_curves", "phase_diagram", "phase_labels", "phase_matrix",
           "phase_states", "scaling_constants", "survival_curves", "tv_bounds"]
