"""The vendored public-domain English corpus (``data/english/corpus.jsonl.xz``) and its fixed document split.

Genres: ``sotu`` (State of the Union addresses 1790-2018), ``moby`` (*Moby-Dick*, one document per chapter),
``bible`` (King James Bible, one document per book). Provenance, licence and the rebuild script are in
``data/english/``.
"""

from __future__ import annotations

import json
import lzma
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

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
