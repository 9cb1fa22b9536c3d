"""Batched Glauber dynamics (heat-bath resampling of masked positions) on any :class:`~mlm_dynamics.Denoiser`.

One step on each of ``B`` chains, all in one forward pass of ``B`` rows:

1. choose a block ``S`` of ``k`` distinct sites (random scan with replacement across steps -- the default
   Glauber chain --, random-permutation sweeps, or left-to-right sweeps);
2. mask ``S`` and read the logits ``l_i`` at ``i in S``;
3. propose ``y_i ~ q_i = softmax(l_i / tau)`` independently for ``i in S`` (forbidden ids excluded, optional top-k /
   top-p truncation), ``y = (x_{-S}, y_S)``;
4. optionally accept with the Metropolis-Hastings probability against an energy ``E`` with target
   ``pi(x) ~ exp(-E(x) / tau)``:  ``log a = -(E(y) - E(x)) / tau + sum_{i in S} [log q_i(x_i) - log q_i(y_i)]``.

For ``k = 1`` without correction this is the chain of the kernel
``P(x, y) = (1/n) sum_i 1[y_{-i} = x_{-i}] q_i(y_i | x_{-i})``.

Rows may differ in temperature (a ``[B]`` tensor: a whole temperature ladder in one forward pass) and in their number
of resampled sites (padded ``sites [B, n_max]`` with ``site_counts [B]``: row ``b`` uses its first ``site_counts[b]``
sites), so cells of a (temperature x length) grid advance together; each row is exactly the chain of its own
``(tau_b, n_b)``.  For ``k > 1`` the proposal is the product of the
block's marginal conditionals, which is not the block's joint conditional: without the MH correction the chain does
not preserve a joint even when one exists (the tests show the bias).
"""

from __future__ import annotations

import hashlib
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Literal

import torch
from torch import Tensor, nn

from .._random import Randomness, as_generator
from ..models.base import Denoiser, check_attention_mask, require_integer
from .categorical import as_temperature, check_truncation, inverse_cdf, sample_categorical, tempered_log_probs
from .streams import uniforms

STEP_SLOTS = 3  # uniforms per chain and step with per-chain streams: site, token, MH acceptance

ScanOrder = Literal["random", "sweep", "sequential"]
SCAN_ORDERS: tuple[str, ...] = ("random", "sweep", "sequential")


@dataclass
class StepRecord:
    """What one step did to every chain.

    Attributes:
        step: number of steps taken after this one (1 for the first step).
        positions: ``[B, k]`` positions (indices into the token sequence) that were resampled.
        old_tokens / new_tokens: ``[B, k]`` tokens before and after (after = old where rejected).
        log_prob: ``[B, k]`` log-probability of the proposed tokens under the tempered proposal.
        accepted: ``[B]`` whether the proposal was accepted (always True without MH correction).
    """

    step: int
    positions: Tensor
    old_tokens: Tensor
    new_tokens: Tensor
    log_prob: Tensor
    accepted: Tensor


