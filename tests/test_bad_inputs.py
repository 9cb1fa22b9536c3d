"""The one place for bad inputs: each must give a clear error naming the parameter, never a traceback or a number.

Add new cases to the tables below.
"""

import math

import pytest
import torch

from mlm_dynamics import GlauberSampler, PairwiseMRFDenoiser, estimate_influence, maximal_coupling, tempered_log_probs
from mlm_dynamics.callbacks import InfluenceProbe, MixingDiagnostics, RectangleTest, SemanticDrift, TrapDetector
from mlm_dynamics.cli import main
from mlm_dynamics.sampling import check_temperature

QUICK = ["--set", "model.num_layers=1", "--set", "chains.num_chains=2",
         "--set", "chains.temperatures=[1.0, 2.0]", "--set", "run.num_steps=2",
         "--set", "coupling.enabled=false", "--set", "rectangle.enabled=false", "--set", "margins.enabled=false",
         "--set", "influence.enabled=false"]

# (overrides, text the error must contain); all are rejected before the model loads unless marked
CONFIG_CASES = [
    ("run.record_every=0", "run.record_every"),
    ("run.record_every=-1", "run.record_every"),
    ("run.checkpoint_every=-3", "run.checkpoint_every"),
    ("run.num_steps=0", "run.num_steps"),
    ("chains.window=[93.5, 100]", "chains.window"),
    ("chains.window=[9, 3]", "chains.window"),
    ("chains.seed=abc", "chains.seed"),
    ("chains.num_chains=0", "chains.num_chains"),
    ("chains.crop=-1", "chains.crop"),
    ("chains.crop=4", "chains.crop"),  # no window to crop around
    ("model.device=foo", "model.device"),
    ("model.source=nowhere", "model.source"),
    ("model.num_layers=0", "model.num_layers"),
    ("sampler.temperature=true", "sampler.temperature"),
    ("sampler.temperature=0", "sampler.temperature"),
    ("sampler.temperature=.nan", "sampler.temperature"),
    ("sampler.scan=diagonal", "sampler.scan"),
    ("sampler.top_p=1.5", "sampler.top_p"),
    ("sampler.bogus=1", "sampler.bogus"),
    ("coupling.num_pairs=0", "coupling.num_pairs"),
    ("coupling.max_steps=-1", "coupling.max_steps"),
    ("rectangle.max_distance=0", "rectangle.max_distance"),
    ("rectangle.num_tokens=1", "rectangle.num_tokens"),
    ("influence.max_sites=1", "influence.max_sites"),
    ("influence.num_contexts=0", "influence.num_contexts"),
    ("influence.temperatures=[]", "influence.temperatures"),
    ("influence.temperatures=[1.0, -2.0]", "influence.temperatures"),
]


@pytest.mark.parametrize(("override", "message"), CONFIG_CASES)
def test_bad_config_values_are_refused_by_name_before_any_work(tmp_path, capsys, monkeypatch, override, message):
    import mlm_dynamics.experiments.run as job

    monkeypatch.setattr(job, "build_model", lambda spec: pytest.fail("the model was loaded"))
    assert main(["run", "--out", str(tmp_path), "--set", override]) == 2
    assert message in capsys.readouterr().err


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_cuda_device_on_a_cpu_machine(tmp_path, capsys):
    assert main(["run", "--out", str(tmp_path), "--set", "model.device=cuda"]) == 2
    assert "no CUDA device" in capsys.readouterr().err


def test_bad_files_and_directories(tmp_path, capsys):
    cases = []
    duplicate = tmp_path / "dup.yaml"
    duplicate.write_text("sampler:\n  temperature: 1.0\n  temperature: 2.0\n")
    malformed = tmp_path / "bad.yaml"
    malformed.write_text("sampler: [unclosed\n")
    listed = tmp_path / "list.yaml"
    listed.write_text("- a\n- b\n")
    a_file = tmp_path / "file"
    a_file.write_text("x")
    cases += [(["--config", str(duplicate)], "duplicate key"), (["--config", str(malformed)], "not valid YAML"),
              (["--config", str(listed)], "mapping"), (["--config", str(tmp_path / "missing.yaml")], "no such file"),
              (["--config", str(tmp_path)], "not a file"), (["--out", str(a_file)], "not a directory"),
              (["--out", str(a_file / "sub")], "cannot be created")]
    for arguments, message in cases:
        out = ["--out", str(tmp_path / "out")] if "--out" not in arguments else []
        assert main(["run", *out, *arguments]) == 2, arguments
        assert message in capsys.readouterr().err, arguments


def test_missing_model_paths_and_unreachable_hub_names(tmp_path, capsys):
    for name, message in (("./no/such/model", "does not exist"), ("surely-not-cached/model-xyz", "local")):
        assert main(["run", "--out", str(tmp_path), "--set", "model.source=huggingface",
                     "--set", f"model.name_or_path={name}", "--set", "chains.sequences=[hello]"]) == 2
        assert message in capsys.readouterr().err


def test_errors_after_loading_still_name_the_parameter(tmp_path, capsys):
    pytest.importorskip("antiberty")
    for override, message in (("chains.window=[5, 500]", "chains.window"),
                              ("chains.sequences=[EVQLXZ]", "chains.sequences"),
                              ("chains.sequences=[EVQL, EVQLV]", "chains.sequences"),
                              ("chains.temperatures=[1e-310, 1.0]", "temperature")):  # logits / tau overflow float64
        assert main(["run", "--out", str(tmp_path), *QUICK, "--set", override]) == 2, override
        assert message in capsys.readouterr().err, override


