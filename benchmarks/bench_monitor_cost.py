"""What ``monitor_sampler`` adds to a sampler's own time, measured in the same process.

A confidence-ordered unmasking loop (LLaDA-style: every step draws all masked positions and commits the most
confident ``L / steps``) on a model with a large vocabulary (an embedding, one linear layer to ``V`` logits): the loop
alone, then the same loop watched by ``monitor_sampler`` (no chain monitor, no parallel measurement). Prints both
times and their ratio, and the monitor's seconds per committed token. With ``--parallel`` also the loop watched with
``parallel=True`` at the default ``overhead=0.05`` and with ``overhead=None`` (every step measured): their ratios to
the loop alone, and the share of steps the budgeted one measured. With ``--greedy`` the loop commits argmax tokens
(temperature 0, LLaDA's and Fast-dLLM's default) and is watched at ``temperature=0``: the parallel measurement is the
sequential greedy decode's ``K - 1`` forward rows per row.

Usage: python benchmarks/bench_monitor_cost.py [--vocab 150000] [--batch 4] [--length 64] [--steps 16] [--repeats 3]
    [--parallel] [--greedy]
"""

from __future__ import annotations

import argparse
import time

import torch

from mlm_dynamics.models.base import VocabInfo
from mlm_dynamics.models.full_sequence import FullSequenceDenoiser
from mlm_dynamics.tracking.sampler_monitor import monitor_sampler


class Tiny(torch.nn.Module):
    def __init__(self, vocab: int, hidden: int = 64) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, hidden)
        self.head = torch.nn.Linear(hidden, vocab)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.embed(x))


@torch.no_grad()
def sample(model: Tiny, batch: int, length: int, steps: int, mask_id: int, seed: int,
           greedy: bool = False) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    x = torch.full((batch, length), mask_id)
    per_step = length // steps
    for _ in range(steps):
        logits = model(x)
        logits[..., mask_id] = -torch.inf
        probs = logits.softmax(-1)
        draws = probs.argmax(-1) if greedy else \
            torch.multinomial(probs.flatten(0, 1), 1, generator=generator).view(batch, length)
        confidence = torch.where(x == mask_id, probs.gather(-1, draws[..., None]).squeeze(-1), -1.0)
        chosen = confidence.topk(per_step, dim=1).indices
        x = x.scatter(1, chosen, draws.gather(1, chosen))
    return x


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vocab", type=int, default=150_000)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--length", type=int, default=64)
    parser.add_argument("--steps", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--parallel", action="store_true", help="also time parallel=True, budgeted and unbudgeted")
    parser.add_argument("--greedy", action="store_true", help="an argmax loop, watched at temperature=0")
    args = parser.parse_args()
    temperature = 0.0 if args.greedy else 1.0
    model = Tiny(args.vocab).eval()
    mask_id = args.vocab - 1

    def run() -> torch.Tensor:
        return sample(model, args.batch, args.length, args.steps, mask_id, 0, args.greedy)

    run()  # warm-up
    bare, watched = [], []
    for _ in range(args.repeats):
        started = time.perf_counter()
        run()
        bare.append(time.perf_counter() - started)
        started = time.perf_counter()
        monitor_sampler(model, run, mask_id=mask_id, temperature=temperature)
        watched.append(time.perf_counter() - started)
    fastest_bare, fastest_watched = min(bare), min(watched)
    committed = args.batch * args.length
    print(f"V = {args.vocab}, B = {args.batch}, L = {args.length}, {args.steps} steps "
          f"({torch.get_num_threads()} threads{', greedy' if args.greedy else ''})")
    print(f"sampler alone   {fastest_bare:.3f} s")
    print(f"monitored       {fastest_watched:.3f} s   ratio {fastest_watched / fastest_bare:.2f}x, "
          f"{(fastest_watched - fastest_bare) / committed * 1e3:.2f} ms per committed token")
    if args.parallel:
        denoiser = FullSequenceDenoiser(model, VocabInfo(size=args.vocab, mask_id=mask_id))
        for overhead in (0.05, None):
            seconds, shares = [], []
            for _ in range(args.repeats):
                started = time.perf_counter()
                trace = monitor_sampler(model, run, mask_id=mask_id, parallel=True, denoiser=denoiser,
                                        overhead=overhead, temperature=temperature)
                seconds.append(time.perf_counter() - started)
                shares.append(trace.summary().get("parallel_measured_share", 0.0))
            print(f"parallel, overhead={overhead}: {min(seconds):.3f} s   ratio {min(seconds) / fastest_bare:.2f}x, "
                  f"{min(shares):.0%} of the rows measured")


if __name__ == "__main__":
    main()
