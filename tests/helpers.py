"""Shared test helpers (import from here, not from conftest)."""

from __future__ import annotations

import itertools

import torch
from scipy.stats import chisquare

from mlm_dynamics.sampling.exact import state_index


def chi_square_pvalue(tokens: torch.Tensor, probs: torch.Tensor, states: int) -> float:
    """Goodness of fit of the empirical law of the rows of ``tokens`` to ``probs`` over all states."""
    counts = torch.bincount(state_index(tokens, states), minlength=probs.numel()).double()
    expected = probs.double() * counts.sum()
    return float(chisquare(counts.numpy(), expected.numpy()).pvalue)


def modules_of_test_extra() -> list[str]:
    """Top-level modules that only the ``test`` extra brings (not core, ``assets`` or ``hf``, or their dependencies).

    Examples run with these hidden, so they work in the install the README gives users.
    """
    from importlib.metadata import PackageNotFoundError, packages_distributions, requires

    from packaging.requirements import Requirement

    def closure(roots: list[str]) -> set[str]:
        seen: set[str] = set()
        todo = list(roots)
        while todo:
            name = todo.pop().lower().replace("_", "-")
            if name in seen:
                continue
            seen.add(name)
            try:
                dependencies = requires(name) or []
            except PackageNotFoundError:
                continue
            todo += [Requirement(d).name for d in dependencies
                     if Requirement(d).marker is None or Requirement(d).marker.evaluate({"extra": ""})]
        return seen

    own = [Requirement(d) for d in requires("mlm_dynamics") or []]

    def extra(name: str) -> list[Requirement]:
        return [r for r in own if r.marker is not None and r.marker.evaluate({"extra": name})]

    users = ("assets", "hf")  # what the README installs for users, and the Trainer's extra
    user = closure([r.name for r in own if r.marker is None] + [r.name for e in users for r in extra(e)])
    roots = []  # the test extra, with its references to our own extras expanded (test = [mlm_dynamics[docs], ...])
    for requirement in extra("test"):
        if requirement.name.lower().replace("_", "-") == "mlm-dynamics":
            roots += [r.name for e in sorted(requirement.extras) if e not in users for r in extra(e)]
        else:
            roots.append(requirement.name)
    test = closure(roots)
    only = test - user
    # a namespace shared with a user package (google: protobuf and a test-only google-auth) stays importable
    return sorted(module for module, dists in packages_distributions().items()
                  if all(d.lower().replace("_", "-") in only for d in dists) and module.isidentifier())


def potts_corpus(num: int = 64, length: int = 10, seed: int = 0) -> torch.Tensor:
    """Sequences [CLS] x [SEP] of a Potts chain on content ids 4..9 (structure to learn)."""
    from mlm_dynamics import GlauberSampler, PairwiseMRFDenoiser

    potts = PairwiseMRFDenoiser.potts_chain(length, 6, coupling=1.5)
    sampler = GlauberSampler(potts, 1.0)
    state = sampler.init_state(torch.randint(6, (num, length), generator=torch.Generator().manual_seed(seed)),
                               generator=seed)
    for _ in sampler.run(state, 200):
        pass
    return torch.cat([torch.ones(num, 1, dtype=torch.long), state.tokens + 4, torch.full((num, 1), 2)], 1)


def tiny_lightning_classes():
    """A masked-denoising module around a tiny random BERT and a Potts data module, for LightningCLI tests."""
    import lightning as L
    from torch.utils.data import DataLoader

    from mlm_dynamics.training import MaskedDenoiserModule, tiny_bert_denoiser

    class TinyDenoiser(MaskedDenoiserModule):
        def __init__(self, lr: float = 3e-3) -> None:
            super().__init__(tiny_bert_denoiser(), lr=lr)

    class PottsData(L.LightningDataModule):
        def __init__(self, batch_size: int = 8) -> None:
            super().__init__()
            self.batch_size = batch_size

        def train_dataloader(self) -> DataLoader:
            return DataLoader(potts_corpus(), batch_size=self.batch_size, shuffle=True)

    return TinyDenoiser, PottsData


# -- set-ups for the observer-effect tests: a run with the plugin attached must equal the bare run bit for bit --------
SENTENCES = [
    "the old man walked slowly down the road with his dog at his side .",
    "call me ishmael .",
    "in the beginning god created the heaven and the earth .",
    "the state of the union is strong , and our people are at work .",
    "some years ago , never mind how long precisely , having little or no money in my purse .",
    "and the earth was without form , and void .",
    "we the people of the united states , in order to form a more perfect union .",
    "the whale rose from the sea and the ship turned to follow it across the waves .",
    "congress shall make no law respecting an establishment of religion .",
    "it was a cold morning and the harbour was full of ships .",
    "let there be light : and there was light .",
    "the president spoke of trade , of war and of peace with the nations of the world .",
]