def test_resume_refuses_missing_empty_truncated_and_garbage_checkpoints(tmp_path, capsys):
    pytest.importorskip("antiberty")
    out = tmp_path / "run"
    assert main(["run", "--out", str(out), "--resume", *QUICK]) == 2
    assert "no checkpoint" in capsys.readouterr().err
    assert main(["run", "--out", str(out), "--set", "run.checkpoint_every=1", *QUICK]) == 0
    good = (out / "checkpoint.pt").read_bytes()
    for damaged, message in ((b"", "not an mlm_dynamics checkpoint"), (good[: len(good) // 2], "corrupted"),
                             (b"\x80\x04garbage", "not an mlm_dynamics checkpoint")):
        (out / "checkpoint.pt").write_bytes(damaged)
        assert main(["run", "--out", str(out), "--resume", *QUICK]) == 2
        error = capsys.readouterr().err
        assert message in error and str(out / "checkpoint.pt") in error


# library calls: (callable, exception type, text the message must contain)
def _mrf():
    return PairwiseMRFDenoiser.random(3, 3, seed=0)


LIBRARY_CASES = [
    (lambda: maximal_coupling(torch.tensor([[1.0, 1.0, 0.0]]), torch.tensor([[0.0, 1.0, 1.0]]), torch.Generator()),
     ValueError, "sum to 1"),
    (lambda: maximal_coupling(torch.tensor([[math.inf, 0.0]]), torch.tensor([[0.5, 0.5]]), torch.Generator()),
     ValueError, "finite"),
    (lambda: maximal_coupling(torch.tensor([[1, 0]]), torch.tensor([[1, 0]]), torch.Generator()),
     ValueError, "floating-point"),
    (lambda: estimate_influence(_mrf(), torch.zeros(1, 3, dtype=torch.long), sites=torch.tensor([0, 0])),
     ValueError, "distinct"),
    (lambda: estimate_influence(_mrf(), torch.zeros(0, 3, dtype=torch.long)), ValueError, "contexts"),
    (lambda: estimate_influence(_mrf(), torch.zeros(1, 3, dtype=torch.long), sites=torch.tensor([0.0, 1.7])),
     ValueError, "sites must be an integer tensor"),
    (lambda: estimate_influence(_mrf(), torch.zeros(1, 3, dtype=torch.long), temperatures=[0.0]),
     ValueError, "temperature"),
    (lambda: GlauberSampler(_mrf()).init_state(torch.zeros(2, 3), seed=0), ValueError, "tokens must be an integer"),
    (lambda: GlauberSampler(_mrf()).init_state(torch.zeros(2, 3, dtype=torch.long), seed=0,
                                               sites=torch.tensor([[0.0, 1.9]] * 2)),
     ValueError, "sites must be an integer tensor"),
    (lambda: check_temperature(True), ValueError, "temperature"),
    (lambda: GlauberSampler(_mrf(), temperature=0.0), ValueError, "temperature"),
    (lambda: tempered_log_probs(torch.tensor([3e38, -3e38]), torch.ones(2, dtype=torch.bool), 0.5,
                                dtype=torch.float32), FloatingPointError, "temperature"),
    (lambda: tempered_log_probs(torch.tensor([1.0, 2.0]), torch.ones(2, dtype=torch.bool), 1e-310,
                                dtype=torch.float64), FloatingPointError, "temperature"),
    (lambda: MixingDiagnostics(temperature=0), ValueError, "temperature"),
    (lambda: MixingDiagnostics(max_steps=-1), ValueError, "max_steps"),
    (lambda: MixingDiagnostics(lag=0), ValueError, "lag"),
    (lambda: RectangleTest(num_tokens=1), ValueError, "num_tokens"),
    (lambda: RectangleTest(pairs_per_context=0), ValueError, "pairs_per_context"),
    (lambda: InfluenceProbe(temperatures=[0]), ValueError, "temperature"),
    (lambda: InfluenceProbe(temperatures=[]), ValueError, "temperatures"),
    (lambda: SemanticDrift(budget_seconds=0), ValueError, "budget_seconds"),
    (lambda: SemanticDrift(budget_seconds=-5), ValueError, "budget_seconds"),
    (lambda: SemanticDrift(every=0), ValueError, "every"),
    (lambda: SemanticDrift(thresholds=[3.0]), ValueError, "thresholds"),
    (lambda: TrapDetector(topic_threshold=2.0), ValueError, "topic_threshold"),
    (lambda: TrapDetector(start_tokens=torch.zeros(2, 3)), ValueError, "start_tokens"),
]


@pytest.mark.parametrize(("call", "error", "message"), LIBRARY_CASES)
def test_bad_library_inputs_raise_errors_naming_the_parameter(call, error, message):
    with pytest.raises(error, match=message):
        call()


def test_a_module_without_a_denoiser_fails_when_fit_starts():
    import lightning as L
    from torch.utils.data import DataLoader

    class NoDenoiser(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(1, 1)

        def training_step(self, batch, batch_idx):
            pytest.fail("training started")

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    trainer = L.Trainer(max_steps=1, callbacks=[RectangleTest(every_n_train_steps=1)], logger=False,
                        enable_progress_bar=False, enable_checkpointing=False, enable_model_summary=False)
    with pytest.raises(AttributeError, match="'denoiser' attribute"):
        trainer.fit(NoDenoiser(), DataLoader(torch.zeros(4, 3, dtype=torch.long), batch_size=2))
