"""Mixing diagnostics for Glauber dynamics on masked language models and discrete-diffusion denoisers.

The top level holds what users reach for, grouped as in the documentation: denoisers and their loaders, samplers,
on-the-fly monitoring (``ChainMonitor``, Lightning callbacks, torchmetrics metrics, the framework-free
``ScheduledProbe``), the diagnostics' functions and results, and the jobs with their configs. Helpers stay in their
subpackages (``mlm_dynamics.sampling``, ``.diagnostics``, ...). Names are imported on first use (PEP 562), so
``import mlm_dynamics`` does not load Lightning, transformers or the jobs until one of their names is used.
"""

from __future__ import annotations

import importlib
import warnings
from typing import TYPE_CHECKING, Any

from ._version import __version__

# public name -> the module that defines it
_EXPORTS: dict[str, str] = {
    # denoisers and loaders
    "Denoiser": "models.base", "VocabInfo": "models.base",
    "MaskedLMDenoiser": "models.huggingface", "TextCodec": "models.huggingface",
    "FullSequenceDenoiser": "models.full_sequence", "PairwiseMRFDenoiser": "models.toy",
    "denoiser_for": "models.families", "load_diffusion_lm": "models.families", "CostLedger": "models.cost",
    "ResidueCodec": "models.pretrained", "load_antiberty": "models.pretrained",
    "load_english_mlm": "models.pretrained",
    # samplers and randomness
    "GlauberSampler": "sampling.glauber", "CoupledGlauberChains": "sampling.coupling",
    "ReplicaExchange": "sampling.tempering", "GlauberCorrector": "sampling.corrector",
    "BlockSchedule": "sampling.blocks",
    "Randomness": "_random", "as_generator": "_random",
    # monitoring during training and inference
    "ChainMonitor": "tracking.monitor", "TrapTracker": "tracking.traps", "TrapIntervention": "tracking.interventions",
    "monitor_sampler": "tracking.sampler_monitor", "decode_agreement": "tracking.sampler_monitor",
    "HiddenStateEmbedder": "embedders.base", "SentenceEmbedder": "embedders.base",
    "ScheduledProbe": "probes.base",
    "MixingDiagnostics": "callbacks.diagnostics", "RectangleTest": "callbacks.diagnostics",
    "InfluenceProbe": "callbacks.diagnostics", "SemanticDrift": "callbacks.diagnostics",
    "TrapDetector": "callbacks.diagnostics", "ParallelDecoding": "callbacks.diagnostics",
    "MeetingTimeMetric": "metrics.aggregates", "RectanglePrevalence": "metrics.aggregates",
    "DobrushinCoefficient": "metrics.aggregates", "ChainConvergence": "metrics.aggregates",
    "DwellTime": "metrics.aggregates", "EffectiveTemperature": "metrics.aggregates",
    "DecodingQuality": "metrics.aggregates",
    # diagnostics
    "MeetingTimes": "diagnostics.meeting", "meeting_times": "diagnostics.meeting",
    "lagged_meeting_times": "diagnostics.meeting",
    "RectangleReport": "diagnostics.rectangle", "sample_rectangles": "diagnostics.rectangle",
    "InfluenceEstimate": "diagnostics.influence", "estimate_influence": "diagnostics.influence",
    "ParallelCommitError": "diagnostics.parallel", "parallel_commit_error": "diagnostics.parallel",
    "confidence_profile": "diagnostics.parallel", "first_order_error": "diagnostics.parallel",
    "greedy_commit_error": "diagnostics.parallel",
    "LocalMargins": "diagnostics.margins", "local_margins": "diagnostics.margins",
    "MixingLowerBound": "diagnostics.witness", "mixing_lower_bound": "diagnostics.witness",
    "Witness": "diagnostics.witness",
    "ScalingFit": "diagnostics.scaling", "fit_scaling": "diagnostics.scaling",
    "rhat": "diagnostics.convergence", "ess": "diagnostics.convergence",
    # jobs and their configs
    "load_config": "experiments.config", "RunConfig": "experiments.config", "SweepConfig": "experiments.config",
    "run_chains": "experiments.run", "run_sweep": "experiments.sweep",
    "CaseStudyConfig": "experiments.semantics", "run_case_study": "experiments.semantics",
    "RectangleTableConfig": "experiments.rectangles", "run_rectangle_table": "experiments.rectangles",
}

# old top-level names, importable with a DeprecationWarning until the next release: name -> where it lives now
_DEPRECATED: dict[str, str] = {
    "ChainState": "sampling.glauber", "StepRecord": "sampling.glauber",
    "PseudoLogLikelihoodEnergy": "sampling.energy", "tempered_log_probs": "sampling.categorical",
    "maximal_coupling": "sampling.coupling", "enumerate_states": "models.toy",
    "escape_probability_bound": "diagnostics.margins", "mixing_time_bound": "diagnostics.influence",
    "rectangle_grid": "diagnostics.rectangle",
}

