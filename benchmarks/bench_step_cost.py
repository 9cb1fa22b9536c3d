"""What a Glauber step and a sweep-grid step cost against the bare forward they need, measured in the same run.

A step needs one encoder forward over its rows; everything else (masking, the head at one position, the tempered
softmax, the draw, the coupling) is overhead. For each model and batch size B this prints, from medians of timed
repeats in one process:

  step / bare   one `GlauberSampler.step` of B chains against the bare encoder forward of the same B rows
                (target <= 1.05x);
  grid / bare   one step of B coupled pairs of a sweep grid (`sampling.grid.pair_grid`, 2B rows while no pair has
                met) against the bare forward of 2B rows (target <= 1.10x);
  throughput    bare / step, the fraction of the bare forward's throughput the step keeps (GPU target >= 0.9 at
                B = 1024).

Models: `antiberty` (the pretrained antibody MLM, a real heavy chain of 124 tokens) and `bert-base` (randomly
initialised, BERT-base shape: 12 layers, hidden 768, V = 30,522; the length is --length). `--device cuda --dtype
bfloat16` runs the model forward in bf16 with float64 sampling, as the GPU sweep preset does.

Usage:
    python benchmarks/bench_step_cost.py                              # CPU: antiberty and bert-base at B = 8, 64
    python benchmarks/bench_step_cost.py --device cuda --dtype bfloat16 --models bert-base --batches 1024
    python benchmarks/bench_step_cost.py --smoke                      # tiny shapes (run by the tests)
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch

from mlm_dynamics import GlauberSampler, MaskedLMDenoiser
from mlm_dynamics.sampling.grid import GridCell, pair_grid

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def load(name: str, device: str, dtype: torch.dtype, length: int, smoke: bool) -> tuple[MaskedLMDenoiser, torch.Tensor]:
    """The denoiser and one start row ``[1, L]``."""
    if name == "antiberty":
        from mlm_dynamics.models.pretrained import EXAMPLE_ANTIBODIES, load_antiberty

        denoiser, codec = load_antiberty(device=device, dtype=dtype, num_layers=1 if smoke else None)
        return denoiser, codec.batch_encode([EXAMPLE_ANTIBODIES[0]]).to(device)
    from transformers import BertConfig, BertForMaskedLM

    torch.manual_seed(0)
    shape = dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64) if smoke else \
        dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072)
    model = BertForMaskedLM(BertConfig(vocab_size=30_522, max_position_embeddings=512, **shape)).eval()
    denoiser = MaskedLMDenoiser(model.to(device=device, dtype=dtype), mask_id=103, special_ids=range(999))
    row = torch.randint(1000, 30_522, (1, length), generator=torch.Generator().manual_seed(0))
    row[0, 0], row[0, -1] = 101, 102
    return denoiser, row.to(device)


def median_seconds(fn: Callable[[], object], repeats: int, device: str) -> float:
    """Median wall time of ``fn`` over ``repeats`` calls after one warm-up (synchronised on CUDA)."""
    fn()
    times = []
    for _ in range(repeats):
        if device == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        fn()
        if device == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


@torch.inference_mode()
def measure(denoiser: MaskedLMDenoiser, row: torch.Tensor, batch: int, repeats: int, device: str) -> dict[str, float]:
    """Seconds of the bare forward at B and 2B rows, of a Glauber step of B chains and of a grid step of B pairs."""
    sites = denoiser.resampleable_sites(row)[0]
    tokens = row.expand(batch, -1).clone()
    sampler = GlauberSampler(denoiser, 1.0)
    state = sampler.init_state(tokens, generator=0)
    encoder = denoiser.model.base_model
    doubled = row.expand(2 * batch, -1).clone()
    cells = [GridCell(temperature=0.5, sites=tuple(sites.tolist()))]

    def grid_step() -> None:  # a fresh grid each time: every pair open, 2B rows
        grid = pair_grid(denoiser, row, cells, pairs=batch, seed=0)
        start = time.perf_counter()
        grid.step()
        if device == "cuda":
            torch.cuda.synchronize()
        grid_times.append(time.perf_counter() - start)

    grid_times: list[float] = []
    seconds = {"bare": median_seconds(lambda: encoder(input_ids=tokens), repeats, device),
               "bare_2b": median_seconds(lambda: encoder(input_ids=doubled), repeats, device),
               "step": median_seconds(lambda: sampler.step(state), repeats, device)}
    for _ in range(repeats + 1):
        grid_step()
    seconds["grid"] = statistics.median(grid_times[1:])
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", nargs="+", default=["antiberty", "bert-base"], choices=["antiberty", "bert-base"])
    parser.add_argument("--batches", nargs="+", type=int, default=[8, 64])
    parser.add_argument("--length", type=int, default=128, help="sequence length of the bert-base rows")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32", choices=list(DTYPES))
    parser.add_argument("--smoke", action="store_true", help="one-layer models, B = 2, two repeats")
    args = parser.parse_args()
    if args.smoke:
        args.batches, args.repeats, args.length = [2], 2, 16
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, device {args.device}, model dtype "
          f"{args.dtype} (sampling float64); median of {args.repeats}")
    print(f"{'model':>10} {'B':>5} {'bare ms':>9} {'step ms':>9} {'step/bare':>9} {'throughput':>10} "
          f"{'grid ms':>9} {'grid/bare(2B)':>13}")
    for name in args.models:
        denoiser, row = load(name, args.device, DTYPES[args.dtype], args.length, args.smoke)
        for batch in args.batches:
            s = measure(denoiser, row, batch, args.repeats, args.device)
            print(f"{name:>10} {batch:>5} {s['bare'] * 1e3:9.2f} {s['step'] * 1e3:9.2f} {s['step'] / s['bare']:8.3f}x "
                  f"{s['bare'] / s['step']:10.3f} {s['grid'] * 1e3:9.2f} {s['grid'] / s['bare_2b']:12.3f}x")


if __name__ == "__main__":
    main()
