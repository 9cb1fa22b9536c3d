"""Glauber chains on an English masked LM with semantic drift, trap detection and topic attraction (no Trainer).

    python examples/text_topic_traps.py --steps 400 --temperature 0.7          # the bundled English MLM
    python examples/text_topic_traps.py --model PATH_OR_NAME                    # any Hugging Face masked LM

Chains start from neutral sentences of different lengths (one padded batch), are observed every ``--every`` steps in
all-MiniLM-L6-v2 sentence space, and report how often they sit near political content versus control topics.
Metrics go to a CSV logger under ``--out``. ``mlm-dynamics semantics`` is the full case study with base rates,
bootstrap intervals and figures.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch
import yaml
from lightning.pytorch.loggers import CSVLogger

from mlm_dynamics import GlauberSampler, MaskedLMDenoiser
from mlm_dynamics.embedders import SentenceEmbedder
from mlm_dynamics.experiments.semantics import NEUTRAL_STARTS
from mlm_dynamics.models import load_english_mlm
from mlm_dynamics.tracking import ChainMonitor, TopicAttraction, TrapTracker
from mlm_dynamics.tracking.traps import load_topics


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="english", help="'english' (bundled) or a HF masked LM name or local dir")
    parser.add_argument("--topics", default="politics", help="a YAML file of topic anchors, or a packaged set's name")
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--chains", type=int, default=4)
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--every", type=int, default=20)
    parser.add_argument("--out", type=Path, default=Path("runs/text-topics"))
    parser.add_argument("--smoke", action="store_true", help="a few steps of two chains (seconds)")
    args = parser.parse_args(argv)
    if args.smoke:
        args.steps, args.chains, args.every = 4, 2, 2

    denoiser, codec = load_english_mlm() if args.model == "english" else MaskedLMDenoiser.from_pretrained(args.model)
    encoded = [codec.encode(NEUTRAL_STARTS[c % len(NEUTRAL_STARTS)]) for c in range(args.chains)]
    length, pad = max(map(len, encoded)), codec.tokenizer.pad_token_id
    tokens = torch.tensor([e + [pad] * (length - len(e)) for e in encoded])
    sites, counts = denoiser.padded_sites(tokens)
    embedder = SentenceEmbedder(codec)
    sentences, threshold = load_topics(args.topics, key="--topics")
    anchors = {name: embedder.embed_texts(texts) for name, texts in sentences.items()}
    logger = CSVLogger(args.out, name="metrics")
    topics = TopicAttraction(anchors, threshold=0.5 if threshold is None else threshold)  # 0.5: the class default
    monitor = ChainMonitor(embedder, every=args.every, traps=TrapTracker(radius=0.05, dwell=5 * args.every),
                           topics=topics, loggers=[logger])
    sampler = GlauberSampler(denoiser, args.temperature)
    state = sampler.init_state(tokens, generator=0, sites=sites, site_counts=counts)
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
