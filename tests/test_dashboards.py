"""Where users look: one fit logged to CSV, TensorBoard and offline W&B reads back as the same history in each
format; `mlm-dynamics report LOGDIR` renders it from each; the TensorBoard layout and the W&B metric definitions and
workspace name exactly the keys the callbacks log; MLflow gets the values and the figures."""

from __future__ import annotations

import json
import math
import re

import pytest

from mlm_dynamics.cli import main
from mlm_dynamics.integrations.wandb import panel_specs, workspace
from mlm_dynamics.report.logs import leveldb_records, read_logs, tfrecords
from test_callbacks import callbacks, fit

FORMATS = {"csv": "csv", "tensorboard": "tb", "wandb": "wandb"}


@pytest.fixture(scope="module")
def logged(tmp_path_factory):
    """One short fit with every callback (figures on) and three loggers."""
    folder = tmp_path_factory.mktemp("fit")
    chosen = callbacks()
    chosen[0].log_figures = chosen[1].log_figures = True
    fit(folder, max_steps=4, cbs=chosen)
    return folder


def test_the_three_formats_read_back_as_one_history(logged):
    runs = {name: read_logs(logged / folder) for name, folder in FORMATS.items()}
    assert {run.source for run in runs.values()} == set(FORMATS)
    reference = runs["csv"].scalars
    assert {"mixing/train/meeting_time_median_low", "mixing/val/censored_fraction", "rectangle/train/prevalence",
            "influence/train/dobrushin_tau1", "traps/val/trap_rate"} <= set(reference)
    assert [step for step, _ in reference["mixing/train/meeting_time_median_low"]] == [1, 3]  # Lightning's step index
    for name in ("tensorboard", "wandb"):
        assert set(runs[name].scalars) == set(reference), name
        for key, series in reference.items():
            other = runs[name].scalars[key]
            assert [s for s, _ in other] == [s for s, _ in series], (name, key)
            # TensorBoard stores float32: equal to the CSV's float64 within its rounding
            assert all(math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-9) for (_, a), (_, b) in zip(series, other,
                                                                                                   strict=True))
    assert any(tag.startswith("mixing/survival") for tag in runs["tensorboard"].images)
    assert any(tag.startswith("rectangle") for tag in runs["wandb"].images)


def test_the_draws_are_written_beside_each_log_and_read_back_with_it(logged):
    """Each logger's folder gets the runs' draws (a W&B run's in its files folder); each format reads back the same
    records: one per mixing run, at the steps of its values, a coupled pair whose chains agree at the end exactly
    when pair 0 met, and whose random filling y differs from the start row x only at resampled sites."""
    runs = {name: read_logs(logged / folder) for name, folder in FORMATS.items()}
    draws = runs["csv"].draws
    assert all(run.draws == draws for run in runs.values())
    assert any(file.endswith("mlm_dynamics-draws.jsonl") for file in runs["wandb"].files)
    steps = {key: [record["step"] for record in draws if record["key"] == key]
             for key in ("mixing/train", "mixing/val")}
    assert steps["mixing/train"] == [s for s, _ in runs["csv"].scalars["mixing/train/censored_fraction"]]
    assert steps["mixing/val"] == [s for s, _ in runs["csv"].scalars["mixing/val/censored_fraction"]]
    for record in draws:
        (pair,) = record["draws"]
        labels = list(pair)
        x, y = (pair[label].split(" ") for label in labels[:2])
        assert labels[:2] == ["x (start row) at step 0", "y (random filling) at step 0"] and len(x) == len(y)
        assert x[0] == y[0] and x[-1] == y[-1]  # the frame ([CLS] ... [SEP]) is never resampled
        met = labels[2].startswith("x = y")
        assert len(labels) == (3 if met else 4)
        if not met:
            assert pair[labels[2]] != pair[labels[3]]


