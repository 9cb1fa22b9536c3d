"""A self-contained HTML report: figures embedded as base64 PNG, numbers in tables, no external resources."""

from __future__ import annotations

import base64
import html
import io
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from matplotlib.figure import Figure

from .._io import atomic_write
from ..diagnostics.claims import ClaimsReport

STYLE = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 2rem auto; max-width: 1100px;
       color: #222; line-height: 1.45; }
h1 { font-size: 1.6rem; } h2 { font-size: 1.25rem; border-bottom: 1px solid #ddd; padding-bottom: .2rem; }
table { border-collapse: collapse; margin: .6rem 0 1.2rem; font-size: .85rem; }
th, td { border: 1px solid #ddd; padding: .25rem .5rem; text-align: right; }
th { background: #f4f4f4; } td.text { text-align: left; }
figure { margin: 1rem 0; } figcaption { font-size: .85rem; color: #555; }
img { max-width: 100%; } pre { background: #f7f7f7; padding: .6rem; overflow-x: auto; font-size: .8rem; }
.note { background: #fff8e1; padding: .4rem .6rem; border-left: 3px solid #f0b400; }
"""


@dataclass
class Section:
    """A titled block: paragraphs, tables (lists of rows), figures with captions, preformatted text."""

    title: str
    paragraphs: list[str] = field(default_factory=list)
    tables: list[tuple[str, Sequence[Mapping[str, Any]]]] = field(default_factory=list)
    figures: list[tuple[Figure, str]] = field(default_factory=list)
    preformatted: list[str] = field(default_factory=list)


def claims_section(claims: ClaimsReport) -> Section:
    """The paper's claims with verdicts and evidence, and the contradictions between pieces of evidence."""
    rows = [{"claim": c.statement, "verdict": c.verdict, "evidence": "; ".join(c.evidence)} for c in claims.claims]
    paragraphs = [f'<span class="note">{html.escape(text)}</span>' for text in claims.contradictions]
    return Section("What the run found: the paper's claims", paragraphs=paragraphs, tables=[("claims", rows)])


def figure_png(figure: Figure, dpi: int = 110) -> bytes:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=dpi)
    return buffer.getvalue()


def write_figures(out_dir: Path, drawn: Mapping[str, Figure]) -> None:
    """Each figure as ``out_dir/figures/{stem}.png``, written atomically."""
    for stem, figure in drawn.items():
        atomic_write(out_dir / "figures" / f"{stem}.png", figure_png(figure))


def _cell(value: Any) -> str:
    if isinstance(value, float):
        text = "—" if not math.isfinite(value) else f"{value:.4g}"
        return f"<td>{text}</td>"
    if isinstance(value, int):
        return f"<td>{value}</td>"
    return f'<td class="text">{html.escape(str(value))}</td>'


def _table(caption: str, rows: Sequence[Mapping[str, Any]]) -> str:
    if not rows:
        return ""
    columns = list(dict.fromkeys(key for row in rows for key in row))
    head = "".join(f"<th>{html.escape(c)}</th>" for c in columns)
    body = "".join("<tr>" + "".join(_cell(row.get(c, "")) for c in columns) + "</tr>" for row in rows)
    return f"<table><caption>{html.escape(caption)}</caption><tr>{head}</tr>{body}</table>"


def render_html(title: str, sections: Sequence[Section], config: Mapping[str, Any]) -> str:
    """The whole page as one string (images as ``data:`` URIs)."""
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>",
             f"<style>{STYLE}</style></head><body><h1>{html.escape(title)}</h1>"]
    for section in sections:
        parts.append(f"<h2>{html.escape(section.title)}</h2>")
        parts += [f"<p>{paragraph}</p>" for paragraph in section.paragraphs]
        parts += [_table(caption, rows) for caption, rows in section.tables]
        for figure, caption in section.figures:
            data = base64.b64encode(figure_png(figure)).decode()
            parts.append(f'<figure><img alt="{html.escape(caption)}" src="data:image/png;base64,{data}">'
                         f"<figcaption>{html.escape(caption)}</figcaption></figure>")
        parts += [f"<pre>{html.escape(text)}</pre>" for text in section.preformatted]
    parts.append(f"<h2>Configuration</h2><pre>{html.escape(json.dumps(config, indent=2))}</pre></body></html>")
    return "".join(parts)
