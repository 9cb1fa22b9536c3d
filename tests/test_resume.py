"""Every resumable object's state_dict holds all it needs: stopped after any phase, saved through bytes (loaded with
weights_only, as checkpoints are), rebuilt and continued, it ends exactly where an uninterrupted run ends."""

import io

import pytest
import torch

from mlm_dynamics import GlauberSampler, PairwiseMRFDenoiser
from mlm_dynamics.embedders import FunctionEmbedder
from mlm_dynamics.sampling import ChainState, CoupledGlauberChains, CoupledState, ReplicaExchange, TemperingState
from mlm_dynamics.sampling.streams import stream_key
from mlm_dynamics.tracking import ChainMonitor, TopicAttraction, TrapTracker
from mlm_dynamics.tracking.interventions import TrapIntervention


def through_bytes(state):
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=True)


@pytest.fixture(scope="module")
def mrf():
    return PairwiseMRFDenoiser.random(5, 3, scale=1.2, generator=4)


@pytest.mark.parametrize("streams", [False, True])
@pytest.mark.parametrize("stop", [1, 7, 19])
def test_chains_resume(mrf, streams, stop):
    sampler = GlauberSampler(mrf, torch.tensor([0.5, 1.0, 2.0, 4.0]))
    keys = torch.tensor([stream_key(1, k) for k in range(4)]) if streams else None

    def fresh():
        return sampler.init_state(torch.zeros(4, 5, dtype=torch.long), generator=3, streams=keys)

    whole = fresh()
    for _ in sampler.run(whole, 20):
        pass
    part = fresh()
    for _ in sampler.run(part, stop):
        pass
    resumed = ChainState.from_state_dict(through_bytes(part.state_dict()))
    for _ in sampler.run(resumed, 20 - stop):
        pass
    assert torch.equal(resumed.tokens, whole.tokens) and resumed.step == 20


@pytest.mark.parametrize("stop", [1, 9])
def test_coupled_chains_resume(mrf, stop):
    chains = CoupledGlauberChains(GlauberSampler(mrf, 0.7), freeze_met=True)

    def fresh():
        return chains.init_state(torch.zeros(16, 5, dtype=torch.long), torch.full((16, 5), 2), generator=5)

    whole = fresh()
    chains.run(whole, 40)
    part = fresh()
    chains.run(part, stop)
    resumed = CoupledState.from_state_dict(through_bytes(part.state_dict()))
    chains.run(resumed, 40 - stop)
    assert torch.equal(resumed.met_at, whole.met_at) and torch.equal(resumed.y, whole.y)
    assert resumed.rows == whole.rows


@pytest.mark.parametrize("stop", [3, 12, 30])  # during the adaptive burn-in, at its end, after it
def test_replica_exchange_resumes_with_its_adapted_ladder(mrf, stop):
    def exchange():
        return ReplicaExchange(mrf, [0.5, 1.0, 2.0, 4.0], mode="exact", energy=mrf.energy, adapt_steps=12)

    start = torch.zeros(3, 5, dtype=torch.long)
    reference = exchange()
    whole = reference.init_state(start, generator=2)
    reference.run(whole, 40)
    assert not torch.equal(whole.ladder, torch.tensor([0.5, 1.0, 2.0, 4.0], dtype=torch.float64))  # it adapted
    first = exchange()
    part = first.init_state(start, generator=2)
    first.run(part, stop)
    second = exchange()  # a new process: the ladder of the config, the adapted one only in the checkpoint
    resumed = TemperingState.from_state_dict(through_bytes(part.state_dict()))
    second.run(resumed, 40 - stop)
    assert torch.equal(resumed.ladder, whole.ladder)
    assert torch.equal(resumed.chains.tokens, whole.chains.tokens) and torch.equal(resumed.walkers, whole.walkers)
    assert torch.equal(resumed.accepts, whole.accepts) and resumed.round_trips == whole.round_trips


def one_hot(tokens):
    return torch.nn.functional.one_hot(tokens, 3).flatten(1).float()


def monitored(mrf, kind):
    sampler = GlauberSampler(mrf, 0.6)
    monitor = ChainMonitor(FunctionEmbedder(one_hot), every=2, traps=TrapTracker(radius=0.3, dwell=4),
                           topics=TopicAttraction({"zeros": one_hot(torch.zeros(1, 5, dtype=torch.long))},
                                                  threshold=0.5))
    intervention = TrapIntervention(monitor, sampler, kind, duration=5, generator=1)
    state = sampler.init_state(torch.zeros(6, 5, dtype=torch.long), generator=7)
    monitor.start(state)
    return sampler, monitor, intervention, state


def advance(sampler, monitor, intervention, state, steps):
    for _ in range(steps):
        intervention.before_step(state)
        sampler.step(state)
        if monitor.observe(state) is not None:
            intervention.after_observe(state)


@pytest.mark.parametrize("kind", ["bump", "block", "restart"])
@pytest.mark.parametrize("stop", [5, 23])
def test_monitor_and_interventions_resume(mrf, kind, stop):
    whole = monitored(mrf, kind)
    advance(*whole, 60)
    assert whole[2].events  # the interventions did act
    part = monitored(mrf, kind)
    advance(*part, stop)
    saved = through_bytes({"monitor": part[1].state_dict(), "intervention": part[2].state_dict(),
                           "chains": part[3].state_dict()})
    sampler, monitor, intervention, _ = monitored(mrf, kind)
    monitor.load_state_dict(saved["monitor"])
    intervention.load_state_dict(saved["intervention"])
    state = ChainState.from_state_dict(saved["chains"])
    advance(sampler, monitor, intervention, state, 60 - stop)
    assert torch.equal(state.tokens, whole[3].tokens)
    assert monitor.history == whole[1].history
    assert intervention.events == whole[2].events