@pytest.mark.parametrize("name", sorted(FORMATS))
def test_report_command_renders_the_history_from_each_format(logged, tmp_path, name, capsys):
    out = tmp_path / name
    assert main(["report", str(logged / FORMATS[name]), "--out", str(out)]) == 0
    history = json.loads((out / "history.json").read_text())
    headline = {row["metric"]: row for row in history["headline"]}
    assert headline["mixing/train/censored_fraction"]["runs"] == 2 and history["source"] == name
    assert set(history["environment"]) == {"mlm_dynamics", "date", "command"}  # what made the report
    page = (out / "report.html").read_text()
    assert "What the run found" in page and page.count("<img") >= 4  # a figure per section, and the logged ones
    assert ">Draws</h2>" in page and "x (start row) at step 0" in page
    assert "mixing/train/censored_fraction" in capsys.readouterr().out


def test_report_command_names_the_folder_it_cannot_read(tmp_path, capsys):
    assert main(["report", str(tmp_path)]) == 2
    assert "LOGDIR" in capsys.readouterr().err and str(tmp_path) in capsys.readouterr().err + str(tmp_path)


def test_tensorboard_layout_groups_every_logged_key(logged):
    from tensorboardX.proto.event_pb2 import Event
    from tensorboardX.proto.layout_pb2 import Layout

    events = [Event.FromString(r) for path in (logged / "tb").rglob("events.out.*") for r in tfrecords(path)]
    layouts = [Layout.FromString(v.tensor.string_val[0]) for e in events for v in e.summary.value
               if v.tag == "custom_scalars__config__"]
    assert len(layouts) == 1  # written once, by the first callback, for all of them
    categories = {c.title: [tag for chart in c.chart for tag in chart.multiline.tag] for c in layouts[0].category}
    assert set(categories) == {"Mixing: coupled chains", "Incompatibility: rectangle test",
                               "Influence: Dobrushin estimates", "Semantic drift", "Traps and basins",
                               "Parallel decoding: K positions at once"}
    logged_keys = set(read_logs(logged / "tb").scalars)
    patterns = [re.compile(tag) for tags in categories.values() for tag in tags]
    assert all(any(p.fullmatch(key) for p in patterns) for key in logged_keys)  # every key has a chart


def test_wandb_workspace_and_metric_definitions_match_the_logged_keys(logged):
    logged_keys = set(read_logs(logged / "wandb").scalars)
    specs = panel_specs()
    for title, panels in specs.items():
        for panel in panels:
            if "y" in panel:  # no panel waits for keys never logged (a censored median: its lower bound is)
                assert set(panel["y"]) & logged_keys, (title, panel)
            else:
                assert any(re.fullmatch(panel["metric_regex"], key) for key in logged_keys), (title, panel)
    built = workspace("entity", "project")  # offline: built, not saved
    assert [section.name for section in built.sections] == list(specs)
    assert sum(len(section.panels) for section in built.sections) == sum(map(len, specs.values()))
    from wandb.proto.wandb_internal_pb2 import Record

    run_file = next((logged / "wandb").rglob("*.wandb"))
    metrics = [Record.FromString(r).metric for r in leveldb_records(run_file)
               if Record.FromString(r).WhichOneof("record_type") == "metric"]
    defined = {m.glob_name: m.step_metric for m in metrics if m.glob_name}
    assert {f"{group}/*" for group in ("mixing", "rectangle", "influence", "drift", "traps")} <= set(defined)
    assert {defined[f"{group}/*"] for group in ("mixing", "traps")} == {"trainer/global_step"}


def test_mlflow_gets_every_value_and_the_figures_as_artifacts(tmp_path, monkeypatch):
    pytest.importorskip("mlflow")
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # a local file store, as the issue asks (MLflow 3 warns)
    import lightning as L
    from lightning.pytorch.loggers import MLFlowLogger
    from torch.utils.data import DataLoader

    from helpers import potts_corpus
    from mlm_dynamics.callbacks import MixingDiagnostics
    from mlm_dynamics.training.masked_lm import MaskedDenoiserModule, tiny_bert_denoiser

    logger = MLFlowLogger(experiment_name="diagnostics", tracking_uri=f"file:{tmp_path / 'mlruns'}")
    data = potts_corpus()
    trainer = L.Trainer(max_steps=4, logger=logger, accelerator="cpu", enable_progress_bar=False,
                        enable_model_summary=False, limit_val_batches=1, val_check_interval=4, num_sanity_val_steps=0,
                        callbacks=[MixingDiagnostics(every_n_train_steps=2, max_steps=15, num_starts=3, overhead=None,
                                                     log_figures=True)], default_root_dir=tmp_path)
    trainer.fit(MaskedDenoiserModule(tiny_bert_denoiser(), lr=3e-3), DataLoader(data, batch_size=8),
                DataLoader(data[:8], batch_size=8))
    client = logger.experiment
    history = client.get_metric_history(logger.run_id, "mixing/train/meeting_time_median_low")
    assert [point.step for point in history] == [1, 3]
    assert client.get_metric_history(logger.run_id, "mixing/val/censored_fraction")
    artifacts = [item.path for item in client.list_artifacts(logger.run_id, "mixing")]  # folders by tag
    assert any(path.startswith("mixing/survival") and path.endswith(".png") for path in artifacts), artifacts


