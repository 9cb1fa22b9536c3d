"""Precision of the categorical draw: float32 against float64 at a 30,522-token vocabulary, and what float64 costs.

(a) The exact law of the inverse-CDF draw in float32 (``inverse_cdf_law`` enumerates all 2^24 values of the float32
    uniform, so there is no sampling noise) against the exact softmax in float64, at tau 0.5, 1, 2: total variation,
    entropy of both, the mass of tokens with p < 1e-6 under both, and the number of tokens with p > 0 that the
    float32 draw can never return. Logits: Zipf-like synthetic rows with the shape of real MLM conditionals, plus
    real conditionals of a masked LM (``--model DIR``, default: the bundled English MLM when it is installed) at
    random masked positions of held-out English text.
(b) The cost: one Glauber step with ``sampling_dtype=float64`` against float32 and against the bare encoder forward
    on the BERT-style model of ``bench_glauber.py`` (same batch and length), median of ``--repeats``.

Usage: python benchmarks/bench_sampling_precision.py [--rows 8] [--model DIR] [--batch 32] [--length 128]
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import torch
from bench_glauber import MASK_ID, VOCAB, build, median_seconds

from mlm_dynamics import GlauberSampler
from mlm_dynamics.sampling.categorical import inverse_cdf_law, tempered_log_probs

TEMPERATURES = (0.5, 1.0, 2.0)


def synthetic_logits(rows: int, seed: int = 0) -> torch.Tensor:
    """Zipf-like rows: ``l_k = -2 log rank_k + 0.5 N(0, 1)`` over a random ranking of the vocabulary."""
    generator = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(rows):
        ranks = torch.randperm(VOCAB, generator=generator).double() + 1
        out.append(-2.0 * ranks.log() + 0.5 * torch.randn(VOCAB, generator=generator, dtype=torch.float64))
    return torch.stack(out)


def model_logits(directory: str, rows: int, seed: int = 0) -> torch.Tensor:
    """Conditionals of a masked LM at random positions of held-out corpus windows (one masked site per row)."""
    from mlm_dynamics import MaskedLMDenoiser
    from mlm_dynamics.corpus import load_corpus

    denoiser, codec = MaskedLMDenoiser.from_pretrained(directory)
    generator = torch.Generator().manual_seed(seed)
    texts = [d.text for d in load_corpus("heldout")]
    tokens, positions = [], []
    for row in range(rows):
        ids = codec.encode(texts[row % len(texts)])[:64]
        tokens.append(ids)
        positions.append(int(torch.randint(1, len(ids) - 1, (1,), generator=generator)))
    length = min(len(t) for t in tokens)
    batch = torch.tensor([[*t[: length - 1], t[-1]] for t in tokens])
    where = torch.tensor([min(p, length - 2) for p in positions])[:, None]
    with torch.inference_mode():
        logits = denoiser.conditional_logits(batch, where)[:, 0].double()
    return logits.masked_fill(~denoiser.vocab.allowed_mask(), -math.inf)


def entropy(p: torch.Tensor) -> float:
    positive = p[p > 0]
    return float(-(positive * positive.log()).sum())


def precision_table(name: str, logits: torch.Tensor) -> None:
    allowed = torch.isfinite(logits[0])
    print(f"{name}: {len(logits)} rows, V = {logits.shape[1]}; means over rows")
    print("    tau   TV(P32, p)   H(p)     H(P32)   mass p<1e-6: exact   float32   unreachable tokens with p>0")
    for tau in TEMPERATURES:
        stats = []
        for row in logits:
            exact = tempered_log_probs(row, allowed, tau, dtype=torch.float64).exp()
            law32 = inverse_cdf_law(tempered_log_probs(row, allowed, tau, dtype=torch.float32).exp())
            tail = (exact < 1e-6) & (exact > 0)
            stats.append([0.5 * float((law32 - exact).abs().sum()), entropy(exact), entropy(law32),
                          float(exact[tail].sum()), float(law32[tail].sum()), int(((law32 == 0) & (exact > 0)).sum())])
        mean = torch.tensor(stats, dtype=torch.float64).mean(0).tolist()
        print(f"  {tau:5.2f}   {mean[0]:.2e}   {mean[1]:7.4f}  {mean[2]:7.4f}      {mean[3]:.3e}   {mean[4]:.3e}"
              f"   {mean[5]:9.0f}")


def cost(batch: int, length: int, repeats: int) -> None:
    model, denoiser = build()
    tokens = torch.randint(1000, VOCAB, (batch, length))
    sites = torch.arange(1, length - 1).expand(batch, -1)
    steps = {}
    for dtype in (torch.float32, torch.float64):
        sampler = GlauberSampler(denoiser, 1.0, sampling_dtype=dtype)
        state = sampler.init_state(tokens, generator=0, sites=sites)
        steps[str(dtype).split(".")[1]] = median_seconds(lambda s=sampler, st=state: s.step(st), repeats)

    @torch.no_grad()
    def bare() -> None:
        model.bert(input_ids=tokens.scatter(1, sites[:, :1], MASK_ID))

    forward = median_seconds(bare, repeats)
    print(f"cost at B={batch}, L={length} (BERT-style, V={VOCAB}, {torch.get_num_threads()} threads, median of "
          f"{repeats}): bare forward {forward * 1e3:.1f} ms, step float32 {steps['float32'] * 1e3:.1f} ms, "
          f"float64 {steps['float64'] * 1e3:.1f} ms")
    print(f"  float64 / float32 step = {steps['float64'] / steps['float32']:.3f}x; float64 step / bare forward = "
          f"{steps['float64'] / forward:.3f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=8)
    parser.add_argument("--model", help="a masked LM directory (default: the bundled English MLM if installed)")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--length", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    precision_table("synthetic Zipf-like logits", synthetic_logits(args.rows))
    directory = args.model
    if directory is None:
        from mlm_dynamics.models import pretrained

        bundled = getattr(pretrained, "english_mlm_dir", None)
        directory = str(bundled()) if bundled is not None and Path(bundled()).is_dir() else None
    if directory is not None:
        precision_table(f"masked LM {directory}", model_logits(directory, args.rows))
    cost(args.batch, args.length, args.repeats)


if __name__ == "__main__":
    main()
