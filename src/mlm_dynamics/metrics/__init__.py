"""torchmetrics aggregates over :mod:`mlm_dynamics.diagnostics`, with DDP-correct reductions."""

from .aggregates import ChainConvergence, DobrushinCoefficient, DwellTime, MeetingTimeMetric, RectanglePrevalence

__all__ = ["ChainConvergence", "DobrushinCoefficient", "DwellTime", "MeetingTimeMetric", "RectanglePrevalence"]
