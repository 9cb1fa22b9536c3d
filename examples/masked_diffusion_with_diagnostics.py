"""A small absorbing-state masked diffusion model (MDLM-style) with the mixing diagnostics, and four samplers compared.

    python examples/masked_diffusion_with_diagnostics.py --out runs/diffusion      # about 20 minutes on 2 CPU cores
    python examples/masked_diffusion_with_diagnostics.py --smoke                    # seconds: the plumbing only

Model: a time-conditioned transformer ``forward(x, sigma)`` returning log-probabilities with the mask token at
probability 0 (MDLM's parameterisation), trained with Lightning on windows of the vendored English corpus: a masked
fraction ``t ~ U(eps, 1)`` per sequence (log-linear schedule ``alpha_t = 1 - t``), the ELBO-weighted masked
cross-entropy ``(1 / t) CE`` at the masked positions. The callbacks see it through
``FullSequenceDenoiser.masked_diffusion`` (Glauber convention ``sigma = sigma(1 / L)``).

Samplers, each run on the same number of denoising steps and monitored (drift and traps in sentence-embedding
space, commits and overwrites, repetition and diversity, entropy of the conditionals, effective temperature of the
draws): (a) ancestral unmasking, (b) confidence-ordered unmasking, (c) a remasking loop (ReMDM-style: each step
remasks a fraction of the unmasked positions), (d) (a) followed by Glauber refinement steps (the corrector), with
meeting times of coupled refinement chains. Writes ``comparison.csv``, ``report.json`` and ``figures/`` into
``--out``.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import lightning as L
import torch
from lightning.pytorch.loggers import CSVLogger
from torch import Tensor, nn
from torch.utils.data import DataLoader

from mlm_dynamics import CoupledGlauberChains, FullSequenceDenoiser, GlauberSampler, TextCodec, VocabInfo
from mlm_dynamics.callbacks import MixingDiagnostics, RectangleTest, TrapDetector
from mlm_dynamics.corpus import token_streams
from mlm_dynamics.diagnostics.decoding import CommitTracker, DecodingSummary, effective_temperature, entropy
from mlm_dynamics.diagnostics.meeting import meeting_times_of
from mlm_dynamics.embedders import SentenceEmbedder, default_sentence_model_path
from mlm_dynamics.models.full_sequence import loglinear_sigma
from mlm_dynamics.report.html import figure_png
from mlm_dynamics.report.writers import write_csv, write_json
from mlm_dynamics.sampling import GlauberCorrector
from mlm_dynamics.tracking import ChainMonitor, TrapTracker

EPS = 1e-3


class TinyMDLM(nn.Module):
    """``forward(x [B, L], sigma [B]) -> log-probabilities [B, L, V]``; the mask token gets probability 0."""

    def __init__(self, vocab_size: int, mask_id: int, length: int, width: int = 128, layers: int = 2) -> None:
        super().__init__()
        self.mask_id = mask_id
        self.tokens = nn.Embedding(vocab_size, width)
        self.positions = nn.Parameter(torch.zeros(length, width))
        self.time = nn.Sequential(nn.Linear(1, width), nn.SiLU(), nn.Linear(width, width))
        block = nn.TransformerEncoderLayer(width, nhead=4, dim_feedforward=2 * width, dropout=0.1, batch_first=True)
        self.body = nn.TransformerEncoder(block, layers)
        self.out = nn.Linear(width, vocab_size)

    def forward(self, x: Tensor, sigma: Tensor) -> Tensor:
        h = self.tokens(x) + self.positions[: x.shape[1]] + self.time(sigma[:, None].float())[:, None, :]
        logits = self.out(self.body(h))
        logits[..., self.mask_id] = -math.inf
        return logits.log_softmax(-1)


class MaskedDiffusion(L.LightningModule):
    """MDLM training: per-sequence masked fraction ``t``, ELBO weight ``1 / t``; ``self.denoiser`` for callbacks."""

    def __init__(self, backbone: TinyMDLM, vocab: VocabInfo, lr: float = 1e-3) -> None:
        super().__init__()
        self.backbone, self.lr = backbone, lr
        self.denoiser = FullSequenceDenoiser.masked_diffusion(backbone, vocab, time_conditioning=True)

    def training_step(self, tokens: Tensor, batch_idx: int) -> Tensor:
        t = EPS + (1 - EPS) * torch.rand(tokens.shape[0], device=tokens.device)
        chosen = torch.rand(tokens.shape, device=tokens.device) < t[:, None]
        chosen[:, 0] = True  # at least one masked position per row
        noisy = tokens.masked_fill(chosen, self.backbone.mask_id)
        log_probs = self.backbone(noisy, loglinear_sigma(t))
        nll = -log_probs.gather(-1, tokens[..., None]).squeeze(-1)
        loss = ((nll * chosen) / t[:, None]).sum() / chosen.sum()
        self.log("train/elbo_loss", loss, prog_bar=True, batch_size=len(tokens))
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.AdamW(self.parameters(), lr=self.lr)


def windows(stream: Tensor, length: int, count: int, seed: int) -> Tensor:
    starts = torch.randint(len(stream) - length, (count,), generator=torch.Generator().manual_seed(seed))
    return torch.stack([stream[s:s + length] for s in starts.tolist()])


@torch.no_grad()
def decode(backbone: TinyMDLM, samples: int, length: int, steps: int, kind: str, generator: torch.Generator,
           monitor: ChainMonitor, commits: CommitTracker, remask: float = 0.05) -> tuple[Tensor, dict[str, float]]:
    """Run one sampler from all-masked sequences; returns the samples and the draws' statistics."""
    mask = backbone.mask_id
    x = torch.full((samples, length), mask)
    monitor.start(x, step=0, phase="decode")
    entropies, logits_seen, draws_seen = [], [], []
    for k in range(steps):
        t, s = 1 - k / steps, 1 - (k + 1) / steps
        masked = x == mask
        log_probs = backbone(x, loglinear_sigma(torch.full((samples,), t)))
        proposal = torch.multinomial(log_probs.exp().flatten(0, 1), 1, generator=generator).view_as(x)
        entropies.append(float(entropy(log_probs[masked]).mean()) if masked.any() else math.nan)
        if kind == "confidence":
            confidence = log_probs.gather(-1, proposal[..., None]).squeeze(-1).masked_fill(~masked, -math.inf)
            quota = max(1, math.ceil(int(masked.sum(1).max()) / (steps - k)))
            top = confidence.topk(min(quota, length), dim=1).indices
            unmask = torch.zeros_like(masked).scatter(1, top, True) & masked
        else:
            unmask = masked & (torch.rand(x.shape, generator=generator) < (t - s) / t)
        x = torch.where(unmask, proposal, x)
        logits_seen.append(log_probs[unmask])
        draws_seen.append(proposal[unmask])
        if kind == "remask" and k < steps - 1:
            visible = x != mask
            x = x.masked_fill(visible & (torch.rand(x.shape, generator=generator) < remask), mask)
        commits.update(x, x == mask)
        monitor.observe(x, step=k + 1, masked=x == mask)
    still = x == mask  # anything left (remasking) is filled from the final conditionals
    if still.any():
        log_probs = backbone(x, loglinear_sigma(torch.full((samples,), 1 / length)))
        x = torch.where(still, torch.multinomial(log_probs.exp().flatten(0, 1), 1, generator=generator).view_as(x), x)
        commits.update(x, x == mask)
    checked = effective_temperature(torch.cat(logits_seen), torch.cat(draws_seen), 1.0)
    return x, {"conditional_entropy_mean": float(torch.tensor(entropies).nanmean()),
               "effective_temperature": checked["effective_temperature"]}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=Path("runs/diffusion"))
    parser.add_argument("--train-steps", type=int, default=1200)
    parser.add_argument("--length", type=int, default=24)
    parser.add_argument("--samples", type=int, default=16)
    parser.add_argument("--steps", type=int, default=24, help="denoising steps per sampler")
    parser.add_argument("--refine", type=int, default=48, help="Glauber refinement steps per sample, sampler (d)")
    parser.add_argument("--smoke", action="store_true", help="a few steps of everything (seconds)")
    args = parser.parse_args(argv)
    if args.smoke:
        args.train_steps, args.samples, args.steps, args.refine, args.length = 3, 4, 4, 4, 12
    torch.manual_seed(0)
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(default_sentence_model_path())
    codec = TextCodec(tokenizer)
    mask = tokenizer.mask_token_id
    vocab = VocabInfo(size=tokenizer.vocab_size, mask_id=mask, forbidden_ids=tuple(tokenizer.all_special_ids))
    stream = torch.cat(list(token_streams(tokenizer, "train").values()))
    data = windows(stream, args.length, 64 * max(args.train_steps, 1), seed=0)
    backbone = TinyMDLM(vocab.size, mask, args.length)
    module = MaskedDiffusion(backbone, vocab)
    encoder = SentenceEmbedder(codec)
    common = dict(every_n_train_steps=max(2, args.train_steps // 2), on_validation_end=False, num_starts=2,
                  overhead=None if args.smoke else 0.05)  # --smoke: every due run, whatever it costs
    trainer = L.Trainer(max_steps=args.train_steps, accelerator="cpu", logger=CSVLogger(args.out, name="training"),
                        enable_checkpointing=False, log_every_n_steps=1,
                        enable_progress_bar=False, enable_model_summary=False, default_root_dir=args.out,
                        callbacks=[MixingDiagnostics(max_steps=20, **common),
                                   RectangleTest(pairs_per_context=2, num_tokens=3, **common),
                                   TrapDetector(embedder=encoder, steps_per_run=10, every=5, codec=codec, **common)])
    trainer.fit(module, DataLoader(data, batch_size=64, shuffle=True))
    backbone.eval()
    training = {k: float(v) for k, v in trainer.callback_metrics.items()}

    rows, curves = [], {}
    generator = torch.Generator().manual_seed(1)
    finals = {}
    for kind in ("ancestral", "confidence", "remask"):
        monitor = ChainMonitor(encoder, every=max(1, args.steps // 6), traps=TrapTracker(radius=0.1, dwell=4),
                               prefix="")
        commits = CommitTracker()
        samples, drawn = decode(backbone, args.samples, args.length, args.steps, kind, generator, monitor, commits)
        finals[kind] = samples
        curves[kind] = [h[1] for h in commits.history]
        rows.append({"sampler": kind, **DecodingSummary(samples).summary(), **commits.summary(), **drawn,
                     "drift_final": monitor.history[-1].get("decode/drift_mean", math.nan)})
    denoiser = module.denoiser.eval()
    corrector = GlauberCorrector(denoiser, steps=args.refine, generator=2)
    refined = corrector(finals["ancestral"])
    before, after = DecodingSummary(finals["ancestral"]).summary(), DecodingSummary(refined).summary()
    rows.append({"sampler": "ancestral + Glauber refinement", **after,
                 "refinement_changes_per_sample": corrector.changes / args.samples})
    pairs = CoupledGlauberChains(GlauberSampler(denoiser, 1.0), freeze_met=True)
    coupled = pairs.init_state(finals["ancestral"], finals["confidence"], generator=3,
                               sites=torch.arange(args.length).expand(args.samples, -1))
    meeting = meeting_times_of(pairs.run(coupled, 10 * args.refine)).summary()
    write_csv(args.out / "comparison.csv", rows, list(dict.fromkeys(k for row in rows for k in row)))
    report = {"training": training, "samplers": rows, "refinement": {"before": before, "after": after,
                                                                     "meeting": meeting},
              "examples": {kind: [codec.decode(s.tolist()) for s in finals[kind][:3]] for kind in finals}
              | {"refined": [codec.decode(s.tolist()) for s in refined[:3]]}}
    write_json(args.out / "report.json", report)
    (args.out / "figures").mkdir(parents=True, exist_ok=True)
    (args.out / "figures" / "overwrites.png").write_bytes(figure_png(overwrite_figure(curves)))
    for row in rows:
        print({k: (round(v, 3) if isinstance(v, float) else v) for k, v in row.items()
               if k in ("sampler", "repetition_1", "repetition_2", "longest_run_mean", "distinct_2",
                        "duplicate_rate", "overwrite_rate", "effective_temperature")})
    print(f"refinement: repetition_2 {before['repetition_2']:.3f} -> {after['repetition_2']:.3f}, distinct_2 "
          f"{before['distinct_2']:.3f} -> {after['distinct_2']:.3f}; coupled refinement chains: "
          f"{meeting['censored_fraction']:.2f} censored, median meeting time {meeting['meeting_time_median']:.0f}")
    print(f"mixing history of the training run: mlm-dynamics report {args.out / 'training'} --out "
          f"{args.out / 'history'}")
    return report


def overwrite_figure(curves: dict[str, list[int]]):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(6.4, 3.6), layout="constrained")
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    for kind, counts in curves.items():
        axes.plot(range(1, len(counts) + 1), counts, marker="o", label=kind)
    axes.set_xlabel("denoising step")
    axes.set_ylabel("committed tokens overwritten")
    axes.set_title("Overwrites per denoising step")
    axes.legend()
    return figure


if __name__ == "__main__":
    print(json.dumps(main()["refinement"], indent=2))
