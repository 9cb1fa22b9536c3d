import itertools
import json
import math
import re
from pathlib import Path

import pytest
import torch

from mlm_dynamics import PairwiseMRFDenoiser
from mlm_dynamics.cli import main
from mlm_dynamics.diagnostics import MeetingTimes, fit_scaling
from mlm_dynamics.experiments import load_config
from mlm_dynamics.experiments.sweep import SweepConfig, run_sweep
from mlm_dynamics.report import sweep_figures
from mlm_dynamics.report.sweep_report import write_sweep_report
from mlm_dynamics.sampling.exact import (
    expected_meeting_times,
    glauber_transition_matrix,
    state_index,
    stationary_distribution,
)
from mlm_dynamics.sampling.grid import START_KINDS

ROOT = Path(__file__).resolve().parents[1]
SMALL = ["grid.temperatures=[0.7, 1.5, 4.0]", "grid.lengths=[2, 3, 4]", "grid.pairs=400", "grid.max_steps=20000",
         "drift.enabled=false", "influence.enabled=false", "checkpoint_every=null"]


def exact_mean_meeting_time(n: int, tau: float) -> float:
    """E T over the sweep's start pairs: half (all-zero, uniform), half (uniform, uniform), from the pair kernel."""
    ising = PairwiseMRFDenoiser.ising_chain(n, 1.0)
    times = expected_meeting_times(ising, n, tau)
    zero = int(state_index(torch.zeros(1, n, dtype=torch.long), 2))
    return 0.5 * float(times[zero].mean()) + 0.5 * float(times.mean())


def test_ising_sweep_slows_down_as_tau_falls_and_its_c_matches_the_exact_kernel():
    config = load_config(SweepConfig, None, SMALL)
    result = run_sweep(config)
    assert all(c.meeting.censored_fraction == 0 for c in result.cells)
    for n in (2, 3, 4):
        means = [float(result.cell(tau, n).meeting.times.double().mean()) for tau in (0.7, 1.5, 4.0)]
        assert means[0] > means[1] > means[2], (n, means)
    x = torch.tensor([math.log(n) for n in (2, 3, 4)], dtype=torch.float64)
    for tau in (0.7, 1.5, 4.0):
        # with equal pairs per length the least squares over pairs equal those over the exact means E T_n / n
        y = torch.tensor([exact_mean_meeting_time(n, tau) / n for n in (2, 3, 4)], dtype=torch.float64)
        exact_c = float(((x - x.mean()) * (y - y.mean())).sum() / ((x - x.mean()) ** 2).sum())
        fit = result.analysis.fits[tau]
        # the interval is +-t(0.975, 1198) SE = +-1.96 SE; 4 SE keeps the false alarm rate below 1e-4 per temperature
        standard_error = (fit.C_high - fit.C_low) / (2 * 1.96)
        assert abs(fit.C - exact_c) < 4 * standard_error, (tau, fit.C, exact_c, standard_error)
    fits = result.analysis.fits
    assert fits[0.7].C > fits[1.5].C > fits[4.0].C


def test_fit_recovers_a_known_constant_on_synthetic_meeting_times():
    """Geometric times with mean n (2.5 log n - 1): A = 2.5 and B = -1 lie in their 95 % intervals."""
    generator = torch.Generator().manual_seed(0)
    lengths = [8, 16, 32, 64]
    by_n = {}
    for n in lengths:
        p = 1 / (n * (2.5 * math.log(n) - 1))
        uniform = torch.rand(500, generator=generator, dtype=torch.float64)
        times = torch.ceil(torch.log1p(-uniform) / math.log1p(-p)).long()
        by_n[n] = MeetingTimes(times=times, censored=torch.zeros(500, dtype=torch.bool))
    fit = fit_scaling(by_n)
    assert fit.C_low < 2.5 < fit.C_high and abs(fit.C - 2.5) < 0.1 * 2.5
    assert fit.censored_fraction == 0 and fit.num_pairs == 2000 and fit.confidence == 0.95


