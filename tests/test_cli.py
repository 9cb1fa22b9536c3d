import json
import re

import pytest

from mlm_dynamics.cli import main
from mlm_dynamics.experiments.config import ConfigError, RunConfig, load_config
from mlm_dynamics.models.pretrained import EXAMPLE_ANTIBODIES


def test_main_job_writes_a_complete_report(tmp_path, capsys):
    pytest.importorskip("antiberty")
    out = tmp_path / "run"
    code = main(["run", "--config", "antiberty-default", "--out", str(out),
                 "--set", "model.num_layers=1", "--set", "chains.num_chains=2",
                 "--set", "temperatures=[1.0, 2.0]", "--set", "run.num_steps=6",
                 "--set", "run.record_every=3", "--set", "coupling.num_pairs=2", "--set", "coupling.max_steps=4",
                 "--set", "coupling.looks=[]", "--set", "coupling.max_rows=null",
                 "--set", "rectangle.pairs_per_context=1", "--set", "rectangle.num_tokens=2",
                 "--set", "influence.max_sites=3",
                 "--set", "chains.crop=16"])
    assert code == 0
    report = json.loads((out / "report.json").read_text())
    chains = report["chains"]
    assert chains["num_chains"] == 2 and chains["num_sites"] == 16 and chains["num_steps"] == 6
    assert 0 <= chains["hamming_to_start_mean"] <= 6
    assert sum(chains["site_change_counts"]) <= 12
    # Cropped to 16 residues each side of the window [93, 109) of the 122-residue chain (13 remain after it); only
    # the window may change.
    natural = EXAMPLE_ANTIBODIES[0]
    assert report["config"]["chains"]["crop"] == 16 and "chains.crop = 16" in report["notes"][0]
    for sequence in chains["final_sequences"]:
        assert len(sequence) == 45 and sequence[:16] == natural[77:93] and sequence[32:] == natural[109:]
    ladder = report["mixing"]["by_temperature"]
    assert [t["temperature"] for t in ladder] == [1.0, 2.0] and [len(t["meeting_times"]) for t in ladder] == [2] * 2
    assert report["influence"]["temperatures"] == [1.0, 2.0]  # the one ladder
    assert report["rectangle"]["num_rectangles"] == 2
    assert set(report["margins"]) == {"start", "final"}
    assert "dobrushin_tau1" in report["influence"] and report["influence"]["sites"] == [17, 18, 19]
    lines = (out / "trajectory.csv").read_text().splitlines()
    assert lines[0] == "step,chain,hamming_to_start,sequence" and len(lines) == 1 + 2 * 2
    # The draws: per temperature one chain at the start, the middle (the record at step 3) and the end, changed
    # residues marked against the start; the trace figure beside them.
    page = (out / "report.html").read_text()
    assert ">Draws</h2>" in page and ">Traces</h2>" in page and (out / "figures" / "traces.png").exists()
    draws = re.findall(r'<td class="draw">(.*?)</td>', page)
    assert len(draws) == 2 * 3
    for chain, shown in enumerate([draws[:3], draws[3:]]):
        assert shown[0] == report["chains"]["start_sequences"][chain]  # nothing marked at the start
        assert re.sub("</?mark>", "", shown[2]) == report["chains"]["final_sequences"][chain]
    assert "rectangle test" in capsys.readouterr().out


@pytest.mark.parametrize(("override", "message"), [
    ("temperatures=[0]", "temperatures must be a non-empty list of finite numbers > 0"),
    ("sampler.bogus=1", "sampler.bogus"),
    ("chains.window=[5, 500]", "chains.window"),
    ("model.source=nowhere", "model.source"),
])
def test_bad_configuration_exits_with_a_clear_message(tmp_path, capsys, override, message):
    pytest.importorskip("antiberty")
    assert main(["run", "--out", str(tmp_path), "--set", override, "--set", "model.num_layers=1"]) == 2
    assert message in capsys.readouterr().err


QUICK = ["--set", "model.num_layers=1", "--set", "chains.num_chains=2",
         "--set", "temperatures=[1.0, 2.0]", "--set", "run.record_every=2",
         "--set", "coupling.enabled=false", "--set", "rectangle.enabled=false", "--set", "margins.enabled=false",
         "--set", "run.checkpoint_every=2"]


