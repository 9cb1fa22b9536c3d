"""What a job or a probe spent, phase by phase, in seconds and in forward rows: the cost ledger.

Every forward pass goes through :meth:`~mlm_dynamics.models.base.Denoiser.conditional_logits`, which adds its rows
(sequences) and tokens (sequences x positions) to every :class:`~mlm_dynamics.models.base.Meter` that is open. A
:class:`CostLedger` opens one per phase (:meth:`CostLedger.phase`), so each phase's seconds and forward rows come from
the one door every diagnostic uses, never from a phase's own estimate. A phase may also declare the rows its results
needed (pairs after they met need none), so the ledger shows what was computed for nothing.

The unit that makes costs comparable across machines is one bare forward pass at the job's batch shape, timed in the
same process (:meth:`CostLedger.time_bare_forward`): a job's cost in *forward equivalents* is its seconds divided by
that time, and its *row efficiency* is the rows it needed over the rows the seconds could have computed.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from .base import Denoiser, Meter, metering


@dataclass
class PhaseCost:
    """One phase's bill.

    Attributes:
        seconds: wall-clock seconds inside the phase (summed over its entries).
        forward_rows: sequences through the model; forward_tokens: sequences x positions; forward_calls: passes.
        needed_rows: the rows the phase's results depend on (``None``: all of them).
    """

    seconds: float = 0.0
    forward_rows: int = 0
    forward_tokens: int = 0
    forward_calls: int = 0
    needed_rows: int | None = None

    @property
    def needed(self) -> int:
        """The rows the results needed: :attr:`needed_rows`, or every row computed when the phase did not say."""
        return self.forward_rows if self.needed_rows is None else self.needed_rows


def process_started() -> float:
    """This process's start as a ``time.perf_counter()`` value (Linux ``/proc``: start time since boot against the
    uptime), so a bill can include the interpreter's start and the imports; now where ``/proc`` cannot tell."""
    now = time.perf_counter()
    try:
        ticks = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])
        uptime = float(Path("/proc/uptime").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return now
    age = uptime - ticks / os.sysconf("SC_CLK_TCK")
    return now - age if 0 <= age < 86_400 else now


class CostLedger:
    """Seconds and forward rows per named phase, against a bare forward pass timed in the same run; ``started``: the
    ``time.perf_counter()`` the bill starts from (default: now; the command line passes its own start, so the
    imports are on the bill as ``other``).

    Examples:
        >>> import torch
        >>> from mlm_dynamics import PairwiseMRFDenoiser
        >>> from mlm_dynamics.models.cost import CostLedger
        >>> ising = PairwiseMRFDenoiser.ising_chain(6, coupling=1.0)
        >>> ledger = CostLedger()
        >>> with ledger.phase("chains"):
        ...     _ = ising.conditional_logits(torch.zeros(4, 6, dtype=torch.long), torch.zeros(4, 1, dtype=torch.long))
        >>> ledger.phases["chains"].forward_rows, ledger.phases["chains"].forward_tokens
        (4, 24)
    """

    def __init__(self, started: float | None = None) -> None:
        self.phases: dict[str, PhaseCost] = {}
        self.bare_forward_seconds: float | None = None
        self.bare_forward_shape: tuple[int, int] | None = None
        self.started = time.perf_counter() if started is None else started
        self.scope: str | None = None
        """What the bill covers when it is not the whole job (a resumed run: this process only)."""
        self._open: list[Meter] = []

    @contextmanager
    def phase(self, name: str) -> Iterator[PhaseCost]:
        """Charge the block's seconds and forward passes to phase ``name`` (entering a name again adds to it).
        Nested phases: the inner one is charged, the outer one keeps only its own time and rows."""
        cost = self.phases.setdefault(name, PhaseCost())
        meter, parent = Meter(), self._open[-1] if self._open else None
        self._open.append(meter)
        start = time.perf_counter()
        try:
            with metering(meter):
                yield cost
        finally:
            self._open.pop()
            seconds = time.perf_counter() - start
            cost.seconds += seconds - meter.excluded_seconds
            cost.forward_rows += meter.rows
            cost.forward_tokens += meter.tokens
            cost.forward_calls += meter.calls
            if parent is not None:  # the enclosing phase does not charge this one's work again
                parent.rows -= meter.rows
                parent.tokens -= meter.tokens
                parent.calls -= meter.calls
                parent.excluded_seconds += seconds

    def need(self, name: str, rows: int) -> None:
        """Declare that phase ``name``'s results needed ``rows`` of the rows it computed."""
        cost = self.phases.setdefault(name, PhaseCost())
        cost.needed_rows = rows if cost.needed_rows is None else cost.needed_rows + rows

    @torch.no_grad()
    def time_bare_forward(self, denoiser: Denoiser, tokens: Tensor, attention_mask: Tensor | None = None, *,
                          repeats: int = 3) -> float:
        """Time one bare forward pass at the batch shape of ``tokens [B, L]`` (one masked position per row, the
        chains' shape): the fastest of ``repeats`` passes after one warm-up (the machine's rate when nothing else
        holds it up, as ``timeit`` takes it), charged to phase ``calibration``. Cost: ``(repeats + 1) B`` forward
        rows."""
        positions = denoiser.resampleable_sites(tokens, attention_mask)[:, :1] if attention_mask is None else \
            denoiser.padded_sites(tokens, attention_mask=attention_mask)[0][:, :1]
        times = []
        with self.phase("calibration"):
            for _ in range(repeats + 1):
                start = time.perf_counter()
                denoiser.conditional_logits(tokens, positions, attention_mask)
                if tokens.device.type == "cuda":
                    torch.cuda.synchronize(tokens.device)
                times.append(time.perf_counter() - start)
        self.bare_forward_seconds = min(times[1:])
        self.bare_forward_shape = (int(tokens.shape[0]), int(tokens.shape[1]))
        return self.bare_forward_seconds

    @property
    def total_seconds(self) -> float:
        """Seconds since the ledger was made."""
        return time.perf_counter() - self.started

    def summary(self) -> dict[str, float]:
        """Flat numbers: ``seconds``, ``forward_rows``, ``needed_rows``, ``bare_forward_seconds``,
        ``bare_forward_batch``, ``forward_equivalents`` (seconds over one bare forward), ``row_efficiency`` (needed
        rows over the rows the seconds could have computed at the bare rate: ``<= 1`` up to timing noise where no
        phase runs larger batches than the bare forward's, and above 1 possible where one does, a row being cheaper
        in a larger batch; the jobs time their unit at their main loop's batch), and per
        phase ``{phase}_seconds``, ``{phase}_forward_rows``, ``{phase}_needed_rows``, ``{phase}_forward_equivalents``.
        The equivalents and the efficiency are ``nan`` before :meth:`time_bare_forward`."""
        bare = self.bare_forward_seconds
        batch = self.bare_forward_shape[0] if self.bare_forward_shape else 0
        seconds = self.total_seconds
        needed = sum(cost.needed for cost in self.phases.values())
        out = {"seconds": seconds, "forward_rows": float(sum(c.forward_rows for c in self.phases.values())),
               "needed_rows": float(needed), "bare_forward_seconds": bare if bare else float("nan"),
               "bare_forward_batch": float(batch),
               "forward_equivalents": seconds / bare if bare else float("nan"),
               "row_efficiency": needed / (seconds / bare * batch) if bare else float("nan")}
        for name, cost in self.phases.items():
            out[f"{name}_seconds"] = cost.seconds
            out[f"{name}_forward_rows"] = float(cost.forward_rows)
            out[f"{name}_needed_rows"] = float(cost.needed)
            out[f"{name}_forward_equivalents"] = cost.seconds / bare if bare else float("nan")
        return out

    def table(self) -> list[dict[str, float | str]]:
        """One row per phase (and ``other``: the time no phase took), for reports."""
        bare = self.bare_forward_seconds
        rows: list[dict[str, float | str]] = []
        for name, cost in self.phases.items():
            rows.append({"phase": name, "seconds": round(cost.seconds, 3), "forward_rows": cost.forward_rows,
                         "needed_rows": cost.needed, "forward_tokens": cost.forward_tokens,
                         "forward_equivalents": round(cost.seconds / bare, 1) if bare else float("nan")})
        other = self.total_seconds - sum(cost.seconds for cost in self.phases.values())
        rows.append({"phase": "other", "seconds": round(other, 3), "forward_rows": 0, "needed_rows": 0,
                     "forward_tokens": 0, "forward_equivalents": round(other / bare, 1) if bare else float("nan")})
        return rows

    def record(self) -> dict[str, Any]:
        """The bill for ``report.json`` under ``cost``: :meth:`summary`'s totals, the bare forward's batch shape, one
        row per phase (:meth:`table`) and the one-line account (:meth:`line`)."""
        summary = self.summary()
        totals = {key: summary[key] for key in ("seconds", "forward_equivalents", "bare_forward_seconds",
                                                 "forward_rows", "needed_rows", "row_efficiency")}
        return {**totals, "bare_forward_shape": list(self.bare_forward_shape or ()), "phases": self.table(),
                "scope": self.scope, "line": self.line()}

    @classmethod
    def merged(cls, records: Sequence[Mapping[str, Any]]) -> CostLedger:
        """One ledger from the :meth:`record` of processes that ran side by side (shards): per phase the longest
        seconds and the summed rows, the median bare forward, and the longest total."""
        merged = cls(started=time.perf_counter() - max(float(r["seconds"]) for r in records))
        for record in records:
            for row in record["phases"]:
                if row["phase"] == "other":
                    continue
                cost = merged.phases.setdefault(str(row["phase"]), PhaseCost(needed_rows=0))
                cost.seconds = max(cost.seconds, float(row["seconds"]))
                cost.forward_rows += int(row["forward_rows"])
                cost.forward_tokens += int(row["forward_tokens"])
                cost.needed_rows = (cost.needed_rows or 0) + int(row["needed_rows"])
        bare = [float(r["bare_forward_seconds"]) for r in records if r["bare_forward_shape"]]
        if bare:
            merged.bare_forward_seconds = statistics.median(bare)
            shape = next(r["bare_forward_shape"] for r in records if r["bare_forward_shape"])
            merged.bare_forward_shape = (int(shape[0]), int(shape[1]))
        return merged

    def line(self) -> str:
        """One line: total seconds, forward equivalents, rows needed of rows computed, and the three dearest
        phases."""
        summary = self.summary()
        dearest = sorted(self.phases.items(), key=lambda item: -item[1].seconds)[:3]
        phases = ", ".join(f"{name} {cost.seconds:.1f} s" for name, cost in dearest)
        shape = "x".join(map(str, self.bare_forward_shape)) if self.bare_forward_shape else "?"
        bare = (f" = {summary['forward_equivalents']:.0f} bare forwards of {shape} tokens "
                f"({summary['bare_forward_seconds'] * 1000:.1f} ms each)" if self.bare_forward_seconds else "")
        scope = f" ({self.scope})" if self.scope else ""
        return (f"cost{scope}: {summary['seconds']:.1f} s{bare}; {summary['needed_rows']:.0f} of "
                f"{summary['forward_rows']:.0f} forward rows needed; dearest: {phases}")


__all__ = ["CostLedger", "PhaseCost", "process_started"]