def offset_law_times(pairs: int, generator: torch.Generator) -> dict[int, MeetingTimes]:
    """``pairs`` geometric meeting times at each of n = 4, 8, 16, 32 with mean ``n (3 log n - 1) + 40``: an
    ``n log n`` law with constant 3 and an ``O(1)`` term, spread in proportion to the mean."""
    by_n = {}
    for n in (4, 8, 16, 32):
        p = 1 / (n * (3 * math.log(n) - 1) + 40)
        uniform = torch.rand(pairs, generator=generator, dtype=torch.float64)
        by_n[n] = MeetingTimes(times=torch.ceil(torch.log1p(-uniform) / math.log1p(-p)).long(),
                               censored=torch.zeros(pairs, dtype=torch.bool))
    return by_n


def test_the_extrapolation_removes_an_order_one_term_that_biases_the_plain_fit():
    """Geometric times with mean n (3 log n - 1) + 40 at n = 4..32 (500 pairs each): the constant term 40 in T is a
    finite-size effect the plain fit folds into C (its interval misses 3), while C_inf of T / n = C log n + B + D / n
    holds 3 and D = 40 is recovered within a third; with three lengths there is no extrapolation."""
    by_n = offset_law_times(500, torch.Generator().manual_seed(1))
    fit = fit_scaling(by_n)
    assert not fit.C_low < 3 < fit.C_high
    assert fit.C_inf_low < 3 < fit.C_inf_high and abs(fit.D - 40) < 40 / 3
    assert fit.C_inf_high - fit.C_inf_low > fit.C_high - fit.C_low  # the price of the extra term
    three = fit_scaling({n: by_n[n] for n in (8, 16, 32)})
    assert math.isfinite(three.C) and math.isnan(three.C_inf) and "C_inf" in three.summary()


def test_the_extrapolated_interval_covers_at_its_level_when_the_law_has_the_fitted_form():
    """400 replicates of the sweep-ising design's shape (64 geometric times at each of n = 4..32, mean n (3 log n -
    1) + 40, spread proportional to the mean): the 95 % interval of C_inf holds 3 in 95 % of them. Binomial sd of
    the observed rate at 400 replicates is 0.011, so [0.925, 0.975] is a 2.3 sd window; an interval on a variance
    30 % too small leaves it (365 / 400 hold, checked)."""
    generator = torch.Generator().manual_seed(7)
    held = 0
    for _ in range(400):
        fit = fit_scaling(offset_law_times(64, generator))
        held += fit.C_inf_low < 3 < fit.C_inf_high
    assert 0.925 <= held / 400 <= 0.975


@pytest.fixture(scope="module")
def small_sweep(tmp_path_factory):
    out = tmp_path_factory.mktemp("sweep")
    config = load_config(SweepConfig, None, ["grid.temperatures=[0.5, 2.0]", "grid.lengths=[3, 6]", "grid.pairs=8",
                                             "grid.max_steps=300", "lag.enabled=true", "lag.lag=20", "lag.pairs=4",
                                             "lag.t_values=[0, 20]", "drift.chains=3", "influence.max_sites=3"])
    result = run_sweep(config)
    return result, write_sweep_report(result, out), out


