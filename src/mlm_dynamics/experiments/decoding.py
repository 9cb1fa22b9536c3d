"""The ``parallel-decoding`` job: how many positions may each model commit in one step?

For every model: ``contexts`` natural rows (antibody sequences for AntiBERTy, held-out sentences for English models,
random states for the toy control, random ids for a diffusion LM), in each a window of ``window`` consecutive
resampled positions at a random offset, masked (the masked start of a decode). The window's ``n`` most confident
positions are committed at once and one at a time, for ``n = 1 .. window``
(:func:`~mlm_dynamics.diagnostics.parallel.confidence_profile`): the error (total variation between the two laws,
exact where the tree is small, else Monte Carlo), its influence estimate and the Frechet-Hoeffding certificate; the
confidence rules at every threshold, factor and Frechet level of the config commit their sets, which are checked
against their certificates; for each target error, the largest K (and the threshold) that kept it.

Each row's interval is at level ``1 - (1 - level) / contexts`` (Bonferroni), so the interval of the mean over the
rows (mean of the lower ends to mean of the upper ends) covers the mean error over these contexts at ``level``.
The compatible toy control must never violate a certificate.
"""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import torch

from .._random import as_generator
from ..corpus import sample_sentences
from ..diagnostics.parallel import RULES, ConfidenceProfile, confidence_profile, random_window
from ..models.base import Denoiser
from ..models.cost import CostLedger
from ..models.families import load_diffusion_lm
from ..models.pretrained import EXAMPLE_ANTIBODIES
from ..models.toy import PairwiseMRFDenoiser
from .common import build_model
from .config import MODEL_SOURCES, ConfigError, ModelConfig, check_device, check_seed, require

SOURCES = (*MODEL_SOURCES, "diffusion", "toy-compatible")


@dataclass
class DecodingModel:
    """One model: ``source`` is a model source of the ``run`` job, ``diffusion`` (a diffusion-LM directory or hub
    name in ``name_or_path``, loaded with :func:`~mlm_dynamics.load_diffusion_lm`; ``trust_remote_code`` lets its own
    code run) or ``toy-compatible`` (a Gibbs field's exact conditionals: the control)."""

    name: str
    source: str
    name_or_path: str | None = None
    trust_remote_code: bool = False


