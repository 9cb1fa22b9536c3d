"""The cost ledger: forward rows counted at the one door, phase by phase, and the jobs' bills."""

import json
import math

import pytest
import torch

from mlm_dynamics import PairwiseMRFDenoiser
from mlm_dynamics.cli import main
from mlm_dynamics.models.cost import CostLedger


def test_every_forward_is_charged_to_the_innermost_open_phase():
    """Rows, tokens and calls are exact counts of what went through conditional_logits; a nested phase's rows and
    seconds are not charged to the enclosing one again; the totals add up."""
    ising = PairwiseMRFDenoiser.ising_chain(6, coupling=1.0)
    tokens = torch.zeros(4, 6, dtype=torch.long)
    positions = torch.zeros(4, 1, dtype=torch.long)
    ledger = CostLedger()
    with ledger.phase("outer"):
        ising.conditional_logits(tokens, positions)
        with ledger.phase("inner"):
            ising.conditional_logits(tokens[:3], positions[:3])
            ising.conditional_logits(tokens[:2], positions[:2])
    with ledger.phase("outer"):  # entering a phase again adds to it
        ising.conditional_logits(tokens[:1], positions[:1])
    ising.conditional_logits(tokens, positions)  # outside every phase: not on the bill
    outer, inner = ledger.phases["outer"], ledger.phases["inner"]
    assert (outer.forward_rows, outer.forward_tokens, outer.forward_calls) == (5, 30, 2)
    assert (inner.forward_rows, inner.forward_tokens, inner.forward_calls) == (5, 30, 2)
    assert outer.seconds >= 0 and 0 <= inner.seconds <= ledger.total_seconds
    summary = ledger.summary()
    assert summary["forward_rows"] == 10 and summary["needed_rows"] == 10
    assert math.isnan(summary["forward_equivalents"])  # no bare forward timed yet
    ledger.time_bare_forward(ising, tokens)
    summary = ledger.summary()
    assert summary["bare_forward_batch"] == 4 and summary["calibration_forward_rows"] == 16  # warm-up + 3 repeats
    assert summary["forward_equivalents"] == pytest.approx(summary["seconds"] / summary["bare_forward_seconds"])
    ledger.need("outer", 3)
    assert ledger.summary()["outer_needed_rows"] == 3
    record = ledger.record()
    assert [row["phase"] for row in record["phases"]] == ["outer", "inner", "calibration", "other"]
    assert record["line"].startswith("cost: ") and "bare forwards of 4x6 tokens" in record["line"]


def test_shards_merge_into_one_bill():
    """Side-by-side processes: per phase the longest seconds and the sum of the rows."""
    ising = PairwiseMRFDenoiser.ising_chain(5, coupling=1.0)
    records = []
    for rows in (2, 3):
        ledger = CostLedger()
        with ledger.phase("pairs"):
            ising.conditional_logits(torch.zeros(rows, 5, dtype=torch.long), torch.zeros(rows, 1, dtype=torch.long))
        ledger.time_bare_forward(ising, torch.zeros(2, 5, dtype=torch.long))
        records.append(ledger.record())
    merged = CostLedger.merged(records)
    assert merged.phases["pairs"].forward_rows == 5 and merged.phases["calibration"].forward_rows == 16
    assert merged.phases["pairs"].seconds == max(r["phases"][0]["seconds"] for r in records)
    assert merged.bare_forward_shape == (2, 5)


QUICK = ["--set", "model.num_layers=1", "--set", "chains.num_chains=4", "--set", "temperatures=[1.0, 2.0]",
         "--set", "run.num_steps=6", "--set", "run.record_every=3", "--set", "chains.window=[90, 100]",
         "--set", "rectangle.enabled=false", "--set", "influence.enabled=false", "--set", "run.checkpoint_every=null"]


def test_the_run_job_bills_exactly_the_rows_its_loop_serves(tmp_path):
    """One forward per step over the live rows: without pairs exactly chains x steps; with pairs, 2 rows per pair
    for every step it was open and 1 per chain for every other step; report.json and the printed line carry the
    bill."""
    pytest.importorskip("antiberty")
    alone, paired = tmp_path / "alone", tmp_path / "paired"
    assert main(["run", "--out", str(alone), *QUICK, "--set", "coupling.enabled=false",
                 "--set", "semantics.enabled=false"]) == 0
    report = json.loads((alone / "report.json").read_text())
    loop = {row["phase"]: row for row in report["cost"]["phases"]}["chains and pairs"]
    assert loop["forward_rows"] == 4 * 6 and loop["forward_tokens"] == 4 * 6 * 124
    assert report["cost"]["bare_forward_shape"] == [4, 124]  # the unit of the bill: a forward at the loop's batch
    assert report["cost"]["forward_rows"] == sum(row["forward_rows"] for row in report["cost"]["phases"])
    assert "cost:" in (alone / "report.html").read_text()

    assert main(["run", "--out", str(paired), *QUICK, "--set", "coupling.num_pairs=3",
                 "--set", "coupling.max_steps=6", "--set", "coupling.looks=[]", "--set", "coupling.max_rows=null"]) == 0
    report = json.loads((paired / "report.json").read_text())
    phases = {row["phase"]: row for row in report["cost"]["phases"]}
    # the plan prices a step at the batch it starts with: both chains of each temperature's 3 pairs, the chains being
    # the first chains of pairs 0 and 1 (planned_rows), not at the chains' 4 rows
    assert report["cost"]["bare_forward_shape"] == [2 * 2 * 3, 124]
    # exact: a pair costs 2 rows for every step it is open (its meeting time, or 6 where censored); a chain whose
    # pair met or stopped moves on alone, 1 row a step, to the 6 steps of the run
    loop = 0
    for row in report["mixing"]["by_temperature"]:
        times = [int(t) for t in row["meeting_times"]]
        loop += 2 * sum(times) + sum(6 - t for t in times[:2])
    assert phases["chains and pairs"]["forward_rows"] == loop
    assert report["mixing"]["forward_rows"] == sum(2 * int(t) for row in report["mixing"]["by_temperature"]
                                                   for t in row["meeting_times"])
    assert phases["semantics"]["forward_rows"] > 0  # hidden-state forwards are counted too


