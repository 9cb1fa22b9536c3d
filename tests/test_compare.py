"""`mlm-dynamics compare`: several runs on one page, their claims side by side, their numbers with intervals and
censoring, the key figure overlaid; refusals name the folder."""

from __future__ import annotations

import json

import pytest

from helpers import SMALL_JOBS, figure_problems
from mlm_dynamics.cli import main
from mlm_dynamics.report.compare_report import draw_rows, load_reports, meeting_figure


@pytest.fixture(scope="module")
def two_sweeps(tmp_path_factory):
    """The Ising sweep at two step budgets: the short one censors more pairs."""
    out = tmp_path_factory.mktemp("sweeps")
    preset, overrides = SMALL_JOBS["sweep"]
    for name, budget in (("short", 6), ("long", 200)):
        sets = [item for o in [*overrides, f"grid.max_steps={budget}"] for item in ("--set", o)]
        assert main(["sweep", "--config", preset, "--out", str(out / name), "--quiet", *sets]) == 0
    return out


def test_two_sweeps_side_by_side(two_sweeps, tmp_path, capsys):
    out = tmp_path / "compare"
    assert main(["compare", str(two_sweeps / "short"), str(two_sweeps / "long"), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "compared 2 sweeps: short, long" in printed and f"report: {out / 'report.html'}" in printed
    compared = json.loads((out / "compare.json").read_text())
    assert compared["runs"] == ["short", "long"] and compared["job"] == "sweep"
    assert {row["run"] for row in compared["provenance"]} == {"short", "long"}
    claims = {row["claim"]: row for row in compared["claims"]}
    assert all({"short", "long"} <= set(row) for row in claims.values())
    for name in ("short", "long"):  # each run's numbers, as its own report.json has them
        own = json.loads((two_sweeps / name / "report.json").read_text())["sweep"]["fit"]
        for fit, row in zip(own, compared["numbers"], strict=True):
            text = row[f"{name}: C(tau)"]
            assert text.startswith("no fit") if fit["C"] is None else text.startswith(f"{fit['C']:.3g} [")
    page = (out / "report.html").read_text()
    assert page.index("claims, side by side") < page.index("Where each run comes from")
    assert (out / "figures" / "scaling.png").is_file()
    # the draws: each sweep's first pair at its lowest and highest temperature (largest n), as its report has it,
    # one end line where it met and both chains where it never did
    assert page.index(">Draws</h2>") > page.index("Where each run comes from")
    rows = draw_rows(load_reports([two_sweeps / "short", two_sweeps / "long"]))
    for name in ("short", "long"):
        cells = json.loads((two_sweeps / name / "report.json").read_text())["sweep"]["cells"]
        largest = max(cell["num_sites"] for cell in cells)
        ladder = sorted(cell["temperature"] for cell in cells if cell["num_sites"] == largest)
        for tau in (ladder[0], ladder[-1]):
            (cell,) = [c for c in cells if c["num_sites"] == largest and c["temperature"] == tau]
            draw = cell["draws"][0]
            ends = ["x = y (met)"] if draw["met_at"] >= 0 else ["x (never met)", "y (never met)"]
            shown = [row for row in rows if row["run"] == name and row["tau"] == f"{tau:g}"]
            assert [row["chain"] for row in shown] == ["x", "y", *ends]
            assert shown[0]["step"] == 0 and shown[-1]["step"] == (draw["met_at"] if draw["met_at"] >= 0
                                                                   else f"> {cell['budget']:g}")
    assert any(row["chain"] == "x (never met)" for row in rows)  # the 6-step budget leaves pairs apart


def test_a_censored_median_is_drawn_as_a_bound_and_equal_runs_stay_apart():
    entry = {"temperature": 1.0, "censored_fraction": 1.0, "num_pairs": 4, "meeting_time_median": None,
             "meeting_time_median_lower_bound": 200.0, "meeting_time_median_confidence": 0.875}
    met = {"temperature": 2.0, "censored_fraction": 0.0, "num_pairs": 4, "meeting_time_median": 50.0,
           "meeting_time_median_low": 40.0, "meeting_time_median_high": 70.0, "meeting_time_median_confidence": 0.875}
    report = {"mixing": {"by_temperature": [entry, met]}, "chains": {}}
    figure = meeting_figure([("a", report), ("b", report)])
    lines = figure.axes[0].get_lines()
    bounds = [line for line in lines if line.get_marker() == "^"]
    assert len(bounds) == 2 and all(line.get_fillstyle() == "none" for line in bounds)  # open: "> 200"
    assert all(list(line.get_ydata()) == [200.0] for line in bounds)
    assert len({float(line.get_xdata()[0]) for line in bounds}) == 2  # nudged apart, both visible
    assert figure_problems(figure) == []


def test_refusals_name_the_folder(two_sweeps, tmp_path, capsys):
    with pytest.raises(ValueError, match="at least two"):
        load_reports([two_sweeps / "short"])
    assert main(["compare", str(two_sweeps / "short"), str(tmp_path), "--out", str(tmp_path / "c")]) == 2
    assert f"{tmp_path} has no report.json" in capsys.readouterr().err
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "report.json").write_text(json.dumps(MINIMAL_RUN))
    assert main(["compare", str(two_sweeps / "short"), str(tmp_path / "run"), "--out", str(tmp_path / "c")]) == 2
    assert "different jobs (run, sweep)" in capsys.readouterr().err


MINIMAL_RUN = {"config": {"temperatures": [1.0]}, "chains": {"num_chains": 2, "num_steps": 10},
               "mixing": {"by_temperature": [{"temperature": 1.0, "censored_fraction": 0.5, "num_pairs": 2,
                                              "budget": 20, "meeting_time_median": None,
                                              "meeting_time_median_lower_bound": 10}]},
               "claims": {"claims": [{"name": "incompatible", "statement": "s", "verdict": "holds"}]}}


@pytest.mark.parametrize(("edit", "key"), [
    (lambda r: r.update(mixing={}, chains={}, config={}), "config.temperatures is missing"),
    (lambda r: r["config"].update(temperatures=[]), "config.temperatures must have at least 1 item"),
    (lambda r: r["config"].update(temperatures=[-1e300]), "config.temperatures[0] must be greater than 0, got -1e+300"),
    (lambda r: r["mixing"]["by_temperature"][0].update(temperature="hot"),
     "mixing.by_temperature[0].temperature must be a number, got 'hot'"),
    (lambda r: r["mixing"]["by_temperature"][0].update(censored_fraction=1.5),
     "mixing.by_temperature[0].censored_fraction must be less than or equal to 1"),
    (lambda r: r["mixing"]["by_temperature"][0].update(meeting_time_median_lower_bound=-1e300),
     "mixing.by_temperature[0].meeting_time_median_lower_bound must be greater than or equal to 0"),
    (lambda r: r["claims"]["claims"][0].update(verdict="probably"), "claims.claims[0].verdict must be"),
    (lambda r: r["chains"].pop("num_chains"), "chains.num_chains is missing"),
    # the cases a new user's damaged files raised: impossible numbers, wrong types, partial reports
    (lambda r: r["mixing"]["by_temperature"][0].update(budget=20, meeting_time_median=1e300,
                                                       meeting_time_median_lower_bound=None),
     "mixing.by_temperature[0]: meeting_time_median 1e+300 must be at most the budget 20"),
    (lambda r: r["mixing"]["by_temperature"][0].update(num_pairs=10**301),
     "mixing.by_temperature[0].num_pairs must be less than or equal to 9007199254740992"),
    (lambda r: r["mixing"]["by_temperature"][0].update(num_pairs=2.5),
     "mixing.by_temperature[0].num_pairs must be a valid integer"),
    (lambda r: r["claims"]["claims"][0].update(power=7), "claims.claims[0].power must be less than or equal to 1"),
    (lambda r: r["claims"]["claims"][0].pop("statement"), "claims.claims[0].statement is missing"),
    (lambda r: r.update(environment="laptop"), "environment must be a valid dictionary"),
    (lambda r: r["chains"].update(num_chains=2.5), "chains.num_chains must be a valid integer"),
    (lambda r: r["chains"].update(start_sequences=["AC"]),
     "chains: start_sequences must hold one sequence per chain (2), got 1"),
    (lambda r: r["mixing"]["by_temperature"][0].update(meeting_time_median=5, meeting_time_median_low=6),
     "mixing.by_temperature[0]: meeting_time_median 5 must lie in its interval"),
    (lambda r: r["mixing"]["by_temperature"][0].update(censored_fraction=True),
     "mixing.by_temperature[0].censored_fraction must be a number, got True"),
])
def test_hollow_and_impossible_reports_are_refused_in_one_line_naming_the_file_and_key(tmp_path, capsys, edit, key):
    good, bad = tmp_path / "good", tmp_path / "bad"
    report = json.loads(json.dumps(MINIMAL_RUN))
    edit(report)
    for folder, content in ((good, MINIMAL_RUN), (bad, report)):
        folder.mkdir()
        (folder / "report.json").write_text(json.dumps(content))
    assert main(["compare", str(good), str(bad), "--out", str(tmp_path / "c")]) == 2
    error = capsys.readouterr().err.strip()
    assert len(error.splitlines()) == 1 and f"{bad / 'report.json'}: {key}" in error, error


def test_the_same_run_twice_and_damaged_files_are_refused(tmp_path, capsys):
    runs = [tmp_path / name for name in ("a", "b", "c", "d", "e")]
    for folder in runs:
        folder.mkdir()
    (runs[0] / "report.json").write_text(json.dumps(MINIMAL_RUN))
    (runs[2] / "report.json").write_bytes(b"\x00\xff\x13binary")
    (runs[1] / "report.json").write_text(json.dumps(MINIMAL_RUN, indent=4))  # the same report, laid out again
    (runs[3] / "report.json").write_text("[" * 200_000 + "]" * 200_000)
    (runs[4] / "report.json").write_text(json.dumps({**MINIMAL_RUN, "artifact": {"job": "run", "version": 99}}))
    for pair, said in (((runs[0], runs[0]), "same run as"), ((runs[0], runs[1]), "same run as"),
                       ((runs[0], runs[2]), "is damaged"), ((runs[0], runs[3]), "nested too deeply"),
                       ((runs[0], runs[4]), "schema version 99, written by a newer mlm_dynamics")):
        assert main(["compare", *map(str, pair), "--out", str(tmp_path / "out")]) == 2
        error = capsys.readouterr().err.strip()
        assert len(error.splitlines()) == 1 and said in error, error


def test_close_temperatures_do_not_crowd_the_tick_labels():
    """Temperatures 1.4 and 1.5 side by side: their tick labels would run into each other."""
    from mlm_dynamics.report.compare_report import scaling_figure

    def report(temperatures):
        fits = [{"temperature": t, "C": 2.0, "C_low": 1.0, "C_high": 3.0} for t in temperatures]
        return {"sweep": {"fit": fits, "slow_region": [{"num_sites": 8, "slow_up_to": 0.5, "fast_from": 1.0}],
                          "cells": []}}

    figure = scaling_figure([("a", report([1.0, 1.4, 2.0])), ("b", report([1.0, 1.5, 2.5]))])
    assert figure_problems(figure) == []
    shown = [float(label.get_text()) for label in figure.axes[0].get_xticklabels() if label.get_text()]
    assert 1.4 in shown and 1.5 not in shown  # the closer neighbour is left unlabelled
