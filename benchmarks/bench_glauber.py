"""Speed of one Glauber step, as ratios against baselines measured in the same run.

Model: a randomly initialised BERT-style masked LM with a 30,522-token vocabulary (the bert-base vocabulary size);
the same model, batch and length serve every variant.

(a) our step (`GlauberSampler.step`) vs the bare encoder forward on the same input: the physical limit, since a
    step needs one forward; target <= 1.10x.
(b) our step vs a naive step that computes `model(x).logits` ([B, L, V]) and picks the masked row: time and the
    extra peak resident memory of one step (Linux high-water mark, reset before the call).
(c) our batched chains vs a per-chain loop around a full-logits call (what a fill-mask loop does).
Then chain-steps/s of our step against B and L.

Usage: python benchmarks/bench_glauber.py [--batch 32] [--length 128] [--repeats 5]
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time

import torch
from transformers import BertConfig, BertForMaskedLM

from mlm_dynamics import GlauberSampler, MaskedLMDenoiser

VOCAB = 30_522
MASK_ID = 103


def build(seed: int = 0) -> tuple[BertForMaskedLM, MaskedLMDenoiser]:
    torch.manual_seed(seed)
    config = BertConfig(vocab_size=VOCAB, hidden_size=256, num_hidden_layers=4, num_attention_heads=4,
                        intermediate_size=1024, max_position_embeddings=512)
    model = BertForMaskedLM(config).eval()
    return model, MaskedLMDenoiser(model, mask_id=MASK_ID, special_ids=range(999))


def median_seconds(fn, repeats: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def variants(model, denoiser, batch: int, length: int):
    tokens = torch.randint(1000, VOCAB, (batch, length))
    sampler = GlauberSampler(denoiser, 1.0)
    state = sampler.init_state(tokens, generator=0, sites=torch.arange(1, length - 1).expand(batch, -1))
    generator = torch.Generator().manual_seed(0)
    allowed = denoiser.vocab.allowed_mask()

    @torch.no_grad()
    def bare_forward():
        model.bert(input_ids=state.tokens)

    def ours():
        sampler.step(state)

    @torch.no_grad()
    def naive_step(rows=slice(None)):
        x = state.tokens[rows]
        positions = torch.randint(1, length - 1, (x.shape[0], 1), generator=generator)
        logits = model(input_ids=x.scatter(1, positions, MASK_ID)).logits  # [B, L, V]
        picked = logits.gather(1, positions[..., None].expand(-1, -1, VOCAB))[:, 0]
        probs = picked.masked_fill(~allowed, float("-inf")).softmax(-1)
        x.scatter_(1, positions, torch.multinomial(probs, 1, generator=generator))

    def per_chain_loop():
        for chain in range(batch):
            naive_step(slice(chain, chain + 1))

    return {"bare_forward": bare_forward, "ours": ours, "naive_full_logits": naive_step,
            "per_chain_loop": per_chain_loop}


def _status_kib(field: str) -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/self/status")


def peak_memory_mib(fn) -> float:
    """Extra peak resident memory of one call: reset the high-water mark (Linux clear_refs 5), call, read VmHWM."""
    gc.collect()
    with open("/proc/self/clear_refs", "w") as clear:
        clear.write("5")
    before = _status_kib("VmRSS")
    fn()
    return (_status_kib("VmHWM") - before) / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--length", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()

    model, denoiser = build()
    B, L = args.batch, args.length
    print(f"BERT-style MLM, V={VOCAB}, hidden 256, 4 layers; B={B}, L={L}; torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads; median of {args.repeats}")
    fns = variants(model, denoiser, B, L)
    seconds = {name: median_seconds(fn, args.repeats if name != "per_chain_loop" else max(2, args.repeats // 2))
               for name, fn in fns.items()}
    for name, value in seconds.items():
        print(f"  {name:>18}: {value * 1e3:9.1f} ms/step  ({B / value:8.1f} chain-steps/s)")
    print(f"(a) ours / bare encoder forward     = {seconds['ours'] / seconds['bare_forward']:.3f}x  (target <= 1.10x)")
    print(f"(b) naive full-logits / ours        = {seconds['naive_full_logits'] / seconds['ours']:.2f}x slower")
    print(f"(c) per-chain loop / ours (batched) = {seconds['per_chain_loop'] / seconds['ours']:.2f}x slower")

    for name in ("ours", "naive_full_logits"):
        print(f"    extra peak resident memory of one step, {name:>18}: {peak_memory_mib(fns[name]):8.1f} MiB"
              " (beyond what the process already holds)")
    print(f"    ([B, L, V] float32 logits alone are {B * L * VOCAB * 4 / 2**20:.0f} MiB)")

    print("scaling of our step (chain-steps/s):")
    for length in (32, L):
        cells = []
        for batch in (1, 8, B):
            step = variants(model, denoiser, batch, length)["ours"]
            cells.append(f"B={batch}: {batch / median_seconds(step, args.repeats):8.1f}")
        print(f"  L={length:4d}  " + "  ".join(cells))


if __name__ == "__main__":
    main()
