"""Cost of a checkpoint of the run job as it goes on: the size and write time of the save at step 300 against the save
at step 3000, measured in the same run.

The chains' state, their RNG and the report's accumulators go into ``checkpoint.pt``; the trajectory rows and the
semantic observations are appended to ``trajectory.csv`` and ``semantics.bin``, whose lengths the checkpoint
stores, so a save should cost about the same at step 3000 as at step 300 (ratio about 1). Model: a small random BERT
masked LM saved as a local Hugging Face directory (``--hidden``, ``--layers``), 8 chains of ``--length`` tokens.

Usage: python benchmarks/bench_checkpoint.py [--steps 3000 --every 300]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import torch
from transformers import BertConfig, BertForMaskedLM, BertTokenizer

import mlm_dynamics.experiments.run as job
from mlm_dynamics.experiments import RunConfig, load_config, run_chains


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--every", type=int, default=300)
    parser.add_argument("--hidden", type=int, default=32)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--length", type=int, default=24)
    args = parser.parse_args()
    saves: list[tuple[int, float, int]] = []
    real_save = job.save_checkpoint

    def timed_save(path: Path, payload: dict, *, fingerprints: dict, step: int) -> None:
        started = time.perf_counter()
        real_save(path, payload, fingerprints=fingerprints, step=step)
        saves.append((step, time.perf_counter() - started, path.stat().st_size))

    job.save_checkpoint = timed_save
    with tempfile.TemporaryDirectory() as root:
        model_dir = Path(root) / "model"
        words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *[f"w{i}" for i in range(195)]]
        with torch.random.fork_rng():
            torch.manual_seed(0)
            BertForMaskedLM(BertConfig(vocab_size=len(words), hidden_size=args.hidden, num_hidden_layers=args.layers,
                                       num_attention_heads=2, intermediate_size=2 * args.hidden)).save_pretrained(
                model_dir)
        BertTokenizer(vocab={w: i for i, w in enumerate(words)}, do_lower_case=False).save_pretrained(model_dir)
        sentence = " ".join(f"w{i}" for i in range(args.length - 2))
        config = load_config(RunConfig, None, [
            "model.source=huggingface", f"model.name_or_path={model_dir}", f"chains.sequences=['{sentence}']",
            f"run.num_steps={args.steps}", f"run.checkpoint_every={args.every}", "run.record_every=10",
            "semantics.every=10", "coupling.enabled=false", "rectangle.enabled=false", "margins.enabled=false"])
        started = time.perf_counter()
        run_chains(config, Path(root) / "out")
        seconds = time.perf_counter() - started
        trajectory = (Path(root) / "out" / "trajectory.csv").stat().st_size
        semantics = (Path(root) / "out" / "semantics.bin").stat().st_size
    first = next(s for s in saves if s[0] == args.every)
    last = saves[-1]
    print(f"run of {args.steps} steps ({seconds:.1f} s), 8 chains of {args.length} tokens, a checkpoint every "
          f"{args.every} steps; trajectory.csv {trajectory / 1e3:.0f} kB, semantics.bin {semantics / 1e3:.0f} kB at "
          "the end")
    print(f"save at step {first[0]}: {first[2] / 1e3:.1f} kB in {first[1] * 1e3:.1f} ms; at step {last[0]}: "
          f"{last[2] / 1e3:.1f} kB in {last[1] * 1e3:.1f} ms: {last[2] / first[2]:.2f}x the size, "
          f"{last[1] / first[1]:.2f}x the time")


if __name__ == "__main__":
    main()