@pytest.mark.slow
def test_interrupted_run_resumes_bit_identically(tmp_path):
    pytest.importorskip("antiberty")
    whole, split = tmp_path / "whole", tmp_path / "split"
    assert main(["run", "--out", str(whole), "--set", "run.num_steps=6", *QUICK]) == 0
    assert main(["run", "--out", str(split), "--set", "run.num_steps=2", *QUICK]) == 0
    assert main(["run", "--out", str(split), "--set", "run.num_steps=6", "--resume", *QUICK]) == 0
    reports = [json.loads((d / "report.json").read_text())["chains"] for d in (whole, split)]
    for key in ("final_sequences", "site_change_counts", "change_rate", "hamming_to_start_mean"):
        assert reports[0][key] == reports[1][key]
    assert (whole / "trajectory.csv").read_text() == (split / "trajectory.csv").read_text()
    assert main(["run", "--out", str(split), "--set", "run.num_steps=6", "--resume", *QUICK,
                 "--set", "temperatures=[2.0, 4.0]"]) == 2


def test_config_paths_resolve_against_the_config_file(tmp_path, monkeypatch):
    """A config and its data files travel together: ``topics: mine.yaml`` names the file beside the config, from any
    working directory; a packaged set resolves by name; a missing file is an error naming the key."""
    from mlm_dynamics.experiments.semantics import CaseStudyConfig

    folder = tmp_path / "study"
    folder.mkdir()
    (folder / "mine.yaml").write_text("topics:\n  sea: [The ship sailed across the stormy sea.]\n")
    (folder / "study.yaml").write_text("topics: mine.yaml\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    config = load_config(CaseStudyConfig, folder / "study.yaml")
    assert config.topics == str(folder / "mine.yaml")
    assert load_config(CaseStudyConfig, None, ["topics=politics"]).topics == "politics"
    with pytest.raises(ConfigError, match="topics must be a YAML file of topic anchors or a packaged set"):
        load_config(CaseStudyConfig, None, ["topics=nowhere.yaml"])


@pytest.mark.parametrize("name", ["sweep-ising", "sweep-ising.yaml"])
def test_presets_load_by_name_from_any_directory(tmp_path, monkeypatch, name):
    monkeypatch.chdir(tmp_path)
    from mlm_dynamics.experiments.config import SweepConfig

    assert load_config(SweepConfig, name).model.source == "ising"
    with pytest.raises(ConfigError, match="preset 'sweep-ising' is for `mlm-dynamics sweep`, not `run`"):
        load_config(RunConfig, name)


@pytest.mark.slow
def test_run_interrupted_after_the_witness_step_resumes_to_the_same_both_sides(tmp_path, monkeypatch):
    """A sequential run (rounds after the witness step at 10) interrupted at step 13 and resumed equals the run that
    was never stopped, every temperature's pairs, looks and verdicts included."""
    pytest.importorskip("antiberty")
    from mlm_dynamics.experiments.run import run_chains
    from mlm_dynamics.report.run_report import run_report
    from mlm_dynamics.sampling.coupling import CoupledGlauberChains

    config = load_config(RunConfig, "antiberty-default", [
        "model.num_layers=1", "chains.num_chains=2", "temperatures=[1.0, 2.0]", "run.num_steps=30",
        "coupling.num_pairs=11", "coupling.looks=[14, 18]", "coupling.max_steps=30", "coupling.witness_steps=10",
        "coupling.max_rows=null", "rectangle.enabled=false", "margins.enabled=false", "influence.enabled=false",
        "semantics.enabled=false", "run.checkpoint_every=2"])
    whole = run_report(run_chains(config, tmp_path / "whole"))["mixing"]["by_temperature"]
    step = CoupledGlauberChains.step_record

    def interrupted(self, state):
        if state.x.step == 13:
            raise KeyboardInterrupt
        return step(self, state)

    (tmp_path / "split").mkdir()
    with monkeypatch.context() as patch:
        patch.setattr(CoupledGlauberChains, "step_record", interrupted)
        assert run_chains(config, tmp_path / "split").stopped.startswith("interrupted")
    split = run_report(run_chains(config, tmp_path / "split", resume=True))["mixing"]["by_temperature"]
    assert whole == split
    assert all(row["pairs"] in (11, 14, 18) and "verdict" in row for row in whole)