def collator_batches(tokenizer, *, batch_size=4, seed=0):
    """``DataCollatorForLanguageModeling`` batches of the sentences: dynamic padding, random masking, shuffled."""
    from torch.utils.data import DataLoader
    from transformers import DataCollatorForLanguageModeling

    rows = [tokenizer(s) for s in SENTENCES]
    collator = DataCollatorForLanguageModeling(tokenizer, mlm_probability=0.15)
    return DataLoader(rows, batch_size=batch_size, shuffle=True, collate_fn=collator,
                      generator=torch.Generator().manual_seed(seed))


def collator_finetune_class():
    """A Hugging Face BertForMaskedLM fine-tune in Lightning, its embeddings frozen in eval mode, recording losses;
    with ``plugin=True`` it also holds ``MaskedLMDenoiser(self.model, tokenizer=tok)``."""
    import lightning as L
    from transformers import BertConfig, BertForMaskedLM

    from mlm_dynamics import MaskedLMDenoiser

    class CollatorFineTune(L.LightningModule):
        def __init__(self, tokenizer, *, plugin: bool):
            super().__init__()
            config = BertConfig(vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                intermediate_size=64, max_position_embeddings=64)
            self.model = BertForMaskedLM(config)
            self.model.bert.embeddings.requires_grad_(False)
            self.model.bert.embeddings.eval()  # a frozen part kept in eval mode by the user
            self.losses: list[float] = []
            if plugin:
                self.denoiser = MaskedLMDenoiser(self.model, tokenizer=tokenizer)

        def training_step(self, batch, batch_idx):
            loss = self.model(**batch).loss
            self.losses.append(loss.item())
            return loss

        def validation_step(self, batch, batch_idx):
            self.log("val/loss", self.model(**batch).loss, batch_size=len(batch["input_ids"]))

        def predict_step(self, batch, batch_idx):
            return self.model(**batch).loss

        def configure_optimizers(self):
            return torch.optim.AdamW([p for p in self.parameters() if p.requires_grad], lr=1e-3)

    return CollatorFineTune


class EMA:
    """Exponential moving average with MDLM's interface: ``update``, ``store``, ``copy_to``, ``restore``."""

    def __init__(self, parameters, decay):
        self.decay = decay
        self.shadow = [p.detach().clone() for p in parameters]
        self.collected: list[torch.Tensor] = []

    @torch.no_grad()
    def update(self, parameters):
        for shadow, p in zip(self.shadow, parameters, strict=True):
            shadow.sub_((1 - self.decay) * (shadow - p))

    def store(self, parameters):
        self.collected = [p.detach().clone() for p in parameters]

    @torch.no_grad()
    def copy_to(self, parameters):
        for shadow, p in zip(self.shadow, parameters, strict=True):
            p.copy_(shadow)

    @torch.no_grad()
    def restore(self, parameters):
        for saved, p in zip(self.collected, parameters, strict=True):
            p.copy_(saved)


class TinyDiT(torch.nn.Module):
    """A masked-diffusion backbone of MDLM's shape, ``forward(x, sigma) -> logits [B, L, V]``, with dropout."""

    def __init__(self, vocab: int = 12, dim: int = 32):
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, dim)
        self.time = torch.nn.Sequential(torch.nn.Linear(1, dim), torch.nn.SiLU())
        layer = torch.nn.TransformerEncoderLayer(dim, 2, 2 * dim, dropout=0.1, batch_first=True)
        self.encoder = torch.nn.TransformerEncoder(layer, 1, enable_nested_tensor=False)
        self.out = torch.nn.Linear(dim, vocab)

    def forward(self, x, sigma):
        return self.out(self.encoder(self.embed(x) + self.time(sigma[:, None, None].float())))


