"""The public API: the top-level names are pinned, every package declares ``__all__``, old names still resolve (with
a DeprecationWarning), imports stay light, and no library code seeds the global random state."""

import importlib
import pkgutil
import re
import subprocess
import sys
from pathlib import Path

import pytest

import mlm_dynamics

PUBLIC = {
    # denoisers and loaders
    "Denoiser", "VocabInfo", "MaskedLMDenoiser", "TextCodec", "FullSequenceDenoiser", "PairwiseMRFDenoiser",
    "ResidueCodec", "load_antiberty", "load_english_mlm", "denoiser_for", "load_diffusion_lm", "CostLedger",
    # samplers and randomness
    "GlauberSampler", "CoupledGlauberChains", "ReplicaExchange", "GlauberCorrector", "Randomness", "as_generator",
    "BlockSchedule",
    # monitoring
    "ChainMonitor", "TrapTracker", "TrapIntervention", "HiddenStateEmbedder", "SentenceEmbedder", "ScheduledProbe",
    "monitor_sampler", "decode_agreement",
    "MixingDiagnostics", "RectangleTest", "InfluenceProbe", "SemanticDrift", "TrapDetector", "ParallelDecoding",
    "MeetingTimeMetric", "RectanglePrevalence", "DobrushinCoefficient", "ChainConvergence", "DwellTime",
    "EffectiveTemperature", "DecodingQuality",
    # diagnostics
    "MeetingTimes", "meeting_times", "lagged_meeting_times", "RectangleReport", "sample_rectangles",
    "InfluenceEstimate", "estimate_influence", "LocalMargins", "local_margins", "ScalingFit", "fit_scaling", "rhat",
    "ess", "ParallelCommitError", "parallel_commit_error", "confidence_profile", "first_order_error",
    "greedy_commit_error", "MixingLowerBound",
    "mixing_lower_bound", "Witness",
    # jobs
    "load_config", "RunConfig", "SweepConfig", "run_chains", "run_sweep", "CaseStudyConfig", "run_case_study",
    "RectangleTableConfig", "run_rectangle_table",
    "__version__",
}

DEPRECATED = {
    "ChainState": "mlm_dynamics.sampling", "StepRecord": "mlm_dynamics.sampling",
    "PseudoLogLikelihoodEnergy": "mlm_dynamics.sampling", "tempered_log_probs": "mlm_dynamics.sampling",
    "maximal_coupling": "mlm_dynamics.sampling", "enumerate_states": "mlm_dynamics.models.toy",
    "escape_probability_bound": "mlm_dynamics.diagnostics", "mixing_time_bound": "mlm_dynamics.diagnostics",
    "rectangle_grid": "mlm_dynamics.diagnostics",
}

SRC = Path(mlm_dynamics.__file__).parent


def test_top_level_names_are_pinned_and_resolve():
    assert set(mlm_dynamics.__all__) == PUBLIC
    assert sorted(mlm_dynamics.__all__) == mlm_dynamics.__all__
    for name in PUBLIC:
        assert getattr(mlm_dynamics, name) is not None, name
    assert set(dir(mlm_dynamics)) >= PUBLIC


def test_every_package_declares_what_it_exports():
    for info in pkgutil.walk_packages([str(SRC)], prefix="mlm_dynamics."):
        module = importlib.import_module(info.name)
        assert hasattr(module, "__all__"), f"{info.name} has no __all__"
        for name in module.__all__:
            assert hasattr(module, name), f"{info.name}.__all__ names {name!r}, which it does not have"


@pytest.mark.parametrize(("name", "home"), sorted(DEPRECATED.items()))
def test_old_top_level_names_warn_and_give_the_same_object(name, home):
    with pytest.warns(DeprecationWarning, match=f"mlm_dynamics.{name} is no longer exported"):
        old = getattr(mlm_dynamics, name)
    assert old is getattr(importlib.import_module(home), name)


@pytest.mark.parametrize(("module", "name", "home"), [
    ("mlm_dynamics.sampling", "meeting_times", "mlm_dynamics.diagnostics.meeting"),
    ("mlm_dynamics.sampling", "lagged_meeting_times", "mlm_dynamics.diagnostics.meeting"),
    ("mlm_dynamics.models.exact", "glauber_transition_matrix", "mlm_dynamics.sampling.exact"),
    ("mlm_dynamics.models.exact", "state_index", "mlm_dynamics.sampling.exact"),
])
def test_moved_names_warn_and_give_the_same_object(module, name, home):
    with pytest.warns(DeprecationWarning, match="moved to"):
        old = getattr(importlib.import_module(module), name)
    assert old is getattr(importlib.import_module(home), name)


def test_unknown_top_level_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="no attribute 'GlauberSamplr'"):
        _ = mlm_dynamics.GlauberSamplr


def loaded_after(statement: str) -> set[str]:
    """The modules a fresh interpreter has loaded after ``statement``."""
    code = f"import sys; {statement}; print('\\n'.join(sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    return set(out.split())


def test_imports_stay_light():
    """``import mlm_dynamics`` loads no framework; the callbacks load Lightning but none of the jobs (OmegaConf,
    checkpoints, configs)."""
    root = loaded_after("import mlm_dynamics")
    assert not {"lightning", "transformers", "matplotlib", "omegaconf"} & root
    assert not any(m.startswith("mlm_dynamics.") and m != "mlm_dynamics._version" for m in root)
    callbacks = loaded_after("import mlm_dynamics.callbacks")
    assert "lightning" in callbacks
    assert not {m for m in callbacks if m.startswith(("mlm_dynamics.experiments", "mlm_dynamics.launch", "omegaconf"))}
    cli = loaded_after("import mlm_dynamics.cli")
    assert "lightning" not in cli  # only a sharded sweep loads it, to launch processes


GLOBAL_SEEDING = re.compile(r"\b(torch\.(random\.)?manual_seed|torch\.cuda\.manual_seed(_all)?|np\.random\.seed|"
                            r"numpy\.random\.seed|random\.seed|seed_everything|set_seed)\s*\(")


def test_no_library_code_seeds_the_global_random_state():
    offenders = [f"{path.relative_to(SRC)}:{number}: {line.strip()}"
                 for path in SRC.rglob("*.py")
                 for number, line in enumerate(path.read_text().splitlines(), 1) if GLOBAL_SEEDING.search(line)]
    assert not offenders, offenders
