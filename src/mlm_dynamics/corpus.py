"""The vendored public-domain English corpus (``data/english/corpus.jsonl.xz``) and its fixed document split.

Genres: ``sotu`` (State of the Union addresses 1790-2018), ``moby`` (*Moby-Dick*, one document per chapter),
``bible`` (King James Bible, one document per book). Provenance, licence and the rebuild script are in
``data/english/``.
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

GENRES = ("sotu", "moby", "bible")
SPLITS = ("train", "heldout")


@dataclass(frozen=True)
class Document:
    id: str
    genre: str
    title: str
    split: str
    text: str


def corpus_path() -> Path:
    """``data/english/corpus.jsonl.xz`` of the source checkout this package is installed from."""
    path = Path(__file__).resolve().parents[2] / "data" / "english" / "corpus.jsonl.xz"
    if not path.is_file():
        raise FileNotFoundError(f"the English corpus is not at {path}: it ships with the repository checkout "
                                "(pip install -e .), or rebuild it with data/english/build.py")
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
                   mask_rate: float = 0.15, seed: int = 1234) -> tuple[Tensor, Tensor, Tensor]:
    """``count`` evenly spaced, non-overlapping windows ``[CLS] x [SEP]`` of ``stream`` with ``mask_rate`` of the
    inner positions replaced by ``mask_id`` (fixed seed): ``(tokens, masked inputs, labels)``, labels -100 where
    nothing is masked. The held-out evaluation of the English MLM."""
    body = length - 2
    chunks = stream[: (len(stream) // body) * body].view(-1, body)
    chunks = chunks[torch.linspace(0, len(chunks) - 1, min(count, len(chunks))).long()]
    tokens = torch.cat([torch.full((len(chunks), 1), cls_id), chunks, torch.full((len(chunks), 1), sep_id)], 1)
    chosen = torch.rand(tokens.shape, generator=torch.Generator().manual_seed(seed)) < mask_rate
    chosen[:, 0] = chosen[:, -1] = False
    return tokens, tokens.masked_fill(chosen, mask_id), tokens.masked_fill(~chosen, -100)


def sample_sentences(count: int, seed: int, min_words: int = 8, max_words: int = 40, split: str = "train"
                     ) -> list[str]:
    """``count`` sentences of the corpus ``split`` (all genres), uniformly among those of 8 to 40 words."""
    sentences = [s.strip() for d in load_corpus(split) for s in re.split(r"(?<=[.!?])\s+", d.text)
                 if min_words <= len(s.split()) <= max_words]
    picks = torch.randperm(len(sentences), generator=torch.Generator().manual_seed(seed))[:count]
    return [sentences[i] for i in picks.tolist()]