def mdlm_style_class():
    """A LightningModule with the shape of MDLM's ``Diffusion``: ``_process_sigma`` (sigma = 0 without time
    conditioning), the SUBS parameterization, a log-linear schedule, an EMA updated after each optimizer step and
    swapped in at validation (store/copy_to in ``on_validation_epoch_start``, restore at its end), ``ema_scope()``
    for the callbacks' ``weights=``; with ``plugin=True`` it holds ``masked_diffusion(self.backbone, ...)``."""
    from contextlib import contextmanager

    import lightning as L

    from mlm_dynamics import FullSequenceDenoiser, VocabInfo
    from mlm_dynamics.models.full_sequence import loglinear_sigma

    class MDLMStyle(L.LightningModule):
        mask_index = 11

        def __init__(self, *, plugin: bool, time_conditioning: bool = False):
            super().__init__()
            self.backbone = TinyDiT()
            self.time_conditioning = time_conditioning
            self.ema = EMA(self.backbone.parameters(), decay=0.9)
            self.losses: list[float] = []
            if plugin:
                vocab = VocabInfo(size=12, mask_id=self.mask_index, forbidden_ids=(self.mask_index,))
                self.denoiser = FullSequenceDenoiser.masked_diffusion(self.backbone, vocab,
                                                                      time_conditioning=time_conditioning)

        def forward(self, x, sigma):
            """Log-probabilities (SUBS): the mask id excluded, unmasked positions carry their own token."""
            if not self.time_conditioning:
                sigma = torch.zeros_like(sigma)
            logits = self.backbone(x, sigma)
            logits[:, :, self.mask_index] += -1e6
            logits = logits - logits.logsumexp(-1, keepdim=True)
            unmasked = x != self.mask_index
            logits[unmasked] = -1e6
            logits[unmasked, x[unmasked]] = 0
            return logits

        def training_step(self, batch, batch_idx):
            t = torch.rand(batch.shape[0], device=batch.device) * (1 - 1e-3) + 1e-3
            sigma = loglinear_sigma(t)
            masked = torch.rand(batch.shape, device=batch.device) < (1 - torch.exp(-sigma))[:, None]
            log_p = self(batch.masked_fill(masked, self.mask_index), sigma).gather(-1, batch[..., None])[..., 0]
            loss = -(log_p * masked).sum() / masked.sum().clamp_min(1)
            self.losses.append(loss.item())
            return loss

        def validation_step(self, batch, batch_idx):
            pass

        def predict_step(self, batch, batch_idx):
            return batch

        def optimizer_step(self, *args, **kwargs):
            super().optimizer_step(*args, **kwargs)
            self.ema.update(self.backbone.parameters())

        def on_train_epoch_start(self):
            self.backbone.train()

        def on_validation_epoch_start(self):
            self.ema.store(self.backbone.parameters())
            self.ema.copy_to(self.backbone.parameters())
            self.backbone.eval()

        def on_validation_epoch_end(self):
            self.ema.restore(self.backbone.parameters())

        @contextmanager
        def ema_scope(self):
            self.ema.store(self.backbone.parameters())
            self.ema.copy_to(self.backbone.parameters())
            try:
                yield
            finally:
                self.ema.restore(self.backbone.parameters())

        def configure_optimizers(self):
            return torch.optim.AdamW(self.backbone.parameters(), lr=3e-3)

    return MDLMStyle


def fit_fingerprint(trainer, module, root) -> dict:
    """What a fit leaves behind that the plugin must not change: losses, parameters, optimizer state, the global
    random state, each submodule's train/eval flag (under ``root``), grad mode."""
    optimizer = trainer.optimizers[0].state_dict()
    return {"losses": list(module.losses),
            "parameters": {k: v.detach().clone() for k, v in root.state_dict().items()},
            "optimizer": [{k: v.clone() for k, v in state.items()} for state in optimizer["state"].values()],
            "rng": torch.get_rng_state(),
            "modes": {name: m.training for name, m in root.named_modules()},
            "grad_enabled": torch.is_grad_enabled()}


def assert_same_fit(bare: dict, observed: dict) -> None:
    assert bare["losses"] == observed["losses"]  # every per-step loss, exactly
    assert bare["parameters"].keys() == observed["parameters"].keys()
    for key, value in bare["parameters"].items():
        assert torch.equal(value, observed["parameters"][key]), key
    assert len(bare["optimizer"]) == len(observed["optimizer"])
    for mine, theirs in zip(bare["optimizer"], observed["optimizer"], strict=True):
        for key, value in mine.items():
            assert torch.equal(value, theirs[key]), key
    assert torch.equal(bare["rng"], observed["rng"])
    assert bare["modes"] == observed["modes"]
    assert bare["grad_enabled"] == observed["grad_enabled"]


def untyped_embedding(tokens):
    """A plain function without annotations, as users write them (a LightningCLI file names it by dotted path)."""
    return torch.nn.functional.one_hot(tokens, 24).float().mean(1)


