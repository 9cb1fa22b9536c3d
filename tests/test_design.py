"""The sequential design (experiments.design) on toy chains whose laws are exact: it decides where the exact chain
says, stops what a decision no longer needs, gives rounds only to undecided cells (cheapest first within the
budget), keeps each cell its own (the same alone as in a grid), resumes bit for bit, and keeps its level under
optional stopping over many replicates.

Tolerance argument (validation over replicates): each side's verdict is false with probability at most 5 % in every
replicate, so over R independent replicates the false verdicts of a side are stochastically below Binomial(R,
0.05); a test allows the 0.999 quantile of that law (a false alarm at most once in a thousand runs of a correct
design). Everything else here is an exact invariant or an exact law.
"""

import json

import pytest
import torch
from scipy import stats

from mlm_dynamics.cli import main
from mlm_dynamics.experiments.config import SweepConfig, load_config
from mlm_dynamics.experiments.design import DesignPlan, SequentialDesign
from mlm_dynamics.experiments.sweep import run_sweep
from mlm_dynamics.models.toy import PairwiseMRFDenoiser
from mlm_dynamics.sampling.exact import glauber_transition_matrix, stationary_distribution
from mlm_dynamics.sampling.grid import GridCell, pair_grid

POTTS = ["model.source=potts", "model.states=16", "model.coupling=5.0", "grid.lengths=[3]", "grid.pairs=16",
         "grid.looks=[20, 24, 30, 40]", "grid.learn_pairs=4", "grid.max_steps=200", "grid.witness_steps=[100]",
         "grid.starts=[natural-random]", "drift.enabled=false", "influence.enabled=false",
         "rectangle.enabled=false", "lag.enabled=false", "checkpoint_every=null"]


def exact_tv(model: PairwiseMRFDenoiser, temperature: float, t: int) -> tuple[float, float]:
    """``(TV(a P^t, b P^t), d(t))`` for the natural start ``a`` (state 0) and ``b`` uniform fillings."""
    kernel = glauber_transition_matrix(model, model.num_sites, temperature)
    power = torch.linalg.matrix_power(kernel, t)
    uniform = torch.full((kernel.shape[0],), 1 / kernel.shape[0], dtype=torch.float64)
    pi = stationary_distribution(kernel)
    return 0.5 * float((power[0] - uniform @ power).abs().sum()), 0.5 * float((power - pi).abs().sum(1).max())


@pytest.fixture(scope="module")
def potts():
    return run_sweep(load_config(SweepConfig, None, [*POTTS, "grid.temperatures=[0.5, 0.7, 1.0, 8.0]"]))


def test_the_design_decides_where_the_exact_chain_says_and_spends_nothing_after(potts):
    """Trapped at tau = 0.5 (slow, true: d(100) > 1/4 exactly), fast at 8 (true: the exact TV between the natural
    start and uniform fillings is <= 1/4 at the certified step). A cell decided at its first look stops there: the
    slow cell spent exactly 2 rows per pair and step up to the witness step, no round after; the fast one's pairs
    left the batch as they met."""
    slow, fast = potts.cell(0.5, 3), potts.cell(8.0, 3)
    model = PairwiseMRFDenoiser.potts_chain(3, 16, 5.0)
    assert slow.bracket.verdict == "slow" and slow.bracket.slow_beyond == 100 and exact_tv(model, 0.5, 100)[1] > 0.25
    assert fast.bracket.verdict == "fast" and exact_tv(model, 8.0, fast.bracket.forgotten_by)[0] <= 0.25
    assert slow.bracket.pairs == 16 and slow.rows == 2 * 16 * 100
    assert fast.bracket.pairs == 16 and fast.rows == 2 * int(fast.meeting.times.sum())
    for cell in potts.cells:
        assert cell.bracket.pairs in cell.looks and len(cell.meeting.times) == cell.bracket.pairs
        assert (cell.bracket.verdict == "undecided") == bool(cell.bracket.needs)


def test_a_cell_between_the_phases_stops_and_says_what_it_needs(potts):
    """At tau = 0.7 the witness ties a quarter of the pairs (chains from random fillings fall back into the natural
    basin) and the pairs do not meet: no planned look can decide it, so it takes no further round, and its words say
    how many pairs beyond the plan (or that none) each side would need; its summary carries its pairs and rows."""
    cell = potts.cell(0.7, 3)
    assert cell.bracket.verdict == "undecided" and cell.bracket.pairs == 16
    assert "slow side:" in cell.bracket.needs and "fast side:" in cell.bracket.needs
    assert "beyond the 40 planned" in cell.bracket.needs or "no number of pairs" in cell.bracket.needs
    summary = cell.summary()
    assert summary["pairs"] == 16 and summary["rows"] == cell.rows > 0


