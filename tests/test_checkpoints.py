import io
import json
import os
import shlex
import subprocess
import sys
import textwrap

import pytest
import torch

from mlm_dynamics.cli import main
from mlm_dynamics.experiments import CheckpointError, OutputLock, load_checkpoint, save_checkpoint
from mlm_dynamics.experiments.checkpoint import MAGIC, _digest, fingerprint
from mlm_dynamics.models import PairwiseMRFDenoiser
from mlm_dynamics.sampling import ChainState, CoupledGlauberChains, GlauberSampler

QUICK = ["--set", "model.num_layers=1", "--set", "chains.num_chains=2",
         "--set", "temperatures=[1.0, 2.0]", "--set", "run.record_every=2",
         "--set", "coupling.enabled=false", "--set", "rectangle.enabled=false", "--set", "margins.enabled=false",
         "--set", "influence.enabled=false", "--set", "chains.window=[90, 100]"]


def chains_section(out):
    report = json.loads((out / "report.json").read_text())["chains"]
    return {k: report[k] for k in ("final_sequences", "site_change_counts", "change_rate", "hamming_to_start_mean")}


def test_a_kill_during_a_checkpoint_write_keeps_the_last_good_checkpoint(tmp_path):
    pytest.importorskip("antiberty")
    whole, killed = tmp_path / "whole", tmp_path / "killed"
    assert main(["run", "--out", str(whole), "--set", "run.num_steps=6", *QUICK]) == 0
    # a child process writes checkpoints at steps 2 and 4 through the real writer; it is SIGKILLed inside the second
    # write, after the data went to the temporary file and before the rename
    child = textwrap.dedent(f"""
        import os, signal
        from mlm_dynamics.cli import main
        real_fsync, calls = os.fsync, []

        def dying_fsync(descriptor):
            if ".checkpoint.pt." in os.readlink(f"/proc/self/fd/{{descriptor}}"):  # a checkpoint's temporary file
                calls.append(descriptor)
                if len(calls) == 2:  # the second checkpoint, written but not yet renamed into place
                    os.kill(os.getpid(), signal.SIGKILL)
            real_fsync(descriptor)

        os.fsync = dying_fsync
        main(["run", "--out", {str(killed)!r}, "--set", "run.num_steps=6", "--set", "run.checkpoint_every=2",
              *{QUICK!r}])
    """)
    done = subprocess.run([sys.executable, "-c", child], capture_output=True, timeout=300,
                          env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert done.returncode == -9  # killed, mid-write
    _, step = load_checkpoint(killed / "checkpoint.pt", fingerprints=_fingerprints_of(killed))
    assert step == 2  # the previous good checkpoint survived the interrupted write
    assert list(killed.glob(".checkpoint.pt.*.tmp"))  # the torn temporary file is all the kill left behind
    assert main(["run", "--out", str(killed), "--set", "run.num_steps=6", "--set", "run.checkpoint_every=2",
                 "--resume", *QUICK]) == 0
    assert chains_section(killed) == chains_section(whole)
    assert (killed / "trajectory.csv").read_text() == (whole / "trajectory.csv").read_text()


def _fingerprints_of(out):
    header = (out / "checkpoint.pt").read_bytes()[len(MAGIC):].partition(b"\n")[0]
    return json.loads(header)["fingerprint"]


def test_resuming_to_a_larger_budget_records_each_step_once_and_matches_one_run(tmp_path):
    pytest.importorskip("antiberty")
    whole, split = tmp_path / "whole", tmp_path / "split"
    assert main(["run", "--out", str(whole), "--set", "run.num_steps=6", *QUICK]) == 0
    # 3 steps end off the recording grid (every 2): the final row at step 3 must not survive the resume
    assert main(["run", "--out", str(split), "--set", "run.num_steps=3", "--set", "run.checkpoint_every=3",
                 *QUICK]) == 0
    assert main(["run", "--out", str(split), "--set", "run.num_steps=6", "--set", "run.checkpoint_every=3",
                 "--resume", *QUICK]) == 0
    assert (split / "trajectory.csv").read_text() == (whole / "trajectory.csv").read_text()
    assert chains_section(split) == chains_section(whole)


def test_corruption_foreign_runs_and_pickled_code_are_refused(tmp_path):
    path = tmp_path / "checkpoint.pt"
    prints = {"config": fingerprint({"a": 1}), "start_state": fingerprint([torch.arange(3)])}
    save_checkpoint(path, {"tokens": torch.arange(100)}, fingerprints=prints, step=7)
    payload, step = load_checkpoint(path, fingerprints=prints)
    assert step == 7 and torch.equal(payload["tokens"], torch.arange(100))
    raw = bytearray(path.read_bytes())
    raw[-40] ^= 0x01  # one bit of the saved tokens
    path.write_bytes(bytes(raw))
    with pytest.raises(CheckpointError, match="corrupted"):
        load_checkpoint(path, fingerprints=prints)
    save_checkpoint(path, {"tokens": torch.arange(100)}, fingerprints=prints, step=7)
    edited = path.read_bytes().replace(b'"step": 7', b'"step": 5')  # the loop counter a resume continues from
    assert edited != path.read_bytes()
    path.write_bytes(edited)
    with pytest.raises(CheckpointError, match="corrupted: its header and content"):
        load_checkpoint(path, fingerprints=prints)
    path.write_bytes(b"MLMDYN-CHECKPOINT 1\n" + edited[len(MAGIC):])
    with pytest.raises(CheckpointError, match="format 1"):
        load_checkpoint(path, fingerprints=prints)
    path.write_bytes(b"MLMDYN-CHECKPOINT 3\n" + edited[len(MAGIC):])  # a newer version's: named as such
    with pytest.raises(CheckpointError, match="is of format 3, written by a newer mlm_dynamics; this one resumes "
                                              "format 2: upgrade"):
        load_checkpoint(path, fingerprints=prints)
    path.write_bytes(b"PK\x03\x04 a zip file")
    with pytest.raises(CheckpointError, match=r"not an mlm_dynamics checkpoint .* another program's file"):
        load_checkpoint(path, fingerprints=prints)
    save_checkpoint(path, {"tokens": torch.arange(100)}, fingerprints=prints, step=7)
    with pytest.raises(CheckpointError, match="start_state"):
        load_checkpoint(path, fingerprints={**prints, "start_state": fingerprint([torch.arange(4)])})
    # a well-formed file whose payload carries a pickled callable: refused, never unpickled into code
    buffer = io.BytesIO()
    torch.save({"hook": os.system}, buffer)
    data = buffer.getvalue()
    header = json.dumps({"sha256": _digest(prints, 1, data), "fingerprint": prints, "step": 1})
    path.write_bytes(MAGIC + header.encode() + b"\n" + data)
    with pytest.raises(CheckpointError, match="could run code"):
        load_checkpoint(path, fingerprints=prints)


def test_a_second_run_into_the_same_out_is_refused(tmp_path, capsys):
    with OutputLock(tmp_path):
        assert main(["run", "--out", str(tmp_path), "--set", "run.num_steps=1"]) == 2
    assert f"in use by pid {os.getpid()}" in capsys.readouterr().err


def test_sigint_says_where_the_last_checkpoint_is(tmp_path, capsys, monkeypatch):
    pytest.importorskip("antiberty")
    real_step = CoupledGlauberChains.step_record

    def interrupted_at_three(self, state):
        if state.x.step == 3:
            raise KeyboardInterrupt
        return real_step(self, state)

    monkeypatch.setattr(CoupledGlauberChains, "step_record", interrupted_at_three)
    arguments = ["run", "--out", str(tmp_path), "--set", "run.num_steps=6", "--set", "run.checkpoint_every=2", *QUICK]
    assert main(arguments) == 130
    error = capsys.readouterr().err
    assert "interrupted at step 3" in error and "step 2" in error
    assert f"continue with: {shlex.join(['mlm-dynamics', *arguments, '--resume'])}" in error
    assert len(error.strip().splitlines()) == 1


@pytest.mark.parametrize("phase", ["loading the model", "after the last step"])
def test_an_interrupt_outside_the_stepping_loop_prints_one_line(tmp_path, capsys, monkeypatch, phase):
    """Ctrl-C while the model loads (nothing saved yet) or while the coupling, rectangle and report run after the
    chains (the final checkpoint exists): one line, exit 130, and the printed command resumes."""
    pytest.importorskip("antiberty")
    import mlm_dynamics.experiments.run as job

    def interrupt(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(job, "build_model" if phase == "loading the model" else "run_claims", interrupt)
    arguments = ["run", "--out", str(tmp_path), "--set", "run.num_steps=4", "--set", "run.checkpoint_every=2", *QUICK]
    assert main(arguments) == 130
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    if phase == "loading the model":
        assert "nothing was saved" in lines[0]
        return
    assert "last checkpoint at step 4" in lines[0]
    command = shlex.split(lines[0].split("continue with: ")[1])
    monkeypatch.undo()
    assert main(command[1:]) == 0  # the printed command finishes the job


def test_sigterm_ends_a_sweep_with_one_line(tmp_path):
    import signal
    import time

    out = tmp_path / "out"
    process = subprocess.Popen([sys.executable, "-m", "mlm_dynamics.cli", "sweep", "--out", str(out), "--quiet",
                                "--set", "grid.max_steps=500000", "--set", "grid.temperatures=[0.2]",
                                "--set", "grid.lengths=[24]", "--set", "checkpoint_every=200",
                                "--set", "drift.enabled=false"], stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not (out / "sweep-checkpoint.pt").exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    process.send_signal(signal.SIGTERM)
    _, error = process.communicate(timeout=60)
    lines = error.strip().splitlines()
    assert process.returncode == 130 and len(lines) == 1, lines
    assert "interrupted at step" in lines[0] and "continue with:" in lines[0] and "--resume" in lines[0]


def test_chains_saved_on_another_device_type_resume_with_a_reseeded_stream():
    model = PairwiseMRFDenoiser.random(4, 3, generator=1)
    sampler = GlauberSampler(model, 1.0)
    state = sampler.init_state(torch.zeros(2, 4, dtype=torch.long), generator=0)
    saved = {**state.state_dict(), "rng_device": "cuda", "rng": torch.zeros(16, dtype=torch.uint8)}
    with pytest.warns(UserWarning, match="re-seeded"):
        first = ChainState.from_state_dict(saved, "cpu")
    with pytest.warns(UserWarning, match="re-seeded"):
        second = ChainState.from_state_dict(saved, "cpu")
    draws = [torch.rand(5, generator=s.generator) for s in (first, second)]
    assert torch.equal(*draws)  # deterministic, so a resumed run is reproducible on the new device
