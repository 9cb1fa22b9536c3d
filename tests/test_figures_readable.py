"""What a person sees in the reports' figures: every figure the run, sweep, semantics-free history and callback
reports save keeps its legend off the data, its text at 9 pt or more and inside the image, and its tick labels
plain, and identical series are told apart instead of hiding under each other."""

from __future__ import annotations

import pytest
import torch

from helpers import SMALL_JOBS, figure_problems
from mlm_dynamics.cli import main
from mlm_dynamics.diagnostics.meeting import MeetingTimes
from mlm_dynamics.report import html
from mlm_dynamics.report.figures import chain_traces, ladder_survival, legend_outside, new_figure
from mlm_dynamics.report.html import marked_changes


@pytest.fixture(scope="module")
def saved_figures(tmp_path_factory):
    """(report, figure problems) of every figure the run and sweep jobs and a history report save."""
    from test_callbacks import fit

    out = tmp_path_factory.mktemp("figures")
    found: list[tuple[str, list[str]]] = []
    real = html.figure_png
    with pytest.MonkeyPatch.context() as patch:
        def checked(figure, dpi=110):
            data = real(figure, dpi)  # saved as the report saves it (plain tick labels applied), then checked
            found.append((current[0], figure_problems(figure)))
            return data

        patch.setattr(html, "figure_png", checked)
        current = [""]
        for job in ("run", "sweep"):
            current[0] = job
            preset, overrides = SMALL_JOBS[job]
            sets = [item for override in overrides for item in ("--set", override)]
            assert main([job, "--config", preset, "--out", str(out / job), "--quiet", *sets]) == 0
        current[0] = "history"
        fit(out / "fit", max_steps=4)
        assert main(["report", str(out / "fit" / "csv"), "--out", str(out / "history")]) == 0
    return found


@pytest.mark.parametrize("job", ["run", "sweep", "history"])
def test_every_saved_figure_shows_its_data_readably(saved_figures, job):
    figures = [problems for report, problems in saved_figures if report == job]
    assert len(figures) >= 2
    assert not [p for problems in figures for p in problems], [p for problems in figures for p in problems]


def test_the_check_fails_on_a_legend_over_the_data_small_text_an_offset_axis_a_cut_title_and_crowded_words():
    figure = new_figure()
    axes = figure.add_subplot()
    axes.plot([0, 1], [0, 1], label="diagonal")
    axes.plot([0, 1], [1, 0], label="anti-diagonal")
    axes.legend(loc="center", fontsize=7)  # across both lines, in 7 pt
    problems = figure_problems(figure)
    assert any("covers the line 'diagonal'" in p for p in problems) and any("at 7 pt" in p for p in problems)
    offset = new_figure()
    offset.add_subplot().plot([1e6, 1e6 + 1], [0, 1])
    assert any("offset" in p for p in figure_problems(offset))
    cut = new_figure()
    cut.add_subplot().set_title("a title far wider than the image it is drawn in " * 4, fontsize=9)
    assert any("cut off at the edge" in p for p in figure_problems(cut))
    crowded = new_figure()
    axes = crowded.add_subplot()
    axes.text(0.5, 0.5, "d(2000) >= 0.23", ha="center", fontsize=9)
    axes.text(0.52, 0.5, "d(2000) >= 0.08", ha="center", fontsize=9)  # a neighbouring cell's words, too wide
    assert any("runs into other text" in p for p in figure_problems(crowded))
    fixed = new_figure()
    axes = fixed.add_subplot()
    axes.plot([0, 1], [0, 1], label="diagonal")
    legend_outside(axes)
    assert figure_problems(fixed) == []


def test_identical_survival_curves_are_named_as_such():
    met = torch.tensor([3.0, 5.0, 9.0, 20.0])
    times = {tau: MeetingTimes(met, torch.zeros(4, dtype=torch.bool), max_steps=20) for tau in (0.5, 1.0)}
    labels = [line.get_label() for line in ladder_survival(times).axes[0].get_lines()]
    assert labels == ["tau=0.5", "tau=1 (same as tau=0.5)"]


def test_the_trace_view_draws_every_chain_in_its_temperature_panel():
    steps = [0, 5, 10]
    hamming = torch.tensor([[0, 0, 0], [1, 0, 3], [2, 0, 4]])
    figure = chain_traces(steps, hamming, [0.5, 0.5, 2.0], num_sites=6)
    low, high = figure.axes
    assert low.get_title() == "tau=0.5 (2 chains)" and high.get_title() == "tau=2 (1 chain)"
    # each chain a line with its own distances, then the mean per panel
    assert [list(line.get_ydata()) for line in low.get_lines()] == [[0, 1, 2], [0, 0, 0], [0, 0.5, 1]]
    assert [list(line.get_ydata()) for line in high.get_lines()] == [[0, 3, 4], [0, 3, 4]]
    assert low.get_ylim() == (0, 6) and figure_problems(figure) == []


def test_changed_tokens_are_marked_against_the_start():
    assert marked_changes("a b c", "a x c") == "a <mark>b</mark> c"  # words when there are spaces
    assert marked_changes("EVQ<", "EIQ") == "E<mark>V</mark>Q<mark>&lt;</mark>"  # residues, escaped, longer
