"""Samplers: tempered categorical draws, batched Glauber chains (with optional MH correction), coupled chains,
replica exchange and a Glauber corrector for diffusion samplers."""

from .categorical import check_temperature, sample_categorical, tempered_log_probs
from .corrector import GlauberCorrector
from .coupling import (
    CoupledGlauberChains,
    CoupledState,
    lagged_meeting_times,
    maximal_coupling,
    meeting_times,
    randomize_sites,
)
from .energy import PseudoLogLikelihoodEnergy
from .glauber import SCAN_ORDERS, ChainState, GlauberSampler, StepRecord
from .tempering import ReplicaExchange, TemperingState

__all__ = ["SCAN_ORDERS", "ChainState", "CoupledGlauberChains", "CoupledState", "GlauberCorrector", "GlauberSampler",
           "PseudoLogLikelihoodEnergy", "ReplicaExchange", "StepRecord", "TemperingState", "check_temperature",
           "lagged_meeting_times", "maximal_coupling", "meeting_times", "randomize_sites", "sample_categorical",
           "tempered_log_probs"]