def test_report_json_holds_the_promised_keys_and_the_figures_draw_its_numbers(small_sweep):
    result, _, out = small_sweep
    on_disk = json.loads((out / "report.json").read_text())
    sweep = on_disk["sweep"]
    for cell in sweep["cells"]:
        for key in ("temperature", "num_sites", "num_pairs", "meeting_time_median_low",
                    "meeting_time_median_confidence", "meeting_time_restricted_mean",
                    "meeting_time_restricted_mean_low", "censored_fraction", "budget", "sites", "meeting_times",
                    "censored", "start_kinds", "natural-random/meeting_time_restricted_mean",
                    "random-random/censored_fraction"):
            assert key in cell and cell[key] is not None, key
        # a censored median is null in report.json, with its lower bound beside it; never both missing
        assert (cell["meeting_time_median"] is None) == ("meeting_time_median_lower_bound" in cell)
        assert len(cell["sites"]) == cell["num_sites"] and len(cell["meeting_times"]) == 8
    assert {"C", "C_low", "C_high", "B", "slope", "slope_low", "temperature", "lengths", "note"} <= set(sweep["fit"][0])
    assert {"num_sites", "slow_up_to", "fast_from", "confidence"} <= set(sweep["slow_region"][0])
    assert [c["name"] for c in sweep["claims"]["claims"]] == ["incompatible", "fast_mixing", "boundary_moves_up",
                                                             "metastable", "faster_than_n3", "dobrushin"]
    # the Ising chain's conditionals have a joint: no rectangle certifies anything, and no sample proves compatibility
    assert sweep["claims"]["claims"][0]["verdict"] == "inconclusive"
    # the heatmap is the cells' median / (n log n) from report.json, or its lower bound (hatched) where censored
    values, censored = sweep_figures.phase_matrix(result)
    for cell in sweep["cells"]:
        row = [3, 6].index(cell["num_sites"])
        col = [0.5, 2.0].index(cell["temperature"])
        n_log_n = cell["num_sites"] * math.log(cell["num_sites"])
        median = cell["meeting_time_median"]
        assert censored[row, col] == (median is None)
        shown = cell["meeting_time_median_lower_bound"] if median is None else median
        assert values[row, col] == pytest.approx(shown / n_log_n)
    # each Kaplan-Meier step is the fraction of that start kind's pairs (in report.json) not met by then
    figure = sweep_figures.survival_curves(result)
    stored = {(c["temperature"], c["num_sites"]): c for c in sweep["cells"]}
    for axes, n in zip(figure.axes, [3, 6], strict=True):
        lines = iter(axes.get_lines())
        for tau in [0.5, 2.0]:
            cell = stored[(tau, n)]
            for kind in ("natural-random", "random-random"):
                line = next(lines)
                chosen = torch.tensor([k == kind for k in cell["start_kinds"]])
                times = torch.tensor(cell["meeting_times"])[chosen]
                censored = torch.tensor(cell["censored"])[chosen]
                steps = torch.tensor(line.get_xdata())[1:-1]  # drawn from (0, 1) and extended to the budget
                expected = ((times[None, :] > steps[:, None]) | censored[None, :]).double().mean(1)
                assert torch.allclose(torch.tensor(line.get_ydata())[1:-1].double(), expected)
    assert {p.stem for p in (out / "figures").glob("*.png")} == {"phase_diagram", "survival", "scaling_constant",
                                                                 "tv_bounds", "drift", "coupling_traces"}
    assert (out / "cells.csv").read_text().count("\n") == 1 + 4


def test_censored_pairs_report_the_budget_and_leave_their_temperature_unfitted(small_sweep):
    """A censored pair is known to take longer than the budget: it counts at the budget in the restricted mean, and
    its temperature gets no C(tau) (a mean there is only a lower bound; fitting the other lengths would select fast
    samples). Reporting it as 0 would fail here."""
    result, report, _ = small_sweep
    censored_cells = [c for c in report["sweep"]["cells"] if any(c["censored"])]
    assert censored_cells  # tau = 0.5 on 6 spins leaves pairs apart for 300 steps
    for cell in censored_cells:
        times = torch.tensor(cell["meeting_times"], dtype=torch.float64)
        flags = torch.tensor(cell["censored"])
        assert (times[flags] == cell["budget"]).all()
        assert cell["meeting_time_restricted_mean"] == pytest.approx(float(times.mean()))
        fit = result.analysis.fits[cell["temperature"]]
        assert math.isnan(fit.C) and "censored" in fit.note


