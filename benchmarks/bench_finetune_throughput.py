"""Training throughput of the English MLM fine-tune (``examples/finetune_english_mlm.py``) on this machine.

One optimizer step of the example's model (all-MiniLM-L6-v2 with a tied masked-LM head) on a batch of random corpus
windows, timed for the options that could help on a CPU, each against the example's default measured in the same
run (fp32, LM head at the chosen positions only):

- ``full head``: the LM head on every position (``[B, L, V]`` logits), what a stock ``BertForMaskedLM`` computes;
- ``bf16 autocast``: ``torch.autocast("cpu", torch.bfloat16)`` around forward and loss (Lightning's
  ``precision="bf16-mixed"``), useful where the CPU has bf16 instructions (``avx512_bf16``, AMX);
- ``eager attention``: the Python attention instead of ``scaled_dot_product_attention``.

Prints word pieces per second (all positions of the batch) and each ratio to the default.

Usage: python benchmarks/bench_finetune_throughput.py [--batch 16 --length 128 --steps 6 --repeats 3]
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from mlm_dynamics import MaskedLMDenoiser
from mlm_dynamics.corpus import token_streams
from mlm_dynamics.embedders import default_sentence_model_path

ROOT = Path(__file__).resolve().parent.parent


def load_example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("finetune_english_mlm", ROOT / "examples" / "finetune_english_mlm.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def step_fn(module: Any, optimizer: torch.optim.Optimizer, *, full_head: bool,
            autocast: bool) -> Callable[[Tensor], None]:
    """One optimizer step of the example's forward and loss on ``module`` (its ``EnglishMLM``) at its masking rate
    (every chosen position becomes [MASK]: the 80/10/10 split costs nothing)."""
    denoiser = module.denoiser

    def step(tokens: Tensor) -> None:
        chosen = denoiser.free_mask(tokens) & (torch.rand(tokens.shape) < module.mask_rate)
        inputs = torch.where(chosen, denoiser.vocab.mask_id, tokens)
        context = torch.autocast("cpu", dtype=torch.bfloat16) if autocast else contextlib.nullcontext()
        with context:
            if full_head:
                logits = denoiser.head(denoiser.encoder(input_ids=inputs).last_hidden_state)[chosen]
            else:
                logits = module.logits_at(inputs, chosen)
            loss = F.cross_entropy(logits.float(), tokens[chosen])
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    return step


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--length", type=int, default=128)
    parser.add_argument("--steps", type=int, default=6, help="timed optimizer steps per repeat")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    torch.manual_seed(0)
    example = load_example()
    variants = {"default (fp32, head at chosen positions)": {"full_head": False, "autocast": False, "eager": False},
                "full head": {"full_head": True, "autocast": False, "eager": False},
                "bf16 autocast": {"full_head": False, "autocast": True, "eager": False},
                "eager attention": {"full_head": False, "autocast": False, "eager": True}}
    _, codec = MaskedLMDenoiser.from_pretrained(default_sentence_model_path(), new_head=True)
    tokenizer = codec.tokenizer
    streams = token_streams(tokenizer, "train")
    data = example.RandomWindows(streams, dict.fromkeys(streams, 1.0), args.length, tokenizer.cls_token_id,
                                 tokenizer.sep_token_id, seed=0, size=args.batch * (args.steps + 1))
    batches = torch.stack([data[i] for i in range(len(data))]).split(args.batch)
    steps: dict[str, Callable[[Tensor], None]] = {}
    for name, options in variants.items():
        denoiser, _ = MaskedLMDenoiser.from_pretrained(default_sentence_model_path(), new_head=True)
        if options["eager"]:
            denoiser.model.set_attn_implementation("eager")
        module = example.EnglishMLM(denoiser, lr=3e-4, warmup=1, max_steps=10, mask_rate=0.3, genres=list(streams))
        optimizer = torch.optim.AdamW(module.parameters(), lr=3e-4)
        steps[name] = step_fn(module, optimizer, full_head=options["full_head"], autocast=options["autocast"])
        steps[name](batches[0])  # warm-up (allocations, kernels)
    seconds: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(args.repeats):  # interleaved, so drifts of the machine hit every variant alike
        for name, step in steps.items():
            started = time.perf_counter()
            for batch in batches[1:]:
                step(batch)
            seconds[name].append((time.perf_counter() - started) / (len(batches) - 1))
    pieces = args.batch * args.length
    baseline = statistics.median(seconds[next(iter(variants))])
    print(f"English MLM fine-tune step, batch {args.batch} x {args.length}, {torch.get_num_threads()} threads, "
          f"median of {args.repeats} x {args.steps} steps")
    for name, values in seconds.items():
        median = statistics.median(values)
        print(f"{name:>42}: {median * 1e3:7.0f} ms/step, {pieces / median:7.0f} word pieces/s, "
              f"{baseline / median:.2f}x the default's speed")


if __name__ == "__main__":
    main()
