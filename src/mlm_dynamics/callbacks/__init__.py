"""Lightning callbacks that log mixing diagnostics and trap detection while a model trains or predicts."""

from .base import DiagnosticCallback, default_batch_to_tokens
from .diagnostics import InfluenceProbe, MixingDiagnostics, RectangleTest, SemanticDrift, TrapDetector

__all__ = ["DiagnosticCallback", "InfluenceProbe", "MixingDiagnostics", "RectangleTest", "SemanticDrift",
           "TrapDetector", "default_batch_to_tokens"]
