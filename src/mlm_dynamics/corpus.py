"""The vendored public-domain English corpus (``assets/english-corpus/corpus.jsonl.xz`` of the package) and its fixed
document split.

Genres: ``sotu`` (State of the Union addresses 1790-2018), ``moby`` (*Moby-Dick*, one document per chapter),
``bible`` (King James Bible, one document per book). Provenance, licence and the rebuild script are in
``mlm_dynamics/assets/english-corpus/``.
"""

from __future__ import annotations

import json
import lzma
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from ._random import Randomness, as_generator

GENRES = ("sotu", "moby", "bible")
SPLITS = ("train", "heldout")


@dataclass(frozen=True)
class Document:
    """One document of the vendored corpus: ``id``, ``genre``, ``title``, ``split`` (train or held out) and ``text``."""
    id: str
    genre: str
    title: str
    split: str
    text: str


def corpus_path() -> Path:
    """``mlm_dynamics/assets/english-corpus/corpus.jsonl.xz``, shipped inside the package."""
    path = Path(__file__).resolve().parent / "assets" / "english-corpus" / "corpus.jsonl.xz"
    if not path.is_file():
        raise FileNotFoundError(f"the English corpus is not at {path}: reinstall the package, or rebuild it with "
                                "assets/english-corpus/build.py of the source checkout")
    return path


def load_corpus(split: str | None = None, genres: Sequence[str] = GENRES, path: Path | None = None) -> list[Document]:
    """Documents of ``split`` (``"train"``, ``"heldout"`` or ``None`` for both) in the given genres."""
    if split is not None and split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS} or None, got {split!r}")
    unknown = sorted(set(genres) - set(GENRES))
    if unknown:
        raise ValueError(f"genres: unknown {unknown}; known: {list(GENRES)}")
    with lzma.open(path or corpus_path(), "rt", encoding="utf-8") as handle:
        documents = [Document(**json.loads(line)) for line in handle]
    return [d for d in documents if d.genre in genres and (split is None or d.split == split)]


def token_streams(tokenizer: Any, split: str, genres: Sequence[str] = GENRES) -> dict[str, Tensor]:
    """One concatenated stream of token ids per genre (documents in corpus order, no special tokens)."""
    streams: dict[str, list[int]] = {genre: [] for genre in genres}
    for document in load_corpus(split, genres):
        streams[document.genre] += tokenizer(document.text, add_special_tokens=False, verbose=False)["input_ids"]
    return {genre: torch.tensor(ids) for genre, ids in streams.items()}


def masked_windows(stream: Tensor, *, length: int, count: int, cls_id: int, sep_id: int, mask_id: int,
                   mask_rate: float = 0.15, generator: Randomness = 1234) -> tuple[Tensor, Tensor, Tensor]:
    """``count`` evenly spaced, non-overlapping windows ``[CLS] x [SEP]`` of ``stream`` with ``mask_rate`` of the
    inner positions replaced by ``mask_id`` (drawn from ``generator``, a fixed seed by default): ``(tokens, masked
    inputs, labels)``, labels -100 where nothing is masked. The held-out evaluation of the English MLM."""
    body = length - 2
    chunks = stream[: (len(stream) // body) * body].view(-1, body)
    chunks = chunks[torch.linspace(0, len(chunks) - 1, min(count, len(chunks))).long()]
    tokens = torch.cat([torch.full((len(chunks), 1), cls_id), chunks, torch.full((len(chunks), 1), sep_id)], 1)
    chosen = torch.rand(tokens.shape, generator=as_generator(generator)) < mask_rate
    chosen[:, 0] = chosen[:, -1] = False
    return tokens, tokens.masked_fill(chosen, mask_id), tokens.masked_fill(~chosen, -100)


def sample_sentences(count: int, generator: Randomness, min_words: int = 8, max_words: int = 40, split: str = "train"
                     ) -> list[str]:
    """``count`` sentences of the corpus ``split`` (all genres), uniformly among those of 8 to 40 words (drawn from
    ``generator``, a ``torch.Generator`` or an int seed)."""
    sentences = [s.strip() for d in load_corpus(split) for s in re.split(r"(?<=[.!?])\s+", d.text)
                 if min_words <= len(s.split()) <= max_words]
    picks = torch.randperm(len(sentences), generator=as_generator(generator))[:count]
    return [sentences[i] for i in picks.tolist()]


__all__ = ["GENRES", "SPLITS", "Document", "corpus_path", "load_corpus", "masked_windows", "sample_sentences",
           "token_streams"]
