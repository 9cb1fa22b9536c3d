"""Glauber chains on an English masked LM with semantic drift, trap detection and topic attraction (no Trainer).

    python examples/text_topic_traps.py --model PATH_OR_NAME --steps 400 --temperature 0.7

``--model minilm`` uses the offline all-MiniLM-L6-v2 encoder with an untrained MLM head: it only shows the plumbing
(the head is random), since no pretrained English MLM is bundled. Metrics go to a CSV logger under ``--out``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch
import yaml
from lightning.pytorch.loggers import CSVLogger

from mlm_dynamics import GlauberSampler, MaskedLMDenoiser
from mlm_dynamics.embedders import SentenceEmbedder, default_sentence_model_path
from mlm_dynamics.tracking import ChainMonitor, TopicAttraction, TrapTracker

SEEDS = [
    "the committee will meet next week to discuss the new proposal for the city park .",
    "she opened the window and watched the rain fall over the quiet harbour town .",
]


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="minilm", help="HF masked LM name or local dir; 'minilm' for the demo")
    parser.add_argument("--topics", type=Path, default=Path(__file__).parent.parent / "configs/topics-politics.yaml")
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--chains", type=int, default=4)
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--every", type=int, default=20)
    parser.add_argument("--out", type=Path, default=Path("runs/text-topics"))
    parser.add_argument("--smoke", action="store_true", help="a few steps of two chains (seconds)")
    args = parser.parse_args(argv)
    if args.smoke:
        args.steps, args.chains, args.every = 4, 2, 2

    path = default_sentence_model_path() if args.model == "minilm" else args.model
    denoiser, codec = MaskedLMDenoiser.from_pretrained(path)
    encoded = [codec.encode(s) for s in SEEDS]
    length = min(len(e) for e in encoded)
    tokens = torch.tensor([[*encoded[c % len(encoded)][: length - 1], encoded[c % len(encoded)][-1]]
                           for c in range(args.chains)])
    embedder = SentenceEmbedder(codec)
    spec = yaml.safe_load(args.topics.read_text())
    anchors = {name: embedder.embed_texts(sentences) for name, sentences in spec["topics"].items()}
    logger = CSVLogger(args.out, name="metrics")
    monitor = ChainMonitor(embedder, every=args.every, traps=TrapTracker(radius=0.05, dwell=5 * args.every),
                           topics=TopicAttraction(anchors, threshold=spec["threshold"]), loggers=[logger])
    sampler = GlauberSampler(denoiser, args.temperature)
    state = sampler.init_state(tokens, seed=0)
    monitor.start(state)
    for _ in sampler.run(state, args.steps):
        monitor.observe(state)
    logger.save()
    summary = {"topics": monitor.topics.fractions(), "basins": len(monitor.traps.basin_visits),
               "final": [codec.decode(row.tolist()) for row in state.tokens]}
    print(yaml.safe_dump(summary, sort_keys=False))
    return summary


if __name__ == "__main__":
    main()