def copy_of(logged, tmp_path, folder):
    import shutil

    target = tmp_path / folder
    shutil.copytree(logged / folder, target, symlinks=True)  # W&B's latest-run link stays a link
    return target


def only(folder, pattern):
    (found,) = list(folder.rglob(pattern))
    return found


def test_a_flipped_bit_in_an_event_file_is_refused_and_a_cut_last_record_is_read_past_and_said(logged, tmp_path):
    folder = copy_of(logged, tmp_path, "tb")
    events = only(folder, "events.out.tfevents.*")
    data = bytearray(events.read_bytes())
    good = read_logs(folder)
    events.write_bytes(bytes(data[:-5]))  # the writer killed inside its last record
    cut = read_logs(folder)
    assert cut.notes and "cut short" in cut.notes[0] and set(cut.scalars) <= set(good.scalars)
    middle = len(data) // 2
    data[middle] ^= 0x04  # one bit: without the checksum a value could silently change (9.0 read as 2.25)
    events.write_bytes(bytes(data))
    with pytest.raises(ValueError, match=r"events\.out\.tfevents.*record at byte \d+: its (data|length) fail"):
        read_logs(folder)
    events.write_bytes(bytes(range(256)) * 8)  # not an event file at all
    with pytest.raises(ValueError, match="fails the checksum"):
        read_logs(folder)
    events.write_bytes(b"")
    with pytest.raises(ValueError, match=r"no diagnostics keys found in .*events\.out\.tfevents"):
        read_logs(folder)


