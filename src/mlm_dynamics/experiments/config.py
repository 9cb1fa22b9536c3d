"""Typed job configuration: dataclasses, YAML files and dotted ``key=value`` overrides through OmegaConf.

``load_config(RunConfig, path, overrides)`` merges the defaults, the YAML file and the overrides; OmegaConf rejects
unknown keys, wrong types (``temperatures: [true]``, ``seed: abc``, ``window: [93.5, 100]``) and duplicate YAML keys,
naming the full key. :meth:`RunConfig.validate` then checks ranges and combinations, again naming the key, all
before any model is loaded.

``path`` is a YAML file or the name of a preset shipped in the package (:func:`presets`: ``antiberty-default``,
``sweep-ising``, ...). Relative file paths inside a config file (``topics``, a local ``model.name_or_path``) resolve
against the config file's folder when they exist there, so a config and its data files travel together.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, TypeVar

import torch
import yaml
from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException, ValidationError

from ..models.base import available_device
from ..sampling.glauber import SCAN_ORDERS
from ..sampling.grid import START_KINDS

PRESETS = Path(__file__).resolve().parents[1] / "presets"
MODEL_SOURCES = ("antiberty", "english", "huggingface")
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


class ConfigError(ValueError):
    """A configuration value is missing, mistyped or out of range; the message names the key."""


def require(condition: bool, key: str, requirement: str, value: Any) -> None:
    """Raise :class:`ConfigError` ``"{key} must {requirement}, got {value!r}"`` unless ``condition``."""
    if not condition:
        raise ConfigError(f"{key} must {requirement}, got {value!r}")


def check_seed(key: str, seed: int) -> None:
    """A ConfigError naming ``key`` unless ``0 <= seed < 2^62`` (what a torch generator takes, with room for the seeds
    a job derives from it)."""
    require(0 <= seed < 2**62, key, "be in [0, 2^62)", seed)


def check_device(key: str, device: str) -> torch.device:
    """``torch.device(device)``, or a :class:`ConfigError` if it does not parse or is not present here
    (:func:`~mlm_dynamics.models.base.available_device`)."""
    try:
        return available_device(device, key)
    except ValueError as error:
        raise ConfigError(str(error)) from None


def _positive_temperatures(key: str, values: Sequence[float]) -> None:
    require(len(values) > 0 and all(math.isfinite(t) and t > 0 for t in values), key,
            "be a non-empty list of finite numbers > 0", list(values))


@dataclass
class ModelConfig:
    """``source``: ``antiberty`` (bundled), ``english`` (the bundled English MLM) or ``huggingface``
    (``name_or_path``: hub name or local directory);
    ``dtype`` of the weights: ``float32``, ``bfloat16`` or ``float16`` (sampling itself stays float64)."""

    source: str = "antiberty"
    name_or_path: str | None = None
    num_layers: int | None = None
    device: str = "cpu"
    dtype: str = "float32"

    def validate(self, key: str = "model") -> None:
        """Raise :class:`ConfigError` naming ``{key}.<field>`` for the first value that is out of range."""
        require(self.source in MODEL_SOURCES, f"{key}.source", f"be one of {list(MODEL_SOURCES)}", self.source)
        require(self.dtype in DTYPES, f"{key}.dtype", f"be one of {list(DTYPES)}", self.dtype)
        if self.source == "huggingface":
            require(bool(self.name_or_path), f"{key}.name_or_path", "be set when model.source is 'huggingface'",
                    self.name_or_path)
        require(self.num_layers is None or self.num_layers >= 1, f"{key}.num_layers", "be >= 1 or null",
                self.num_layers)
        check_device(f"{key}.device", self.device)


@dataclass
class ChainsConfig:
    """Start sequences (cycled over ``num_chains`` chains; the chains split into equal blocks, one per temperature of
    the run's ladder, all in one batch) and the ``[start, stop)`` window of resampled sites. ``crop``: resampleable
    tokens of context kept on each side of the window, or ``null`` for the whole sequence. Cropping makes forwards
    cheaper, but the model no longer sees the rest and, with absolute position embeddings, sees the window at other
    positions."""

    sequences: list[str] | None = None
    num_chains: int = 8
    window: list[int] | None = None
    crop: int | None = None
    seed: int = 0

    def validate(self, key: str = "chains") -> None:
        """Raise :class:`ConfigError` naming ``{key}.<field>`` for the first value that is out of range."""
        require(self.sequences is None or (len(self.sequences) > 0 and all(s.strip() for s in self.sequences)),
                f"{key}.sequences", "be a non-empty list of non-empty strings or null", self.sequences)
        require(self.num_chains >= 1, f"{key}.num_chains", "be >= 1", self.num_chains)
        if self.window is not None:
            require(len(self.window) == 2 and 0 <= self.window[0] < self.window[1], f"{key}.window",
                    "be [start, stop) with 0 <= start < stop", self.window)
        if self.crop is not None:
            require(self.crop >= 0, f"{key}.crop", "be >= 0 or null", self.crop)
            require(self.window is not None, f"{key}.crop", "come with a chains.window to crop around", self.crop)
        check_seed(f"{key}.seed", self.seed)


@dataclass
class SamplerConfig:
    """:class:`~mlm_dynamics.GlauberSampler` options (the temperatures are the run's ladder, ``temperatures``)."""

    scan: str = "random"
    block_size: int = 1
    top_k: int | None = None
    top_p: float | None = None

    def validate(self, key: str = "sampler") -> None:
        """Raise :class:`ConfigError` naming ``{key}.<field>`` for the first value that is out of range."""
        require(self.scan in SCAN_ORDERS, f"{key}.scan", f"be one of {list(SCAN_ORDERS)}", self.scan)
        require(self.block_size >= 1, f"{key}.block_size", "be >= 1", self.block_size)
        require(self.top_k is None or self.top_k >= 1, f"{key}.top_k", "be >= 1 or null", self.top_k)
        require(self.top_p is None or 0 < self.top_p <= 1, f"{key}.top_p", "lie in (0, 1] or be null", self.top_p)


@dataclass
class StepsConfig:
    """Chain length, trajectory recording interval and checkpoint interval (``null``: no checkpoints; checkpoints are
    written into the job's output directory, so a library call without one writes none)."""

    num_steps: int = 200
    record_every: int = 10
    checkpoint_every: int | None = 100

    def validate(self, key: str = "run") -> None:
        """Raise :class:`ConfigError` naming ``{key}.<field>`` for the first value that is out of range."""
        require(self.num_steps >= 1, f"{key}.num_steps", "be >= 1", self.num_steps)
        require(self.record_every >= 1, f"{key}.record_every", "be >= 1", self.record_every)
        require(self.checkpoint_every is None or self.checkpoint_every >= 1, f"{key}.checkpoint_every",
                "be >= 1 or null", self.checkpoint_every)


@dataclass
class CouplingConfig:
    """Maximally coupled pairs (the first start sequence vs uniformly random tokens on the sites) at each temperature
    of the run's ladder, each followed until it meets or for ``max_steps`` of its own steps; met pairs leave the
    batch, and the chains of the run are the first pairs' first chains.

    Both sides of mixing are decided per temperature on the same pairs (:mod:`~mlm_dynamics.experiments.design`):
    slow where the learned witness, fitted on the other temperatures' first-round pairs, tells the two chains of the
    tested pairs apart at step ``witness_steps`` (None: half of ``max_steps``; 0: no test), certifying
    ``t_mix(1/4) > witness_steps``; fast where the pairs' meeting times certify ``TV <= 1/4`` from the two starts.
    ``num_pairs`` start at each temperature; with ``looks`` (the sequential design) a temperature whose look failed
    on both sides gets pairs up to the next count of ``looks``, cheapest to decide first, while the pairs and chains
    have spent fewer than ``max_rows`` forward rows; each side keeps its 95 % through the looks (group-sequential
    boundaries). A decided temperature's pairs stop; pairs whose slow side is the cheaper to decide stop at the
    witness step."""

    enabled: bool = True
    num_pairs: int = 4
    max_steps: int = 200
    witness_steps: int | None = None
    looks: list[int] = field(default_factory=list)
    max_rows: int | None = None

    def validate(self, key: str = "coupling") -> None:
        """Raise :class:`ConfigError` naming ``{key}.<field>`` for the first value that is out of range."""
        require(self.num_pairs >= 1, f"{key}.num_pairs", "be >= 1", self.num_pairs)
        require(self.max_steps >= 1, f"{key}.max_steps", "be >= 1", self.max_steps)
        require(self.witness_steps is None or self.witness_steps >= 0, f"{key}.witness_steps", "be None or >= 0",
                self.witness_steps)
        require(all(isinstance(n, int) for n in self.looks) and self.looks == sorted(set(self.looks)) and
                (not self.looks or self.looks[0] > self.num_pairs), f"{key}.looks",
                f"be increasing pair counts above coupling.num_pairs ({self.num_pairs}), the first round", self.looks)
        require(self.max_rows is None or self.max_rows >= 1, f"{key}.max_rows", "be >= 1 or null", self.max_rows)
        require(self.max_rows is None or bool(self.looks), f"{key}.max_rows",
                "be null without coupling.looks (a fixed design has no rounds to cap)", self.max_rows)
        require(not self.looks or self.witness_step >= 1, f"{key}.witness_steps",
                "be >= 1 with coupling.looks (the sequential design tests the slow side there)", self.witness_steps)

    @property
    def witness_step(self) -> int:
        """The step of the witness test (0: none), at most ``max_steps`` (a later one is cut to it, with a note)."""
        return self.max_steps // 2 if self.witness_steps is None else min(self.witness_steps, self.max_steps)


@dataclass
class SemanticsConfig:
    """Drift, traps and basins of the chains in the model's own hidden states pooled over the resampled sites,
    observed every ``every`` steps. Radii are fractions of the median distance from the start to random fillings of
    the sites (the embedder's own scale): a trap is ``dwell`` steps within ``trap_radius``, basins are trap anchors
    within ``basin_radius`` of each other."""

    enabled: bool = True
    every: int = 10
    trap_radius: float = 0.15
    basin_radius: float = 0.3
    dwell: int = 40
    thresholds: list[float] = field(default_factory=lambda: [0.25, 0.5])
    reference_samples: int = 16

    def validate(self, key: str = "semantics") -> None:
        """Raise :class:`ConfigError` naming ``{key}.<field>`` for the first value that is out of range."""
        require(self.every >= 1, f"{key}.every", "be >= 1", self.every)
        for name in ("trap_radius", "basin_radius"):
            value = getattr(self, name)
            require(0 < value <= 1, f"{key}.{name}", "be a fraction in (0, 1]", value)
        require(self.dwell >= 1, f"{key}.dwell", "be >= 1", self.dwell)
        require(len(self.thresholds) > 0 and all(0 < t <= 1 for t in self.thresholds), f"{key}.thresholds",
                "be a non-empty list of fractions in (0, 1]", self.thresholds)
        require(self.reference_samples >= 1, f"{key}.reference_samples", "be >= 1", self.reference_samples)


@dataclass
class RectangleConfig:
    """Rectangle test on the final states: site pairs per chain, top-k candidate tokens, maximum pair distance."""

    enabled: bool = True
    pairs_per_context: int = 4
    num_tokens: int = 4
    max_distance: int | None = None

    def validate(self, key: str = "rectangle") -> None:
        """Raise :class:`ConfigError` naming ``{key}.<field>`` for the first value that is out of range."""
        require(self.pairs_per_context >= 1, f"{key}.pairs_per_context", "be >= 1", self.pairs_per_context)
        require(self.num_tokens >= 2, f"{key}.num_tokens", "be >= 2", self.num_tokens)
        require(self.max_distance is None or self.max_distance >= 1, f"{key}.max_distance", "be >= 1 or null",
                self.max_distance)


@dataclass
class MarginsConfig:
    """Local margins at the start and at the end of the chains."""

    enabled: bool = True


@dataclass
class InfluenceConfig:
    """Influence coefficients among the first ``max_sites`` resampled sites of ``num_contexts`` final states, at each
    temperature of the run's ladder."""

    enabled: bool = False
    num_contexts: int = 1
    max_sites: int = 8
    replacements: int = 1

    def validate(self, key: str = "influence") -> None:
        """Raise :class:`ConfigError` naming ``{key}.<field>`` for the first value that is out of range."""
        require(self.num_contexts >= 1, f"{key}.num_contexts", "be >= 1", self.num_contexts)
        require(self.max_sites >= 2, f"{key}.max_sites", "be >= 2", self.max_sites)
        require(self.replacements >= 1, f"{key}.replacements", "be >= 1", self.replacements)


@dataclass
class ParallelSectionConfig:
    """Parallel decoding on the final states: in each of ``num_contexts`` of them, a window of ``window`` resampled
    sites at a random offset is masked and its ``n`` most confident positions committed at once against one at a
    time, ``n = 1 .. window``, at the main temperature (``samples`` Monte Carlo draws where enumeration costs more);
    the confidence rules at their default parameters are checked (the ``parallel-decoding`` job sweeps them)."""

    enabled: bool = False
    num_contexts: int = 2
    window: int = 4
    samples: int = 32

    def validate(self, key: str = "parallel") -> None:
        """Raise :class:`ConfigError` naming ``{key}.<field>`` for the first value that is out of range."""
        require(self.num_contexts >= 1, f"{key}.num_contexts", "be >= 1", self.num_contexts)
        require(2 <= self.window <= 12, f"{key}.window", "lie in [2, 12]", self.window)
        require(self.samples >= 2, f"{key}.samples", "be >= 2", self.samples)


@dataclass
class RunConfig:
    """The ``run`` job: Glauber chains on one model, plus coupling, rectangle, margin, influence and parallel-decoding
    sections.

    ``temperatures`` is the run's one temperature ladder: the chains split into equal blocks over it, and the coupled
    pairs and the influence estimate run at each of its temperatures. The report's headline numbers (mixing scalars,
    margins, rectangles) are at :attr:`main_temperature`."""

    JOB: ClassVar[str] = "run"
    MOVED: ClassVar[dict[str, str]] = dict.fromkeys(
        ("sampler.temperature", "chains.temperatures", "coupling.temperatures", "influence.temperatures"),
        "the top-level `temperatures`, the run's one ladder (e.g. `temperatures: [0.5, 1.0]`)") | dict.fromkeys(
        ("coupling.witness_temperatures", "coupling.witness_pairs"),
        "`coupling.looks`: the sequential design tests every temperature and adds pairs where it is undecided "
        "(e.g. `looks: [15, 18, 22, 28, 36]`)")

    temperatures: list[float] = field(default_factory=lambda: [1.0])
    model: ModelConfig = field(default_factory=ModelConfig)
    chains: ChainsConfig = field(default_factory=ChainsConfig)
    sampler: SamplerConfig = field(default_factory=SamplerConfig)
    run: StepsConfig = field(default_factory=StepsConfig)
    coupling: CouplingConfig = field(default_factory=CouplingConfig)
    rectangle: RectangleConfig = field(default_factory=RectangleConfig)
    margins: MarginsConfig = field(default_factory=MarginsConfig)
    influence: InfluenceConfig = field(default_factory=InfluenceConfig)
    semantics: SemanticsConfig = field(default_factory=SemanticsConfig)
    parallel: ParallelSectionConfig = field(default_factory=ParallelSectionConfig)

    def validate(self) -> None:
        """Range checks of every section (types were checked on loading); raises :class:`ConfigError`."""
        _positive_temperatures("temperatures", self.temperatures)
        require(len(set(self.temperatures)) == len(self.temperatures), "temperatures", "be distinct",
                self.temperatures)
        validate_sections(self)
        require(self.chains.num_chains % len(self.temperatures) == 0, "chains.num_chains",
                f"be a multiple of the {len(self.temperatures)} temperatures", self.chains.num_chains)
        for section in ("influence", "parallel"):
            spec = getattr(self, section)
            if spec.enabled:
                require(spec.num_contexts <= self.chains.num_chains, f"{section}.num_contexts",
                        f"be <= chains.num_chains ({self.chains.num_chains})", spec.num_contexts)
        if self.chains.sequences is None:
            require(self.model.source == "antiberty", "chains.sequences",
                    "be given for models other than the bundled antiberty", None)

    @property
    def main_temperature(self) -> float:
        """``1.0`` (the model's own conditionals) when it is on the ladder, else the ladder's lowest temperature."""
        return 1.0 if 1.0 in self.temperatures else min(self.temperatures)

    def per_chain_temperatures(self) -> list[float]:
        """The temperature of each chain: equal blocks, one per temperature of the ladder, in ladder order."""
        block = self.chains.num_chains // len(self.temperatures)
        return [self.temperatures[c // block] for c in range(self.chains.num_chains)]

    def resume_fingerprint(self) -> dict[str, Any]:
        """What a resumed run must share with its checkpoint: everything but the budgets and the report sections."""
        data = to_dict(self)
        return {key: data[key] for key in ("temperatures", "model", "chains", "sampler", "semantics")} | {
            "record_every": self.run.record_every,
            "coupling": to_dict(self.coupling) if self.coupling.enabled else None}


TOY_SOURCES = ("ising", "potts", "curie-weiss")
DISTANCES = ("hamming", "embedding")


@dataclass
class SweepModelConfig(ModelConfig):
    """``source``: ``ising``/``potts`` (toy chains of ``n`` sites with ``coupling`` J, ``field`` h, ``states``
    colours), ``curie-weiss`` (mean-field Ising: every pair coupled ``J / n``, a phase transition at ``tau = J``) or a
    masked LM as in the ``run`` job."""

    source: str = "ising"
    coupling: float = 1.0
    field: float = 0.0
    states: int = 3

    def validate(self, key: str = "model") -> None:
        """Raise :class:`ConfigError` naming ``{key}.<field>`` for the first value that is out of range."""
        sources = (*TOY_SOURCES, *MODEL_SOURCES)
        require(self.source in sources, f"{key}.source", f"be one of {list(sources)}", self.source)
        if self.source not in TOY_SOURCES:
            super().validate(key)
            return
        check_device(f"{key}.device", self.device)
        require(self.states >= 2, f"{key}.states", "be >= 2", self.states)
        require(math.isfinite(self.coupling) and math.isfinite(self.field), f"{key}.coupling",
                "and field must be finite", (self.coupling, self.field))


@dataclass
class GridConfig:
    """Temperatures x lengths; ``pairs`` coupled pairs per cell (their start kinds alternate over ``starts``)
    followed for at most ``max_steps`` steps.

    The certified slow side rides on the natural-random pairs of each cell: at the budget (the step reached) and at
    each of ``witness_steps`` below it, the learned witness fitted on the odd-numbered of those pairs is
    tested, paired, on the even-numbered ones (:mod:`~mlm_dynamics.diagnostics.witness`; a met pair counts 0),
    certifying ``t_mix(1/4) > t`` at 95 % where it separates them. Each horizon shares the level (Bonferroni); a
    cell needs about 44 pairs (11 tested) to certify at one horizon. No forward rows beyond the pairs'.

    With ``looks`` (the sequential design, :mod:`~mlm_dynamics.experiments.design`) ``pairs`` is the first round and
    each cell gets further rounds only while undecided, up to ``looks`` natural-random pairs in all at each later
    look (``starts`` must then be ``[natural-random]``): both sides are tested at every look (group-sequential, each at
    95 %), a decided cell's pairs stop, and the undecided ones get their next round in order of their expected cost
    while ``max_rows`` forward rows allow. The slow side is tested at ``witness_steps`` only (the budget then is the
    fast side's horizon), its witness fitted on the first ``learn_pairs`` odd-numbered natural-random pairs (default:
    half the first round); ``max_steps`` is how long a pair is followed."""

    temperatures: list[float] = field(default_factory=lambda: [0.5, 1.0, 2.0, 4.0])
    lengths: list[int] = field(default_factory=lambda: [4, 8, 16])
    pairs: int = 16
    max_steps: int = 2000
    starts: list[str] = field(default_factory=lambda: list(START_KINDS))
    seed: int = 0
    witness_steps: list[int] = field(default_factory=list)
    looks: list[int] = field(default_factory=list)
    learn_pairs: int | None = None
    max_rows: int | None = None

    @property
    def learn(self) -> int:
        """The natural-random pairs of the first round that fit each cell's witness."""
        natural = sum(1 for k in range(self.pairs) if self.starts[k % len(self.starts)] == "natural-random")
        return natural // 2 if self.learn_pairs is None else self.learn_pairs

    def validate(self, key: str = "grid") -> None:
        """Raise :class:`ConfigError` naming ``{key}.<field>`` for the first value that is out of range."""
        _positive_temperatures(f"{key}.temperatures", self.temperatures)
        require(len(set(self.temperatures)) == len(self.temperatures), f"{key}.temperatures", "be distinct",
                self.temperatures)
        require(len(self.lengths) > 0 and all(n >= 2 for n in self.lengths) and len(set(self.lengths)) == len(
            self.lengths), f"{key}.lengths", "be a non-empty list of distinct lengths >= 2", self.lengths)
        require(self.pairs >= 1, f"{key}.pairs", "be >= 1", self.pairs)
        require(self.max_steps >= 1, f"{key}.max_steps", "be >= 1", self.max_steps)
        require(len(self.starts) > 0 and set(self.starts) <= set(START_KINDS), f"{key}.starts",
                f"be a non-empty list of {list(START_KINDS)}", self.starts)
        check_seed(f"{key}.seed", self.seed)
        require(all(isinstance(t, int) and t >= 1 for t in self.witness_steps) and
                self.witness_steps == sorted(set(self.witness_steps)), f"{key}.witness_steps",
                "be increasing steps >= 1 (the budget is always tested)", self.witness_steps)
        require(self.learn_pairs is None or self.learn_pairs >= 0, f"{key}.learn_pairs", "be >= 0 or null",
                self.learn_pairs)
        require(self.max_rows is None or self.max_rows >= 1, f"{key}.max_rows", "be >= 1 or null", self.max_rows)
        if self.looks:
            require(self.starts == ["natural-random"], f"{key}.starts",
                    "be [natural-random] with grid.looks (the sequential design tests those pairs)", self.starts)
            require(all(isinstance(n, int) for n in self.looks) and self.looks == sorted(set(self.looks)) and
                    self.looks[0] > self.pairs, f"{key}.looks",
                    f"be increasing pair counts above grid.pairs ({self.pairs}), the first round", self.looks)
            require(bool(self.witness_steps) and max(self.witness_steps) <= self.max_steps, f"{key}.witness_steps",
                    "name the slow side's horizons (at most grid.max_steps) with grid.looks", self.witness_steps)
            require(2 * self.learn <= self.pairs, f"{key}.learn_pairs",
                    f"be at most half the first round's {self.pairs} pairs (the odd-numbered ones learn)",
                    self.learn_pairs)
        elif self.max_rows is not None:
            require(False, f"{key}.max_rows", "be null without grid.looks (a fixed design has no rounds to cap)",
                    self.max_rows)


@dataclass
class ContextConfig:
    """Masked LMs: the natural start ``sequence`` (default: the model's default start) and the window centre
    ``window_center`` (an index among its resampleable positions; default: the middle). The window of length ``n``
    is the ``n`` resampleable positions starting ``n // 2`` before the centre, so windows of every length are
    nested around one centre. ``crop``: resampleable tokens of context kept on each side of the largest window
    (``null``: the whole sequence); cropping changes the conditionals (another model, the report says so)."""

    sequence: str | None = None
    window_center: int | None = None
    crop: int | None = None

    def validate(self, key: str = "context") -> None:
        """Raise :class:`ConfigError` naming ``{key}.<field>`` for the first value that is out of range."""
        require(self.sequence is None or bool(self.sequence.strip()), f"{key}.sequence",
                "be a non-empty string or null", self.sequence)
        require(self.crop is None or self.crop >= 0, f"{key}.crop", "be >= 0 or null", self.crop)
        require(self.window_center is None or self.window_center >= 0, f"{key}.window_center", "be >= 0 or null",
                self.window_center)


@dataclass
class DriftSweepConfig:
    """Drift chains per cell from the natural start; threshold hitting times observed every ``every`` steps;
    ``relative`` thresholds are fractions of the distance to random fillings of each chain's sites (the median over
    ``reference_samples`` fillings)."""

    enabled: bool = True
    chains: int = 4
    distance: str = "hamming"
    thresholds: list[float] = field(default_factory=lambda: [0.25, 0.5])
    every: int = 5
    relative: bool = True
    reference_samples: int = 16

    def validate(self, key: str = "drift") -> None:
        """Raise :class:`ConfigError` naming ``{key}.<field>`` for the first value that is out of range."""
        require(self.chains >= 1, f"{key}.chains", "be >= 1", self.chains)
        require(self.distance in DISTANCES, f"{key}.distance", f"be one of {list(DISTANCES)}", self.distance)
        require(len(self.thresholds) > 0 and all(0 < t <= 2 for t in self.thresholds), f"{key}.thresholds",
                "be a non-empty list of distances in (0, 2]", self.thresholds)
        require(self.every >= 1, f"{key}.every", "be >= 1", self.every)
        require(self.reference_samples >= 1, f"{key}.reference_samples", "be >= 1", self.reference_samples)


@dataclass
class LagSweepConfig:
    """Optional L-lag couplings per cell (random starts): bounds on ``TV(mu_0 P^t, pi)`` at ``t_values``."""

    enabled: bool = False
    lag: int = 100
    pairs: int = 8
    t_values: list[int] = field(default_factory=lambda: [0, 100, 200, 400])

    def validate(self, key: str = "lag") -> None:
        """Raise :class:`ConfigError` naming ``{key}.<field>`` for the first value that is out of range."""
        require(self.lag >= 1, f"{key}.lag", "be >= 1", self.lag)
        require(self.pairs >= 1, f"{key}.pairs", "be >= 1", self.pairs)
        require(len(self.t_values) > 0 and all(t >= 0 for t in self.t_values), f"{key}.t_values",
                "be a non-empty list of steps >= 0", self.t_values)


@dataclass
class InfluenceSweepConfig:
    """Dobrushin coefficients on the first ``max_sites`` sites of the largest window, over the grid temperatures."""

    enabled: bool = True
    max_sites: int = 8
    replacements: int = 1

    def validate(self, key: str = "influence") -> None:
        """Raise :class:`ConfigError` naming ``{key}.<field>`` for the first value that is out of range."""
        require(self.max_sites >= 2, f"{key}.max_sites", "be >= 2", self.max_sites)
        require(self.replacements >= 1, f"{key}.replacements", "be >= 1", self.replacements)


@dataclass
class SweepRectangleConfig(RectangleConfig):
    """Rectangles on the natural start within the largest window (the incompatibility claim)."""

    pairs_per_context: int = 32


@dataclass
class SweepConfig:
    """The ``sweep`` job."""

    JOB: ClassVar[str] = "sweep"

    model: SweepModelConfig = field(default_factory=SweepModelConfig)
    grid: GridConfig = field(default_factory=GridConfig)
    context: ContextConfig = field(default_factory=ContextConfig)
    drift: DriftSweepConfig = field(default_factory=DriftSweepConfig)
    lag: LagSweepConfig = field(default_factory=LagSweepConfig)
    influence: InfluenceSweepConfig = field(default_factory=InfluenceSweepConfig)
    rectangle: SweepRectangleConfig = field(default_factory=SweepRectangleConfig)
    checkpoint_every: int | None = 500
    confidence: float = 0.95

    def validate(self) -> None:
        """Validate every section; raise :class:`ConfigError` naming the first bad key."""
        validate_sections(self)
        require(self.checkpoint_every is None or self.checkpoint_every >= 1, "checkpoint_every", "be >= 1 or null",
                self.checkpoint_every)
        require(0 < self.confidence < 1, "confidence", "be in (0, 1) (the confidence of every interval)",
                self.confidence)
        if self.model.source in TOY_SOURCES:
            require(self.drift.distance == "hamming" or not self.drift.enabled, "drift.distance",
                    "be 'hamming' for toy models (they have no hidden states)", self.drift.distance)

    def resume_fingerprint(self) -> dict[str, Any]:
        """What a resumed sweep must share with its checkpoint: all but the step budget and the checkpoint interval
        (a resumed run may go on for longer)."""
        data = to_dict(self)
        data["grid"] = {k: v for k, v in data["grid"].items() if k != "max_steps"}
        return {k: v for k, v in data.items() if k != "checkpoint_every"}


def field_default(item: dataclasses.Field[Any]) -> Any:
    """The default value of a config field (its ``default_factory()`` for lists and sections)."""
    return item.default_factory() if item.default_factory is not dataclasses.MISSING else item.default


def validate_sections(config: Any) -> None:
    """``section.validate(name)`` for every field of a job config that has one (keys in errors are ``name.key``)."""
    for section in dataclasses.fields(config):
        value = getattr(config, section.name)
        if hasattr(value, "validate"):
            value.validate(section.name)


ConfigT = TypeVar("ConfigT")


def to_dict(config: Any) -> dict[str, Any]:
    """A plain, JSON-ready dict of a config dataclass."""
    return dataclasses.asdict(config)


def load_config(schema: type[ConfigT], path: str | Path | None = None, overrides: Sequence[str] = ()) -> ConfigT:
    """Defaults of ``schema``, updated by the YAML file at ``path``, then by ``key.sub=value`` overrides; validated.

    Every problem is a :class:`ConfigError` naming ``--config`` (unreadable, not UTF-8, empty, not YAML, not a
    mapping), the override (``--set``) or the key."""
    moved: dict[str, str] = getattr(schema, "MOVED", {})
    try:
        merged = OmegaConf.structured(schema)
        if path is not None:
            file = resolve_config(path, getattr(schema, "JOB", None))
            loaded = _read_yaml(file)
            for key in _dotted_keys(loaded):
                if key in moved:
                    raise ConfigError(f"--config: {path}: {key} moved to {moved[key]}")
            _relative_to(loaded, file.parent, getattr(schema, "PATHS", ()))
            merged = _merge(merged, loaded, f"--config: {path}")
        for item in overrides:
            if "=" not in item:
                raise ConfigError(f"--set expects key.sub=value, got {item!r}")
            if item.split("=", 1)[0].strip() in moved:
                key = item.split("=", 1)[0].strip()
                raise ConfigError(f"--set {item!r}: {key} moved to {moved[key]}")
            try:
                override = OmegaConf.from_dotlist([item])
            except Exception as error:  # YAML errors of the value
                if type(error).__module__.startswith("yaml"):
                    first = str(error).splitlines()[0]
                    raise ConfigError(f"--set {item!r} is not a valid YAML value: {first}") from None
                raise
            merged = _merge(merged, override, f"--set {item!r}")
        config = OmegaConf.to_object(merged)
    except OmegaConfBaseException as error:
        raise ConfigError(_describe(error)) from None
    validate = getattr(config, "validate", None)
    if validate is not None:
        validate()
    return config  # type: ignore[return-value]


def _merge(merged: DictConfig, other: Any, where: str) -> DictConfig:
    """``OmegaConf.merge``, with a mapping given for a list or a single value (or the reverse) refused by the key's
    name: OmegaConf raises a bare TypeError or a "Merge error" that does not name it there. Any other refusal names
    ``where`` too (an empty key has no name of its own)."""
    try:
        return OmegaConf.merge(merged, other)  # type: ignore[return-value]
    except (TypeError, ValidationError) as error:
        key, wanted = _container_mismatch(merged, other)
        if key:
            raise ConfigError(f"{where}: {key} must be a {wanted}") from None
        if isinstance(error, TypeError):
            raise
        raise ConfigError(f"{where}: {_describe(error)}") from None
    except OmegaConfBaseException as error:
        raise ConfigError(f"{where}: {_describe(error)}") from None


def _container_mismatch(target: Any, other: Any, prefix: str = "") -> tuple[str, str]:
    """The first key of ``other`` whose value is a mapping where ``target`` has a list or a scalar, or the
    reverse, and what it must be."""
    for key, value in other.items():
        if not isinstance(target, DictConfig) or key not in target:
            continue
        current, path = target._get_node(key), f"{prefix}{key}"
        kinds = [isinstance(node, (DictConfig, dict)) for node in (current, value)]
        lists = [isinstance(node, (ListConfig, list)) for node in (current, value)]
        if kinds[0] != kinds[1] or lists[0] != lists[1]:
            return path, "mapping" if kinds[0] else "list" if lists[0] else "single value"
        if kinds[0]:
            found = _container_mismatch(current, value, f"{path}.")
            if found[0]:
                return found
    return "", "value of another kind"


def presets() -> dict[str, str]:
    """The presets shipped in the package: name -> the job that runs it (``# job: NAME``, the file's first line)."""
    out = {}
    for file in sorted(PRESETS.glob("*.yaml")):
        first = file.read_text(encoding="utf-8").splitlines()[0]
        out[file.stem] = first.removeprefix("# job:").strip()
    return out


def resolve_config(path: str | Path, job: str | None = None) -> Path:
    """``path`` when it is a file, else the packaged preset of that name (with or without ``.yaml``); a ConfigError
    naming ``--config`` when it is neither, or when the preset belongs to another job than ``job``."""
    file = Path(path)
    if file.is_file() or file.parent != Path(".") or file.exists():
        return file  # a file, or a path: _read_yaml says what is wrong with it
    known = presets()
    name = file.name.removesuffix(".yaml")
    if name not in known:
        raise ConfigError(f"--config: no such file {path}, and no preset of that name (presets: {', '.join(known)})")
    if job is not None and known[name] != job:
        raise ConfigError(f"--config: preset {name!r} is for `mlm-dynamics {known[name]}`, not `{job}`")
    return PRESETS / f"{name}.yaml"


def _relative_to(loaded: DictConfig, folder: Path, keys: Sequence[str]) -> None:
    """Rewrite the relative file paths at ``keys`` (and a local ``model.name_or_path``) of a loaded config file to
    paths under ``folder`` where such a file exists."""
    for key in (*keys, "model.name_or_path"):
        value = OmegaConf.select(loaded, key, default=None)
        if isinstance(value, str) and value and not Path(value).is_absolute() and (folder / value).exists():
            OmegaConf.update(loaded, key, str(folder / value), force_add=False)


def _dotted_keys(config: DictConfig, prefix: str = "") -> list[str]:
    """Every key of a nested mapping, dotted (``sampler.temperature``)."""
    keys = []
    for key, value in config.items_ex(resolve=False):
        dotted = f"{prefix}{key!s}"
        keys.append(dotted)
        if isinstance(value, DictConfig):
            keys += _dotted_keys(value, f"{dotted}.")
    return keys


def _read_yaml(path: Path) -> Any:
    """The mapping in a YAML file, or a ConfigError naming ``--config`` and what is wrong with the file."""
    if not path.is_file():
        raise ConfigError(f"--config: {path} is not a file" if path.exists() else f"--config: no such file {path}")
    try:
        text = path.read_bytes().decode("utf-8")
    except OSError as error:
        raise ConfigError(f"--config: {path} cannot be read: {error.strerror}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"--config: {path} is not UTF-8 text (a YAML file was expected)") from None
    if not text.strip() or all(line.lstrip().startswith("#") for line in text.splitlines() if line.strip()):
        raise ConfigError(f"--config: {path} is empty; give at least one key, or leave --config out for the defaults")
    try:  # a lone scalar (`false`, `3`, a word): OmegaConf fails on an assertion, or takes the word for a key
        scalar = not isinstance(yaml.safe_load(text), (dict, list))
    except yaml.YAMLError:
        scalar = False  # the syntax error is reported below, as OmegaConf reads it
    if scalar:
        raise ConfigError(f"--config: {path} must hold a mapping at the top level")
    try:
        loaded = OmegaConf.create(text)
    except OmegaConfBaseException as error:
        raise ConfigError(f"--config: {path}: {_describe(error)}") from None
    except Exception as error:  # YAML syntax and duplicate keys surface as yaml errors
        if type(error).__module__.startswith("yaml"):
            raise ConfigError(f"--config: {path} is not valid YAML: {error}") from None
        raise
    if not isinstance(loaded, DictConfig):
        raise ConfigError(f"--config: {path} must hold a mapping at the top level")
    return loaded


def _describe(error: OmegaConfBaseException) -> str:
    key = getattr(error, "full_key", None)
    message = str(error).split("\n")[0]
    return f"{key}: {message}" if key else message


__all__ = ["DISTANCES", "DTYPES", "MODEL_SOURCES", "TOY_SOURCES", "ChainsConfig", "ConfigError",
           "ContextConfig", "CouplingConfig", "DriftSweepConfig", "GridConfig", "InfluenceConfig",
           "InfluenceSweepConfig", "LagSweepConfig", "MarginsConfig", "ModelConfig", "ParallelSectionConfig",
           "RectangleConfig", "RunConfig", "SamplerConfig", "SemanticsConfig", "StepsConfig", "SweepConfig",
           "SweepModelConfig", "SweepRectangleConfig",
           "check_device", "check_seed", "field_default", "load_config", "require", "to_dict", "validate_sections"]
