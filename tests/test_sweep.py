import json
import math
import re

import pytest
import torch

from mlm_dynamics import PairwiseMRFDenoiser
from mlm_dynamics.cli import main
from mlm_dynamics.diagnostics import MeetingTimes, fit_n_log_n, fit_scaling, phase_boundary
from mlm_dynamics.experiments import load_config
from mlm_dynamics.experiments.sweep import SweepConfig, run_sweep
from mlm_dynamics.models.exact import expected_meeting_times, state_index
from mlm_dynamics.report import figures
from mlm_dynamics.report.sweep_report import write_sweep_report

SMALL = ["grid.temperatures=[0.7, 1.5, 4.0]", "grid.lengths=[2, 3, 4]", "grid.pairs=400", "grid.max_steps=20000",
         "drift.enabled=false", "influence.enabled=false", "checkpoint_every=null", "bootstrap=400"]


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
    for tau in (0.7, 1.5, 4.0):
        exact_c, _ = fit_n_log_n([2, 3, 4], [exact_mean_meeting_time(n, tau) for n in (2, 3, 4)])
        fit = result.fits[tau]
        # the bootstrap interval is +-1.96 SE; 4 SE keeps the false alarm rate below 1e-4 per temperature
        standard_error = (fit.C_high - fit.C_low) / (2 * 1.96)
        assert abs(fit.C - exact_c) < 4 * standard_error, (tau, fit.C, exact_c, standard_error)
    assert result.fits[0.7].C > result.fits[1.5].C > result.fits[4.0].C


def test_fit_recovers_a_known_constant_on_synthetic_meeting_times():
    generator = torch.Generator().manual_seed(0)
    true_c, lengths = 2.5, [8, 16, 32, 64]
    by_n = {}
    for n in lengths:  # geometric times with mean C n log n
        p = 1 / (true_c * n * math.log(n))
        uniform = torch.rand(500, generator=generator, dtype=torch.float64)
        times = torch.ceil(torch.log1p(-uniform) / math.log1p(-p)).long()
        by_n[n] = MeetingTimes(times=times, censored=torch.zeros(500, dtype=torch.bool))
    fit = fit_scaling(by_n, num_bootstrap=500)
    assert fit.C_low < true_c < fit.C_high
    assert abs(fit.C - true_c) < 0.1 * true_c
    assert fit.r2 > 0.95 and fit.censored_fraction == 0


def test_phase_boundary_interpolates_in_log_temperature():
    point = phase_boundary(8, [0.5, 1.0, 2.0], [1.0, 0.75, 0.25])
    assert point.status == "interpolated" and point.temperature == pytest.approx(math.sqrt(2))
    assert phase_boundary(8, [1.0, 2.0], [0.1, 0.0]).status == "below_grid"
    assert phase_boundary(8, [1.0, 2.0], [1.0, 0.9]).status == "above_grid"


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
        for key in ("temperature", "num_sites", "num_pairs", "meeting_time_median", "meeting_time_q90",
                    "censored_fraction", "budget"):
            assert key in cell and cell[key] is not None, key
    assert {"C", "C_low", "C_high", "r2", "temperature"} <= set(sweep["fit"][0])
    assert {"num_sites", "temperature", "status"} <= set(sweep["phase_boundary"][0])
    assert "dobrushin_tau_star" in sweep
    # the heatmap is the cells' median / (n log n) from report.json
    values, _ = figures.phase_matrix(result)
    for cell in sweep["cells"]:
        row = [3, 6].index(cell["num_sites"])
        col = [0.5, 2.0].index(cell["temperature"])
        assert values[row, col] == pytest.approx(cell["meeting_time_median"] / (cell["num_sites"] *
                                                                                  math.log(cell["num_sites"])))
    # each survival curve is P(T > t) of the meeting times stored in report.json
    figure = figures.survival_curves(result)
    stored = {(c["temperature"], c["num_sites"]): c for c in sweep["cells"]}
    for axes, n in zip(figure.axes, [3, 6], strict=True):
        for line, tau in zip(axes.get_lines(), [0.5, 2.0], strict=True):
            cell = stored[(tau, n)]
            times = torch.tensor(cell["meeting_times"])
            censored = torch.tensor(cell["censored"])
            steps = torch.tensor(line.get_xdata())
            expected = ((times[None, :] > steps[:, None]) | censored[None, :]).float().mean(1)
            assert torch.allclose(torch.tensor(line.get_ydata()).float(), expected)
    assert {p.stem for p in (out / "figures").glob("*.png")} == {"phase_diagram", "survival", "scaling_constant",
                                                                 "tv_bounds", "drift"}
    assert (out / "cells.csv").read_text().count("\n") == 1 + 4


def test_html_report_is_self_contained(small_sweep):
    _, _, out = small_sweep
    page = (out / "report.html").read_text()
    assert "<img" in page and page.count('src="data:image/png;base64,') == page.count("<img")
    assert not re.search(r"(src|href)=[\"'](?!data:)", page)
    assert "http://" not in page and "https://" not in page


def test_sweep_cli_resumes_bit_identically_after_an_interrupt(tmp_path, capsys, monkeypatch):
    import mlm_dynamics.experiments.sweep as sweep

    common = ["--quiet", "--set", "grid.temperatures=[0.6, 2.0]", "--set", "grid.lengths=[3, 5]",
              "--set", "grid.pairs=6", "--set", "grid.max_steps=120", "--set", "checkpoint_every=20",
              "--set", "influence.enabled=false"]
    assert main(["sweep", "--out", str(tmp_path / "whole"), *common]) == 0
    real = sweep._advance

    def interrupted(group, step, config):
        if step == 55:
            raise KeyboardInterrupt
        real(group, step, config)

    monkeypatch.setattr(sweep, "_advance", interrupted)
    assert main(["sweep", "--out", str(tmp_path / "split"), *common]) == 130
    assert "last checkpoint at step 40" in capsys.readouterr().err
    monkeypatch.setattr(sweep, "_advance", real)
    assert main(["sweep", "--out", str(tmp_path / "split"), "--resume", *common]) == 0
    reports = [json.loads((tmp_path / d / "report.json").read_text())["sweep"] for d in ("whole", "split")]
    assert reports[0]["cells"] == reports[1]["cells"] and reports[0]["fit"] == reports[1]["fit"]


def test_cells_sharded_over_two_processes_are_gathered_on_rank_zero(tmp_path):
    """--devices 2 (Lightning Fabric, gloo on CPU): every cell comes back once, fits are made on the whole grid."""
    import subprocess
    import sys

    out = tmp_path / "sharded"
    command = [sys.executable, "-m", "mlm_dynamics.cli", "sweep", "--devices", "2", "--quiet", "--out", str(out),
               "--set", "grid.temperatures=[0.5, 4.0]", "--set", "grid.lengths=[3, 5]", "--set", "grid.pairs=24",
               "--set", "grid.max_steps=3000", "--set", "drift.enabled=false"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    sweep = json.loads((out / "report.json").read_text())["sweep"]
    assert sorted((c["temperature"], c["num_sites"]) for c in sweep["cells"]) == [(0.5, 3), (0.5, 5), (4.0, 3),
                                                                                   (4.0, 5)]
    assert {f["temperature"] for f in sweep["fit"]} == {0.5, 4.0}
    assert "sharded over 2 processes" in " ".join(sweep["notes"])
    by_temperature = {f["temperature"]: f["C"] for f in sweep["fit"]}
    assert by_temperature[0.5] > by_temperature[4.0]
