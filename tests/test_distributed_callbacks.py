import json
import subprocess
import sys
import textwrap

import lightning as L
import pytest
import torch
from torch.utils.data import DataLoader

from mlm_dynamics.callbacks import RectangleTest
from mlm_dynamics.training import MaskedDenoiserModule, tiny_bert_denoiser


class Recorder(RectangleTest):
    """Records the optimizer step of every run."""

    def _run(self, trainer, pl_module, stage):
        self.steps = [*getattr(self, "steps", []), trainer.global_step]
        return super()._run(trainer, pl_module, stage)


def test_gradient_accumulation_runs_once_per_optimizer_step(tmp_path):
    data = torch.randint(4, 24, (32, 8))
    data[:, 0], data[:, -1] = 1, 2
    recorder = Recorder(every_n_train_steps=2, on_validation_end=False, num_starts=2, pairs_per_context=1,
                        num_tokens=2)
    trainer = L.Trainer(max_steps=6, accumulate_grad_batches=2, callbacks=[recorder], logger=False,
                        enable_progress_bar=False, enable_checkpointing=False, enable_model_summary=False,
                        default_root_dir=tmp_path)
    trainer.fit(MaskedDenoiserModule(tiny_bert_denoiser()), DataLoader(data, batch_size=2))
    assert recorder.steps == [2, 4, 6]  # not [0, 2, 2, 4, 4, 6]


SCRIPT = """
import json, sys, time
import lightning as L
import torch
from torch.utils.data import DataLoader
from mlm_dynamics.callbacks import DiagnosticCallback, InfluenceProbe, RectangleTest, SemanticDrift, TrapDetector
from mlm_dynamics.probes import MeetingTimeProbe
from mlm_dynamics.training import MaskedDenoiserModule, tiny_bert_denoiser


class SlowOnRankOne(MeetingTimeProbe):
    def measure(self, denoiser, starts, generator):
        if torch.distributed.get_rank() == 1:
            time.sleep(1.5)  # rank 1 spends the budget first
        return super().measure(denoiser, starts, generator)


def main(out):
    torch.manual_seed(0)
    data = torch.randint(4, 24, (64, 8))
    data[:, 0], data[:, -1] = 1, 2
    common = dict(every_n_train_steps=1, on_validation_end=False, num_starts=2, seed=0, overhead=None)
    callbacks = [DiagnosticCallback(SlowOnRankOne(max_steps=10), budget_seconds=2.0, **common),
                 RectangleTest(pairs_per_context=2, num_tokens=3, **common),
                 InfluenceProbe(max_sites=3, temperatures=(1.0, 2.0), **common),
                 SemanticDrift(steps_per_run=4, every=2, **common),
                 TrapDetector(steps_per_run=4, every=2, dwell=2, radius=0.5, **common)]
    trainer = L.Trainer(accelerator="cpu", devices=2, strategy="ddp", max_steps=6, callbacks=callbacks,
                        logger=False, enable_progress_bar=False, enable_checkpointing=False,
                        enable_model_summary=False, default_root_dir=out)
    trainer.fit(MaskedDenoiserModule(tiny_bert_denoiser()), DataLoader(data, batch_size=4))
    metrics = {k: float(v) for k, v in trainer.callback_metrics.items()}
    runs = [cb.runs for cb in callbacks]
    with open(f"{out}/rank{trainer.global_rank}.json", "w") as handle:
        json.dump({"metrics": metrics, "runs": runs}, handle)


if __name__ == "__main__":
    main(sys.argv[1])
"""


@pytest.mark.slow
def test_ddp_ranks_agree_on_the_budget_and_pooled_values(tmp_path):
    script = tmp_path / "ddp_fit.py"
    script.write_text(textwrap.dedent(SCRIPT))
    done = subprocess.run([sys.executable, str(script), str(tmp_path)], capture_output=True, text=True,
                          timeout=400, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert ranks[0]["runs"][0] == ranks[1]["runs"][0] < 6  # the budget stopped both ranks at the same run
    pooled = [k for k in ranks[0]["metrics"] if k.startswith(("mixing/", "rectangle/"))]
    assert pooled
    for key in pooled:  # pooled through torchmetrics: the same value on both ranks
        assert ranks[0]["metrics"][key] == ranks[1]["metrics"][key], key
    assert any(k.startswith("traps/") for k in ranks[0]["metrics"])  # rank 0 measures and logs the long-run chains
