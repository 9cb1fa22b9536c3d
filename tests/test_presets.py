"""Every shipped config loads and validates (typos in presets fail here, not in a user's run)."""

from pathlib import Path

import pytest

from mlm_dynamics.experiments import RunConfig, load_config
from mlm_dynamics.experiments.rectangles import RectangleTableConfig
from mlm_dynamics.experiments.semantics import CaseStudyConfig
from mlm_dynamics.experiments.sweep import SweepConfig

CONFIGS = Path(__file__).parent.parent / "configs"
# (schema, overrides that let GPU presets validate on any machine), by file-name prefix
JOBS = {"sweep": (SweepConfig, ["model.device=cpu"]), "english": (CaseStudyConfig, ["model.device=cpu"]),
        "rectangle": (RectangleTableConfig, ["device=cpu"]), "antiberty": (RunConfig, ["model.device=cpu"])}


@pytest.mark.parametrize("path", sorted(CONFIGS.glob("*.yaml")), ids=lambda p: p.stem)
def test_preset_loads(path):
    if path.stem.startswith("topics"):
        pytest.skip("topic anchors, not a job config")
    schema, overrides = JOBS[path.stem.split("-")[0]]
    load_config(schema, path, overrides)