@dataclass
class ParallelDecodingConfig:
    """The ``parallel-decoding`` job (module docstring). ``thresholds``, ``factors``, ``frechet``: the parameters
    of the threshold, factor and Frechet rules checked; ``targets``: the errors a K is sought for; ``samples``:
    Monte Carlo draws per row where enumeration costs more; ``top_m``: values per position of the influence
    estimate; ``length``: the row length of a diffusion LM without a tokenizer, and of the toy. ``prompts``: a text
    file of the user's prompts, one per line: a diffusion LM's rows are then the first ``contexts`` of them (cut from
    the left to the shortest) followed by ``length`` masked positions, as a sampler starts, and the window is the
    first ``window`` of those (instead of random ids and a random window)."""

    JOB: ClassVar[str] = "parallel-decoding"

    models: list[DecodingModel] = field(default_factory=lambda: [
        DecodingModel("AntiBERTy", "antiberty"), DecodingModel("toy MRF, compatible", "toy-compatible")])
    contexts: int = 2
    window: int = 8
    temperature: float = 1.0
    thresholds: list[float] = field(default_factory=lambda: [0.5, 0.7, 0.8, 0.9, 0.95, 0.99])
    factors: list[float] = field(default_factory=lambda: [0.5, 1.0, 2.0])
    frechet: list[float] = field(default_factory=lambda: [0.05, 0.1, 0.2])
    targets: list[float] = field(default_factory=lambda: [0.01, 0.05, 0.1])
    samples: int = 32
    top_m: int = 4
    level: float = 0.95
    length: int = 16
    device: str = "cpu"
    seed: int = 0
    prompts: str | None = None

    def validate(self) -> None:
        """Raise :class:`ConfigError` naming the first bad key."""
        require(len(self.models) > 0, "models", "be a non-empty list", self.models)
        names = [model.name for model in self.models]
        require(len(set(names)) == len(names), "models", "have distinct names (each is one series of the figures)",
                names)
        for k, model in enumerate(self.models):
            require(model.source in SOURCES, f"models[{k}].source", f"be one of {list(SOURCES)}", model.source)
            if model.source in MODEL_SOURCES:
                ModelConfig(model.source, model.name_or_path, None, self.device).validate(f"models[{k}]")
            if model.source == "diffusion":
                require(bool(model.name_or_path), f"models[{k}].name_or_path", "be set for a diffusion LM",
                        model.name_or_path)
        require(self.contexts >= 1, "contexts", "be >= 1", self.contexts)
        require(2 <= self.window <= 12, "window", "lie in [2, 12] (the rules' K)", self.window)
        require(self.temperature > 0, "temperature", "be > 0", self.temperature)
        for key in ("thresholds", "frechet"):
            values = getattr(self, key)
            require(all(0 < v < 1 for v in values), key, "be numbers in (0, 1)", values)
        require(all(v > 0 for v in self.factors), "factors", "be numbers > 0", self.factors)
        require(len(self.targets) > 0 and all(0 < v < 1 for v in self.targets), "targets",
                "be a non-empty list of errors in (0, 1)", self.targets)
        require(self.samples >= 2, "samples", "be >= 2", self.samples)
        require(self.top_m >= 1, "top_m", "be >= 1", self.top_m)
        require(0 < self.level < 1, "level", "lie in (0, 1)", self.level)
        require(self.length >= self.window + 2, "length", f"be >= window + 2 = {self.window + 2}", self.length)
        check_seed("seed", self.seed)
        check_device("device", self.device)
        if self.prompts is not None:
            lines = prompt_lines(self.prompts)
            require(len(lines) >= self.contexts, "prompts", f"hold at least contexts = {self.contexts} non-empty "
                    f"lines (one prompt each)", f"{len(lines)} in {self.prompts}")
            require(any(model.source == "diffusion" for model in self.models), "prompts",
                    "go with a diffusion LM among the models (source: diffusion)", self.prompts)
            require(self.length >= self.window, "length", f"be >= window = {self.window}: the masked positions after "
                    "each prompt", self.length)

    def rules(self) -> list[tuple[str, float]]:
        """Every ``(rule, parameter)`` the job checks, in :data:`~mlm_dynamics.diagnostics.parallel.RULES` order."""
        parameters = {"threshold": self.thresholds, "factor": self.factors, "frechet": self.frechet}
        return [(rule, float(value)) for rule in RULES for value in parameters[rule]]


@dataclass
class DecodingResult:
    """One model's profile (``profile``: rows = contexts) and how it was measured."""

    name: str
    source: str
    profile: ConfidenceProfile

    def summary(self) -> dict[str, float | str]:
        """``model``, ``source`` and :meth:`ConfidenceProfile.summary`, with ``tv_low_k{n}`` beside ``tv_high_k{n}``."""
        out: dict[str, float | str] = {"model": self.name, "source": self.source, **self.profile.summary()}
        for n in range(1, self.profile.max_k + 1):
            out[f"tv_low_k{n}"] = float(self.profile.tv_low[:, n - 1].mean())
        return out


def run_parallel_decoding(config: ParallelDecodingConfig, *, ledger: CostLedger | None = None
                          ) -> list[DecodingResult]:
    """The profile of each model of ``config.models`` with one protocol. Each model's loading and profile are charged
    to ``ledger`` (phases ``{name}: load`` and ``{name}: profile``); its bare forward is the first model's, at its
    contexts' rows."""
    config.validate()
    results = []
    for spec in config.models:
        with nullcontext() if ledger is None else ledger.phase(f"{spec.name}: load"):
            denoiser, rows, candidates = _rows(spec, config)
        if ledger is not None and ledger.bare_forward_seconds is None:
            ledger.time_bare_forward(denoiser, rows)
        generator = as_generator(config.seed, "parallel-decoding", spec.name, device=denoiser.device)
        if candidates is None:
            sites, counts = denoiser.padded_sites(rows)
            if int(counts.min()) < config.window:
                raise ConfigError(f"window: {config.window} positions do not fit in a {spec.name} row with "
                                  f"{int(counts.min())} resampled positions")
            candidates = random_window(sites, counts, config.window, generator)
        with nullcontext() if ledger is None else ledger.phase(f"{spec.name}: profile"):
            profile = confidence_profile(denoiser, rows, candidates, max_k=config.window, rules=config.rules(),
                                         targets=config.targets, temperature=config.temperature,
                                         samples=config.samples, top_m=config.top_m,
                                         level=1 - (1 - config.level) / len(rows), generator=generator)
        results.append(DecodingResult(spec.name, spec.source, profile))
    return results


