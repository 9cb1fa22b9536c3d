"""Attaching mlm_dynamics leaves the run it watches bit-identical: the same fit with and without the plugin.

Each test runs one set-up twice from the same seed, bare and with the wrapper plus every callback (runs every few
optimizer steps, at validation end and at predict end), and compares per-step losses, final parameters, optimizer
state, the global random state after fit and every submodule's train/eval flag, exactly.
"""

import csv
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import lightning as L
import pytest
import torch
from lightning.pytorch.loggers import CSVLogger
from torch.utils.data import DataLoader

from helpers import (
    assert_same_fit,
    collator_batches,
    collator_finetune_class,
    fit_fingerprint,
    mdlm_style_class,
    potts_corpus,
)
from mlm_dynamics.callbacks import InfluenceProbe, MixingDiagnostics, RectangleTest, SemanticDrift, TrapDetector
from mlm_dynamics.models import english_mlm_dir


def every_callback(every: int, hidden_module: str | None = None, **extra):
    """Every callback with its defaults, run every ``every`` optimizer steps, at validation end and predict end."""
    common = dict(every_n_train_steps=every, on_predict_end=True, overhead=None, **extra)
    chains = {} if hidden_module is None else {"hidden_module": hidden_module}
    return [MixingDiagnostics(lag=5, **common), RectangleTest(**common), InfluenceProbe(**common),
            SemanticDrift(**chains, **common), TrapDetector(**chains, with_margins=True, **common)]


@pytest.fixture(scope="module")
def tokenizer():
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(english_mlm_dir())


def collator_fit(tokenizer, out, *, plugin: bool, accumulate: int = 1):
    L.seed_everything(0, verbose=False)
    module = collator_finetune_class()(tokenizer, plugin=plugin)
    trainer = L.Trainer(max_steps=6, accumulate_grad_batches=accumulate, val_check_interval=3 * accumulate,
                        check_val_every_n_epoch=None,
                        limit_val_batches=2, num_sanity_val_steps=1, callbacks=every_callback(3) if plugin else [],
                        logger=CSVLogger(out, name="csv"), log_every_n_steps=1, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, accelerator="cpu")
    trainer.fit(module, collator_batches(tokenizer), collator_batches(tokenizer, seed=1))
    fingerprint = fit_fingerprint(trainer, module, module.model)
    trainer.predict(module, collator_batches(tokenizer, seed=2))
    after_predict = {"rng": torch.get_rng_state(), "modes": {n: m.training for n, m in module.model.named_modules()}}
    return fingerprint, after_predict, trainer


