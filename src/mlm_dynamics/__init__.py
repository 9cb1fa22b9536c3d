"""Mixing diagnostics for Glauber dynamics on masked language models."""

from .coupling import CoupledGlauberChains, MeetingTimes, lagged_meeting_times, maximal_coupling, meeting_times
from .denoiser import Denoiser, FullSequenceDenoiser, MaskedLMDenoiser, TextCodec, VocabInfo
from .glauber import ChainState, GlauberSampler, PseudoLogLikelihoodEnergy, StepRecord, tempered_log_probs
from .influence import InfluenceEstimate, estimate_influence, mixing_time_bound
from .margin import LocalMargins, escape_probability_bound, local_margins
from .rectangle import RectangleReport, rectangle_grid, sample_rectangles
from .toy import PairwiseMRFDenoiser, enumerate_states

__version__ = "0.1.0"

__all__ = [
    "ChainState",
    "CoupledGlauberChains",
    "InfluenceEstimate",
    "LocalMargins",
    "MeetingTimes",
    "RectangleReport",
    "escape_probability_bound",
    "estimate_influence",
    "lagged_meeting_times",
    "local_margins",
    "maximal_coupling",
    "meeting_times",
    "mixing_time_bound",
    "rectangle_grid",
    "sample_rectangles",
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