def test_html_report_is_self_contained(small_sweep):
    _, _, out = small_sweep
    page = (out / "report.html").read_text()
    assert "<img" in page and page.count('src="data:image/png;base64,') == page.count("<img")
    assert not re.search(r"(src|href)=[\"'](?!data:|#)", page)  # images inline; links only within the page
    assert "http://" not in page and "https://" not in page


def test_sweep_cli_resumes_bit_identically_after_an_interrupt(tmp_path, capsys, monkeypatch):
    import mlm_dynamics.experiments.sweep as sweep

    common = ["--quiet", "--set", "grid.temperatures=[0.6, 2.0]", "--set", "grid.lengths=[3, 5]",
              "--set", "grid.pairs=6", "--set", "grid.max_steps=120", "--set", "checkpoint_every=20",
              "--set", "influence.enabled=false", "--set", "grid.witness_steps=[30]"]  # a snapshot before the stop
    assert main(["sweep", "--out", str(tmp_path / "whole"), *common]) == 0
    real = sweep.PairGrid.step

    def interrupted(grid):
        if grid.state.x.step == 54:  # Ctrl-C during step 55
            raise KeyboardInterrupt
        return real(grid)

    monkeypatch.setattr(sweep.PairGrid, "step", interrupted)
    assert main(["sweep", "--out", str(tmp_path / "split"), *common]) == 130
    assert "last checkpoint at step 40" in capsys.readouterr().err
    monkeypatch.setattr(sweep.PairGrid, "step", real)
    assert main(["sweep", "--out", str(tmp_path / "split"), "--resume", *common]) == 0
    reports = [json.loads((tmp_path / d / "report.json").read_text())["sweep"] for d in ("whole", "split")]
    assert reports[0]["cells"] == reports[1]["cells"] and reports[0]["fit"] == reports[1]["fit"]
    assert reports[1]["cells"][0]["coupling_trace_mean"] and reports[1]["cells"][0]["draws"]  # compared above too
    assert "tv_lower_t30" in reports[1]["cells"][0] and "tv_lower_t120" in reports[1]["cells"][0]


