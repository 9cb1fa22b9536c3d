"""The callbacks' cost estimate against the run it estimates, measured in the same process.

For each model (the shipped English MLM, AntiBERTy) and each default probe of the Hugging Face callback
(`MeetingTimeProbe(max_steps=200)`, `RectangleProbe()`): a `ScheduledProbe` is prepared on real rows (the estimate:
the probe's forward rows times a timed forward), then one run is measured; the script prints both and their ratio
(target: within 25 %). A meeting-time run whose pairs meet early costs less than the estimate, which counts every
pair for its whole budget: the ratio says how much.

Usage: python benchmarks/bench_probe_estimate.py [--models english antiberty] [--repeats 2]
"""

from __future__ import annotations

import argparse
import time

import torch

from mlm_dynamics.models.pretrained import EXAMPLE_ANTIBODIES, load_antiberty, load_english_mlm
from mlm_dynamics.probes.base import ScheduledProbe
from mlm_dynamics.probes.mixing import MeetingTimeProbe, RectangleProbe

ENGLISH = ["It would have been impossible otherwise to establish the facts of the case.",
           "The ship sailed out of the harbour before the storm reached the coast.",
           "She kept the letters in a box under the window for many years.",
           "They walked along the river until the light began to fade."]


def rows(name: str) -> tuple[torch.nn.Module, torch.Tensor]:
    if name == "english":
        denoiser, codec = load_english_mlm()
        encoded = [codec.encode(text) for text in ENGLISH]
        width = max(len(e) for e in encoded)
        pad = codec.tokenizer.pad_token_id
        return denoiser, torch.tensor([e + [pad] * (width - len(e)) for e in encoded])
    denoiser, codec = load_antiberty()
    return denoiser, codec.batch_encode([EXAMPLE_ANTIBODIES[0]] * 4)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", nargs="+", default=["english", "antiberty"], choices=["english", "antiberty"])
    parser.add_argument("--repeats", type=int, default=2, help="runs measured per probe (each against its estimate)")
    args = parser.parse_args()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    print(f"{'model':>10} {'probe':>18} {'estimate s':>11} {'run s':>8} {'run / estimate':>15}")
    for name in args.models:
        denoiser, tokens = rows(name)
        for make in (lambda: MeetingTimeProbe(max_steps=200), RectangleProbe):
            for _ in range(args.repeats):
                scheduled = ScheduledProbe(make(), every_n_steps=1, start_tokens=tokens, overhead=None)
                scheduled.prepare(denoiser, denoiser)
                estimate = scheduled.estimate
                started = time.perf_counter()
                scheduled.run(denoiser, denoiser, stage="train")
                seconds = time.perf_counter() - started
                assert estimate is not None
                print(f"{name:>10} {type(scheduled.probe).__name__:>18} {estimate:11.2f} {seconds:8.2f} "
                      f"{seconds / estimate:14.2f}x")


if __name__ == "__main__":
    main()