__all__ = [
    "BlockSchedule",
    "CaseStudyConfig",
    "ChainConvergence",
    "ChainMonitor",
    "CostLedger",
    "CoupledGlauberChains",
    "DecodingQuality",
    "Denoiser",
    "DobrushinCoefficient",
    "DwellTime",
    "EffectiveTemperature",
    "FullSequenceDenoiser",
    "GlauberCorrector",
    "GlauberSampler",
    "HiddenStateEmbedder",
    "InfluenceEstimate",
    "InfluenceProbe",
    "LocalMargins",
    "MaskedLMDenoiser",
    "MeetingTimeMetric",
    "MeetingTimes",
    "MixingDiagnostics",
    "MixingLowerBound",
    "PairwiseMRFDenoiser",
    "ParallelCommitError",
    "ParallelDecoding",
    "Randomness",
    "RectanglePrevalence",
    "RectangleReport",
    "RectangleTableConfig",
    "RectangleTest",
    "ReplicaExchange",
    "ResidueCodec",
    "RunConfig",
    "ScalingFit",
    "ScheduledProbe",
    "SemanticDrift",
    "SentenceEmbedder",
    "SweepConfig",
    "TextCodec",
    "TrapDetector",
    "TrapIntervention",
    "TrapTracker",
    "VocabInfo",
    "Witness",
    "__version__",
    "as_generator",
    "confidence_profile",
    "decode_agreement",
    "denoiser_for",
    "ess",
    "estimate_influence",
    "first_order_error",
    "fit_scaling",
    "greedy_commit_error",
    "lagged_meeting_times",
    "load_antiberty",
    "load_config",
    "load_diffusion_lm",
    "load_english_mlm",
    "local_margins",
    "meeting_times",
    "mixing_lower_bound",
    "monitor_sampler",
    "parallel_commit_error",
    "rhat",
    "run_case_study",
    "run_chains",
    "run_rectangle_table",
    "run_sweep",
    "sample_rectangles",
]


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        value = getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    elif name in _DEPRECATED:
        where = f"{__name__}.{_DEPRECATED[name]}"
        warnings.warn(f"mlm_dynamics.{name} is no longer exported at the top level; import it from {where} (the old "
                      "name goes in the next release)", DeprecationWarning, stacklevel=2)
        return getattr(importlib.import_module(where), name)
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value  # later uses skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


if TYPE_CHECKING:  # the same names, for type checkers and IDEs
    from ._random import Randomness, as_generator
    from .callbacks.diagnostics import (
        InfluenceProbe,
        MixingDiagnostics,
        ParallelDecoding,
        RectangleTest,
        SemanticDrift,
        TrapDetector,
    )
    from .diagnostics.convergence import ess, rhat
    from .diagnostics.influence import InfluenceEstimate, estimate_influence
    from .diagnostics.margins import LocalMargins, local_margins
    from .diagnostics.meeting import MeetingTimes, lagged_meeting_times, meeting_times
    from .diagnostics.parallel import (
        ParallelCommitError,
        confidence_profile,
        first_order_error,
        greedy_commit_error,
        parallel_commit_error,
    )
    from .diagnostics.rectangle import RectangleReport, sample_rectangles
    from .diagnostics.scaling import ScalingFit, fit_scaling
    from .diagnostics.witness import MixingLowerBound, Witness, mixing_lower_bound
    from .embedders.base import HiddenStateEmbedder, SentenceEmbedder
    from .experiments.config import RunConfig, SweepConfig, load_config
    from .experiments.rectangles import RectangleTableConfig, run_rectangle_table
    from .experiments.run import run_chains
    from .experiments.semantics import CaseStudyConfig, run_case_study
    from .experiments.sweep import run_sweep
    from .metrics.aggregates import (
        ChainConvergence,
        DecodingQuality,
        DobrushinCoefficient,
        DwellTime,
        EffectiveTemperature,
        MeetingTimeMetric,
        RectanglePrevalence,
    )
    from .models.base import Denoiser, VocabInfo
    from .models.families import denoiser_for, load_diffusion_lm
    from .models.full_sequence import FullSequenceDenoiser
    from .models.huggingface import MaskedLMDenoiser, TextCodec
    from .models.pretrained import ResidueCodec, load_antiberty, load_english_mlm
    from .models.toy import PairwiseMRFDenoiser
    from .probes.base import ScheduledProbe
    from .sampling.blocks import BlockSchedule
    from .sampling.corrector import GlauberCorrector
    from .sampling.coupling import CoupledGlauberChains
    from .sampling.glauber import GlauberSampler
    from .sampling.tempering import ReplicaExchange
    from .tracking.interventions import TrapIntervention
    from .tracking.monitor import ChainMonitor
    from .tracking.sampler_monitor import decode_agreement, monitor_sampler
    from .tracking.traps import TrapTracker
