"""Lightning callbacks that log mixing diagnostics and trap detection while a model trains or predicts; thin
adapters over :mod:`mlm_dynamics.probes`."""

from .base import DiagnosticCallback
from .diagnostics import (
    InfluenceProbe,
    MixingDiagnostics,
    ParallelDecoding,
    RectangleTest,
    SemanticDrift,
    TrapDetector,
)

__all__ = ["DiagnosticCallback", "InfluenceProbe", "MixingDiagnostics", "ParallelDecoding", "RectangleTest",
           "SemanticDrift", "TrapDetector"]