def test_a_damaged_wandb_file_is_refused(logged, tmp_path):
    folder = copy_of(logged, tmp_path, "wandb")
    run_file = only(folder, "*.wandb")
    data = run_file.read_bytes()
    assert leveldb_records(run_file)  # the real file passes every chunk checksum
    run_file.write_bytes(data[:7] + bytes(reversed(data[7:200])) + data[200:])  # garbage after the header
    with pytest.raises(ValueError, match=r"\.wandb: chunk at byte 7 fails its checksum"):
        read_logs(folder)
    flipped = bytearray(data)
    flipped[len(data) // 2] ^= 0x01
    run_file.write_bytes(bytes(flipped))
    with pytest.raises(ValueError, match="fails its checksum"):
        read_logs(folder)


@pytest.mark.parametrize(("damage", "message"), [
    (lambda text: text[:text.rindex(".") + 2], r"metrics\.csv, line \d+: the file ends inside a line"),
    (lambda text: _garble_cell(text), r"line 2: column .* holds '0.6x25', not a number"),
    (lambda text: "", r"metrics\.csv, line 1: not a metrics log"),
    (lambda text: text[:5], r"line 1: the file ends inside a line"),
])
def test_a_damaged_csv_is_refused_naming_file_and_line(logged, tmp_path, damage, message):
    folder = copy_of(logged, tmp_path, "csv")
    path = only(folder, "metrics.csv")
    path.write_text(damage(path.read_text()))
    with pytest.raises(ValueError, match=message):
        read_logs(folder)


@pytest.mark.parametrize(("damage", "message"), [
    (lambda data: b"\x00\xff\x13" + data, r"metrics\.csv: damaged, not a text metrics log \(byte 1 is not UTF-8\)"),
    (lambda data: data.replace(b"\n", b"\n\x00", 2), r"metrics\.csv, line 2: damaged, a NUL byte"),
])
def test_a_binary_csv_is_named_as_damaged(logged, tmp_path, damage, message):
    folder = copy_of(logged, tmp_path, "csv")
    path = only(folder, "metrics.csv")
    path.write_bytes(damage(path.read_bytes()))
    with pytest.raises(ValueError, match=message):
        read_logs(folder)


def _garble_cell(text: str) -> str:
    """The first non-empty numeric cell of the first data row replaced by text."""
    header, first, *rest = text.split("\n")
    cells = first.split(",")
    index = next(i for i, cell in enumerate(cells) if cell and i != header.split(",").index("step"))
    cells[index] = "0.6x25"
    return "\n".join([header, ",".join(cells), *rest])


def test_several_runs_in_a_folder_are_named_and_read_one_at_a_time(logged, tmp_path, capsys):
    import shutil

    folder = copy_of(logged, tmp_path, "csv")
    (first,) = [p for p in folder.iterdir() if p.is_dir()]
    shutil.copytree(first, folder / "version_7")
    with pytest.raises(ValueError, match=r"holds 2 runs \(version_0, version_7\); name one with --run NAME"):
        read_logs(folder)
    run = read_logs(folder, run="version_7")
    assert run.name == "version_7" and run.files == [str(folder / "version_7" / name)
                                                      for name in ("metrics.csv", "mlm_dynamics-draws.jsonl")]
    with pytest.raises(ValueError, match="--run: 'version_9' names no run"):
        read_logs(folder, run="version_9")
    assert main(["report", str(folder), "--run", "version_0", "--out", str(tmp_path / "out")]) == 0
    assert f"read: run version_0 (csv): {folder / 'version_0' / 'metrics.csv'}" in capsys.readouterr().out
    assert main(["report", str(folder), "--out", str(tmp_path / "out2")]) == 2
    assert "--run NAME" in capsys.readouterr().err


def test_several_runs_are_overlaid_on_one_page(logged, tmp_path, capsys):
    """``--run A --run B``: every series of both runs drawn with its own data, one colour per run, labelled with
    its run; history.json holds both reports; a run that is not there is named before anything is written."""
    import shutil

    from mlm_dynamics.report.history_report import history_figures

    folder = copy_of(logged, tmp_path, "csv")
    (first,) = [p for p in folder.iterdir() if p.is_dir()]
    shutil.copytree(first, folder / "version_7")
    metrics = folder / "version_7" / "metrics.csv"  # the second run's rectangle prevalence halved: a different run
    header, *rows = metrics.read_text().splitlines()
    column = header.split(",").index("rectangle/train/prevalence")
    halved = [",".join(f"{float(c) / 2:g}" if i == column and c else c for i, c in enumerate(row.split(",")))
              for row in rows]
    metrics.write_text("\n".join([header, *halved]) + "\n")
    runs = [read_logs(folder, run=name) for name in ("version_0", "version_7")]
    lines = [line for figure in history_figures(runs).values() for axes in figure.axes for line in axes.get_lines()]
    for index, run in enumerate(runs):
        for key, series in run.scalars.items():
            drawn = [line for line in lines if line.get_label().split(" (")[0] == f"{run.name}: {key}"]
            if key.startswith(("mixing/", "rectangle/", "influence/", "drift/", "traps/")) and drawn:
                (line,) = drawn
                assert list(line.get_ydata()) == [value for _, value in series] and line.get_color() == f"C{index}"
    prevalence = [line for line in lines if line.get_label().endswith(": rectangle/train/prevalence")]
    assert len(prevalence) == 2 and list(prevalence[1].get_ydata()) == [v / 2 for v in prevalence[0].get_ydata()]
    out = tmp_path / "both"
    assert main(["report", str(folder), "--run", "version_0", "--run", "version_7", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "read: run version_0" in printed and "read: run version_7" in printed
    history = json.loads((out / "history.json").read_text())
    assert [report["run"] for report in history["runs"]] == ["version_0", "version_7"]
    assert "What the runs found" in (out / "report.html").read_text()
    assert main(["report", str(folder), "--run", "version_0", "--run", "version_9", "--out", str(tmp_path / "no")]) == 2
    assert "'version_9' names no run" in capsys.readouterr().err and not (tmp_path / "no").exists()
