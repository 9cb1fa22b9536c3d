"""Every packaged preset loads and validates (typos in presets fail here, not in a user's run)."""

import pytest

from mlm_dynamics.cli import JOBS
from mlm_dynamics.experiments import load_config
from mlm_dynamics.experiments.config import presets

# overrides that let GPU presets validate on any machine, per job
CPU = {"run": ["model.device=cpu"], "sweep": ["model.device=cpu"], "semantics": ["model.device=cpu"],
       "rectangle-table": ["device=cpu"], "parallel-decoding": ["device=cpu"]}


def test_every_job_has_a_preset():
    assert set(presets().values()) == set(JOBS)


@pytest.mark.parametrize("name", sorted(presets()))
def test_preset_loads(name):
    job = presets()[name]
    schema = JOBS[job][0]
    config = load_config(schema, name, CPU[job])
    assert type(config) is schema
