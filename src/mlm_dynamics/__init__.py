"""Mixing diagnostics for Glauber dynamics on masked language models and discrete-diffusion denoisers."""

from ._version import __version__
from .diagnostics import (
                          InfluenceEstimate,
                          LocalMargins,
                          MeetingTimes,
                          RectangleReport,
                          escape_probability_bound,
                          ess,
                          estimate_influence,
                          local_margins,
                          mixing_time_bound,
                          rectangle_grid,
                          rhat,
                          sample_rectangles,
)
from .models import Denoiser, FullSequenceDenoiser, MaskedLMDenoiser, PairwiseMRFDenoiser, TextCodec, VocabInfo
from .models.toy import enumerate_states
from .sampling import (
                          ChainState,
                          CoupledGlauberChains,
                          GlauberSampler,
                          PseudoLogLikelihoodEnergy,
                          StepRecord,
                          lagged_meeting_times,
                          maximal_coupling,
                          meeting_times,
                          tempered_log_probs,
)

__all__ = [
    "ChainState",
    "CoupledGlauberChains",
    "Denoiser",
    "FullSequenceDenoiser",
    "GlauberSampler",
    "InfluenceEstimate",
    "LocalMargins",
    "MaskedLMDenoiser",
    "MeetingTimes",
    "PairwiseMRFDenoiser",
    "PseudoLogLikelihoodEnergy",
    "RectangleReport",
    "StepRecord",
    "TextCodec",
    "VocabInfo",
    "__version__",
    "enumerate_states",
    "escape_probability_bound",
    "ess",
    "estimate_influence",
    "lagged_meeting_times",
    "local_margins",
    "maximal_coupling",
    "meeting_times",
    "mixing_time_bound",
    "rectangle_grid",
    "rhat",
    "sample_rectangles",
    "tempered_log_probs",
]
