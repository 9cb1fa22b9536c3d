"""Fuzzing the inputs: any config override and any library argument either works or raises the project's error
types with the parameter named; never another exception."""

import dataclasses
import math

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mlm_dynamics import GlauberSampler, PairwiseMRFDenoiser
from mlm_dynamics.experiments import ConfigError, RunConfig, load_config
from mlm_dynamics.experiments.config import SweepConfig, field_default
from mlm_dynamics.experiments.rectangles import RectangleTableConfig
from mlm_dynamics.experiments.semantics import CaseStudyConfig
from mlm_dynamics.sampling import maximal_coupling, tempered_log_probs


def keys(schema, prefix=""):
    """Every dotted key of a config dataclass."""
    out = []
    for item in dataclasses.fields(schema):
        default = field_default(item)
        if dataclasses.is_dataclass(default):
            out += keys(default, f"{prefix}{item.name}.")
        else:
            out.append(f"{prefix}{item.name}")
    return out


VALUES = st.one_of(
    st.integers(-(2**70), 2**70).map(str), st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.sampled_from(["true", "false", "null", "''", "[]", "[1, 2]", "[0.5, -1]", "[a, b]", "{a: 1}", ".nan", ".inf",
                     "-.inf", "abc", "!!binary aGk=", "[[1]]", "1e400", "0x10", "~"]),
    st.text(max_size=12).filter(lambda text: "\n" not in text))
SCHEMAS = [RunConfig, SweepConfig, CaseStudyConfig, RectangleTableConfig]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(SCHEMAS).flatmap(
    lambda schema: st.tuples(st.just(schema), st.lists(st.tuples(st.sampled_from(keys(schema)), VALUES), max_size=3))))
def test_any_override_loads_or_is_refused_by_name(case):
    schema, overrides = case
    items = [f"{key}={value}" for key, value in overrides]
    text = named_refusal(lambda: load_config(schema, None, items), (ConfigError,))
    assert text is None or "--set" in text or any(key in text for key in keys(schema)), (items, text)


def named_refusal(call, errors) -> str | None:
    """The message of one of ``errors`` raised by ``call()``, or ``None`` when it returns (any other exception fails
    the test)."""
    try:
        call()
    except errors as error:
        return str(error)
    return None


def _mrf():
    return PairwiseMRFDenoiser.random(3, 4, generator=1)


NUMBERS = st.one_of(st.floats(allow_nan=True, allow_infinity=True, width=32), st.integers(-3, 5), st.booleans(),
                    st.none())


@settings(max_examples=300, deadline=None)
@given(logits=st.lists(st.floats(allow_nan=False, width=32) | st.just(-math.inf), min_size=4, max_size=4),
       allowed=st.lists(st.booleans(), min_size=4, max_size=4), temperature=NUMBERS, top_k=NUMBERS, top_p=NUMBERS)
def test_tempered_log_probs_is_a_law_or_a_named_error(logits, allowed, temperature, top_k, top_p):
    refused = named_refusal(lambda: tempered_log_probs(torch.tensor(logits), torch.tensor(allowed), temperature,
                                                       top_k=top_k, top_p=top_p, dtype=torch.float64),
                            (ValueError, FloatingPointError, TypeError))
    if refused is not None:
        assert any(name in refused for name in ("temperature", "top_k", "top_p", "allowed", "logits")), refused
        return
    out = tempered_log_probs(torch.tensor(logits), torch.tensor(allowed), temperature, top_k=top_k, top_p=top_p,
                             dtype=torch.float64)
    assert torch.isfinite(out.exp().sum()) and abs(float(out.exp().sum()) - 1) < 1e-9
    assert (out[~torch.tensor(allowed)] == -math.inf).all()


@settings(max_examples=200, deadline=None)
@given(temperature=NUMBERS, top_k=NUMBERS, top_p=NUMBERS, block=NUMBERS,
       scan=st.sampled_from(["random", "sweep", "sequential", "other"]))
def test_sampler_options_work_or_are_refused_by_name(temperature, top_k, top_p, block, scan):
    def build():
        return GlauberSampler(_mrf(), temperature, top_k=top_k, top_p=top_p, block_size=block, scan=scan)

    refused = named_refusal(build, (ValueError, TypeError))
    if refused is not None:
        assert any(name in refused for name in ("temperature", "top_k", "top_p", "block_size", "scan")), refused
        return
    sampler = build()
    if sampler.block_size <= 3 and (scan == "random" or 3 % sampler.block_size == 0):
        state = sampler.init_state(torch.zeros(2, 3, dtype=torch.long), generator=0)
        refused = named_refusal(lambda: sampler.step(state), (FloatingPointError,))
        assert refused is None or "temperature" in refused  # a temperature far below the logits' scale


@settings(max_examples=200, deadline=None)
@given(rows=st.lists(st.lists(st.floats(0, 2, width=16), min_size=3, max_size=3), min_size=2, max_size=2),
       dtype=st.sampled_from([torch.float16, torch.bfloat16, torch.float32, torch.float64]))
def test_maximal_coupling_takes_probability_vectors_only(rows, dtype):
    p, q = (torch.tensor([row], dtype=dtype) for row in rows)
    refused = named_refusal(lambda: maximal_coupling(p, q, torch.Generator().manual_seed(0)), (ValueError,))
    if refused is not None:
        assert refused.startswith(("p", "q")), refused
        if all(abs(float(row.double().sum()) - 1) <= 8 * torch.finfo(dtype).eps for row in (p, q)):
            pytest.fail(f"refused valid rows {p}, {q}")  # refused only when a row is not a probability vector
        return
    x, y = maximal_coupling(p, q, torch.Generator().manual_seed(0))
    for row in (p, q):
        assert abs(float(row.double().sum()) - 1) <= (8 + 2 * math.log2(3) + 4 * math.log(3)) * torch.finfo(dtype).eps
    assert p[0, x].item() > 0 and q[0, y].item() > 0