@pytest.mark.parametrize("accumulate", [1, 2])
def test_collator_finetune_is_bit_identical_with_the_plugin(tokenizer, accumulate, tmp_path):
    bare, bare_predict, _ = collator_fit(tokenizer, tmp_path / "bare", plugin=False, accumulate=accumulate)
    observed, observed_predict, trainer = collator_fit(tokenizer, tmp_path / "plugin", plugin=True,
                                                       accumulate=accumulate)
    assert_same_fit(bare, observed)
    assert bare_predict["modes"] == observed_predict["modes"]
    assert torch.equal(bare_predict["rng"], observed_predict["rng"])
    assert not observed["modes"]["bert.embeddings"] and observed["modes"]["bert.encoder"]  # the frozen part stays
    with (tmp_path / "plugin" / "csv" / "version_0" / "metrics.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    logged_at = {key: [int(row["step"]) for row in rows if row.get(key)] for key in rows[0]}
    # once each, at the step measured: Lightning's axis logs the batch of optimizer step k at k - 1
    assert logged_at["mixing/train/meeting_time_median"] == [2, 5]
    assert logged_at["rectangle/val/prevalence"] == logged_at["val/loss"]  # beside the module's own validation
    assert len(logged_at["traps/predict/drift_mean"]) == 1
    validations = len(logged_at["val/loss"])
    assert [cb.runs for cb in trainer.callbacks if hasattr(cb, "runs")] == [2 + validations + 1] * 5
    # the starts were the collator's clean sequences, not its [MASK]ed input
    mixing = next(cb for cb in trainer.callbacks if isinstance(cb, MixingDiagnostics))
    starts = mixing.scheduled.starts(trainer.lightning_module.denoiser)
    assert not (starts.tokens == tokenizer.mask_token_id).any()
    assert len(set(starts.counts.tolist())) > 1  # padded rows resample their own positions


def mdlm_fit(*, plugin: bool):
    L.seed_everything(0, verbose=False)
    module = mdlm_style_class()(plugin=plugin)
    data = potts_corpus(num=32, length=10)[:, 1:-1].clamp_max(10)  # ids 0..10; 11 is the mask
    callbacks = every_callback(2, hidden_module="model.encoder", weights=lambda m: m.ema_scope()) if plugin else []
    trainer = L.Trainer(max_steps=6, val_check_interval=3, check_val_every_n_epoch=None, limit_val_batches=1,
                        num_sanity_val_steps=1,
                        callbacks=callbacks, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, accelerator="cpu")
    trainer.fit(module, DataLoader(data, batch_size=8, shuffle=True), DataLoader(data[:8], batch_size=8))
    fingerprint = fit_fingerprint(trainer, module, module.backbone)
    fingerprint["ema"] = [s.clone() for s in module.ema.shadow]
    return fingerprint, module, trainer


def test_mdlm_style_module_with_ema_is_bit_identical_with_the_plugin():
    bare, _, _ = mdlm_fit(plugin=False)
    observed, module, trainer = mdlm_fit(plugin=True)
    assert_same_fit(bare, observed)
    for mine, theirs in zip(bare["ema"], observed["ema"], strict=True):
        assert torch.equal(mine, theirs)
    # the training weights are not the EMA weights after fit (they were, with a second swap at validation end)
    assert not all(torch.equal(p, s) for p, s in zip(module.backbone.parameters(), module.ema.shadow, strict=True))
    assert all(cb.runs == 5 for cb in trainer.callbacks if hasattr(cb, "runs"))  # steps 2, 4, 6; two validations


def test_validation_end_measures_the_weights_the_module_validates_with():
    """At validation end MDLM has EMA in place already: ``weights=`` is not applied again; every N steps it is."""
    module = mdlm_style_class()(plugin=True)
    data = potts_corpus(num=8, length=10)[:, 1:-1].clamp_max(10)
    entered = []

    def weights(m):
        entered.append(m.trainer.state.stage.value if m._trainer else None)
        return m.ema_scope()

    callback = MixingDiagnostics(every_n_train_steps=2, max_steps=5, weights=weights, num_starts=2,
                                 overhead=None)
    trainer = L.Trainer(max_steps=4, val_check_interval=4, check_val_every_n_epoch=None, limit_val_batches=1,
                        num_sanity_val_steps=0,
                        callbacks=[callback], logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, accelerator="cpu")
    trainer.fit(module, DataLoader(data, batch_size=4), DataLoader(data[:4], batch_size=4))
    assert entered == ["train", "train"]  # steps 2 and 4; not at validation end, where EMA was already in


def test_a_weights_context_that_does_not_restore_is_an_error():
    module = mdlm_style_class()(plugin=True)
    module.ema.shadow = [s + 1 for s in module.ema.shadow]

    def leaky(m):
        m.ema.copy_to(m.backbone.parameters())  # swaps EMA in and never restores
        from contextlib import nullcontext
        return nullcontext()

    callback = MixingDiagnostics(max_steps=3, weights=leaky, start_tokens=[[1, 2, 3, 4]], overhead=None)
    with pytest.raises(RuntimeError, match=r"weights: .* left other parameters"):
        callback.scheduled.run(module, module.denoiser, stage="train")


DDP_SCRIPT = """
import json, sys
import lightning as L
import torch
sys.path.insert(0, sys.argv[2])
from helpers import collator_batches, collator_finetune_class
from test_observer_effect import every_callback
from transformers import AutoTokenizer
from mlm_dynamics.models import english_mlm_dir


def fit(plugin):
    L.seed_everything(0, verbose=False)
    tokenizer = AutoTokenizer.from_pretrained(english_mlm_dir())
    module = collator_finetune_class()(tokenizer, plugin=plugin)
    trainer = L.Trainer(accelerator="cpu", devices=2, strategy="ddp", max_steps=4, val_check_interval=2,
                        check_val_every_n_epoch=None, limit_val_batches=1, num_sanity_val_steps=0, logger=False,
                        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                        callbacks=every_callback(2) if plugin else [])
    trainer.fit(module, collator_batches(tokenizer, batch_size=2), collator_batches(tokenizer, batch_size=2, seed=1))
    digest = sum(float(p.double().sum()) * (k + 1) for k, p in enumerate(module.model.parameters()))
    return {"losses": module.losses, "digest": digest, "rng": torch.get_rng_state().tolist(),
            "modes": {n: m.training for n, m in module.model.named_modules()}, "rank": trainer.global_rank,
            "runs": [cb.runs for cb in trainer.callbacks if hasattr(cb, "runs")]}


if __name__ == "__main__":
    out = {"bare": fit(False), "plugin": fit(True)}
    with open(f"{sys.argv[1]}/rank{out['bare']['rank']}.json", "w") as handle:
        json.dump(out, handle)
"""


@pytest.mark.slow
def test_two_rank_ddp_fit_is_bit_identical_with_the_plugin(tmp_path):
    script = tmp_path / "ddp_observer.py"
    script.write_text(textwrap.dedent(DDP_SCRIPT))
    tests = Path(__file__).parent
    done = subprocess.run([sys.executable, str(script), str(tmp_path), str(tests)], capture_output=True, text=True,
                          timeout=600, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    for rank in (0, 1):
        result = json.loads((tmp_path / f"rank{rank}.json").read_text())
        bare, plugin = result["bare"], result["plugin"]
        assert bare["losses"] == plugin["losses"] and len(bare["losses"]) == 4
        assert bare["digest"] == plugin["digest"]
        assert bare["rng"] == plugin["rng"]
        assert bare["modes"] == plugin["modes"]
        assert plugin["runs"][:2] == [4, 4]  # pooled probes ran on every rank: steps 2, 4 and two validations


def test_probes_draw_only_from_their_own_stream(tokenizer):
    """The same callback gives the same numbers whatever the global random state: the model is measured in eval mode
    (no dropout) and every draw comes from the callback's own generator."""
    from mlm_dynamics import MaskedLMDenoiser

    module = collator_finetune_class()(tokenizer, plugin=False)  # in train mode, dropout on
    denoiser = MaskedLMDenoiser(module.model, tokenizer=tokenizer)
    batch = next(iter(collator_batches(tokenizer)))
    for index in range(5):
        results = []
        for global_seed in (1, 2):
            scheduled = every_callback(1)[index].scheduled
            scheduled.capture(batch)
            torch.manual_seed(global_seed)
            measured = scheduled.run(module, denoiser, stage="train") or {}
            results.append({k: v for k, v in measured.items() if not k.endswith("/overhead")})  # wall-clock aside
        assert results[0] == results[1], next(iter(results[0]))
