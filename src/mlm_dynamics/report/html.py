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
from .._provenance import generated_by
from ..diagnostics.claims import ClaimsReport
from .figures import readable

STYLE = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 2rem auto; max-width: 1100px;
       color: #222; line-height: 1.45; }
h1 { font-size: 1.6rem; } h2 { font-size: 1.25rem; border-bottom: 1px solid #ddd; padding-bottom: .2rem; }
table { border-collapse: collapse; margin: .6rem 0 1.2rem; font-size: .85rem; }
th, td { border: 1px solid #ddd; padding: .25rem .5rem; text-align: right; }
th { background: #f4f4f4; } td.text { text-align: left; }
figure { margin: 1rem 0; } figcaption { font-size: .85rem; color: #555; }
img { max-width: 100%; height: auto; }
pre { background: #f7f7f7; padding: .6rem; font-size: .8rem; white-space: pre-wrap; overflow-wrap: anywhere; }
.note { display: block; background: #fff8e1; padding: .4rem .6rem; border-left: 3px solid #f0b400; }
.wide { overflow-x: auto; max-width: 100%; }
nav.toc { background: #f7f7f9; padding: .4rem 1rem; border-radius: 4px; font-size: .9rem; }
nav.toc ol { margin: .2rem 0; padding-left: 1.2rem; columns: 2; }
p.provenance { font-size: .8rem; color: #555; overflow-wrap: anywhere; }
mark { background: #ffe08a; }
td.draw { font-family: ui-monospace, monospace; text-align: left; overflow-wrap: anywhere; }
"""


class Markup(str):
    """Text already escaped and marked up (a draw with its changed tokens in ``<mark>``): table cells keep it."""


def marked_changes(sequence: str, reference: str) -> Markup:
    """``sequence`` escaped, with the tokens that differ from ``reference`` in ``<mark>``: characters for sequences
    without spaces (residues), words otherwise."""
    split = (lambda text: text.split(" ")) if " " in sequence else list
    joiner = " " if " " in sequence else ""
    ours, theirs = split(sequence), split(reference)
    pieces = [f"<mark>{html.escape(token)}</mark>" if k >= len(theirs) or token != theirs[k] else html.escape(token)
              for k, token in enumerate(ours)]
    return Markup(joiner.join(pieces))


@dataclass
class Section:
    """A titled block: paragraphs, tables (lists of rows), figures with captions, preformatted text."""

    title: str
    paragraphs: list[str] = field(default_factory=list)
    tables: list[tuple[str, Sequence[Mapping[str, Any]]]] = field(default_factory=list)
    figures: list[tuple[Figure, str]] = field(default_factory=list)
    preformatted: list[str] = field(default_factory=list)


def claims_section(claims: ClaimsReport) -> Section:
    """The paper's claims with verdicts, the sample each rests on, its plug-in power and the evidence, and the
    contradictions between pieces of evidence."""
    rows = [{"claim": c.statement, "verdict": c.verdict, "sample": c.sample,
             "power": "—" if math.isnan(c.power) else f"{c.power:.2f}", "evidence": "; ".join(c.evidence)}
            for c in claims.claims]
    paragraphs = [f'<span class="note">{html.escape(text)}</span>' for text in claims.contradictions]
    return Section("What the run found: the paper's claims", paragraphs=paragraphs, tables=[("claims", rows)])


def _number(value: float | None) -> str:
    return "unbounded" if value is None or math.isinf(value) else f"{value:.4g}"


def quantile_text(summary: Mapping[str, Any], key: str) -> str:
    """A censoring-aware quantile from a summary (:meth:`~mlm_dynamics.diagnostics.survival.QuantileEstimate.summary`
    keys): ``"114 [80, 150] (95.1 %)"``, or ``"est. > 200 [150, unbounded] (87.5 %)"`` where it is censored (the
    sample's median lies beyond the budget: an estimate, not a certainty; the interval says what is covered); ``"—"``
    without it. JSON ``null`` (a missing or unbounded value) reads as unbounded."""
    value, bound = summary.get(key), summary.get(f"{key}_lower_bound")
    if value is None and bound is None:
        return "—"
    point = f"est. > {_number(bound)}" if value is None or (isinstance(value, float) and math.isnan(value)) \
        else _number(value)
    confidence = summary.get(f"{key}_confidence")
    if confidence is None or (isinstance(confidence, float) and math.isnan(confidence)):
        return point
    return (f"{point} [{_number(summary.get(f'{key}_low'))}, {_number(summary.get(f'{key}_high'))}] "
            f"({100 * confidence:.3g} %)")


def figure_png(figure: Figure, dpi: int = 110) -> bytes:
    """PNG bytes of ``figure`` at ``dpi`` (the figure is closed). The figure is drawn once before it is saved: tick
    labels exist only after a draw, and the constrained layout makes room for them only on the next one (a y label
    drawn once can be cut at the image's edge)."""
    buffer = io.BytesIO()
    readable(figure).canvas.draw()
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
    if isinstance(value, Markup):
        return f'<td class="draw">{value}</td>'
    return f'<td class="text">{html.escape(str(value))}</td>'


def _table(caption: str, rows: Sequence[Mapping[str, Any]]) -> str:
    if not rows:
        return ""
    columns = list(dict.fromkeys(key for row in rows for key in row))
    head = "".join(f"<th>{html.escape(c)}</th>" for c in columns)
    body = "".join("<tr>" + "".join(_cell(row.get(c, "")) for c in columns) + "</tr>" for row in rows)
    return f'<div class="wide"><table><caption>{html.escape(caption)}</caption><tr>{head}</tr>{body}</table></div>'


def _anchor(title: str, taken: set[str]) -> str:
    """A unique ``id`` for a section title (letters, digits and dashes)."""
    base = "-".join("".join(c if c.isalnum() else " " for c in title.lower()).split()) or "section"
    anchor, count = base, 1
    while anchor in taken:
        count += 1
        anchor = f"{base}-{count}"
    taken.add(anchor)
    return anchor


PROVENANCE_KEYS = ("model", "weights_sha256", "mlm_dynamics", "transformers", "torch", "device_name", "date", "command")


def provenance_line(environment: Mapping[str, str]) -> str:
    """``model ... · weights sha256 ... · mlm_dynamics 0.2.0 · ... · command ...``: where a report comes from, in one
    line for its first screen (keys of :data:`PROVENANCE_KEYS` that are set)."""
    return " · ".join(f"{key.replace('_', ' ')} {environment[key]}" for key in PROVENANCE_KEYS if environment.get(key))


def render_html(title: str, sections: Sequence[Section], config: Mapping[str, Any],
                environment: Mapping[str, str] | None = None, cost: Mapping[str, Any] | None = None) -> str:
    """The whole page as one string (images as ``data:`` URIs): the title, where it comes from
    (:func:`provenance_line` of ``environment``), a table of contents linking every section, the sections in order
    (lead with what the run found), then the configuration, and at the foot the job's cost (``cost``:
    :meth:`~mlm_dynamics.models.cost.CostLedger.record`)
    beside its provenance. Long lines wrap and wide tables scroll inside their box, so nothing runs off the page."""
    taken: set[str] = set()
    anchors = [_anchor(section.title, taken) for section in sections]
    config_anchor = _anchor("configuration", taken)
    toc = "".join(f'<li><a href="#{anchor}">{html.escape(section.title)}</a></li>'
                  for anchor, section in zip(anchors, sections, strict=True))
    parts = ["<!doctype html><html lang='en'><head><meta charset='utf-8'>",
             "<meta name='viewport' content='width=device-width, initial-scale=1'>",
             f"<title>{html.escape(title)}</title><style>{STYLE}</style></head><body><h1>{html.escape(title)}</h1>",
             f'<p class="provenance">{html.escape(provenance_line(environment or {}))}</p>',
             f'<nav class="toc"><strong>Contents</strong><ol>{toc}'
             f'<li><a href="#{config_anchor}">Configuration</a></li></ol></nav>']
    for anchor, section in zip(anchors, sections, strict=True):
        parts.append(f'<h2 id="{anchor}">{html.escape(section.title)}</h2>')
        parts += [f"<p>{paragraph}</p>" for paragraph in section.paragraphs]
        parts += [_table(caption, rows) for caption, rows in section.tables]
        for figure, caption in section.figures:
            data = base64.b64encode(figure_png(figure)).decode()
            parts.append(f'<figure><img alt="{html.escape(caption)}" src="data:image/png;base64,{data}">'
                         f"<figcaption>{html.escape(caption)}</figcaption></figure>")
        parts += [f"<pre>{html.escape(text)}</pre>" for text in section.preformatted]
    parts.append(f'<h2 id="{config_anchor}">Configuration</h2><pre>{html.escape(json.dumps(config, indent=2))}</pre>')
    if cost is not None:
        parts.append(f'<footer><p class="provenance">{html.escape(provenance_line(environment or {}))}</p>'
                     f'<p class="provenance">{html.escape(cost["line"])} (up to this page)</p>'
                     f'{_table("cost per phase", cost["phases"])}</footer>')
    parts.append("</body></html>")
    return "".join(parts)


__all__ = ["PROVENANCE_KEYS", "STYLE", "Markup", "Section", "claims_section", "figure_png", "generated_by",
           "marked_changes",
           "provenance_line", "quantile_text", "render_html", "write_figures"]
