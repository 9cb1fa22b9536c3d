"""Speed of the sweep engine, as ratios against baselines measured in the same run.

Model: the BERT-style masked LM of ``bench_glauber.py`` (V = 30,522; ``--hidden``, ``--layers``; bf16 with
``--dtype bfloat16`` on a GPU). Grid: ``--temperatures`` x ``--lengths``, ``--pairs`` coupled pairs per cell, windows
of each length in one sequence of ``--length`` tokens.

(a) One grid step (all cells, all pairs: per-row temperatures, ragged sites, coupled draws, one forward) against
    the bare encoder forward over the same rows; target <= 1.10x.
(b) Cells per second: the whole grid advancing in one batch against a loop that steps each cell on its own.
(c) Rows saved by compaction: forward rows a sweep spends when met pairs leave the batch, against 2 rows per pair
    and step (an Ising grid run to completion, and the BERT-style grid for ``--steps`` steps).
(d) Per-pair counter-based streams (what makes a cell's result independent of its neighbours): one grid step with
    them against the same step drawing from one shared generator.

Usage: python benchmarks/bench_sweep.py [--device cuda --dtype bfloat16 --hidden 768 --layers 12 --pairs 32]
"""

from __future__ import annotations

import argparse
import time

import torch
from bench_glauber import MASK_ID, VOCAB, median_seconds
from transformers import BertConfig, BertForMaskedLM

from mlm_dynamics import GlauberSampler, MaskedLMDenoiser
from mlm_dynamics.experiments import load_config
from mlm_dynamics.experiments.sweep import SweepConfig, run_sweep
from mlm_dynamics.sampling import CoupledGlauberChains
from mlm_dynamics.sampling.streams import stream_key


