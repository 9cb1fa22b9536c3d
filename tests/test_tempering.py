import math

import pytest
import torch

from helpers import chi_square_pvalue
from mlm_dynamics import PairwiseMRFDenoiser
from mlm_dynamics.diagnostics.tempering import tempering_summary
from mlm_dynamics.models.toy import enumerate_states
from mlm_dynamics.sampling import ReplicaExchange, TemperingState


@pytest.fixture(scope="module")
def ising():
    return PairwiseMRFDenoiser.ising_chain(4, coupling=1.0)


def test_exact_tempering_samples_the_joint_at_the_lowest_temperature(ising):
    """Replicas MH-corrected towards exp(-E / tau) with the exact swap rule: the tau = 0.5 replica's law is the
    tempered joint (chi-square over the 16 states, p > 1e-3: a false alarm rate of 1e-3)."""
    exchange = ReplicaExchange(ising, [0.5, 1.0, 2.0], energy=ising.energy, swap_every=2)
    state = exchange.init_state(torch.zeros(6000, 4, dtype=torch.long), generator=0)
    exchange.run(state, 120)
    log_joint = ising.log_joint() / 0.5
    assert chi_square_pvalue(exchange.replica(state, 0), (log_joint - log_joint.logsumexp(0)).exp(), 2) > 1e-3
    assert set(state.walkers.tolist()) == set(range(18000))  # swaps permute the walkers


def test_swap_acceptance_matches_its_closed_form(ising):
    """At stationarity the two replicas are independent draws of pi_0.5 and pi_1; the mean acceptance is
    sum_{x, y} pi_0.5(x) pi_1(y) min(1, exp((1/0.5 - 1/1)(E(x) - E(y)))). Tolerance: 4 binomial standard errors."""
    exchange = ReplicaExchange(ising, [0.5, 1.0], energy=ising.energy)
    state = exchange.init_state(torch.zeros(4000, 4, dtype=torch.long), generator=1)
    exchange.run(state, 60)  # burn in (the exact kernels mix in far fewer steps)
    state.attempts.zero_()
    state.accepts.zero_()
    exchange.run(state, 40)
    energy = ising.energy(enumerate_states(4, 2)).double()
    laws = [(-energy / tau - (-energy / tau).logsumexp(0)).exp() for tau in (0.5, 1.0)]
    accept = torch.exp((1 / 0.5 - 1 / 1.0) * (energy[:, None] - energy[None, :])).clamp_max(1.0)
    expected = float((laws[0][:, None] * laws[1][None, :] * accept).sum())
    observed = float(state.acceptance()[0])
    standard_error = math.sqrt(expected * (1 - expected) / float(state.attempts[0]))
    assert abs(observed - expected) < 4 * standard_error + 0.01  # + swaps of one chain are correlated in time


def test_round_trips_checkpoint_and_heuristic_mode(ising):
    exchange = ReplicaExchange(ising, [0.5, 1.0, 2.0, 4.0], energy=ising.energy)
    state = exchange.init_state(torch.zeros(50, 4, dtype=torch.long), generator=2)
    exchange.run(state, 100)
    saved = state.state_dict()
    exchange.run(state, 100)
    summary = tempering_summary(state)
    assert summary["round_trips"] > 0 and summary["swap_acceptance_min"] > 0
    restored = TemperingState.from_state_dict(saved)
    exchange.run(restored, 100)
    assert torch.equal(restored.chains.tokens, state.chains.tokens) and restored.round_trips == state.round_trips
    incompatible = PairwiseMRFDenoiser.random(4, 3, compatible=False, generator=0)
    heuristic = ReplicaExchange(incompatible, [0.5, 2.0], mode="heuristic", swap_every=5)
    hstate = heuristic.init_state(torch.zeros(8, 4, dtype=torch.long), generator=3)
    heuristic.run(hstate, 20)
    assert float(hstate.attempts[0]) == 2 * 8  # 4 swap rounds, the single pair takes part in every other one
    assert 0 <= float(hstate.acceptance()[0]) <= 1
    with pytest.raises(ValueError, match="energy is required"):
        ReplicaExchange(ising, [0.5, 1.0])
    with pytest.raises(ValueError, match="increasing"):
        ReplicaExchange(ising, [1.0, 0.5], energy=ising.energy)


def test_adaptive_ladder_moves_only_inner_temperatures_during_burn_in(ising):
    exchange = ReplicaExchange(ising, [0.3, 0.4, 3.0, 4.0], energy=ising.energy, adapt_steps=50)
    state = exchange.init_state(torch.zeros(100, 4, dtype=torch.long), generator=4)
    exchange.run(state, 50)
    adapted = state.ladder.clone()  # the adapted ladder lives in the state (checkpointed with it)
    exchange.run(state, 50)
    assert torch.equal(state.ladder, adapted)  # frozen after adapt_steps
    assert adapted[0] == pytest.approx(0.3) and adapted[-1] == pytest.approx(4.0)
    assert bool((adapted.diff() > 0).all()) and adapted[1] != pytest.approx(0.4)


def one_hot_mean(tokens):
    return torch.nn.functional.one_hot(tokens, 2).float().mean(1)


@pytest.mark.parametrize("kind", ["bump", "block", "restart"])
def test_trapped_chains_get_interventions_that_are_logged_with_their_outcome(kind):
    from mlm_dynamics import GlauberSampler
    from mlm_dynamics.embedders import FunctionEmbedder
    from mlm_dynamics.tracking import ChainMonitor, TrapIntervention, TrapTracker

    ising = PairwiseMRFDenoiser.ising_chain(8, coupling=1.5)
    sampler = GlauberSampler(ising, 0.3)  # strongly coupled and cold: the all-zero start is a trap
    state = sampler.init_state(torch.zeros(6, 8, dtype=torch.long), generator=0)
    monitor = ChainMonitor(FunctionEmbedder(one_hot_mean), every=5, traps=TrapTracker(radius=0.02, dwell=10),
                           margin_denoiser=ising, temperature=0.3)
    monitor.start(state)
    intervention = TrapIntervention(monitor, sampler, kind, duration=15, factor=20.0, block=6)
    for _ in range(200):
        intervention.before_step(state)
        sampler.step(state)
        if monitor.observe(state) is not None:
            intervention.after_observe(state)
    summary = intervention.summary()
    assert summary["interventions"] >= 6  # every chain was trapped at least once
    assert summary["escaped_fraction"] > 0.3, summary
    assert all(e.kind == kind and (e.escaped_at is None or e.escaped_at > e.step) for e in intervention.events)
    if kind == "bump":  # bumps expire: the chains are back at their own temperature once none is bumped
        bumped = intervention.bumped_until
        assert bumped is not None
        idle = bumped < 0
        assert torch.equal(sampler.temperature[idle], torch.full((int(idle.sum()),), 0.3, dtype=torch.float64))
