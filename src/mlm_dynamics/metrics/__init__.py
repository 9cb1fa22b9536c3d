"""torchmetrics aggregates over :mod:`mlm_dynamics.diagnostics`, with DDP-correct reductions."""

from .aggregates import (
    ChainConvergence,
    DecodingQuality,
    DobrushinCoefficient,
    DwellTime,
    EffectiveTemperature,
    MeetingTimeMetric,
    MixingLowerBoundMetric,
    RectanglePrevalence,
)

__all__ = ["ChainConvergence", "DecodingQuality", "DobrushinCoefficient", "DwellTime", "EffectiveTemperature",
           "MeetingTimeMetric", "MixingLowerBoundMetric", "RectanglePrevalence"]