@dataclass
class ChainState:
    """Everything needed to continue ``B`` chains bit-identically.

    Attributes:
        tokens: ``[B, L]`` current sequences.
        sites: ``[B, n_max]`` resampleable positions of each chain (frame tokens excluded), sorted; row ``b`` uses its
            first ``counts[b]`` entries, the rest is padding.
        generator: the chains' random number generator (on the tokens' device).
        step: steps taken so far.
        order: ``[B, n]`` current sweep order (indices into ``sites``) for sweep scans, else ``None``.
        energy: ``[B]`` cached energy of ``tokens`` when an MH correction is used, else ``None``.
        counts: ``[B]`` number of sites of each row (``None``: every row uses all ``n_max``).
        streams: ``[B]`` int64 keys of per-chain counter-based streams (:mod:`.streams`): chain ``b`` then draws
            from its own key and step only, never from ``generator`` (``None``: all chains share ``generator``).
        attention_mask: ``[B, L]`` bool, False at padding the model must not attend to (``None``: no padding).
    """

    tokens: Tensor
    sites: Tensor
    generator: torch.Generator
    step: int = 0
    order: Tensor | None = None
    energy: Tensor | None = None
    counts: Tensor | None = None
    streams: Tensor | None = None
    attention_mask: Tensor | None = None

    @property
    def num_sites(self) -> int:
        """``n_max``, the padded number of sites."""
        return int(self.sites.shape[1])

    @property
    def site_counts(self) -> Tensor:
        """``[B]`` number of sites of each row."""
        if self.counts is not None:
            return self.counts
        return torch.full((self.tokens.shape[0],), self.num_sites, dtype=torch.long, device=self.tokens.device)

    def state_dict(self) -> dict[str, Any]:
        """Tokens, sites, step and random state, for checkpoints (a resumed chain continues bit for bit)."""
        return {"tokens": self.tokens.clone(), "sites": self.sites.clone(), "step": self.step,
                "counts": None if self.counts is None else self.counts.clone(),
                "streams": None if self.streams is None else self.streams.clone(),
                "rng": self.generator.get_state(), "rng_device": self.generator.device.type,
                "order": None if self.order is None else self.order.clone(),
                "energy": None if self.energy is None else self.energy.clone(),
                "attention_mask": None if self.attention_mask is None else self.attention_mask.clone()}

    @classmethod
    def from_state_dict(cls, state: dict[str, Any], device: torch.device | str | None = None) -> ChainState:
        """Restore chains, on ``device`` (default: where the tokens are).

        On the device type the state was saved from, the random stream continues bit-identically. Generators of
        different device types have different states (CPU and CUDA streams differ anyway), so moving chains to
        another device type re-seeds the stream from the saved state, deterministically, with a warning. A state
        that is not one (missing keys, tensors of the wrong kind or shape, a random state that does not load) is a
        ValueError naming what is wrong.
        """
        check_chain_state(state)
        tokens = state["tokens"].to(device) if device is not None else state["tokens"]
        generator = torch.Generator(device=tokens.device)
        if state.get("rng_device", tokens.device.type) == tokens.device.type:
            generator.set_state(state["rng"].cpu())
        else:
            warnings.warn(f"chain state saved with a {state['rng_device']} generator resumes on "
                          f"{tokens.device.type}: the random stream is re-seeded from the saved state",
                          stacklevel=2)
            generator.manual_seed(int.from_bytes(hashlib.sha256(state["rng"].cpu().numpy().tobytes()).digest()[:8],
                                                 "little") >> 1)
        moved = {k: None if state.get(k) is None else state[k].to(tokens.device).clone()
                 for k in ("order", "energy", "counts", "streams", "attention_mask")}
        return cls(tokens=tokens.clone(), sites=state["sites"].to(tokens.device).clone(), generator=generator,
                   step=int(state["step"]), **moved)


def check_chain_state(state: Any) -> None:
    """A ValueError naming the first thing that keeps ``state`` from being a :meth:`ChainState.state_dict`."""
    missing = sorted({"tokens", "sites", "step", "rng"} - set(state)) if isinstance(state, dict) else ["tokens"]
    if missing:
        raise ValueError(f"state: a chain state needs {missing} (saved by another version, or not a chain state)")
    tokens, sites = state["tokens"], state["sites"]
    for name, value in (("tokens", tokens), ("sites", sites)):
        if not isinstance(value, Tensor) or value.dim() != 2 or value.dtype != torch.long:
            raise ValueError(f"state[{name!r}] must be an int64 tensor [B, ...], got "
                             f"{getattr(value, 'dtype', type(value).__name__)} {tuple(getattr(value, 'shape', ()))}")
    if sites.shape[0] != tokens.shape[0] or (sites.numel() and not 0 <= int(sites.min()) <= int(sites.max())
                                             < tokens.shape[1]):
        raise ValueError(f"state['sites'] must be positions of the {tokens.shape[0]} rows of tokens of length "
                         f"{tokens.shape[1]}, got shape {tuple(sites.shape)}")
    if isinstance(state["step"], bool) or not isinstance(state["step"], int) or state["step"] < 0:
        raise ValueError(f"state['step'] must be an integer >= 0, got {state['step']!r}")
    rng = state["rng"]
    if not isinstance(rng, Tensor) or rng.dtype != torch.uint8:
        raise ValueError(f"state['rng'] must be a generator state (a uint8 tensor), got "
                         f"{getattr(rng, 'dtype', type(rng).__name__)}")
    if state.get("rng_device", "cpu") == "cpu":
        try:
            torch.Generator().set_state(rng.cpu())
        except RuntimeError as error:
            raise ValueError(f"state['rng'] is not a CPU generator state ({error})") from None
    for name in ("order", "energy", "counts", "streams", "attention_mask"):
        value = state.get(name)
        if value is not None and (not isinstance(value, Tensor) or value.shape[:1] != tokens.shape[:1]):
            raise ValueError(f"state[{name!r}] must be None or a tensor with one entry per row ({tokens.shape[0]}), "
                             f"got {getattr(value, 'shape', type(value).__name__)}")