def test_a_cell_is_its_own_alone_and_in_the_grid(potts):
    """With a budget that does not bind, a cell's pairs, rounds, witness values and verdict are the same alone as
    inside a grid of other cells (each pair on its own stream and clock)."""
    alone = run_sweep(load_config(SweepConfig, None, [*POTTS, "grid.temperatures=[1.0]"])).cells[0]
    inside = potts.cell(1.0, 3)
    assert torch.equal(alone.meeting.times, inside.meeting.times)
    assert torch.equal(alone.meeting.censored, inside.meeting.censored)
    assert alone.bracket.text() == inside.bracket.text() and alone.rows == inside.rows
    if alone.witness is not None:
        assert torch.equal(alone.witness.values_b, inside.witness.values_b)


def test_a_budget_that_ran_out_refuses_further_rounds_and_says_so(potts):
    """The first round always runs; a budget it already spent refuses every later round: cells decided at their
    first look are as before, a cell that needed a second look (tau = 1 followed 120 steps: a pair of the first 16
    had not met, 20 certify fast) stays undecided at 16 and its words say that the budget ran out."""
    overrides = [*POTTS, "grid.temperatures=[1.0, 8.0]", "grid.max_steps=120"]
    free = run_sweep(load_config(SweepConfig, None, overrides))
    capped = run_sweep(load_config(SweepConfig, None, [*overrides, "grid.max_rows=1"]))
    assert free.cell(1.0, 3).bracket.pairs > 16, free.cell(1.0, 3).bracket.text()
    for cell in capped.cells:
        before = free.cell(cell.temperature, cell.num_sites)
        if before.bracket.pairs == 16:
            assert cell.bracket.text() == before.bracket.text()
        else:
            assert cell.bracket.verdict == "undecided" and cell.bracket.pairs == 16
            assert "budget of 1 forward rows ran out at look 1 of 5" in cell.bracket.needs
    assert capped.rows["pair_rows_spent"] < free.rows["pair_rows_spent"]


def test_cells_whose_looks_cannot_decide_stop_at_once():
    """Looks of 4, 6 and 8 pairs can never certify a side (11 is the least): the pairs stop at the first witness
    read instead of running on, and the cell says what it would need."""
    overrides = [*POTTS, "grid.temperatures=[1.0]", "grid.pairs=4", "grid.looks=[6, 8]", "grid.learn_pairs=1"]
    cell = run_sweep(load_config(SweepConfig, None, overrides)).cells[0]
    assert cell.bracket.verdict == "undecided" and cell.bracket.pairs == 4
    assert int(cell.meeting.times.max()) <= 100 and cell.rows <= 2 * 4 * 100


def test_a_sequential_sweep_resumes_bit_identically(tmp_path, monkeypatch):
    """Interrupted in a cell's second round (tau = 1, followed 120 steps) after another had ended undecided (tau =
    0.7), resumed from the checkpoint: every cell's pairs, rounds, verdicts and words equal those of the run that was
    never stopped."""
    import mlm_dynamics.experiments.sweep as sweep

    common = ["--quiet", *(item for o in POTTS for item in ("--set", o)), "--set", "grid.temperatures=[0.7, 1.0]",
              "--set", "grid.max_steps=120", "--set", "checkpoint_every=20"]
    assert main(["sweep", "--out", str(tmp_path / "whole"), *common]) == 0
    real = sweep.PairGrid.step

    def interrupted(grid):
        if grid.state.x.step == 150:  # in tau = 1's second round
            raise KeyboardInterrupt
        return real(grid)

    monkeypatch.setattr(sweep.PairGrid, "step", interrupted)
    assert main(["sweep", "--out", str(tmp_path / "split"), *common]) == 130
    monkeypatch.setattr(sweep.PairGrid, "step", real)
    assert main(["sweep", "--out", str(tmp_path / "split"), "--resume", *common]) == 0
    reports = [json.loads((tmp_path / d / "report.json").read_text())["sweep"] for d in ("whole", "split")]
    assert reports[0]["cells"] == reports[1]["cells"]
    cells = {cell["temperature"]: cell for cell in reports[0]["cells"]}
    assert cells[1.0]["pairs"] > 16 and cells[0.7]["verdict"] == "undecided" and "side:" in cells[0.7]["verdict_text"]


