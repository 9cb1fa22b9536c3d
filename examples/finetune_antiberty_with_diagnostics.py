"""Denoising fine-tune of the pretrained AntiBERTy MLM with every diagnostic callback attached (CPU, ~2 minutes).

    python examples/finetune_antiberty_with_diagnostics.py --steps 20 --layers 2 --wandb
    python examples/finetune_antiberty_with_diagnostics.py --smoke     # seconds: the plumbing only

Logs to CSV and TensorBoard under ``--out`` (and W&B offline with ``--wandb``): meeting times and coalescence of
coupled chains, rectangle prevalence, Dobrushin coefficients and tau*, drift of long-run chains, traps and margins.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import lightning as L
import torch
from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger, WandbLogger
from torch.utils.data import DataLoader

from mlm_dynamics.callbacks import InfluenceProbe, MixingDiagnostics, RectangleTest, SemanticDrift, TrapDetector
from mlm_dynamics.models import EXAMPLE_ANTIBODIES, load_antiberty
from mlm_dynamics.training import MaskedDenoiserModule


def main(argv: list[str] | None = None) -> L.Trainer:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--layers", type=int, default=2, help="keep the first N of AntiBERTy's 8 layers")
    parser.add_argument("--every", type=int, default=10, help="run the diagnostics every N optimizer steps")
    parser.add_argument("--wandb", action="store_true", help="also log to W&B in offline mode")
    parser.add_argument("--out", type=Path, default=Path("runs/finetune"))
    parser.add_argument("--smoke", action="store_true", help="2 steps of a 1-layer model (seconds)")
    args = parser.parse_args(argv)
    if args.smoke:
        args.steps, args.layers, args.every = 2, 1, 1

    denoiser, codec = load_antiberty(num_layers=args.layers)
    length = min(len(s) for s in EXAMPLE_ANTIBODIES)
    data = torch.tensor([codec.encode(s[:length]) for s in EXAMPLE_ANTIBODIES])
    common = dict(every_n_train_steps=args.every, on_validation_end=False, num_starts=2,
                  overhead=None if args.smoke else 0.05)  # --smoke: every due run, whatever it costs
    chain_steps = 4 if args.smoke else 20
    callbacks = [MixingDiagnostics(max_steps=5 if args.smoke else 50, **common),
                 RectangleTest(pairs_per_context=2, num_tokens=3, max_distance=3, **common),
                 InfluenceProbe(temperatures=(0.5, 1.0, 2.0), max_sites=3 if args.smoke else 6, **common),
                 SemanticDrift(steps_per_run=chain_steps, every=2, codec=codec, seed=1, **common),
                 TrapDetector(steps_per_run=chain_steps, every=2, dwell=10, radius=0.01, with_margins=True, codec=codec,
                              **common)]
    loggers = [CSVLogger(args.out, name="csv"), TensorBoardLogger(args.out, name="tb")]
    if args.wandb:
        loggers.append(WandbLogger(save_dir=str(args.out), offline=True, project="mlm_dynamics"))
    trainer = L.Trainer(max_steps=args.steps, logger=loggers, callbacks=callbacks, accelerator="cpu",
                        log_every_n_steps=1, enable_progress_bar=False)
    trainer.fit(MaskedDenoiserModule(denoiser, lr=5e-5), DataLoader(data, batch_size=4, shuffle=True))
    for name, value in sorted(trainer.callback_metrics.items()):
        print(f"{name:>40}: {float(value):.4f}")
    print(f"mixing history: mlm-dynamics report {args.out / 'csv'} --out {args.out / 'history'}")
    return trainer


if __name__ == "__main__":
    main()
