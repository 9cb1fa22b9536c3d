"""The design of a job's pairs: rounds, looks and a budget of forward rows, shared by the run job and the sweep.

Three parts, kept apart (as scikit-learn's successive halving keeps its plan of rounds, its evaluation and its
decision of who goes on): the **sampling** is :class:`~mlm_dynamics.sampling.grid.PairGrid` (every started pair
steps in one forward per step, each on its own clock and stream); the **decisions** are the pure functions of
:mod:`mlm_dynamics.diagnostics.sequential` and :mod:`~mlm_dynamics.diagnostics.bracket` (both sides of a cell from
its pairs at a planned look); the **plan** is here: :class:`DesignPlan` (the looks, the witness horizons, the fast
side's horizon, the budget) and :class:`SequentialDesign`, which after every step records what the decisions need,
decides the cells whose look is due, stops the pairs a decided cell no longer needs, and gives the next round to the
undecided cells whose look failed, in order of their expected cost to decide, while the budget allows.

Per cell (a temperature of the run job; a (temperature, length) of the sweep) the pairs from the natural start
against a random filling come in rounds up to the planned looks ``N_1 < ... < N_K``. At look ``k``:

- **slow**: the learned witness (fitted once, at the horizon, on pairs independent of the tested ones: the other
  cells' first-round pairs in the run job, whose cells draw independent streams; the cell's own learning pairs in the
  sweep) is tested, paired, at each horizon of ``witness_steps`` on the tested pairs of the look, when all have
  reached it;
- **fast**: the pairs' meeting times, read at every step (pairs still running count as not met beyond their age);
- a certified side decides the cell and its pairs stop; when both sides of look ``k`` have failed (the slow test did
  not cross; more of the look's pairs stopped unmet than the fast boundary allows) the cell asks for look ``k + 1``.
  When its slow side is the cheaper to decide, its pairs stop at the last witness horizon instead of running on to
  ``max_steps`` for the fast side.

A cell's decisions read its own pairs only, at looks fixed before any pair is seen, so each side keeps its level
whatever the planner did (:mod:`~mlm_dynamics.diagnostics.sequential`). Which cells get further rounds when the
budget binds depends on the other cells (that is what a budget is); with a budget that does not bind a cell's
result is the same alone, in any grid, shard or resume. One look (``looks`` of one entry) is a fixed design: every
pair runs to ``max_steps``, nothing stops early, and the sides are decided at the end.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from ..diagnostics.bracket import LEVEL, MixingBracket, mixing_bracket, pairs_to_decide, pairs_to_separate
from ..diagnostics.meeting import MeetingTimes
from ..diagnostics.sequential import Looks, continuation
from ..diagnostics.witness import DEFAULT_EPSILON, MixingLowerBound, PairedWitness, Witness, learned_witness
from ..sampling.glauber import StepRecord
from ..sampling.grid import PairGrid

PLAN_FLOOR = 0.05  # a side whose planned looks would decide with less chance than this is not priced (infinite)
TRAIN_APART = 0.75  # cross-fitting learns from the cells whose first-round pairs mostly stayed apart at the horizon


@dataclass(frozen=True)
class DesignPlan:
    """The plan of a job's pairs (module docstring).

    Attributes:
        looks: natural-random pairs per cell at each look, the first being the first round (one entry: a fixed
            design).
        witness_steps: the slow side's horizons (ages of the pairs), the level split evenly between them.
        max_steps: the fast side's horizon: a pair is followed at most this many steps.
        learn: natural-random pairs of the first round that fit the cell's witness (the odd-numbered ones among the
            first ``2 learn``).
        cross_fit: fit each cell's witness on the other cells' first-round pairs instead (for cells on independent
            streams: the run job's temperatures), so that no pair is spent on it: on those of the cells whose
            pairs mostly (:data:`TRAIN_APART`) had not met at the horizon, where chains from the two starts still
            differ as in a slow cell (all other cells where none did). The choice reads the other cells only, so
            the witness stays independent of the pairs it is tested on.
        max_rows: forward rows the grid (with its peers, :attr:`SequentialDesign.peers`) may spend in all (None: no
            cap beyond the looks). The first round always runs.
        epsilon: the distance of ``t_mix(epsilon)``.
    """

    looks: tuple[int, ...]
    witness_steps: tuple[int, ...]
    max_steps: int
    learn: int = 0
    cross_fit: bool = False
    max_rows: int | None = None
    epsilon: float = DEFAULT_EPSILON

    @property
    def sequential(self) -> bool:
        """More than one look: rounds, early stops and a planner."""
        return len(self.looks) > 1

    @property
    def fast_looks(self) -> Looks:
        """The fast side's looks: every natural-random pair."""
        return Looks(self.looks, LEVEL)

    @property
    def slow_looks(self) -> Looks:
        """The slow side's looks: the tested pairs (the learning pairs left out), at the level of one horizon."""
        return Looks(tuple(n - self.learn for n in self.looks), 1 - (1 - LEVEL) / max(len(self.witness_steps), 1))


@dataclass
class _Cell:
    """What the plan holds of one cell: the look its pairs are at, their horizon, its witness per horizon, the
    slow side's evaluations at the current look, its decision, and whether it asks for (or was refused) a round."""

    look: int = 0
    horizon: int = 0
    witnesses: dict[int, Witness] = field(default_factory=dict)
    slow: PairedWitness | None = None
    bracket: MixingBracket | None = None
    asking: bool = False
    refused: str = ""
    rows: int = 0


class SequentialDesign:
    """The plan of a :class:`~mlm_dynamics.sampling.grid.PairGrid`'s cells (module docstring): call :meth:`step`
    in place of the grid's, while :meth:`live`; :meth:`brackets` gives both sides of every cell.

    ``keep_rows``: forward rows the loop will spend beyond the pairs' own (the run job's chains moving on alone),
    reserved from the budget. :attr:`peers`: other designs that share this one's ``max_rows`` (a sweep's groups of
    cells on other models; each one's rounds are granted from what all of them left).
    """

    def __init__(self, grid: PairGrid, plan: DesignPlan, *, keep_rows: Callable[[], int] = lambda: 0) -> None:
        if plan.cross_fit and plan.learn:
            raise ValueError("a cross-fitted witness spends no learning pairs: learn must be 0")
        if 2 * plan.learn > plan.looks[0]:
            raise ValueError(f"learn: the {plan.learn} learning pairs (the odd-numbered ones) must lie in the first "
                             f"look's {plan.looks[0]} pairs")
        self.grid, self.plan, self.keep_rows = grid, plan, keep_rows
        self.peers: list[SequentialDesign] = []
        count = int(grid.layout.cell.max()) + 1
        self.cells = [_Cell(horizon=plan.max_steps) for _ in range(count)]
        self.horizons = list(plan.witness_steps)
        self.snapshots = {h: self._empty() for h in self.horizons}
        self.taken = {h: torch.zeros(grid.state.met_at.numel(), dtype=torch.bool) for h in self.horizons}
        natural = grid.kind == 0
        self.order: list[Tensor] = []  # per cell, its natural-random rows by pair number
        self.learning: list[Tensor] = []
        for cell in range(count):
            mine = ((grid.layout.cell == cell) & natural).nonzero().squeeze(1)
            mine = mine[grid.layout.index[mine].argsort()]
            self.order.append(mine)
            number = torch.arange(mine.numel())
            self.learning.append(mine[(number % 2 == 1) & (number < 2 * plan.learn)])

    def _empty(self) -> Tensor:
        return torch.zeros(2, self.grid.state.met_at.numel(), self.grid.state.y.shape[1], dtype=torch.long)

    # --- rows of a cell -------------------------------------------------------------------------------------
    def natural(self, cell: int, look: int | None = None) -> Tensor:
        """The cell's natural-random rows of look ``look`` (default: its current one), by pair number."""
        return self.order[cell][: self.plan.looks[self.cells[cell].look if look is None else look]]

    def tested(self, cell: int, look: int | None = None) -> Tensor:
        """The rows the slow side tests at the look: its natural-random rows less the learning ones."""
        rows = self.natural(cell, look)
        return rows[~torch.isin(rows, self.learning[cell])]

    # --- the loop -------------------------------------------------------------------------------------------
    def step(self) -> StepRecord:
        """One step of the grid (the rows of its open pairs, both chains, charged to their cells; chains moving on
        alone are the job's), then :meth:`observe`."""
        state = self.grid.state
        charged = 2 * state.open.cpu().long()
        per_cell = torch.zeros(len(self.cells), dtype=torch.long).index_add_(0, self.grid.layout.cell, charged)
        for cell, rows in zip(self.cells, per_cell.tolist(), strict=True):
            cell.rows += rows
        record = self.grid.step()
        self.observe()
        return record

    def live(self) -> bool:
        """Whether some pair is running or a cell waits for a round the budget may still give."""
        return bool(self.grid.state.open.any()) or any(c.asking and not c.refused for c in self.cells)

    def observe(self) -> None:
        """After a step: snapshots at the witness horizons; witnesses fitted when their horizon is reached; pairs
        stopped at their cell's horizon; the looks of the cells where something happened (a pair met or stopped, a
        snapshot was taken) read again; rounds for the cells whose look failed."""
        touched = self._snapshot()
        state = self.grid.state
        for h in self.plan.witness_steps:
            if state.x.step == h:
                self._fit(h)
        horizon = torch.tensor([self.cells[int(c)].horizon for c in self.grid.layout.cell],
                               device=state.met_at.device)
        ended = state.open & (state.ages >= horizon)
        if bool(ended.any()):
            state.stop(ended)
        if not self.plan.sequential:
            return
        now = (state.met_at == state.x.step) & state.started
        if state.stopped_at is not None:
            now |= state.stopped_at == state.x.step
        touched |= set(self.grid.layout.cell[now.cpu()].tolist())
        for index in sorted(touched):
            cell = self.cells[index]
            if cell.bracket is None and not cell.asking:
                self._decide(index)
        self._grant()

    def _snapshot(self) -> set[int]:
        """Record both chains of the pairs whose age is a witness horizon now; returns the cells they are in."""
        state = self.grid.state
        ages, started = state.ages.cpu(), state.started.cpu()
        stopped_at = state.stopped_at.cpu() if state.stopped_at is not None else None
        born = state.born.cpu() if state.born is not None else torch.zeros_like(ages)
        touched: set[int] = set()
        for h in self.horizons:
            due = started & (ages == h) & ~self.taken[h]
            if stopped_at is not None:
                due &= (stopped_at < 0) | (stopped_at - born >= h)
            if bool(due.any()):
                rows = due.nonzero().squeeze(1).to(state.y.device)
                met = (state.met_at[rows] >= 0)[:, None]
                x = state.x.tokens[rows]
                self.snapshots[h][0, due] = x.cpu()
                self.snapshots[h][1, due] = torch.where(met, x, state.y[rows]).cpu()
                self.taken[h] |= due
                touched |= set(self.grid.layout.cell[due].tolist())
        return touched

    def _fit(self, horizon: int) -> None:
        """Fit every cell's witness at ``horizon`` on its training pairs (all reached it now: they started at 0)."""
        snapshot, taken = self.snapshots[horizon], self.taken[horizon]
        apart = [self._apart(other, horizon) for other in range(len(self.cells))]
        for index, cell in enumerate(self.cells):
            if self.plan.cross_fit:  # the other cells' first-round pairs, from the cells where most stayed apart
                others = [other for other in range(len(self.cells)) if other != index]
                kept = [other for other in others if apart[other] >= TRAIN_APART] or others
                train = torch.cat([self.natural(other, 0) for other in kept] or [torch.zeros(0, dtype=torch.long)])
            else:
                train = self.learning[index]
            train = train[taken[train]]
            cell.witnesses[horizon] = learned_witness(snapshot[0, train], snapshot[1, train])

    def _apart(self, cell: int, horizon: int) -> float:
        """Share of the cell's first-round pairs whose two chains still differ at ``horizon``."""
        rows = self.natural(cell, 0)
        rows = rows[self.taken[horizon][rows]]
        if not rows.numel():
            return 0.0
        return float((self.snapshots[horizon][0, rows] != self.snapshots[horizon][1, rows]).any(-1).double().mean())

    # --- decisions ------------------------------------------------------------------------------------------
    def meeting(self, cell: int, look: int | None = None) -> MeetingTimes:
        """Meeting ages of the look's natural-random pairs; a pair not met is censored at its age or where it
        stopped (pairs still running count as not met beyond their age)."""
        state, rows = self.grid.state, self.natural(cell, look)
        born = state.born[rows] if state.born is not None else torch.zeros_like(rows)
        met = state.met_at[rows]
        reached = state.x.step - born
        if state.stopped_at is not None:
            stopped = state.stopped_at[rows]
            reached = torch.where(stopped >= 0, stopped - born, reached)
        censored = met < 0
        times = torch.where(censored, reached, met - born).cpu()
        return MeetingTimes(times=times, censored=censored.cpu(), max_steps=int(times.max()) if rows.numel() else 0)

    def lower(self, cell: int, look: int | None = None) -> PairedWitness | None:
        """The witness values of the look's tested pairs at every horizon all of them reached (None before)."""
        rows = self.tested(cell, look).cpu()
        horizons = [h for h in self.horizons
                    if h in self.cells[cell].witnesses and bool(self.taken[h][rows].all())]
        if not horizons or rows.numel() < 2:
            return None
        values = [(self.cells[cell].witnesses[h](self.snapshots[h][0, rows]),
                   self.cells[cell].witnesses[h](self.snapshots[h][1, rows])) for h in horizons]
        return PairedWitness(torch.tensor(horizons), torch.stack([a for a, _ in values]),
                             torch.stack([b for _, b in values]),
                             looks=self.plan.slow_looks.pairs if self.plan.sequential else None)

    def lower_bound(self, cell: int) -> MixingLowerBound | None:
        """The cell's slow side: the paired witness bound of its current look's tested pairs at the horizons they
        reached, each horizon at its share of the level (the repeated bound of the looks in a sequential design)."""
        lower = self.cells[cell].slow
        if lower is None:
            return None
        share = (1 - LEVEL) / max(len(self.horizons), 1) * len(lower.times)
        return lower.bound(1 - share, self.plan.epsilon)

    def _bracket(self, cell: int, *, needs: str | None = None) -> MixingBracket:
        return mixing_bracket(self.meeting(cell), self.lower_bound(cell), epsilon=self.plan.epsilon,
                              looks=self.plan.looks if self.plan.sequential else None, needs=needs)

    def _decide(self, index: int) -> None:
        """Read the cell's current look: certify a side, or, once its slow test is read, stop where no planned
        look can decide the cell, stop the pairs at the witness horizon where the slow side is the cheaper, and ask
        for the next look when both sides of this one failed."""
        cell, state = self.cells[index], self.grid.state
        rows = self.natural(index)
        if cell.slow is None:
            horizons = [h for h in self.horizons if h <= cell.horizon]
            lower = self.lower(index)
            if lower is not None and len(lower.times) == len(horizons):
                cell.slow = lower
        bracket = self._bracket(index, needs="")
        if bracket.verdict != "undecided":
            self._end(index, bracket)
            return
        slow_read = cell.slow is not None or not self.horizons or \
            bool((state.stopped[rows] | (state.met_at[rows] >= 0)).all())
        if slow_read and self.horizons and cell.horizon > max(self.horizons) and self._slow_cheaper(index):
            cell.horizon = max(self.horizons)  # the fast side is the dearer: stop at the witness horizon
            self._stop_at_horizon(index)
        allowed = self.plan.fast_looks.fast_thresholds(self.plan.epsilon)[cell.look]
        fast_failed = int((state.stopped[rows] & (state.met_at[rows] < 0)).sum()) > allowed
        if slow_read and fast_failed and math.isinf(self.price(index)):
            self._end(index)  # no planned look can decide it: stop, and say what it would need
            return
        if slow_read and fast_failed:
            if cell.look + 1 < len(self.plan.looks):
                cell.asking = True
            else:
                self._end(index)

    def _end(self, index: int, bracket: MixingBracket | None = None) -> None:
        """The cell is done: decided (``bracket``), or undecided with what it would need; its pairs stop."""
        cell = self.cells[index]
        cell.asking = False
        cell.bracket = bracket if bracket is not None else self._bracket(index, needs=self.needs(index))
        self.grid.state.stop(self.grid.rows_of(index))

    def _stop_at_horizon(self, index: int) -> None:
        state = self.grid.state
        rows = self.grid.rows_of(index) & state.open & (state.ages >= self.cells[index].horizon)
        if bool(rows.any()):
            state.stop(rows)

    # --- prices and the planner -----------------------------------------------------------------------------
    def _slow_shares(self, index: int) -> tuple[tuple[float, float, float], int] | None:
        lower = self.cells[index].slow
        if lower is None:
            return None
        difference = lower.values_a[-1] - lower.values_b[-1]
        plus, minus = int((difference > 0.5).sum()), int((difference < -0.5).sum())
        n = difference.numel()
        shares = ((plus + 0.5) / (n + 1.5), (n - plus - minus + 0.5) / (n + 1.5), (minus + 0.5) / (n + 1.5))
        return shares, plus - minus

    def _fast_rate(self, index: int) -> tuple[float, int, float]:
        """``(plug-in P(T > t), pairs that can no longer meet, rows a pair costs)``: the share of the look's pairs
        not met so far (pairs still running counted as not met: the evidence now, smoothed by a half pair), and twice
        their mean age at meeting or so far."""
        state, rows = self.grid.state, self.natural(index)
        met = state.met_at[rows] >= 0
        unmet_for_good = int((state.stopped[rows] & ~met).sum())
        rate = (int((~met).sum()) + 0.5) / (rows.numel() + 1)
        ages = self.meeting(index).times.double()
        rows_per_pair = 2 * float(ages.mean()) if ages.numel() else 2.0 * self.plan.max_steps
        return rate, unmet_for_good, max(rows_per_pair, 2.0)

    def _sides(self, index: int) -> tuple[float, float]:
        """Expected forward rows for the cell to decide on its slow and on its fast side from its current look on
        (rows of the further pairs over the chance the planned looks decide that side; ``inf`` below
        :data:`PLAN_FLOOR`)."""
        cell, plan = self.cells[index], self.plan
        slow_rows = fast_rows = math.inf
        slow = self._slow_shares(index)
        if slow is not None and self.horizons:
            shares, statistic = slow
            extra, chances = continuation(plan.slow_looks, cell.look, shares, statistic, side="slow",
                                          value=2 * plan.epsilon)
            if chances and chances[-1] >= PLAN_FLOOR:
                slow_rows = extra * 2 * max(self.horizons) / chances[-1]
        rate, unmet, per_pair = self._fast_rate(index)
        extra, chances = continuation(plan.fast_looks, cell.look, rate, unmet, side="fast", value=plan.epsilon)
        if chances and chances[-1] >= PLAN_FLOOR:
            fast_rows = extra * per_pair / chances[-1]
        return slow_rows, fast_rows

    def price(self, index: int) -> float:
        """Expected forward rows for the cell to decide on its cheaper side (``inf``: no planned look is likely to
        decide it)."""
        return min(self._sides(index))

    def _slow_cheaper(self, index: int) -> bool:
        """Whether the slow side is the cheaper to decide (its pairs then stop at the last witness horizon)."""
        slow_rows, fast_rows = self._sides(index)
        return slow_rows < fast_rows

    def _committed(self) -> int:
        """Rows the running pairs may still spend (both chains to their cell's horizon) and the loop's own."""
        state = self.grid.state
        horizon = torch.tensor([self.cells[int(c)].horizon for c in self.grid.layout.cell],
                               device=state.met_at.device)
        left = (horizon - state.ages).clamp_min(0)
        return int((2 * left * state.open).sum()) + self.keep_rows()

    def _grant(self) -> None:
        """Give the next round to the asking cells, cheapest to decide first, while the budget allows; refuse it
        (saying why) once nothing runs that could free budget."""
        asking = [i for i, c in enumerate(self.cells) if c.asking and not c.refused]
        if not asking:
            return
        prices = {i: self.price(i) for i in asking}
        budget = self.plan.max_rows
        sharing = [self, *self.peers]  # the designs one budget pays for (a sweep's groups of cells)
        left = math.inf if budget is None else budget - sum(d.grid.state.rows + d._committed() for d in sharing)
        running = any(bool(d.grid.state.open.any()) for d in sharing)
        for index in sorted(asking, key=lambda i: prices[i]):
            cell = self.cells[index]
            if math.isinf(prices[index]):
                self._end(index)  # no planned look would decide it
                continue
            more = self.plan.looks[cell.look + 1] - self.plan.looks[cell.look]
            _, _, per_pair = self._fast_rate(index)
            cost = more * min(per_pair, 2 * cell.horizon)
            if cost <= left:
                left -= cost
                self._start(index)
            elif not running:
                cell.refused = (f"the budget of {budget} forward rows ran out at look {cell.look + 1} of "
                                f"{len(self.plan.looks)}")
                self._end(index)

    def _start(self, index: int) -> None:
        cell = self.cells[index]
        before = self.plan.looks[cell.look]
        cell.look += 1
        cell.asking, cell.slow = False, None
        rows = self.order[index]
        last = int(self.grid.layout.index[rows[self.plan.looks[cell.look] - 1]])  # pairs of every kind up to it
        started = self.grid.started(index)
        self.grid.start(index, last + 1 - started)
        assert self.grid.started(index) >= self.plan.looks[cell.look] > before

    # --- results --------------------------------------------------------------------------------------------
    def needs(self, index: int) -> str:
        """What the undecided cell would need, priced on its pairs so far: the look (pairs) at which its planned
        looks would more likely than not decide a side; beyond the plan, the pairs a single look would need at the
        shares seen (:func:`~mlm_dynamics.diagnostics.bracket.pairs_to_separate`, ``pairs_to_decide``); or that no
        number of pairs decides that side at its horizon."""
        cell, plan = self.cells[index], self.plan
        words = []
        slow = self._slow_shares(index)
        if slow is not None and self.horizons:
            shares, statistic = slow
            _, chances = continuation(plan.slow_looks, cell.look, shares, statistic, side="slow",
                                      value=2 * plan.epsilon)
            horizon = max(self.horizons)
            beyond = pairs_to_separate(shares[0], shares[2], plan.epsilon)
            words.append(_needed("slow side", plan.looks, cell.look, chances, beyond,
                                 f"at step {horizon} if they separate as these did ({shares[0]:.0%} told apart, "
                                 f"{shares[1]:.0%} tied)", f"at step {horizon} (a stronger witness, or starts further "
                                 "apart)"))
        elif self.horizons:
            words.append(f"slow side: no witness test (the pairs did not reach step {min(self.horizons)})")
        rate, unmet, _ = self._fast_rate(index)
        _, chances = continuation(plan.fast_looks, cell.look, rate, unmet, side="fast", value=plan.epsilon)
        beyond = pairs_to_decide(rate, plan.epsilon, above=False)
        words.append(_needed("fast side", plan.looks, cell.look, chances, beyond,
                             f"if they meet as these did ({rate:.0%} not met by step {cell.horizon}; or fewer "
                             "followed longer)", f"by step {cell.horizon} (more steps)"))
        refused = f" ({cell.refused})" if cell.refused else ""
        return "; ".join(words) + refused

    def close(self) -> None:
        """End of a fixed design's loop: its pairs' states now are one more horizon of the witness test, at the
        step reached (the sweep's budget, or where ``--budget`` stopped it)."""
        step = self.grid.state.x.step
        if self.plan.sequential or step in self.horizons or step == 0:
            return
        self.horizons.append(step)
        self.snapshots[step] = self._empty()
        self.taken[step] = self.grid.state.started.cpu().clone()
        met = (self.grid.state.met_at >= 0)[:, None]
        self.snapshots[step][0] = self.grid.state.x.tokens.cpu()
        self.snapshots[step][1] = torch.where(met, self.grid.state.x.tokens, self.grid.state.y).cpu()
        self._fit(step)

    def brackets(self) -> list[MixingBracket]:
        """Both sides of every cell: the decision where one was made, else the sides at the current look with what
        the cell would need."""
        out = []
        for index, cell in enumerate(self.cells):
            if cell.bracket is not None:
                out.append(cell.bracket)
                continue
            if cell.slow is None:
                cell.slow = self.lower(index)
            out.append(self._bracket(index, needs=self.needs(index) if self.plan.sequential else None))
        return out

    def progress(self) -> dict[str, Any]:
        """For a progress bar: rows spent, cells decided, looks reached."""
        decided = sum(c.bracket is not None and c.bracket.verdict != "undecided" for c in self.cells)
        return {"rows": int(self.grid.state.rows), "decided": f"{decided}/{len(self.cells)}",
                "looks": "/".join(str(c.look + 1) for c in self.cells)}

    # --- checkpoints ----------------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """The plan's state (the grid's own is the grid's): snapshots, looks, horizons, decisions' inputs."""
        return {"horizons": list(self.horizons), "snapshots": {str(h): v.clone() for h, v in self.snapshots.items()},
                "taken": {str(h): v.clone() for h, v in self.taken.items()},
                "cells": [{"look": c.look, "horizon": c.horizon, "asking": c.asking, "refused": c.refused,
                           "rows": c.rows, "decided": c.bracket is not None} for c in self.cells]}

    def load_state_dict(self, saved: dict[str, Any]) -> None:
        """Continue from :meth:`state_dict`: the witnesses are refitted from the snapshots and the decisions
        re-read from the pairs, as they were made."""
        self.horizons = [int(h) for h in saved["horizons"]]
        self.snapshots = {int(h): v.clone() for h, v in saved["snapshots"].items()}
        self.taken = {int(h): v.clone() for h, v in saved["taken"].items()}
        step = self.grid.state.x.step
        for h in self.horizons:
            if step >= h:
                self._fit(h)
        for index, (cell, data) in enumerate(zip(self.cells, saved["cells"], strict=True)):
            cell.look, cell.horizon, cell.asking = int(data["look"]), int(data["horizon"]), bool(data["asking"])
            cell.refused, cell.rows = str(data["refused"]), int(data["rows"])
            if self.plan.sequential:
                lower = self.lower(index)
                horizons = [h for h in self.plan.witness_steps if h <= cell.horizon]
                cell.slow = lower if lower is not None and len(lower.times) == len(horizons) else None
                if data["decided"]:  # ended: decided, or undecided with what it would need
                    cell.bracket = self._bracket(index, needs="")
                    if cell.bracket.verdict == "undecided":
                        cell.bracket = self._bracket(index, needs=self.needs(index))


def _needed(side: str, looks: tuple[int, ...], look: int, chances: list[float], beyond: int | None, how: str,
            never: str) -> str:
    """``{side}: N pairs {how}``: the first planned look where the chance to have decided reaches 1/2, else the
    fixed-sample estimate ``beyond`` of the plan, else that no number of pairs decides it (``never``)."""
    for k, chance in enumerate(chances):
        if chance >= 0.5:
            return f"{side}: {looks[look + 1 + k]} pairs {how}"
    if beyond is not None:
        return f"{side}: about {max(beyond, looks[look] + 1)} pairs {how}, beyond the {looks[-1]} planned"
    return f"{side}: no number of pairs decides it {never}"


__all__ = ["PLAN_FLOOR", "TRAIN_APART", "DesignPlan", "SequentialDesign"]
