"""Result files: every job writes what its schema allows, readers refuse what it does not, and no command writes over
another job's results."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from helpers import SMALL_JOBS
from mlm_dynamics.cli import main
from mlm_dynamics.report.artifacts import SCHEMA_VERSION, WRITTEN, held_by
from mlm_dynamics.report.schema import SCHEMAS, read_report, validate_report


def _job(job: str, out: Path, *extra: str) -> int:
    preset, overrides = SMALL_JOBS[job]
    sets = [item for override in overrides for item in ("--set", override)]
    return main([job, "--config", preset, "--out", str(out), "--quiet", *sets, *extra])


@pytest.fixture(scope="module")
def outputs(tmp_path_factory):
    """A run, two sweeps, a rectangle table, the comparison of the sweeps and a history report, from the smallest
    presets."""
    from test_callbacks import fit

    out = tmp_path_factory.mktemp("outputs")
    for job in ("run", "sweep", "rectangle-table"):
        assert _job(job, out / job) == 0
    assert _job("sweep", out / "short-sweep", "--set", "grid.max_steps=10") == 0
    assert main(["compare", str(out / "sweep"), str(out / "short-sweep"), "--out", str(out / "compare")]) == 0
    fit(out / "fit", max_steps=4)
    assert main(["report", str(out / "fit" / "csv"), "--out", str(out / "history")]) == 0
    return out


@pytest.mark.parametrize(("folder", "file", "job"), [
    ("run", "report.json", "run"), ("sweep", "report.json", "sweep"), ("short-sweep", "report.json", "sweep"),
    ("rectangle-table", "report.json", "rectangle-table"), ("compare", "compare.json", "compare"),
    ("history", "history.json", "history")])
def test_what_each_job_writes_passes_its_schema_and_names_its_job(outputs, folder, file, job):
    path = outputs / folder / file
    written = json.loads(path.read_text())
    assert written["artifact"] == {"job": job, "version": SCHEMA_VERSION}
    validate_report(written, job)
    assert held_by(outputs / folder).job == job
    if job in ("run", "sweep"):  # read back: what was written, and every key the schema describes
        read, report = read_report(path, ("run", "sweep"))
        assert read == job and _holds(report, written)


def _holds(read, written) -> bool:
    """Whether ``read`` holds everything ``written`` does (and maybe more keys), recursively."""
    if isinstance(written, dict):
        return isinstance(read, dict) and all(key in read and _holds(read[key], value)
                                              for key, value in written.items())
    if isinstance(written, list):
        return isinstance(read, list) and len(read) == len(written) and all(map(_holds, read, written))
    return read == written


def test_the_schema_refuses_what_the_job_would_never_write(outputs):
    """The real run report, each relation broken once: the same checks a reader makes."""
    report = json.loads((outputs / "run" / "report.json").read_text())
    entry = report["mixing"]["by_temperature"][0]
    budget = entry["budget"]
    broken = [("meeting_times", [*entry["meeting_times"][:-1], budget + 1], "must be at most the budget"),
              ("meeting_time_median_lower_bound", budget * 10, "must be at most the budget"),
              ("tv_lower", 1.5, "tv_lower must be less than or equal to 1"),
              ("verdict", "stuck", "verdict must be 'slow', 'fast' or 'undecided'")]
    for key, value, said in broken:
        edited = json.loads(json.dumps(report))
        edited["mixing"]["by_temperature"][0][key] = value
        with pytest.raises(ValueError, match=said):
            validate_report(edited, "run")
    sweep = json.loads((outputs / "sweep" / "report.json").read_text())
    sweep["sweep"]["cells"][0]["draws"][0]["met_at"] = sweep["sweep"]["cells"][0]["budget"] + 1
    with pytest.raises(ValueError, match=r"met_at .* must be at most the budget"):
        validate_report(sweep, "sweep")
    unbounded = json.loads(json.dumps(report))  # every run writes its pairs' budget: without it no value is checked
    unbounded["mixing"]["by_temperature"][0].pop("budget")
    unbounded["mixing"]["by_temperature"][0]["meeting_time_median"] = 1e300
    with pytest.raises(ValueError, match=re.escape("mixing.by_temperature[0].budget is missing")):
        validate_report(unbounded, "run")
    for key, said in (("slow_up_to", "sweep.slow_region[0].slow_up_to is missing"),
                      ("budget", "sweep.cells[0].budget is missing")):  # what the comparison's figures index
        partial = json.loads((outputs / "sweep" / "report.json").read_text())
        (partial["sweep"]["slow_region"] if key == "slow_up_to" else partial["sweep"]["cells"])[0].pop(key)
        with pytest.raises(ValueError, match=re.escape(said)):
            validate_report(partial, "sweep")
    assert set(SCHEMAS) == {"run", "sweep", "parallel-decoding", "semantics", "rectangle-table", "compare", "history"}


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()
            and p.name != ".lock"}


def test_no_command_writes_over_another_jobs_results(outputs, tmp_path, capsys):
    """compare, report and the jobs pointed at a folder holding other results: refused in one line naming what it
    holds, before any work, the folder byte for byte as it was."""
    kept = {name: _files(outputs / name) for name in ("run", "sweep", "compare", "history")}
    refused = [
        (["compare", str(outputs / "sweep"), str(outputs / "short-sweep"), "--out", str(outputs / "run")],
         "holds the results of a run (report.json); a comparison never writes over"),
        (["compare", str(outputs / "sweep"), str(outputs / "short-sweep"), "--out", str(outputs / "sweep"),
          "--overwrite"], "holds the results of a sweep (report.json)"),
        (["report", str(outputs / "fit" / "csv"), "--out", str(outputs / "compare")],
         "holds the results of a comparison (compare.json)"),
        (["sweep", "--config", "sweep-ising", "--out", str(outputs / "run"), "--overwrite"],
         "holds the results of a run (report.json); a sweep never writes over"),
        (["run", "--config", "antiberty-default", "--out", str(outputs / "history")],
         "holds the results of a history report (history.json)"),
        # the same job again: refused unless asked to replace it
        (["compare", str(outputs / "sweep"), str(outputs / "short-sweep"), "--out", str(outputs / "compare")],
         "holds the results of a comparison (compare.json); add --overwrite to replace it, or choose another"),
        (["sweep", "--config", "sweep-ising", "--out", str(outputs / "sweep")],
         "add --overwrite to replace it, --resume to continue it, or choose another --out"),
    ]
    for argv, said in refused:
        assert main(argv) == 2, argv
        error = capsys.readouterr().err.strip()
        assert len(error.splitlines()) == 1 and said in error, error
    assert {name: _files(outputs / name) for name in kept} == kept
    # asked to: the comparison is replaced, and nothing else
    assert main(["compare", str(outputs / "short-sweep"), str(outputs / "sweep"), "--out", str(outputs / "compare"),
                 "--overwrite"]) == 0
    assert json.loads((outputs / "compare" / "compare.json").read_text())["runs"] == ["short-sweep", "sweep"]
    # an unfinished run (a checkpoint, no report) is kept too: --resume continues it, --overwrite starts again
    (tmp_path / "checkpoint.pt").write_bytes(b"a checkpoint")
    assert main(["run", "--config", "antiberty-default", "--out", str(tmp_path)]) == 2
    assert "holds an unfinished run (checkpoint.pt); add --resume to continue it" in capsys.readouterr().err


def test_overwrite_keeps_the_old_results_until_the_new_ones_are_whole(outputs, tmp_path, capsys):
    """`run --overwrite` refused after the output was claimed (a budget that runs out while the model loads) leaves
    every file of the finished run byte for byte, says so, and leaves no staging folder; `compare --overwrite` that
    fails on a run it cannot read keeps the old comparison; one that succeeds replaces it and keeps the user's own
    file in the folder. (Before, the marker was deleted first: a refusal lost the report.)"""
    import shutil

    run = tmp_path / "run"
    shutil.copytree(outputs / "run", run)
    before = _files(run)
    assert _job("run", run, "--overwrite", "--budget", "1e-9") == 2
    error = capsys.readouterr().err.strip()
    assert len(error.splitlines()) == 1 and "budget" in error and f"results already in --out {run} are kept" in error
    assert _files(run) == before and sorted(p.name for p in tmp_path.iterdir()) == ["run"]

    compare = tmp_path / "compare"
    shutil.copytree(outputs / "compare", compare)
    (compare / "notes.txt").write_text("my notes")
    kept = _files(compare)
    assert main(["compare", str(outputs / "sweep"), str(tmp_path / "missing"), "--out", str(compare),
                 "--overwrite"]) == 2
    assert "are kept as they were" in capsys.readouterr().err and _files(compare) == kept
    assert main(["compare", str(outputs / "short-sweep"), str(outputs / "sweep"), "--out", str(compare),
                 "--overwrite"]) == 0
    assert json.loads((compare / "compare.json").read_text())["runs"] == ["short-sweep", "sweep"]
    assert (compare / "notes.txt").read_text() == "my notes"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["compare", "run"]


def test_every_file_a_job_writes_is_known_and_protected(outputs, tmp_path, capsys):
    """What the jobs, compare and report write is in WRITTEN (so none of it is taken for the user's); a folder
    holding such files without their marker (a run whose report.json is gone), or the user's own files, is refused
    by every command, with --overwrite too, naming what it holds, byte for byte as it was. (Before, only the marker
    was protected: compare overwrote the run's report.html, a run the user's trajectory.csv.)"""
    import shutil

    for folder in (outputs / name for name in ("run", "sweep", "rectangle-table", "compare", "history")):
        assert {entry.name for entry in folder.iterdir()} - {".lock"} <= WRITTEN, folder.name
    orphan = tmp_path / "orphan"
    shutil.copytree(outputs / "run", orphan)
    (orphan / "report.json").unlink()
    (orphan / "checkpoint.pt").unlink()
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("my notes")
    (mine / "plot.png").write_bytes(b"my plot")
    kept = {folder: _files(folder) for folder in (orphan, mine)}
    sweeps = [str(outputs / "sweep"), str(outputs / "short-sweep")]
    cases = [(["compare", *sweeps, "--out", str(orphan)], f"--out {orphan} holds figures, report.html, semantics.bin, "
              "trajectory.csv but no finished results or checkpoint"),
             (["compare", *sweeps, "--out", str(orphan), "--overwrite"], "but no finished results or checkpoint"),
             (["report", str(outputs / "fit" / "csv"), "--out", str(mine)],
              f"--out {mine} holds files no mlm-dynamics command wrote (notes.txt, plot.png)"),
             (["run", "--config", "antiberty-default", "--out", str(orphan), "--overwrite"], "no finished results"),
             (["sweep", "--config", "sweep-ising", "--out", str(mine), "--overwrite"], "files no mlm-dynamics")]
    for argv, said in cases:
        assert main(argv) == 2, argv
        error = capsys.readouterr().err.strip()
        assert len(error.splitlines()) == 1 and said in error, error
    assert {folder: _files(folder) for folder in kept} == kept


def _compare_process(out: Path, outputs: Path, *, file_limit: int | None = None):
    """``mlm-dynamics compare`` of the two sweeps into ``out`` in a process of its own (with a file-size limit: a
    full disk, each write past it failing with EFBIG)."""
    import resource
    import signal
    import subprocess
    import sys

    def limit() -> None:
        if file_limit is not None:
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # the write fails instead of killing the process
            resource.setrlimit(resource.RLIMIT_FSIZE, (file_limit, file_limit))

    return subprocess.Popen([sys.executable, "-m", "mlm_dynamics.cli", "compare", str(outputs / "sweep"),
                             str(outputs / "short-sweep"), "--out", str(out)], stderr=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True, preexec_fn=limit)


def test_two_compares_into_one_folder_and_a_full_disk_never_leave_part_of_a_result(outputs, tmp_path):
    """Two `compare` into one new folder at once: one writes the whole comparison, the other is refused in one line
    (by the lock, or by the finished results); never a mixed folder. A full disk during `compare` (a file-size
    limit: the figures fail to write) is one line naming the folder, and leaves it empty, no staging folder beside
    it. (Before: both exited 0 into one folder; the full disk ended in a traceback with an empty figures/ left.)"""
    out = tmp_path / "both"
    first, second = _compare_process(out, outputs), _compare_process(out, outputs)
    ended = [(process.wait(timeout=300), process.stderr.read()) for process in (first, second)]  # type: ignore
    assert sorted(code for code, _ in ended) == [0, 2], ended
    refused = next(error for code, error in ended if code == 2).strip()
    assert len(refused.splitlines()) == 1 and ("is in use by" in refused or "holds the results" in refused)
    written = json.loads((out / "compare.json").read_text())
    assert written["runs"] == ["sweep", "short-sweep"] and (out / "report.html").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["both"]

    full = tmp_path / "full"
    process = _compare_process(full, outputs, file_limit=4096)
    code, error = process.wait(timeout=300), process.stderr.read().strip()  # type: ignore[union-attr]
    assert code == 2 and len(error.splitlines()) == 1, error
    assert "File too large writing" in error and f"nothing was written into --out {full}" in error, error
    assert [p.name for p in full.iterdir()] in ([], [".lock"])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["both", "full"]


def test_a_report_written_before_schema_versions_reads_as_version_zero(tmp_path):
    """The trimmed reports the docs ship carry no marker: they are read by their sections, and checked."""
    docs = Path(__file__).resolve().parents[1] / "docs" / "data"
    job, report = read_report(docs / "default-run.json", ("run", "sweep"))
    assert job == "run" and report["artifact"] is None and report["chains"]["start_sequences"] is None
    assert read_report(docs / "sweep-antiberty.json", ("run", "sweep"))[0] == "sweep"
    report["chains"]["num_chains"] = 0.5
    (tmp_path / "report.json").write_text(json.dumps(report))
    with pytest.raises(ValueError, match=r"chains.num_chains must be a valid integer.*before schema versions"):
        read_report(tmp_path / "report.json", ("run",))