def test_a_budget_plans_the_run_to_fit_and_the_deadline_stops_what_the_plan_missed(tmp_path, capsys, monkeypatch):
    """--budget first plans: the steps that fit at the timed rate once the later sections are reserved (a note says
    how many of how many); a plan that misses (here: no plan) is stopped at the deadline, open pairs censored at the
    step reached, later sections left out, and the report of what was measured written."""
    pytest.importorskip("antiberty")
    import mlm_dynamics.experiments.run as job

    long = [*QUICK, "--set", "run.num_steps=5000", "--set", "coupling.max_steps=5000"]
    planned = tmp_path / "planned"
    assert main(["run", "--out", str(planned), *long, "--budget", "8"]) == 0
    report = json.loads((planned / "report.json").read_text())
    assert 1 <= report["chains"]["num_steps"] < 5000
    assert any(note.startswith("--budget: planned ") and "of 5000 steps" in note for note in report["notes"])
    assert "cost:" in capsys.readouterr().out

    monkeypatch.setattr(job, "fit_to_budget", lambda config, *args, **kwargs: (config, []))
    stopped = tmp_path / "stopped"
    assert main(["run", "--out", str(stopped), *long, "--budget", "6"]) == 0
    report = json.loads((stopped / "report.json").read_text())
    assert report["stopped"].startswith("budget: the 6 s ran out at step ")
    steps = report["chains"]["num_steps"]
    assert 0 <= steps < 5000 and any("stopped early" in note for note in report["notes"])
    for row in report["mixing"]["by_temperature"]:  # open pairs censored at the step reached, never beyond
        assert all(t <= steps for t in row["meeting_times"])
        assert all(t == steps for t, c in zip(row["meeting_times"], row["censored"], strict=True) if c)
    assert "margins: not measured" in " ".join(report["notes"])


def test_a_budget_gone_before_the_first_step_is_one_line_and_a_resumed_bill_says_what_it_covers(tmp_path, capsys):
    """No forward after the deadline, the calibration's included: a budget spent by the set-up is refused in one
    line and nothing is written; a sweep stopped by its budget says so in its summary; a resumed sweep's bill says it
    covers its own process only."""
    preset = ["--config", "sweep-ising", "--set", "grid.temperatures=[1.0]", "--set", "grid.lengths=[4]",
              "--set", "grid.pairs=4", "--quiet"]
    assert main(["sweep", "--out", str(tmp_path / "none"), *preset, "--budget", "0.001"]) == 2
    error = capsys.readouterr().err.strip()
    assert len(error.splitlines()) == 1 and "ran out during the set-up, before any pair step" in error
    assert not (tmp_path / "none" / "report.json").exists()
    out = tmp_path / "sweep"
    assert main(["sweep", "--out", str(out), *preset, "--set", "grid.max_steps=40", "--set",
                 "checkpoint_every=10"]) == 0
    first = capsys.readouterr().out
    assert "steps in" in first and "stopped early" not in first and "(this process only" not in first
    assert main(["sweep", "--out", str(out), *preset, "--set", "grid.max_steps=80", "--set",
                 "checkpoint_every=10", "--resume"]) == 0
    report = json.loads((out / "report.json").read_text())
    assert report["cost"]["scope"].startswith("this process only: resumed from the checkpoint at step ")
    assert report["cost"]["until"].startswith("report.json written")  # where the bill stops counting
    assert "cost (this process only: resumed" in capsys.readouterr().out


def test_the_step_cost_benchmark_runs_at_small_shapes(monkeypatch, capsys):
    """The GPU host's benchmark, exercised on CPU: one-layer models, B = 2; every ratio it prints is a positive
    finite number."""
    import runpy
    import sys
    from pathlib import Path

    pytest.importorskip("antiberty")
    script = Path(__file__).parents[1] / "benchmarks" / "bench_step_cost.py"
    monkeypatch.setattr(sys, "argv", [str(script), "--smoke"])
    runpy.run_path(str(script), run_name="__main__")
    rows = [line.split() for line in capsys.readouterr().out.splitlines() if line.split()[:1] in (["antiberty"],
                                                                                                    ["bert-base"])]
    assert [row[0] for row in rows] == ["antiberty", "bert-base"]
    for row in rows:
        ratios = [float(row[4].rstrip("x")), float(row[5]), float(row[7].rstrip("x"))]
        assert all(0 < r < math.inf for r in ratios), row
