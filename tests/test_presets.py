"""Every shipped config loads and validates (typos in presets fail here, not in a user's run)."""

from pathlib import Path

import pytest

from mlm_dynamics.experiments import RunConfig, load_config
from mlm_dynamics.experiments.sweep import SweepConfig

CONFIGS = Path(__file__).parent.parent / "configs"


@pytest.mark.parametrize("path", sorted(CONFIGS.glob("*.yaml")), ids=lambda p: p.stem)
def test_preset_loads(path):
    if path.stem.startswith("topics"):
        pytest.skip("topic anchors, not a job config")
    schema = SweepConfig if path.stem.startswith("sweep") else RunConfig
    config = load_config(schema, path, ["model.device=cpu"])  # GPU presets validate on any machine
    assert config.model.device == "cpu"
