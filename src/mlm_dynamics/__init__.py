"""Mixing diagnostics for Glauber dynamics on masked language models."""

from .denoiser import Denoiser, FullSequenceDenoiser, MaskedLMDenoiser, TextCodec, VocabInfo
from .glauber import ChainState, GlauberSampler, PseudoLogLikelihoodEnergy, StepRecord, tempered_log_probs
from .toy import PairwiseMRFDenoiser, enumerate_states

__version__ = "0.1.0"

__all__ = [
    "ChainState",
    "Denoiser",
    "FullSequenceDenoiser",
    "GlauberSampler",
    "MaskedLMDenoiser",
    "PairwiseMRFDenoiser",
    "PseudoLogLikelihoodEnergy",
    "StepRecord",
    "TextCodec",
    "VocabInfo",
    "enumerate_states",
    "tempered_log_probs",
]