def build(hidden: int, layers: int, device: str, dtype: torch.dtype) -> tuple[BertForMaskedLM, MaskedLMDenoiser]:
    torch.manual_seed(0)
    config = BertConfig(vocab_size=VOCAB, hidden_size=hidden, num_hidden_layers=layers,
                        num_attention_heads=max(1, hidden // 64), intermediate_size=4 * hidden,
                        max_position_embeddings=512)
    model = BertForMaskedLM(config).eval().to(device=device, dtype=dtype)
    return model, MaskedLMDenoiser(model, mask_id=MASK_ID, special_ids=range(999))


def grid_state(denoiser: MaskedLMDenoiser, cells: list[tuple[float, int]], pairs: int, length: int, seed: int = 0,
               streams: bool = False):
    """Coupled chains of every cell in one batch: rows of cell (tau, n) resample the first n sites of a window; with
    ``streams`` each pair on its own counter-based stream."""
    generator = torch.Generator().manual_seed(seed)
    rows = len(cells) * pairs
    temps = torch.tensor([tau for tau, _ in cells], dtype=torch.float64).repeat_interleave(pairs)
    counts = torch.tensor([n for _, n in cells]).repeat_interleave(pairs)
    x0 = torch.randint(1000, VOCAB, (rows, length), generator=generator)
    y0 = x0.clone()
    window = torch.arange(1, 1 + max(n for _, n in cells)).expand(rows, -1)
    for row in range(rows):
        y0[row, window[row, : counts[row]]] = torch.randint(1000, VOCAB, (int(counts[row]),), generator=generator)
    sampler = GlauberSampler(denoiser, temps)
    chains = CoupledGlauberChains(sampler, freeze_met=True)
    keys = torch.tensor([stream_key(seed, row) for row in range(rows)], device=denoiser.device) if streams else None
    state = chains.init_state(x0.to(denoiser.device), y0.to(denoiser.device), generator=seed, sites=window,
                              site_counts=counts, streams=keys)
    return chains, state


def synchronize(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--temperatures", type=float, nargs="+", default=[0.5, 1.0, 2.0, 4.0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[8, 16, 32, 64])
    parser.add_argument("--pairs", type=int, default=4)
    parser.add_argument("--length", type=int, default=128)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args()
    dtype = getattr(torch, args.dtype)
    model, denoiser = build(args.hidden, args.layers, args.device, dtype)
    cells = [(tau, n) for tau in args.temperatures for n in args.lengths]
    rows = 2 * len(cells) * args.pairs
    print(f"BERT-style MLM V={VOCAB}, hidden {args.hidden}, {args.layers} layers, {args.dtype} on {args.device}; "
          f"{len(cells)} cells x {args.pairs} pairs = {rows} rows of {args.length} tokens; median of {args.repeats}")

    chains, state = grid_state(denoiser, cells, args.pairs, args.length)
    inputs = torch.cat([state.x.tokens, state.y])
    inputs[:, 1] = MASK_ID  # one masked position per row, as in a step

    @torch.inference_mode()
    def bare_forward() -> None:
        model.bert(input_ids=inputs)
        synchronize(args.device)

    @torch.inference_mode()
    def grid_step() -> None:
        state.met_at.fill_(-1)  # keep every pair in the batch: a full-width step each time
        chains.step(state)
        synchronize(args.device)

    bare, step = median_seconds(bare_forward, args.repeats), median_seconds(grid_step, args.repeats)
    print(f"(a) one grid step {step * 1e3:.1f} ms, bare forward of the same {rows} rows {bare * 1e3:.1f} ms: "
          f"{step / bare:.3f}x (target <= 1.10x); {rows / 2 / step:.1f} pair-steps/s")

    def batched() -> None:
        batch_chains, batch_state = grid_state(denoiser, cells, args.pairs, args.length)
        for _ in range(args.steps):
            batch_state.met_at.fill_(-1)
            batch_chains.step(batch_state)
        synchronize(args.device)

    def looped() -> None:
        for cell in cells:
            cell_chains, cell_state = grid_state(denoiser, [cell], args.pairs, args.length)
            for _ in range(args.steps):
                cell_state.met_at.fill_(-1)
                cell_chains.step(cell_state)
        synchronize(args.device)

    with torch.inference_mode():
        together, separately = median_seconds(batched, 1), median_seconds(looped, 1)
    print(f"(b) {args.steps} steps of all {len(cells)} cells: one batch {together:.2f} s "
          f"({len(cells) * args.steps / together:.1f} cell-steps/s), cell by cell {separately:.2f} s: the batch is "
          f"{separately / together:.2f}x faster")

    ising = load_config(SweepConfig, None, ["grid.temperatures=[0.5, 1.0, 2.0, 4.0]", "grid.lengths=[8, 16, 32]",
                                            "grid.pairs=32", "grid.max_steps=2000", "drift.enabled=false",
                                            "influence.enabled=false", "checkpoint_every=null"])
    started = time.perf_counter()
    rows_ising = run_sweep(ising).rows
    print(f"(c) Ising grid to completion ({time.perf_counter() - started:.1f} s): {rows_ising['pair_rows_spent']:.0f} "
          f"of {rows_ising['pair_rows_uncompacted']:.0f} rows, {rows_ising['rows_saved_fraction']:.0%} saved by "
          "compaction")
    chains, state = grid_state(denoiser, cells, args.pairs, args.length)
    with torch.inference_mode():
        for _ in range(args.steps):
            chains.step(state)
    uncompacted = rows * args.steps
    print(f"    BERT-style grid, {args.steps} steps: {state.rows} of {uncompacted} rows "
          f"({1 - state.rows / uncompacted:.0%} saved; pairs met: {int((state.met_at >= 0).sum())} of {rows // 2})")

    own_chains, own_state = grid_state(denoiser, cells, args.pairs, args.length, streams=True)

    @torch.inference_mode()
    def own_streams_step() -> None:
        own_state.met_at.fill_(-1)
        own_chains.step(own_state)
        synchronize(args.device)

    shared, own = median_seconds(grid_step, args.repeats), median_seconds(own_streams_step, args.repeats)
    print(f"(d) one grid step with per-pair streams {own * 1e3:.1f} ms, with one shared generator {shared * 1e3:.1f} "
          f"ms: {own / shared:.3f}x")


if __name__ == "__main__":
    main()