def check_streams(streams: Tensor, batch: int) -> Tensor:
    """``streams`` as int64 keys ``[B]``, or a ValueError naming it."""
    if not isinstance(streams, Tensor) or streams.dtype != torch.int64 or tuple(streams.shape) != (batch,):
        raise ValueError(f"streams must be int64 keys of shape [{batch}], got {getattr(streams, 'dtype', streams)} "
                         f"{tuple(getattr(streams, 'shape', ()))}")
    return streams


def stream_sites(u: Tensor, counts: Tensor) -> Tensor:
    """Indices ``[B, 1]`` into each row's sites from uniforms ``u [B]``: ``floor(u n_b)``, uniform on the row's own
    ``n_b`` sites (``u`` has 53 bits, so the bias is below ``n_b 2^-53``)."""
    return (u * counts.to(u.dtype)).long().clamp_max(counts - 1)[:, None]


class GlauberSampler(nn.Module):
    """Parallel Glauber chains driven by a :class:`Denoiser`.

    Args:
        denoiser: the model.
        temperature: tau > 0; logits are divided by it.
        top_k, top_p: optional truncation of each conditional (off by default; truncation breaks positivity).
        scan: ``"random"`` (k distinct sites drawn uniformly each step, independently across steps),
            ``"sweep"`` (a fresh random permutation of the sites per sweep, visited k at a time) or
            ``"sequential"`` (left to right, k at a time).
        block_size: k >= 1 sites resampled per step from their conditionals given the other sites.
        energy: optional ``E(tokens [B, L]) -> [B]`` at tau = 1; enables the MH correction towards
            ``exp(-E / tau)``, e.g. :class:`PseudoLogLikelihoodEnergy` or a toy model's exact ``energy``.
        sampling_dtype: float dtype of the softmax and categorical draw. float64 (default) reaches every token of
            positive probability; float32 cannot draw tokens below about ``6e-8`` (see
            :mod:`~mlm_dynamics.sampling.categorical`) and is kept for comparison.
        greedy: replace the draw by the arg-max (iterated conditional modes; the zero-temperature limit).

    Examples:
        Three chains on a 5-spin Ising chain, ten steps (one forward of three rows each):

        >>> import torch
        >>> from mlm_dynamics import GlauberSampler, PairwiseMRFDenoiser
        >>> sampler = GlauberSampler(PairwiseMRFDenoiser.ising_chain(5, coupling=1.0), temperature=2.0)
        >>> state = sampler.init_state(torch.zeros(3, 5, dtype=torch.long), generator=0)
        >>> records = list(sampler.run(state, 10))
        >>> state.step, tuple(state.tokens.shape), tuple(records[0].positions.shape)
        (10, (3, 5), (3, 1))

        The same seed gives the same chains (the state carries its own generator; the global RNG is untouched):

        >>> again = sampler.init_state(torch.zeros(3, 5, dtype=torch.long), generator=0)
        >>> _ = list(sampler.run(again, 10))
        >>> torch.equal(again.tokens, state.tokens)
        True
    """

    allowed: Tensor

    def __init__(self, denoiser: Denoiser, temperature: float | Tensor = 1.0, *, top_k: int | None = None,
                 top_p: float | None = None, scan: ScanOrder = "random", block_size: int = 1,
                 energy: Callable[[Tensor], Tensor] | None = None, sampling_dtype: torch.dtype = torch.float64,
                 greedy: bool = False) -> None:
        super().__init__()
        check_truncation(top_k, top_p)
        if scan not in SCAN_ORDERS:
            raise ValueError(f"scan must be one of {SCAN_ORDERS}, got {scan!r}")
        if isinstance(block_size, bool) or not isinstance(block_size, int) or block_size < 1:
            raise ValueError(f"block_size must be an integer >= 1, got {block_size!r}")
        if sampling_dtype not in (torch.float32, torch.float64):
            raise ValueError(f"sampling_dtype must be torch.float32 or torch.float64, got {sampling_dtype}")
        if greedy and energy is not None:
            raise ValueError("energy: the MH correction needs proposal probabilities and cannot be used with greedy")
        self.denoiser = denoiser
        self.temperature = as_temperature(temperature, "; for the tau -> 0 limit use greedy=True")
        self.top_k, self.top_p = top_k, top_p
        self.scan, self.block_size = scan, block_size
        self.energy = energy
        self.sampling_dtype = sampling_dtype
        self.greedy = greedy
        self.register_buffer("allowed", denoiser.vocab.allowed_mask(), persistent=False)

    def row_temperature(self, rows: Tensor | None = None) -> float | Tensor:
        """The temperature broadcastable against logits ``[R, K, V]`` of rows ``rows`` (default: all chains)."""
        if isinstance(self.temperature, float):
            return self.temperature
        picked = self.temperature if rows is None else self.temperature[rows.to(self.temperature.device)]
        return picked[:, None, None]

    def log_probs(self, logits: Tensor, temperature: float | Tensor | None = None) -> Tensor:
        """The proposal's log-probabilities ``log q`` for logits ``[R, K, V]`` (temperature: default per chain)."""
        tau = self.row_temperature() if temperature is None else temperature
        if isinstance(tau, Tensor):
            tau = tau.to(logits.device)
        return tempered_log_probs(logits, self.allowed.to(logits.device), tau, top_k=self.top_k,
                                  top_p=self.top_p, dtype=self.sampling_dtype)

    def init_state(self, tokens: Tensor, generator: Randomness = 0, *, sites: Tensor | None = None,
                   site_counts: Tensor | None = None, streams: Tensor | None = None,
                   attention_mask: Tensor | None = None) -> ChainState:
        """Start chains at ``tokens [B, L]``.

        ``attention_mask [B, L]`` (True: a real token) marks padding, which the model does not attend to and no
        chain resamples; it stays with each chain. ``sites [B, n_max]`` defaults to the non-frame, non-padding
        positions; each row is sorted (sequential scans go left to right). With ``site_counts [B]``, row ``b``
        resamples only its first ``site_counts[b]`` sites (the rest is padding: any positions); see
        :meth:`~mlm_dynamics.models.Denoiser.padded_sites`. With ``streams [B]``
        (int64 keys, random scan with ``block_size=1``), chain ``b`` draws from its own counter-based stream, so its
        path does not depend on the other chains of the batch (``generator`` is then unused). ``generator``: the
        chains' random stream, or an int seed for one (:func:`~mlm_dynamics._random.as_generator`); the
        chains own it and advance it as they step.
        """
        require_integer("tokens", tokens)
        tokens = tokens.to(self.denoiser.device).long().clone()
        mask = check_attention_mask(attention_mask, tokens)
        if sites is not None:
            require_integer("sites", sites)
        if sites is None and mask is not None:
            sites, site_counts = self.denoiser.padded_sites(tokens, attention_mask=mask)
        sites = self.denoiser.resampleable_sites(tokens) if sites is None else sites.to(tokens.device).long()
        counts = None
        if site_counts is not None:
            require_integer("site_counts", site_counts)
            counts = site_counts.to(tokens.device).long()
        self._check_sites(tokens, sites, counts)
        if mask is not None:
            used = torch.arange(sites.shape[1], device=sites.device) < (sites.shape[1] if counts is None
                                                                        else counts[:, None])
            if not bool(mask.gather(1, sites)[used.expand_as(sites)].all()):
                raise ValueError("sites: a site is padding (attention_mask 0 there); padding is never resampled")
        if isinstance(self.temperature, Tensor) and len(self.temperature) != tokens.shape[0]:
            raise ValueError(f"temperature: {len(self.temperature)} per-chain temperatures for {tokens.shape[0]} "
                             "chains")
        if counts is None:
            sites = sites.sort(1).values
        else:  # sort each row's used sites, keep the padding after them
            valid = torch.arange(sites.shape[1], device=sites.device) < counts[:, None]
            keys = torch.where(valid, sites, sites.new_full((), tokens.shape[1])).sort(1)
            sites = torch.where(valid, keys.values, sites)
        if streams is not None:
            streams = check_streams(streams, tokens.shape[0]).to(tokens.device)
            if self.scan != "random" or self.block_size != 1:
                raise ValueError("streams: per-chain streams drive the random scan with block_size=1 only")
        state = ChainState(tokens=tokens, sites=sites, generator=as_generator(generator, device=tokens.device),
                           counts=counts, streams=streams, attention_mask=mask)
        if self.energy is not None:
            state.energy = self._energy(tokens)
        return state

    def _check_sites(self, tokens: Tensor, sites: Tensor, counts: Tensor | None) -> None:
        if sites.dim() != 2 or sites.shape[0] != tokens.shape[0]:
            raise ValueError(f"sites must have shape [B, n] with B = {tokens.shape[0]}, got {tuple(sites.shape)}")
        if sites.shape[1] == 0 or sites.min() < 0 or sites.max() >= tokens.shape[1]:
            raise ValueError(f"sites must be non-empty positions in [0, {tokens.shape[1]})")
        n = sites.shape[1]
        if counts is None:
            counts = torch.full((sites.shape[0],), n, dtype=torch.long, device=sites.device)
        elif counts.shape != (sites.shape[0],) or counts.min() < 1 or counts.max() > n:
            raise ValueError(f"site_counts must be [B] counts in [1, {n}], got {counts.tolist()}")
        valid = torch.arange(n, device=sites.device) < counts[:, None]
        fixed = ~self.denoiser.free_mask(tokens).gather(1, sites) & valid
        if bool(fixed.any()):
            row, slot = (int(i) for i in fixed.nonzero()[0])
            raise ValueError(f"sites: position {int(sites[row, slot])} of row {row} holds a frame token "
                             f"({int(tokens[row, sites[row, slot]])}, e.g. BOS) or has no conditional; it is never "
                             "resampled (BlockSchedule.sites(..., frame_ids=denoiser.vocab.frame_ids) leaves such "
                             "positions out)")
        ordered = torch.where(valid, sites, -1 - torch.arange(n, device=sites.device)).sort(1).values
        if ((ordered.diff(dim=1) == 0) & (ordered[:, 1:] >= 0)).any():
            raise ValueError("sites must be distinct within each row")
        if self.block_size > int(counts.min()):
            raise ValueError(f"block_size {self.block_size} exceeds the number of sites {int(counts.min())}")
        if self.scan != "random" and (counts % self.block_size).any():
            raise ValueError(f"block_size {self.block_size} must divide the number of sites of every row "
                             f"({sorted(set(counts.tolist()))}) for scan={self.scan!r}")

    def choose_sites(self, state: ChainState) -> Tensor:
        """Indices ``[B, k]`` into ``state.sites`` for the next step (advances the scan and the RNG).

        Row ``b`` picks among its first ``n_b`` sites: uniformly (random scan, float64 uniforms so the bias is below
        ``n_b 2^-53``), or through its own sweep of length ``n_b / k``.
        """
        batch, n, k = state.tokens.shape[0], state.num_sites, self.block_size
        device = state.tokens.device
        counts = state.site_counts
        padding = torch.arange(n, device=device) >= counts[:, None]
        if self.scan == "random":
            if k == 1:
                uniform = torch.rand(batch, 1, generator=state.generator, device=device, dtype=torch.float64)
                return (uniform * counts[:, None]).long()
            keys = torch.rand(batch, n, generator=state.generator, device=device).masked_fill(padding, 2.0)
            return keys.argsort(1)[:, :k]
        offset = (state.step * k) % counts  # [B]
        within = offset[:, None] + torch.arange(k, device=device)
        if self.scan == "sequential":
            return within
        restart = offset == 0
        if restart.any():
            keys = torch.rand(batch, n, generator=state.generator, device=device).masked_fill(padding, 2.0)
            fresh = keys.argsort(1)
            state.order = fresh if state.order is None else torch.where(restart[:, None], fresh, state.order)
        assert state.order is not None, "a sweep is resumed only from a state saved with its order"
        return state.order.gather(1, within)

    def _energy(self, tokens: Tensor) -> Tensor:
        assert self.energy is not None
        energy = self.energy(tokens)
        if energy.shape != tokens.shape[:1] or not torch.isfinite(energy).all():
            raise ValueError(f"energy must return finite values of shape [B] = {tuple(tokens.shape[:1])}")
        return energy.to(self.sampling_dtype)

    @torch.no_grad()
    def step(self, state: ChainState) -> StepRecord:
        """Advance every chain by one step; ``state`` is updated in place."""
        drawn = None if state.streams is None else uniforms(state.streams, state.step, STEP_SLOTS)
        index = self.choose_sites(state) if drawn is None else stream_sites(drawn[:, 0], state.site_counts)
        positions = state.sites.gather(1, index)
        old = state.tokens.gather(1, positions)
        log_q = self.log_probs(self.denoiser.conditional_logits(state.tokens, positions, state.attention_mask))
        if self.greedy:
            new = log_q.argmax(-1)
        elif drawn is None:
            new = sample_categorical(log_q.exp().flatten(0, 1), state.generator).view_as(old)
        else:  # one site per step: one row per chain
            new = inverse_cdf(log_q.exp()[:, 0], drawn[:, 1])[:, None]
        log_prob = log_q.gather(-1, new[..., None]).squeeze(-1)
        accepted = torch.ones(old.shape[0], dtype=torch.bool, device=old.device)
        if self.energy is not None:
            accepted = self._metropolis(state, positions, old, new, log_q, log_prob,
                                        None if drawn is None else drawn[:, 2])
            new = torch.where(accepted[:, None], new, old)
        state.tokens.scatter_(1, positions, new)
        state.step += 1
        return StepRecord(step=state.step, positions=positions, old_tokens=old, new_tokens=new, log_prob=log_prob,
                          accepted=accepted)

    def _metropolis(self, state: ChainState, positions: Tensor, old: Tensor, new: Tensor, log_q: Tensor,
                    log_prob: Tensor, drawn: Tensor | None) -> Tensor:
        changed = (new != old).any(1)
        accepted = torch.ones_like(changed)
        uniform = (torch.rand(old.shape[0], generator=state.generator, device=old.device, dtype=self.sampling_dtype)
                   if drawn is None else drawn.to(self.sampling_dtype))
        if not changed.any():
            return accepted
        rows = changed.nonzero().squeeze(1)
        assert state.energy is not None, "init_state caches the energy whenever the sampler has one"
        proposal = state.tokens[rows].scatter(1, positions[rows], new[rows])
        proposal_energy = self._energy(proposal)
        log_reverse = log_q[rows].gather(-1, old[rows, :, None]).squeeze(-1).sum(1)
        tau = self.temperature if isinstance(self.temperature, float) else \
            self.temperature[rows.to(self.temperature.device)].to(old.device)
        log_alpha = (state.energy[rows] - proposal_energy) / tau + log_reverse - log_prob[rows].sum(1)
        accept_rows = uniform[rows].log() < log_alpha
        accepted[rows] = accept_rows
        state.energy[rows[accept_rows]] = proposal_energy[accept_rows]
        return accepted

    def run(self, state: ChainState, num_steps: int) -> Iterator[StepRecord]:
        """Yield the record of each of ``num_steps`` steps (lazily, so diagnostics can consume them online)."""
        if isinstance(num_steps, bool) or not isinstance(num_steps, int) or num_steps < 0:
            raise ValueError(f"num_steps must be a non-negative integer, got {num_steps!r}")
        for _ in range(num_steps):
            yield self.step(state)

    def forward(self, state: ChainState) -> StepRecord:
        """One step: ``step(state)`` as a module call."""
        return self.step(state)


__all__ = ["SCAN_ORDERS", "STEP_SLOTS", "ChainState", "GlauberSampler", "ScanOrder", "StepRecord", "check_streams",
           "stream_sites"]