# each job's smallest preset, made a few seconds long by overrides (the data it loads stays the preset's)
SMALL_JOBS: dict[str, tuple[str, list[str]]] = {
    "run": ("antiberty-default", ["model.num_layers=1", "chains.num_chains=4", "run.num_steps=4", "run.record_every=2",
                                  "coupling.max_steps=4", "rectangle.pairs_per_context=1", "rectangle.num_tokens=2",
                                  "influence.max_sites=2", "semantics.reference_samples=2"]),
    "sweep": ("sweep-ising", ["grid.temperatures=[1.0, 2.0]", "grid.lengths=[4, 6]", "grid.pairs=4",
                              "grid.max_steps=50"]),
    "semantics": ("english-politics", ["temperatures=[1.0]", "chains_per_temperature=2", "num_steps=4", "every=2",
                                       "dwell=2", "corpus_sentences=40", "bootstrap=20"]),
    "rectangle-table": ("rectangle-table", ["contexts=1", "pairs_per_context=1", "num_tokens=2"]),
}


def figure_problems(figure) -> list[str]:
    """What keeps a person from reading ``figure`` at its saved size: a legend box that covers plotted data (a line's
    path, a bar, a scatter point), text below 9 pt or cut off at the edge of the image, tick labels that run into
    each other or carry an offset or scientific multiplier."""
    from matplotlib.collections import Collection
    from matplotlib.patches import Rectangle
    from matplotlib.text import Text

    figure.canvas.draw()
    figure.canvas.draw()  # as report.html.figure_png saves it: drawn once to settle the layout, then again
    renderer = figure.canvas.get_renderer()
    problems = []
    for axes in figure.axes:
        legend = axes.get_legend()
        if legend is not None:
            box = legend.get_window_extent(renderer)
            for line in axes.get_lines():
                path = line.get_transform().transform_path(line.get_path())
                if len(path.vertices) and path.intersects_bbox(box, filled=False):
                    problems.append(f"{axes.get_title()!r}: the legend covers the line {line.get_label()!r}")
            for patch in axes.patches:
                if isinstance(patch, Rectangle) and patch.get_height() and box.overlaps(
                        patch.get_window_extent(renderer)):
                    problems.append(f"{axes.get_title()!r}: the legend covers a bar")
                    break
            for collection in axes.collections:
                if isinstance(collection, Collection) and len(collection.get_offsets()):
                    points = collection.get_offset_transform().transform(collection.get_offsets())
                    if any(box.contains(x, y) for x, y in points):
                        problems.append(f"{axes.get_title()!r}: the legend covers scattered points")
        for axis in (axes.xaxis, axes.yaxis):
            boxes = [label.get_window_extent(renderer) for label in axis.get_ticklabels()
                     if label.get_visible() and label.get_text()]
            if any(a.overlaps(b) for a, b in itertools.pairwise(boxes)):  # neighbours, in tick order
                problems.append(f"{axes.get_title()!r}: tick labels run into each other")
            if axis.get_offset_text().get_text():
                problems.append(f"{axes.get_title()!r}: tick labels carry an offset or multiplier "
                                f"({axis.get_offset_text().get_text()!r})")
    inside = figure.bbox.padded(1)  # a pixel of rounding
    hidden = set()  # tick labels of ticks outside the view: kept by matplotlib, never drawn
    for axes in figure.axes:
        for axis, which in ((axes.xaxis, 0), (axes.yaxis, 1)):
            low, high = sorted(axis.get_view_interval())
            hidden |= {id(label) for label in axis.get_ticklabels(which="both")
                       if not low - 1e-9 * (high - low) <= label.get_position()[which] <= high + 1e-9 * (high - low)}
    for axes in figure.axes:  # words written in the plot must not run into each other or into the tick labels
        ticks = [label for axis in (axes.xaxis, axes.yaxis) for label in axis.get_ticklabels()
                 if label.get_visible() and label.get_text() and id(label) not in hidden]
        written = [text for text in axes.texts if text.get_visible() and text.get_text().strip()]
        boxes = [(text.get_text(), text.get_window_extent(renderer)) for text in written]
        tick_boxes = [label.get_window_extent(renderer) for label in ticks]
        for k, (words, box) in enumerate(boxes):
            if any(box.overlaps(other) for _, other in boxes[k + 1:]) or any(box.overlaps(t) for t in tick_boxes):
                problems.append(f"{axes.get_title()!r}: the text {words[:30]!r} runs into other text")
    for text in figure.findobj(Text):
        if text.get_visible() and text.get_text().strip() and text.get_fontsize() < 9:
            problems.append(f"text {text.get_text()[:30]!r} at {text.get_fontsize():g} pt")
        if text.get_visible() and text.get_text().strip() and id(text) not in hidden:
            box = text.get_window_extent(renderer)
            if box.x0 < inside.x0 or box.x1 > inside.x1 or box.y0 < inside.y0 or box.y1 > inside.y1:
                problems.append(f"text {text.get_text()[:30]!r} is cut off at the edge of the image")
    return list(dict.fromkeys(problems))
