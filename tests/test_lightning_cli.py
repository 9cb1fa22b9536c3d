"""All callbacks configured from a LightningCLI YAML file, with start tokens, topic anchors and embedders in it."""

import json

import pytest
import yaml

from helpers import tiny_lightning_classes
from mlm_dynamics.models import english_mlm_dir


def test_lightning_cli_builds_every_callback_from_yaml_and_fits(tmp_path):
    pytest.importorskip("jsonargparse")
    from lightning.pytorch.cli import LightningCLI

    (tmp_path / "starts.json").write_text(json.dumps([[1, 4, 5, 6, 7, 8, 9, 4, 5, 6, 7, 2]] * 2))
    common = {"every_n_train_steps": 2, "on_validation_end": False, "num_starts": 2, "overhead": None}
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
            "start_tokens": str(tmp_path / "starts.json"),  # this embedder's width is the sequence length
            "embedder": {"class_path": "mlm_dynamics.embedders.FunctionEmbedder",
                         "init_args": {"fn": "torch.atleast_2d"}},  # by class path, rows normalised
            "topic_anchors": {"flat": [[1.0] * 12]}}},
        {"class_path": "mlm_dynamics.callbacks.SemanticDrift", "init_args": {
            **common, "steps_per_run": 2, "every": 2, "prefix": "hidden/",
            "embedder": {"class_path": "mlm_dynamics.embedders.HiddenStateEmbedder"}}},  # bound when fit starts
        {"class_path": "mlm_dynamics.callbacks.SemanticDrift", "init_args": {
            **common, "steps_per_run": 2, "every": 2, "prefix": "module/",
            "embedder": {"class_path": "mlm_dynamics.embedders.ModuleOutputEmbedder",
                         "init_args": {"module": "model.bert.encoder.layer.0"}}}},
        {"class_path": "mlm_dynamics.callbacks.SemanticDrift", "init_args": {
            **common, "steps_per_run": 2, "every": 2, "prefix": "untyped/",
            "embedder": "helpers.untyped_embedding"}},  # a plain function without annotations
        {"class_path": "mlm_dynamics.callbacks.TrapDetector", "init_args": {
            **common, "steps_per_run": 2, "every": 2, "prefix": "text/", "topic_anchors": {"sea": ["the sea"]},
            "embedder": {"class_path": "mlm_dynamics.embedders.SentenceEmbedder",
                         "init_args": {"codec": str(english_mlm_dir())}}}},  # a tokenizer by path
    ]
    config = {"trainer": {"max_steps": 4, "accelerator": "cpu", "logger": False, "enable_checkpointing": False,
                          "enable_progress_bar": False, "enable_model_summary": False,
                          "default_root_dir": str(tmp_path), "callbacks": callbacks}}
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    module, data = tiny_lightning_classes()
    cli = LightningCLI(module, data, args=["fit", "--config", str(tmp_path / "config.yaml")],
                       save_config_kwargs={"overwrite": True})
    built = [cb for cb in cli.trainer.callbacks if hasattr(cb, "runs")]
    assert [len(row) for row in built[0].scheduled.start_tokens] == [12, 12]  # read from the JSON file
    assert [cb.runs for cb in built] == [2] * len(callbacks)
    metrics = cli.trainer.callback_metrics
    for key in ("mixing/train/meeting_time_median_low", "traps/train/topic/flat", "hidden/drift/train/drift_mean",
                "module/drift/train/drift_mean", "untyped/drift/train/drift_mean", "text/traps/train/topic/sea"):
        assert key in metrics, key
