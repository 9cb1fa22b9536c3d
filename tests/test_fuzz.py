"""Fuzzing the inputs: any config override and any library argument either works or raises the project's error
types with the parameter named; never another exception."""

import contextlib
import dataclasses
import json
import math
import re
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mlm_dynamics import GlauberSampler, PairwiseMRFDenoiser
from mlm_dynamics.experiments import ConfigError, RunConfig, load_config
from mlm_dynamics.experiments.checkpoint import save_checkpoint
from mlm_dynamics.experiments.config import SweepConfig, field_default
from mlm_dynamics.experiments.rectangles import RectangleTableConfig
from mlm_dynamics.experiments.semantics import CaseStudyConfig
from mlm_dynamics.report.schema import validate_report
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


JSON_VALUES = st.recursive(st.none() | st.booleans() | st.integers(-(2**40), 2**40)
                           | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=6),
                           lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner,
                                                                                       max_size=3), max_leaves=6)


def _leaves(value, path=()):
    """Every ``(path, value)`` of a parsed JSON document's leaves and containers, outermost first."""
    yield path, value
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        yield from _leaves(item, (*path, key))


def _dotted(path) -> str:
    return "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in path).lstrip(".")


RUN_REPORT = json.loads((Path(__file__).resolve().parents[1] / "docs" / "data" / "default-run.json").read_text())
RUN_PATHS = [path for path, _ in _leaves(RUN_REPORT) if path]


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(path=st.sampled_from(RUN_PATHS), value=JSON_VALUES | st.sampled_from([1e300, -1.0, 2.0, 0.5, 10**9]),
       drop=st.booleans())
def test_a_run_report_changed_anywhere_is_read_as_written_or_refused_naming_the_key(path, value, drop):
    """One key of a real run report set to any JSON value (or removed): the schema accepts it, and then every
    relation a reader relies on holds (each entry's budget bounds its medians and meeting times, fractions in
    [0, 1]); or it refuses it in one line naming that key or a section holding it."""
    report = json.loads(json.dumps(RUN_REPORT))
    parent = report
    for part in path[:-1]:
        parent = parent[part]
    if drop and isinstance(parent, dict):
        parent.pop(path[-1])
    else:
        parent[path[-1]] = value
    try:
        read = validate_report(report, "run")
    except ValueError as error:
        text = str(error)
        assert "\n" not in text
        named = re.split(r" must | is missing|: ", text)[0]
        # the key itself, a section holding it (a relation between its keys), or a part of the value put there
        assert named == "the report" or _dotted(path).startswith(named) or named.startswith(_dotted(path)), (path, text)
        return
    for entry in read["mixing"]["by_temperature"]:
        budget = entry["budget"]
        assert isinstance(budget, (int, float)) and 0 <= budget < math.inf
        for key in ("meeting_time_median", "meeting_time_median_lower_bound"):
            assert entry[key] is None or entry[key] <= budget
        assert all(time <= budget for time in entry["meeting_times"] or [])
        assert 0 <= entry["censored_fraction"] <= 1


@pytest.fixture(scope="module")
def saved_checkpoint(tmp_path_factory):
    path = tmp_path_factory.mktemp("checkpoint") / "checkpoint.pt"
    save_checkpoint(path, {"tokens": torch.arange(6).reshape(2, 3)}, fingerprints={"config": "abc"}, step=7)
    return path


HEADER_FIELDS = st.sampled_from(["sha256", "fingerprint", "step", "other"])


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(changes=st.dictionaries(HEADER_FIELDS, JSON_VALUES | st.integers(-5, 10), max_size=3), reseal=st.booleans(),
       raw=st.none() | st.binary(max_size=40))
def test_a_checkpoint_header_changed_in_any_way_resumes_only_when_it_is_whole(saved_checkpoint, tmp_path_factory,
                                                                               changes, reseal, raw):
    """Any header (fields changed, resealed with a matching hash as by hand, or replaced by bytes): the checkpoint
    loads only with its fingerprints and a step that is an integer >= 0, else it is refused in one line naming the
    file; the step the messages quote is None or such a step, never an exception."""
    from mlm_dynamics.experiments.checkpoint import MAGIC, CheckpointError, _digest, checkpoint_step, load_checkpoint

    blob = saved_checkpoint.read_bytes()
    header_line, _, data = blob[len(MAGIC):].partition(b"\n")
    header = json.loads(header_line)
    header.update(changes)
    if reseal:  # as by hand: a hash that matches the changed fields
        with contextlib.suppress(TypeError, ValueError, KeyError):
            header["sha256"] = _digest(header["fingerprint"], header["step"], data)
    line = raw if raw is not None else json.dumps(header).encode()
    path = tmp_path_factory.mktemp("changed") / "checkpoint.pt"
    path.write_bytes(MAGIC + line.replace(b"\n", b" ") + b"\n" + data)
    step = checkpoint_step(path)
    assert step is None or (type(step) is int and step >= 0)
    refused = named_refusal(lambda: load_checkpoint(path, fingerprints={"config": "abc"}), (CheckpointError,))
    if refused is not None:
        assert str(path) in refused and "\n" not in refused, refused
        return
    payload, loaded = load_checkpoint(path, fingerprints={"config": "abc"})
    assert type(loaded) is int and loaded >= 0 and torch.equal(payload["tokens"], torch.arange(6).reshape(2, 3))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(schema=st.sampled_from(SCHEMAS), document=st.dictionaries(st.text(max_size=8), JSON_VALUES, max_size=4)
       | JSON_VALUES, known=st.lists(VALUES, max_size=3))
def test_any_config_file_loads_or_is_refused_naming_the_key_or_file(tmp_path_factory, schema, document, known):
    """A config file holding any YAML document (random keys and values, or the schema's own keys set to the fuzzed
    --set values): it loads, or a ConfigError names the file or a key; never another exception."""
    import yaml

    def parsed(text: str):
        try:
            return yaml.safe_load(text)
        except yaml.YAMLError:
            return text

    path = tmp_path_factory.mktemp("config") / "config.yaml"
    if isinstance(document, dict) and known:
        names = [item.name for item in dataclasses.fields(schema)]
        document = {**document, **{key: parsed(value) for key, value in zip(names, known, strict=False)}}
    try:
        path.write_text(yaml.safe_dump(document))
    except yaml.YAMLError:
        return
    text = named_refusal(lambda: load_config(schema, str(path), []), (ConfigError,))
    assert text is None or str(path) in text or any(key.split(".")[0] in text for key in keys(schema)), text