def _replicate(seed: int, cells: list[GridCell], plan: DesignPlan, model: PairwiseMRFDenoiser):
    """One run of the whole design on a toy model's cells: its brackets."""
    grid = pair_grid(model, torch.zeros(1, model.num_sites, dtype=torch.long), cells, pairs=plan.looks[0],
                     starts=["natural-random"], seed=seed, capacity=plan.looks[-1])
    design = SequentialDesign(grid, plan)
    while design.live():
        design.step()
    return design.brackets()


class _Truth:
    """Exact ``t_mix(1/4)`` and ``TV(a P^t, b P^t)`` (natural start ``a``, uniform fillings ``b``) of a toy chain."""

    def __init__(self, model: PairwiseMRFDenoiser, temperature: float) -> None:
        self.kernel = glauber_transition_matrix(model, model.num_sites, temperature)
        pi = stationary_distribution(self.kernel)
        power, t = torch.eye(self.kernel.shape[0], dtype=torch.float64), 0
        while 0.5 * float((power - pi).abs().sum(1).max()) > 0.25:
            power, t = power @ self.kernel, t + 1
        self.mixing_time, self.cache = t, {}

    def tv(self, t: int) -> float:
        if t not in self.cache:
            power = torch.linalg.matrix_power(self.kernel, t)
            uniform = torch.full((power.shape[0],), 1 / power.shape[0], dtype=torch.float64)
            self.cache[t] = 0.5 * float((power[0] - uniform @ power).abs().sum())
        return self.cache[t]


@pytest.mark.slow
def test_sequential_verdicts_keep_their_level_on_exact_kernels():
    """Curie-Weiss, n = 8, J = 1 (exact t_mix(1/4): 1518 at tau = 0.4, 304 at 0.5, 18 at 2) with the witness step at
    304, where the slow statement is false at tau = 0.5 and 2 and true at 0.4, and the 1-D Ising chain, n = 8, J = 1
    (no transition; exact t_mix from its kernel) at tau = 0.7 and 2 with the witness step at 100: 200 replicates of
    the whole design (rounds, early stops, the planner), every slow statement checked against the exact mixing time,
    every fast one against the exact TV between the natural start and uniform fillings at its step. False verdicts of
    each side stay within the binomial allowance (module docstring), optional stopping included; true verdicts are
    made (the design is not vacuous)."""
    setups = [(PairwiseMRFDenoiser.curie_weiss(8, 1.0, 0.0), (0.4, 0.5, 2.0), 304),
              (PairwiseMRFDenoiser.ising_chain(8, 1.0, 0.0), (0.7, 2.0), 100)]
    replicates, tested = 200, 0
    false_slow = false_fast = true_verdicts = 0
    for model, temperatures, horizon in setups:
        cells = [GridCell(tau, tuple(range(8))) for tau in temperatures]
        plan = DesignPlan(looks=(12, 15, 18, 22, 28, 36), witness_steps=(horizon,), max_steps=4 * horizon, learn=4)
        truths = {tau: _Truth(model, tau) for tau in temperatures}
        for seed in range(replicates):
            for cell, bracket in zip(cells, _replicate(seed, cells, plan, model), strict=True):
                truth = truths[cell.temperature]
                if bracket.slow_beyond is not None:
                    wrong = truth.mixing_time <= bracket.slow_beyond
                    false_slow, true_verdicts = false_slow + wrong, true_verdicts + (not wrong)
                if bracket.forgotten_by is not None:
                    wrong = truth.tv(bracket.forgotten_by) > 0.25
                    false_fast, true_verdicts = false_fast + wrong, true_verdicts + (not wrong)
        tested += replicates * len(cells)
    allowed = int(stats.binom.ppf(0.999, tested, 0.05))
    print(f"{tested} cell runs: {false_slow} false slow, {false_fast} false fast, {true_verdicts} true verdicts "
          f"(allowed {allowed} false per side)")
    assert false_slow <= allowed and false_fast <= allowed, (false_slow, false_fast, allowed)
    assert true_verdicts >= 2 * replicates  # tau = 2 is certified fast in most replicates of both chains