def test_the_coupling_trace_and_the_draws_agree_with_the_meeting_times():
    """Exact invariants, pair by pair: the trace starts at the Hamming distance of the two start fillings, is > 0 at
    every record before the pair met (not met means some site differs) and 0 at every record from its meeting on
    (met pairs stay together), to the budget; the draws are the first pair of each start kind, whose chains agree at
    the end exactly when it met, the natural start being the all-minus chain of the Ising toy."""
    config = load_config(SweepConfig, None, ["grid.temperatures=[0.5, 4.0]", "grid.lengths=[6]", "grid.pairs=8",
                                             "grid.max_steps=300", "influence.enabled=false",
                                             "rectangle.enabled=false", "checkpoint_every=null",
                                             "drift.enabled=false", "lag.enabled=false"])
    result = run_sweep(config)
    every = 3  # a hundredth of the budget
    for cell in result.cells:
        trace, met_at = cell.coupling_trace, torch.where(cell.meeting.censored, -1, cell.meeting.times)
        assert cell.trace_every == every and trace.shape == (300 // every + 1, 8)
        steps = torch.arange(trace.shape[0])[:, None] * every
        met = (met_at[None, :] >= 0) & (steps >= met_at[None, :])
        assert bool((trace[met] == 0).all()) and bool((trace[~met] > 0).all())
        kinds = [START_KINDS[k] for k in cell.kinds.tolist()]
        assert [draw["kind"] for draw in cell.draws] == [k for k in START_KINDS if k in kinds]
        for draw in cell.draws:
            pair = kinds.index(draw["kind"])  # the first pair of its kind
            assert draw["met_at"] == int(met_at[pair])
            assert (draw["x_end"] == draw["y_end"]) == (draw["met_at"] >= 0)
            assert sum(a != b for a, b in zip(draw["x_start"], draw["y_start"], strict=True)) == int(trace[0, pair])
            if draw["kind"] == "natural-random":
                assert draw["x_start"] == "-" * 6
    assert any(bool(c.meeting.censored.any()) for c in result.cells)  # tau = 0.5 at n = 6: some never meet in 300


def cell_times(cell):
    return cell.meeting.times.tolist(), cell.meeting.censored.tolist(), cell.kinds.tolist()


@pytest.mark.slow
def test_a_cells_meeting_times_do_not_depend_on_the_rest_of_the_grid():
    """The cell (0.5, 8) alone, and inside a grid of other temperatures and lengths (whose pairs meet and leave the
    batch at other times): the same meeting times, censoring flags and start kinds, bit for bit."""
    common = ["grid.pairs=12", "grid.max_steps=1500", "influence.enabled=false", "rectangle.enabled=false",
              "checkpoint_every=null", "drift.chains=2"]
    alone = run_sweep(load_config(SweepConfig, None, [*common, "grid.temperatures=[0.5]", "grid.lengths=[8]"]))
    grid = run_sweep(load_config(SweepConfig, None, [*common, "grid.temperatures=[0.35, 0.5, 2.0]",
                                                     "grid.lengths=[4, 8, 16]"]))
    assert cell_times(alone.cell(0.5, 8)) == cell_times(grid.cell(0.5, 8))
    assert torch.equal(alone.cell(0.5, 8).coupling_trace, grid.cell(0.5, 8).coupling_trace)
    assert alone.cell(0.5, 8).draws == grid.cell(0.5, 8).draws
    for threshold, times in alone.cell(0.5, 8).hitting.items():  # drift chains too
        assert torch.equal(times.times, grid.cell(0.5, 8).hitting[threshold].times)


@pytest.mark.slow
def test_the_ising_preset_sharded_over_two_processes_finishes_and_equals_one_process(tmp_path):
    """--devices 2 (Lightning Fabric, gloo on CPU) on the shipped Ising preset returns under a timeout, with every
    cell once; cells computed alone in this process have the same meeting times bit for bit; the phase diagram is
    monotone in temperature at each length, and the claims block is there."""
    import subprocess
    import sys

    out = tmp_path / "sharded"
    command = [sys.executable, "-m", "mlm_dynamics.cli", "sweep", "--devices", "2", "--quiet", "--out", str(out),
               "--config", "sweep-ising"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads((out / "report.json").read_text())
    sweep = report["sweep"]
    config = load_config(SweepConfig, "sweep-ising")
    assert sorted((c["temperature"], c["num_sites"]) for c in sweep["cells"]) == sorted(
        (t, float(n)) for t in config.grid.temperatures for n in config.grid.lengths)
    assert "sharded over 2 processes" in " ".join(sweep["notes"])
    for tau, n in ((0.5, 8), (4.0, 32)):
        alone = run_sweep(load_config(SweepConfig, "sweep-ising",
                                      [f"grid.temperatures=[{tau}]", f"grid.lengths=[{n}]", "influence.enabled=false",
                                       "rectangle.enabled=false", "lag.enabled=false", "checkpoint_every=null"]))
        stored = next(c for c in sweep["cells"] if (c["temperature"], c["num_sites"]) == (tau, n))
        times, censored, _ = cell_times(alone.cell(tau, n))
        assert (stored["meeting_times"], stored["censored"]) == (times, censored)
    for n in config.grid.lengths:
        row = sorted((c["temperature"], c["meeting_time_restricted_mean_over_n_log_n"]) for c in sweep["cells"]
                     if c["num_sites"] == n)
        values = [v for _, v in row]
        assert all(a >= b for a, b in itertools.pairwise(values)), (n, row)
    verdicts = {c["name"]: c["verdict"] for c in sweep["claims"]["claims"]}
    assert verdicts["incompatible"] == "inconclusive"  # the Ising chain has a joint: nothing certifies otherwise
    assert verdicts["fast_mixing"] != "does not hold" and verdicts["metastable"] != "holds"  # no transition here


def children_of(pid: int) -> list[int]:
    """Process ids whose parent is ``pid`` (from /proc)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


@pytest.mark.slow
def test_killing_a_sharded_sweep_leaves_no_worker_behind(tmp_path):
    """SIGKILL to the launching process only (no chance to clean up): its spawned workers notice and exit."""
    import os
    import signal
    import subprocess
    import sys
    import time

    command = [sys.executable, "-m", "mlm_dynamics.cli", "sweep", "--devices", "2", "--quiet", "--out",
               str(tmp_path / "out"), "--set", "grid.max_steps=200000", "--set", "grid.temperatures=[0.25]",
               "--set", "grid.lengths=[32]", "--set", "drift.enabled=false"]
    parent = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    workers: list[int] = []
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and len(workers) < 2:
        time.sleep(0.5)
        workers = [pid for pid in children_of(parent.pid)
                   if "spawn" in Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")]
    assert len(workers) == 2, "the workers did not start"
    time.sleep(3)  # they are stepping now
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    deadline = time.monotonic() + 30
    alive = workers
    while time.monotonic() < deadline and alive:
        time.sleep(0.5)
        alive = [pid for pid in alive if Path(f"/proc/{pid}").exists() and
                 "Z" not in Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]]
    for pid in alive:
        os.kill(pid, signal.SIGKILL)
    assert not alive, f"workers {alive} outlived the launching process"


def test_windows_are_centred_nested_and_checked():
    from mlm_dynamics.experiments.config import ConfigError
    from mlm_dynamics.experiments.sweep import centred_windows

    windows = centred_windows(120, 100, [4, 8, 16])
    assert windows[8] == range(96, 104) and windows[16] == range(92, 108) and windows[4] == range(98, 102)
    assert centred_windows(120, 100, [8])[8] == windows[8]  # a length's window does not depend on the others
    assert all(set(windows[a]) <= set(windows[b]) for a, b in ((4, 8), (8, 16)))
    assert centred_windows(120, None, [8])[8] == range(56, 64)
    with pytest.raises(ConfigError, match=r"context\.window_center must leave room"):
        centred_windows(120, 5000, [8])
    with pytest.raises(ConfigError, match=r"grid\.lengths"):
        centred_windows(6, None, [8])


def test_an_antiberty_cell_resamples_the_same_positions_in_any_grid(antiberty):
    """n = 8 around CDR-H3 (window_center 100): the same 8 positions alone and in a grid of 4, 8, 16."""
    common = ["model.source=antiberty", "model.num_layers=1", "grid.pairs=2", "grid.max_steps=1", "grid.starts=["
              "natural-random]", "context.window_center=100", "drift.enabled=false", "influence.enabled=false",
              "rectangle.enabled=false", "checkpoint_every=null", "grid.temperatures=[1.0]"]
    alone = run_sweep(load_config(SweepConfig, None, [*common, "grid.lengths=[8]"]))
    grid = run_sweep(load_config(SweepConfig, None, [*common, "grid.lengths=[4, 8, 16]"]))
    assert alone.cell(1.0, 8).sites == grid.cell(1.0, 8).sites == list(range(97, 105))  # [CLS] at position 0
    assert set(grid.cell(1.0, 4).sites) < set(grid.cell(1.0, 8).sites) < set(grid.cell(1.0, 16).sites)


def test_sweep_cells_are_certified_slow_or_fast_only_where_the_exact_chain_is():
    """A 16-colour Potts chain (J = 5) at tau = 0.5 is trapped at its natural start (all colour 0): the exact law
    from it is still >= 0.8 from stationarity at step 200, so d(200) > 1/4 and the witness's "slow: t_mix(1/4) > 200"
    is true; at tau = 8 it mixes in tens of steps, and the coupling's "TV <= 1/4 by step t" between the natural start
    and uniform fillings is true of the exact laws. Each cell's witness is its own: the same alone as in the grid.
    The phase diagram hatches only the undecided cells. (At n = 2 a uniform filling meets the natural start too
    often, 1 in 6, for 24 tested pairs to certify.)"""
    overrides = ["model.source=potts", "model.states=16", "model.coupling=5.0", "grid.temperatures=[0.5, 8.0]",
                 "grid.lengths=[3]", "grid.pairs=96", "grid.max_steps=200", "drift.enabled=false",
                 "influence.enabled=false", "rectangle.enabled=false", "lag.enabled=false", "checkpoint_every=null"]
    result = run_sweep(load_config(SweepConfig, None, overrides))
    for cell in result.cells:
        model = PairwiseMRFDenoiser.potts_chain(cell.num_sites, 16, 5.0)
        kernel = glauber_transition_matrix(model, cell.num_sites, cell.temperature)
        pi = stationary_distribution(kernel)
        natural = torch.zeros(kernel.shape[0], dtype=torch.float64)
        natural[0] = 1
        uniform = torch.full_like(natural, 1 / kernel.shape[0])
        bracket = cell.bracket
        if cell.temperature == 0.5:
            assert bracket.verdict == "slow" and bracket.slow_beyond == 200, bracket.text()
            law = natural @ torch.linalg.matrix_power(kernel, 200)
            assert 0.5 * float((law - pi).abs().sum()) > 0.8  # d(200) >= this > 1/4: the certificate is true
        else:
            assert bracket.verdict == "fast", bracket.text()
            power = torch.linalg.matrix_power(kernel, bracket.forgotten_by)
            assert 0.5 * float((natural @ power - uniform @ power).abs().sum()) <= 0.25
    alone = run_sweep(load_config(SweepConfig, None, [*overrides, "grid.temperatures=[0.5]", "grid.lengths=[3]"]))
    assert torch.equal(alone.cells[0].witness.values_b, result.cell(0.5, 3).witness.values_b)
    states = sweep_figures.phase_states(result)
    assert set(states[:, 0]) == {"slow"} and set(states[:, 1]) == {"fast"}


def test_a_sweep_killed_inside_its_step_loop_resumes_to_the_same_cells(tmp_path):
    """SIGKILL (no handler runs) while the sweep steps, just after a checkpoint: `--resume` continues from it, and
    the cells, fit and draws equal an uninterrupted sweep's, value for value."""
    import signal
    import subprocess
    import sys
    import time

    from mlm_dynamics.experiments.checkpoint import checkpoint_step

    common = ["--quiet", "--set", "grid.temperatures=[0.6, 2.0]", "--set", "grid.lengths=[3, 5]",
              "--set", "grid.pairs=6", "--set", "grid.max_steps=120", "--set", "checkpoint_every=20",
              "--set", "influence.enabled=false", "--set", "grid.witness_steps=[30]"]
    assert main(["sweep", "--out", str(tmp_path / "whole"), *common]) == 0
    killed = tmp_path / "killed"
    process = subprocess.Popen([sys.executable, "-m", "mlm_dynamics.cli", "sweep", "--out", str(killed), *common],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while checkpoint_step(killed / "sweep-checkpoint.pt") is None and time.monotonic() < deadline:
        time.sleep(0.02)
    process.send_signal(signal.SIGKILL)
    assert process.wait(timeout=60) == -signal.SIGKILL  # killed inside the loop, not finished
    step = checkpoint_step(killed / "sweep-checkpoint.pt")
    assert step is not None and 0 < step < 120 and not (killed / "report.json").exists()
    assert main(["sweep", "--out", str(killed), "--resume", *common]) == 0
    reports = [json.loads((tmp_path / d / "report.json").read_text())["sweep"] for d in ("whole", "killed")]
    assert reports[0]["cells"] == reports[1]["cells"] and reports[0]["fit"] == reports[1]["fit"]
