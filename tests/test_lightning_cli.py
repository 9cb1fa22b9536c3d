"""All callbacks configured from a LightningCLI YAML file, with start tokens, topic anchors and embedders in it."""

import json

import pytest
import yaml

from helpers import tiny_lightning_classes


def test_lightning_cli_builds_every_callback_from_yaml_and_fits(tmp_path):
    pytest.importorskip("jsonargparse")
    from lightning.pytorch.cli import LightningCLI

    (tmp_path / "starts.json").write_text(json.dumps([[1, 4, 5, 6, 7, 8, 9, 4, 5, 6, 7, 2]] * 2))
    common = {"every_n_train_steps": 2, "on_validation_end": False, "num_starts": 2}
    callbacks = [
        {"class_path": "mlm_dynamics.callbacks.MixingDiagnostics",
         "init_args": {**common, "max_steps": 10, "start_tokens": str(tmp_path / "starts.json")}},
        {"class_path": "mlm_dynamics.callbacks.RectangleTest",
         "init_args": {**common, "num_tokens": 3, "start_tokens": [[1, 4, 5, 6, 2]] * 2}},
        {"class_path": "mlm_dynamics.callbacks.InfluenceProbe",
         "init_args": {**common, "max_sites": 3, "denoiser_attr": "denoiser"}},
        {"class_path": "mlm_dynamics.callbacks.SemanticDrift", "init_args": {**common, "steps_per_run": 4, "every": 2}},
        {"class_path": "mlm_dynamics.callbacks.TrapDetector", "init_args": {
            **common, "steps_per_run": 4, "every": 2, "dwell": 2, "radius": 0.5,
            "embedder": {"class_path": "mlm_dynamics.embedders.FunctionEmbedder",
                         "init_args": {"fn": "torch.atleast_2d"}},  # by class path, rows normalised
            "topic_anchors": {"flat": [[1.0] * 12]}}},
    ]
    config = {"trainer": {"max_steps": 4, "accelerator": "cpu", "logger": False, "enable_checkpointing": False,
                          "enable_progress_bar": False, "enable_model_summary": False,
                          "default_root_dir": str(tmp_path), "callbacks": callbacks}}
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    module, data = tiny_lightning_classes()
    cli = LightningCLI(module, data, args=["fit", "--config", str(tmp_path / "config.yaml")],
                       save_config_kwargs={"overwrite": True})
    built = {type(cb).__name__: cb for cb in cli.trainer.callbacks}
    assert built["MixingDiagnostics"].start_tokens.shape == (2, 12)
    assert [cb.runs for name, cb in built.items() if name in ("MixingDiagnostics", "RectangleTest",
                                                               "InfluenceProbe", "SemanticDrift")] == [2] * 4
    assert "mixing/meeting_time_median" in cli.trainer.callback_metrics
    assert "traps/topic/flat" in cli.trainer.callback_metrics
