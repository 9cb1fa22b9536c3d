"""The product against the real thing: LLaDA's modeling file and Fast-dLLM's sampler as the dllm repository ships
them (ZHZisZZ/dllm, run beside the project, never copied into it), unmodified, watched by
``monitor_sampler(parallel=True)``: per rule (Fast-dLLM's threshold and factor rules), the committed K per step, the
measured error of each committed set, its influence estimate and how often the confidence certificate failed.
Then Fast-dLLM's default, greedy decoding (temperature 0), at each threshold: per step, the committed tokens
against the sequential greedy decode from the same state (``temperature=0, parallel=True``), and end to end the
decode against the one-token-a-step greedy decode of the same prompts (:func:`~mlm_dynamics.decode_agreement`:
token agreement, exact matches, forwards saved).

The model is a tiny random LLaDA (2 layers, 48 ids) whose output layer is scaled up so that it is confident (random
weights give near-uniform logits, and then every rule commits one position per step).

Usage: python benchmarks/try_fastdllm.py --dllm /path/to/a/checkout/of/dllm
"""

from __future__ import annotations

import argparse
import sys
import time
import types
from pathlib import Path
from types import SimpleNamespace

import torch

from mlm_dynamics import decode_agreement, denoiser_for, monitor_sampler

PACKAGES = ["dllm", "dllm.core", "dllm.core.samplers", "dllm.pipelines", "dllm.pipelines.fastdllm",
            "dllm.pipelines.fastdllm.llada", "dllm.pipelines.llada", "dllm.pipelines.llada.models"]


def import_without_package_inits(root: Path) -> None:
    """The dllm packages as bare namespaces: their ``__init__`` files import its evaluation and training stacks
    (lm_eval, ...), which the sampler and the modeling file do not need."""
    for name in PACKAGES:
        module = types.ModuleType(name)
        module.__path__ = [str(root / name.replace(".", "/"))]
        sys.modules[name] = module


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dllm", type=Path, required=True, help="a checkout of github.com/ZHZisZZ/dllm")
    parser.add_argument("--samples", type=int, default=64)
    args = parser.parse_args()
    import_without_package_inits(args.dllm)
    from dllm.pipelines.fastdllm.llada.sampler import FastdLLMLLaDASampler, FastdLLMLLaDASamplerConfig
    from dllm.pipelines.llada.models.configuration_llada import LLaDAConfig
    from dllm.pipelines.llada.models.modeling_llada import (
        LLaDAModel,
        LLaDAModelLM,
        create_model_config_from_pretrained_config,
    )

    torch.manual_seed(0)
    vocab, mask, eos, bos = 48, 47, 1, 0
    config = LLaDAConfig(d_model=32, n_heads=2, n_layers=2, mlp_ratio=2, vocab_size=vocab, embedding_size=vocab,
                         max_sequence_length=64, rope=True, eos_token_id=eos, pad_token_id=eos, mask_token_id=mask,
                         attention_dropout=0.0, residual_dropout=0.0, embedding_dropout=0.0, weight_tying=False,
                         init_device="cpu")
    config.use_cache = False  # transformers 5 no longer sets it from the keyword arguments
    model_config = create_model_config_from_pretrained_config(config)
    model_config.init_device = "cpu"  # LLaDAModelLM itself puts the weights on CUDA
    model = LLaDAModelLM(config, model=LLaDAModel(model_config, init_params=True)).eval()
    with torch.no_grad():
        model.model.transformer.ff_out.weight.mul_(12.0)
    tokenizer = SimpleNamespace(mask_token_id=mask, bos_token_id=bos, eos_token_id=eos, pad_token_id=eos)
    sampler = FastdLLMLLaDASampler(model=model, tokenizer=tokenizer)
    print(f"attached as {denoiser_for(model).family}; 3 prompts of 6 ids, 12 new tokens, temperature 1")
    prompts = [torch.randint(2, mask, (6,)) for _ in range(3)]
    # the factor rule takes priority over the threshold; a threshold is set with it only because dllm's factor path
    # indexes its fixed schedule past its end otherwise (an IndexError of its own)
    for rule in ({"threshold": 0.9}, {"threshold": 0.7}, {"threshold": 0.5}, {"factor": 0.5, "threshold": 1.0},
                 {"factor": 1.0, "threshold": 1.0}, {"factor": 2.0, "threshold": 1.0}):
        settings = FastdLLMLLaDASamplerConfig(max_new_tokens=12, block_size=12, steps=12, temperature=1.0, **rule)
        started = time.perf_counter()
        trace = monitor_sampler(model, lambda settings=settings: sampler.sample(prompts, settings), parallel=True,
                                parallel_samples=args.samples, overhead=None)  # a few prompts: every step measured
        s = trace.summary()
        shown = ", ".join(f"{k} {v:g}" for k, v in rule.items() if not (k == "threshold" and "factor" in rule))
        print(f"{shown:>14}: {trace.steps:2d} steps, K per step mean {s['parallel_k_mean']:.2f} max "
              f"{s['parallel_k_max']:.0f}; error mean {s['parallel_tv_mean']:.3f} max {s['parallel_tv_max']:.3f}; "
              f"influence estimate max {s['parallel_first_order_max']:.3f}; certificate exceeded in "
              f"{s['parallel_certificate_violated']:.0%} of row-steps ({time.perf_counter() - started:.1f} s)")
    print("greedy (temperature 0, Fast-dLLM's default) against the one-token-a-step greedy decode:")
    one_a_step = FastdLLMLLaDASamplerConfig(max_new_tokens=12, block_size=12, steps=12)
    reference = monitor_sampler(model, lambda: sampler.sample(prompts, one_a_step), temperature=0.0)
    for threshold in (0.9, 0.7, 0.5, 0.3):
        settings = FastdLLMLLaDASamplerConfig(max_new_tokens=12, block_size=12, steps=12, threshold=threshold)
        trace = monitor_sampler(model, lambda settings=settings: sampler.sample(prompts, settings), temperature=0.0,
                                parallel=True, overhead=None)
        s, agreement = trace.summary(), decode_agreement(trace, reference).summary()
        print(f"threshold {threshold}: {trace.steps:2d} forwards, K mean {s['parallel_k_mean']:.2f} max "
              f"{s['parallel_k_max']:.0f}; per step {s['parallel_differ_share']:.1%} of the committed tokens differ "
              f"from sequential greedy ({s['parallel_rows_measured']:.0f} row-steps); end to end "
              f"{agreement['token_agreement']:.1%} of tokens agree, {agreement['exact_match']:.0%} of prompts exact, "
              f"{agreement['forwards_saved']:.0%} of the forwards saved")


if __name__ == "__main__":
    main()
