"""Pages and numbers in the docs that come from the code stay what the code says."""

import re
import runpy
from pathlib import Path

from mlm_dynamics.models.huggingface import HEAD_ONLY_FAMILIES
from mlm_dynamics.probes.keys import PROBES, metric_key_page

ROOT = Path(__file__).resolve().parents[1]


def test_generated_pages_are_current():
    pages = runpy.run_path(str(ROOT / "docs" / "generate.py"))["PAGES"]
    for name, page in pages.items():
        assert (ROOT / "docs" / name).read_text() == page(), f"docs/{name} is stale: run python docs/generate.py"
    assert (ROOT / "docs" / "reference" / "metric-keys.md").read_text() == metric_key_page()
    assert set(pages) >= {"reference/metric-keys.md", "reference/config.md", "reference/cli.md"}


def test_docs_name_the_head_only_families_the_code_has():
    readme = (ROOT / "docs" / "how-to" / "huggingface.md").read_text()
    counts = {int(n) for n in re.findall(r"(\d+) families", readme)}
    assert counts == {len(HEAD_ONLY_FAMILIES)}
    listed = re.search(r"The head-only families: (.*?)\. ", readme.replace("\n", " ")).group(1)
    assert re.findall(r"`([\w-]+)`", listed) == list(HEAD_ONLY_FAMILIES)


def key_pattern(group: str, name: str) -> re.Pattern:
    """``group/{stage}/name`` with ``{...}`` placeholders as regular expressions."""
    parts = re.split(r"\{[a-z]+\}", name)
    body = r"[\w.-]+".join(re.escape(part) for part in parts)
    return re.compile(rf"{group}/(train|val|predict)/{body}")


def declared(key: str) -> bool:
    return any(key_pattern(probe.group, k.name).fullmatch(key) for probe in PROBES for k in probe.keys)


def test_every_logged_key_is_in_the_table_and_every_unconditional_key_is_logged(tmp_path):
    from test_callbacks import fit

    trainer, _, _ = fit(tmp_path, max_steps=4)
    groups = tuple(f"{probe.group}/" for probe in PROBES)
    logged = {key for key in trainer.callback_metrics if key.startswith(groups)}  # not the module's own loss
    undeclared = sorted(key for key in logged if not declared(key))
    assert not undeclared, undeclared
    for probe in PROBES:
        for key in probe.keys:
            if not key.when:  # logged at every run
                assert any(key_pattern(probe.group, key.name).fullmatch(k) for k in logged), (probe.group, key.name)


def test_readme_shows_the_default_run_table_the_results_page_renders():
    """One source for the default run's numbers: the README's table is the one rendered from docs/data."""
    table = (ROOT / "docs" / "results" / "default-run.md").read_text().split("\n\n")[1]
    assert table in (ROOT / "README.md").read_text()
