"""Samplers: tempered categorical draws, batched Glauber chains (with optional MH correction), coupled chains,
per-chain counter-based streams, the sweep's grid engine, replica exchange and a Glauber corrector for diffusion
samplers. Meeting times and their statistics are made in :mod:`mlm_dynamics.diagnostics`."""

from .._deprecated import moved
from .blocks import BlockSchedule
from .categorical import check_temperature, sample_categorical, tempered_log_probs
from .corrector import GlauberCorrector
from .coupling import CoupledGlauberChains, CoupledState, lagged_coupling, maximal_coupling, randomize_sites
from .energy import PseudoLogLikelihoodEnergy
from .glauber import SCAN_ORDERS, ChainState, GlauberSampler, StepRecord
from .tempering import ReplicaExchange, TemperingState

__all__ = ["SCAN_ORDERS", "BlockSchedule", "ChainState", "CoupledGlauberChains", "CoupledState", "GlauberCorrector",
           "GlauberSampler", "PseudoLogLikelihoodEnergy", "ReplicaExchange", "StepRecord", "TemperingState",
           "check_temperature", "lagged_coupling", "maximal_coupling", "randomize_sites", "sample_categorical",
           "tempered_log_probs"]

__getattr__ = moved(__name__, {"meeting_times": "mlm_dynamics.diagnostics.meeting:meeting_times",
                               "lagged_meeting_times": "mlm_dynamics.diagnostics.meeting:lagged_meeting_times"})