def prompt_lines(path: str) -> list[str]:
    """The non-empty lines of the prompts file; a :class:`ConfigError` naming ``prompts`` if it cannot be read."""
    try:
        text = Path(path).expanduser().read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise ConfigError(f"prompts: {path} cannot be read ({getattr(error, 'strerror', None) or error})") from None
    return [line.strip() for line in text.splitlines() if line.strip()]


def _rows(spec: DecodingModel, config: ParallelDecodingConfig) -> tuple[Denoiser, torch.Tensor, torch.Tensor | None]:
    """The model, its ``[contexts, L]`` rows (natural ones cut to a common length) and, for prompts, the window
    to measure (``None``: a random one)."""
    if spec.source == "toy-compatible":
        toy = PairwiseMRFDenoiser.random(config.length, 2, scale=1.0, compatible=True,
                                         generator=as_generator(config.seed, "toy-model")).to(config.device)
        states = torch.randint(2, (config.contexts, config.length), generator=as_generator(config.seed, "toy-rows"))
        return toy, states.to(config.device), None
    if spec.source == "diffusion":
        assert spec.name_or_path is not None  # validated
        try:
            denoiser, tokenizer = load_diffusion_lm(spec.name_or_path, trust_remote_code=spec.trust_remote_code,
                                                    device=config.device)
        except (OSError, ValueError) as error:
            raise ConfigError(f"models: {spec.name}: {error}") from None
        if config.prompts is not None:
            return (denoiser, *_prompt_rows(denoiser, tokenizer, spec, config))
        allowed = denoiser.vocab.allowed_mask().nonzero().squeeze(1)
        # neither frame ids nor the padding id (LLaDA's and Dream's EOS): a random row with EOS before the window
        # would read as a right-padded prompt, which the adapters warn about
        left_out = {*denoiser.vocab.frame_ids, getattr(denoiser, "padding_id", None)}
        allowed = torch.tensor([int(i) for i in allowed if int(i) not in left_out])
        pick = torch.randint(len(allowed), (config.contexts, config.length),
                             generator=as_generator(config.seed, "diffusion-rows"))
        return denoiser, allowed[pick].to(config.device), None
    denoiser, codec = build_model(ModelConfig(spec.source, spec.name_or_path, None, config.device))
    if spec.source == "antiberty":
        texts = [EXAMPLE_ANTIBODIES[k % len(EXAMPLE_ANTIBODIES)] for k in range(config.contexts)]
    else:
        texts = sample_sentences(config.contexts, config.seed, split="heldout")
    encoded = [codec.encode(text) for text in texts]
    shortest = min(len(e) for e in encoded)
    return denoiser, torch.tensor([e[:shortest - 1] + e[-1:] for e in encoded], device=denoiser.device), None


def _prompt_rows(denoiser: Denoiser, tokenizer: Any, spec: DecodingModel, config: ParallelDecodingConfig
                 ) -> tuple[torch.Tensor, torch.Tensor]:
    """The first ``contexts`` prompts, tokenised and cut from the left to the shortest, each followed by ``length``
    masked positions (a sampler's start), and the first ``window`` of those as every row's window."""
    assert config.prompts is not None and denoiser.vocab.mask_id is not None
    if tokenizer is None:
        raise ConfigError(f"prompts: the model {spec.name!r} has no tokenizer to read them with; leave prompts out "
                          "(random rows) or give a model folder with its tokenizer")
    encoded = [list(tokenizer(text)["input_ids"]) for text in prompt_lines(config.prompts)[:config.contexts]]
    shortest = min(len(ids) for ids in encoded)
    if shortest == 0:
        raise ConfigError(f"prompts: a line of {config.prompts} tokenises to nothing")
    rows = torch.tensor([ids[len(ids) - shortest:] + [denoiser.vocab.mask_id] * config.length for ids in encoded],
                        device=denoiser.device)
    window = torch.arange(shortest, shortest + config.window, device=denoiser.device)
    return rows, window.expand(len(rows), -1)


__all__ = ["SOURCES", "DecodingModel", "DecodingResult", "ParallelDecodingConfig", "prompt_lines",
           "run_parallel_decoding"]
