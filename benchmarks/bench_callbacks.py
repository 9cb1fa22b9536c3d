"""Cost of the diagnostic callbacks during training, as a ratio against the same fit without them.

A masked-denoiser fit (``MaskedDenoiserModule`` around a BERT-style model of ``--hidden`` x ``--layers``, vocabulary
``--vocab``, batch ``--batch`` x ``--length``) for ``--steps`` optimizer steps, once without callbacks and once
with the documented default schedule: ``MixingDiagnostics(max_steps=200)``, ``RectangleTest()`` and
``TrapDetector(steps_per_run=50)``, each every ``--every`` optimizer steps (README: every 500 steps). Prints the
wall time of both fits and their ratio (goal <= 1.05x) and the seconds the callbacks report they used.

Usage: python benchmarks/bench_callbacks.py [--steps 1000 --every 500]
"""

from __future__ import annotations

import argparse
import time

import lightning as L
import torch
from torch.utils.data import DataLoader
from transformers import BertConfig, BertForMaskedLM

from mlm_dynamics import MaskedLMDenoiser
from mlm_dynamics.callbacks import MixingDiagnostics, RectangleTest, TrapDetector
from mlm_dynamics.training import MaskedDenoiserModule


def fit(args: argparse.Namespace, callbacks: list[L.Callback]) -> float:
    torch.manual_seed(0)
    config = BertConfig(vocab_size=args.vocab, hidden_size=args.hidden, num_hidden_layers=args.layers,
                        num_attention_heads=max(1, args.hidden // 32), intermediate_size=4 * args.hidden,
                        max_position_embeddings=args.length, pad_token_id=0)
    denoiser = MaskedLMDenoiser(BertForMaskedLM(config), mask_id=3, special_ids=(0, 1, 2, 3), frame_ids=(0, 1, 2),
                                pad_id=0)
    data = torch.randint(4, args.vocab, (args.batch * 50, args.length))
    data[:, 0], data[:, -1] = 1, 2
    trainer = L.Trainer(max_steps=args.steps, callbacks=callbacks, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, accelerator="cpu")
    started = time.perf_counter()
    trainer.fit(MaskedDenoiserModule(denoiser), DataLoader(data, batch_size=args.batch, shuffle=True))
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--every", type=int, default=500)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--vocab", type=int, default=2000)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--length", type=int, default=64)
    args = parser.parse_args()
    common = dict(every_n_train_steps=args.every, on_validation_end=False, num_starts=4)
    callbacks = [MixingDiagnostics(max_steps=200, **common), RectangleTest(**common),
                 TrapDetector(steps_per_run=50, **common)]
    bare = fit(args, [])
    with_callbacks = fit(args, callbacks)
    used = sum(cb.seconds_used for cb in callbacks)
    print(f"{args.steps} steps, BERT-style {args.hidden}x{args.layers}, V={args.vocab}, batch {args.batch}x"
          f"{args.length}, {torch.get_num_threads()} threads; callbacks every {args.every} steps")
    print(f"fit without callbacks {bare:.1f} s, with {with_callbacks:.1f} s: {with_callbacks / bare:.3f}x "
          f"(goal <= 1.05x); the callbacks report {used:.1f} s of diagnostics")


if __name__ == "__main__":
    main()
