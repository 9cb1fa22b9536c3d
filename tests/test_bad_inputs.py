"""The one table of bad inputs: each ends in one line naming the parameter or file and what was expected (exit 2),
never a traceback, never a silent acceptance.

``CLI_CASES`` run the command line in-process: an uncaught exception would fail the test, and stderr must be exactly
one ``mlm-dynamics: error:`` line (argparse errors: its usage, then one error line). ``LIBRARY_CASES`` call the
library: the error must be of the named type and name the parameter. Add new cases to the tables.
"""

import json
import math
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from mlm_dynamics import (
    FullSequenceDenoiser,
    GlauberSampler,
    PairwiseMRFDenoiser,
    VocabInfo,
    estimate_influence,
    local_margins,
)
from mlm_dynamics.callbacks import InfluenceProbe, MixingDiagnostics, RectangleTest, SemanticDrift, TrapDetector
from mlm_dynamics.cli import main
from mlm_dynamics.embedders import ModuleOutputEmbedder
from mlm_dynamics.experiments.checkpoint import MAGIC, _digest
from mlm_dynamics.integrations.wandb import workspace
from mlm_dynamics.probes import RectangleProbe, ScheduledProbe
from mlm_dynamics.probes.starts import batch_rows
from mlm_dynamics.sampling import ChainState, ReplicaExchange, check_temperature, maximal_coupling, tempered_log_probs

QUICK = ["--set", "model.num_layers=1", "--set", "chains.num_chains=2", "--set", "temperatures=[1.0, 2.0]",
         "--set", "run.num_steps=2", "--set", "coupling.enabled=false", "--set", "rectangle.enabled=false",
         "--set", "margins.enabled=false", "--set", "influence.enabled=false"]
TOY_SWEEP = ["--set", "grid.temperatures=[1.0]", "--set", "grid.lengths=[3]", "--set", "grid.pairs=2",
             "--set", "grid.max_steps=20", "--set", "checkpoint_every=5", "--quiet"]
ANTIBERTY_SWEEP = ["--set", "model.source=antiberty", "--set", "model.num_layers=1", "--set", "grid.pairs=1",
                   "--set", "grid.max_steps=1", "--set", "drift.enabled=false", "--set", "influence.enabled=false",
                   "--set", "rectangle.enabled=false", "--quiet"]


def tiny_bert_dir(root: Path) -> Path:
    """A small BERT masked LM with its tokenizer, saved as a Hugging Face directory."""
    from transformers import BertConfig, BertForMaskedLM, BertTokenizer

    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *[f"w{i}" for i in range(27)]]
    path = root / "tiny-bert"
    with torch.random.fork_rng():
        torch.manual_seed(0)
        BertForMaskedLM(BertConfig(vocab_size=32, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                   intermediate_size=32)).save_pretrained(path)
    BertTokenizer(vocab={w: i for i, w in enumerate(words)}, do_lower_case=False).save_pretrained(path)
    return path


def model_dir(kind: str) -> Callable[[Path], list[str]]:
    """``run`` on a model directory broken in one way."""
    def setup(root: Path) -> list[str]:
        path = tiny_bert_dir(root)
        weights = path / "model.safetensors"
        if kind == "empty":
            shutil.rmtree(path)
            path.mkdir()
        elif kind == "unknown type":
            config = json.loads((path / "config.json").read_text())
            (path / "config.json").write_text(json.dumps({**config, "model_type": "no-such-family"}))
        elif kind == "truncated":
            weights.write_bytes(weights.read_bytes()[:100])
        elif kind == "huge header":
            weights.write_bytes((2**40).to_bytes(8, "little") + b"{}")
        elif kind == "pickled":
            weights.unlink()
            torch.save({"hook": print}, path / "pytorch_model.bin")
        return ["--set", "model.source=huggingface", "--set", f"model.name_or_path={path}",
                "--set", "chains.sequences=[w1 w2 w3]", "--set", "semantics.enabled=false", *QUICK[2:]]
    return setup


COUNTERS = {"NaN change counter": ("changed_steps", math.nan), "changes beyond the steps": ("changes", 10 ** 6),
            "positive log-probability sum": ("log_prob_sum", 3.0), "negative byte count": ("trajectory_bytes", -5)}


def checkpoint_with(payload_change: str, job: str) -> Callable[[Path], list[str]]:
    """A real checkpoint of ``job`` in OUT, then resealed by hand (valid magic, hash and fingerprints) with another
    payload layout; the command resumes from it."""
    def setup(root: Path) -> list[str]:
        arguments = ["run", *QUICK] if job == "run" else ["sweep", *TOY_SWEEP]
        out = root / "out"
        if job == "run":
            arguments += ["--set", "run.checkpoint_every=1"]
        assert main([arguments[0], "--out", str(out), *arguments[1:]]) == 0
        name = "checkpoint.pt" if job == "run" else "sweep-checkpoint.pt"
        raw = (out / name).read_bytes()
        header = json.loads(raw[len(MAGIC):].partition(b"\n")[0])
        import io

        payload = {"something": torch.zeros(2)} if payload_change == "other keys" else {"groups": [{"pairs": 1}]}
        if payload_change in COUNTERS:  # the real payload, one counter of its progress changed
            payload = torch.load(io.BytesIO(raw[len(MAGIC):].partition(b"\n")[2]), weights_only=True)
            key, value = COUNTERS[payload_change]
            progress = payload["progress"]
            progress[key] = value if not isinstance(progress[key], torch.Tensor) else progress[key].fill_(value)
        buffer = io.BytesIO()
        torch.save(payload, buffer)
        data = buffer.getvalue()
        header["sha256"] = _digest(header["fingerprint"], header["step"], data)
        (out / name).write_bytes(MAGIC + json.dumps(header).encode() + b"\n" + data)
        return [*arguments[1:], "--resume"]
    return setup


def damaged_checkpoint(kind: str) -> Callable[[Path], list[str]]:
    """A checkpoint of a quick run, then emptied, truncated or replaced by garbage; the command resumes from it."""
    def setup(root: Path) -> list[str]:
        out = root / "out"
        assert main(["run", "--out", str(out), "--set", "run.checkpoint_every=1", *QUICK]) == 0
        good = (out / "checkpoint.pt").read_bytes()
        damaged = {"empty": b"", "truncated": good[: len(good) // 2], "garbage": b"\x80\x04garbage",
                   "one flipped bit": good[:-40] + bytes([good[-40] ^ 1]) + good[-39:]}[kind]
        (out / "checkpoint.pt").write_bytes(damaged)
        return ["--resume", *QUICK]
    return setup


def config_file(content: bytes) -> Callable[[Path], list[str]]:
    def setup(root: Path) -> list[str]:
        (root / "config.yaml").write_bytes(content)
        return ["--config", str(root / "config.yaml")]
    return setup


def directory_as_lock(root: Path) -> list[str]:
    (root / "out" / ".lock").mkdir(parents=True)  # an unopenable lock file, as one owned by another user
    return ["--set", "run.num_steps=1"]


def unreadable_config(root: Path, monkeypatch) -> list[str]:
    (root / "config.yaml").write_text("run:\n  num_steps: 3\n")
    real = Path.read_bytes

    def refuse(self):
        if self.name == "config.yaml":
            raise PermissionError(13, "Permission denied")
        return real(self)

    monkeypatch.setattr(Path, "read_bytes", refuse)
    return ["--config", str(root / "config.yaml")]


def fewer_steps(root: Path) -> list[str]:
    """A run checkpointed at step 2, resumed with a budget of 1 step."""
    quick = [item.replace("run.num_steps=2", "run.num_steps=1") for item in QUICK]
    assert main(["run", "--out", str(root / "out"), *QUICK, "--set", "run.checkpoint_every=2"]) == 0
    return [*quick, "--set", "run.checkpoint_every=2", "--resume"]


# (id, command, arguments or a setup(tmp_path) -> arguments, text the error must contain, needs antiberty)
CLI_CASES = [
    ("two parallel-decoding models under one name", "parallel-decoding",
     ["--set", "models=[{name: toy, source: toy-compatible}, {name: toy, source: toy-incompatible}]"],
     "models must have distinct names", False),
    ("record_every 0", "run", ["--set", "run.record_every=0"], "run.record_every", False),
    ("record_every negative", "run", ["--set", "run.record_every=-1"], "run.record_every", False),
    ("checkpoint_every negative", "run", ["--set", "run.checkpoint_every=-3"], "run.checkpoint_every", False),
    ("num_steps 0", "run", ["--set", "run.num_steps=0"], "run.num_steps", False),
    ("window of floats", "run", ["--set", "chains.window=[93.5, 100]"], "chains.window", False),
    ("window reversed", "run", ["--set", "chains.window=[9, 3]"], "chains.window", False),
    ("seed not a number", "run", ["--set", "chains.seed=abc"], "chains.seed", False),
    ("seed above 2^62", "run", ["--set", "chains.seed=9223372036854775808"], "chains.seed", False),
    ("no chains", "run", ["--set", "chains.num_chains=0"], "chains.num_chains", False),
    ("negative crop", "run", ["--set", "chains.crop=-1"], "chains.crop", False),
    ("crop without a window", "run", ["--set", "chains.crop=4"], "chains.crop", False),
    ("empty sequence", "run", ["--set", "chains.sequences=['']"], "chains.sequences", False),
    ("unknown device", "run", ["--set", "model.device=foo"], "model.device", False),
    ("unknown source", "run", ["--set", "model.source=nowhere"], "model.source", False),
    ("no layers", "run", ["--set", "model.num_layers=0"], "model.num_layers", False),
    ("boolean temperature", "run", ["--set", "temperatures=[true]"], "temperatures", False),
    ("zero temperature", "run", ["--set", "temperatures=[0]"], "temperatures", False),
    ("nan temperature", "run", ["--set", "temperatures=[.nan]"], "temperatures", False),
    ("no temperatures", "run", ["--set", "temperatures=[]"], "temperatures", False),
    ("repeated temperature", "run", ["--set", "temperatures=[1.0, 1.0]"], "temperatures", False),
    ("chains not a multiple of the ladder", "run", ["--set", "temperatures=[0.5, 1.0, 2.0]"], "chains.num_chains",
     False),
    ("moved sampler.temperature", "run", ["--set", "sampler.temperature=0.5"], "moved to the top-level", False),
    ("moved coupling.temperatures", "run", ["--set", "coupling.temperatures=[1.0]"], "coupling.temperatures moved",
     False),
    ("unknown scan", "run", ["--set", "sampler.scan=diagonal"], "sampler.scan", False),
    ("top_p above 1", "run", ["--set", "sampler.top_p=1.5"], "sampler.top_p", False),
    ("top_p 0", "run", ["--set", "sampler.top_p=0"], "sampler.top_p", False),
    ("top_k 0", "run", ["--set", "sampler.top_k=0"], "sampler.top_k", False),
    ("unknown key", "run", ["--set", "sampler.bogus=1"], "sampler.bogus", False),
    ("no pairs", "run", ["--set", "coupling.num_pairs=0"], "coupling.num_pairs", False),
    ("negative budget", "run", ["--set", "coupling.max_steps=-1"], "coupling.max_steps", False),
    ("rectangle distance 0", "run", ["--set", "rectangle.max_distance=0"], "rectangle.max_distance", False),
    ("one rectangle token", "run", ["--set", "rectangle.num_tokens=1"], "rectangle.num_tokens", False),
    ("one influence site", "run", ["--set", "influence.max_sites=1"], "influence.max_sites", False),
    ("no influence contexts", "run", ["--set", "influence.num_contexts=0"], "influence.num_contexts", False),
    ("python tag in --set", "run", ["--set", "chains.seed=!!python/object/apply:os.system [ls]"], "--set", False),
    ("--set without =", "run", ["--set", "chains.seed"], "--set", False),
    ("duplicate YAML key", "run", config_file(b"sampler:\n  scan: random\n  scan: sweep\n"), "duplicate key", False),
    ("moved key in a YAML file", "run", config_file(b"chains:\n  temperatures: [1.0]\n"),
     "chains.temperatures moved to the top-level `temperatures`", False),
    ("malformed YAML", "run", config_file(b"sampler: [unclosed\n"), "not valid YAML", False),
    ("YAML list", "run", config_file(b"- a\n- b\n"), "mapping", False),
    ("empty YAML", "run", config_file(b""), "is empty", False),
    ("comments only", "run", config_file(b"# nothing\n"), "is empty", False),
    ("binary YAML", "run", config_file(bytes(range(256))), "not UTF-8", False),
    ("missing config", "run", lambda root: ["--config", str(root / "missing.yaml")], "no such file", False),
    ("config is a directory", "run", lambda root: ["--config", str(root)], "not a file", False),
    ("--out is a file", "run", lambda root: (root / "file").write_text("x") and ["--out", str(root / "file")],
     "not a directory", False),
    ("--out under a file", "run", lambda root: (root / "file").write_text("x") and ["--out", str(root / "file/sub")],
     "cannot be created", False),
    ("--out empty", "run", ["--out", ""], "--out must name a directory", False),
    ("lock not openable", "run", directory_as_lock, "lock file", False),
    ("missing model path", "run", ["--set", "model.source=huggingface", "--set", "model.name_or_path=./no/such/model",
                                   "--set", "chains.sequences=[hello]"], "does not exist", False),
    ("hub name offline", "run", ["--set", "model.source=huggingface", "--set",
                                 "model.name_or_path=surely-not-cached/model-xyz", "--set", "chains.sequences=[hello]"],
     "local", False),
    ("empty model directory", "run", model_dir("empty"), "no config.json", False),
    ("unknown model_type", "run", model_dir("unknown type"), "config.json cannot be used", False),
    ("truncated safetensors", "run", model_dir("truncated"), "damaged", False),
    ("safetensors header of 2^40 bytes", "run", model_dir("huge header"), "damaged", False),
    ("pickled weights", "run", model_dir("pickled"), "pickled weights", False),
    ("--resume without checkpoint", "run", ["--resume", *QUICK], "no checkpoint", True),
    ("empty checkpoint", "run", damaged_checkpoint("empty"), "not an mlm_dynamics checkpoint", True),
    ("truncated checkpoint", "run", damaged_checkpoint("truncated"), "corrupted", True),
    ("garbage checkpoint", "run", damaged_checkpoint("garbage"), "not an mlm_dynamics checkpoint", True),
    ("flipped bit in a checkpoint", "run", damaged_checkpoint("one flipped bit"), "corrupted", True),
    ("checkpoint of another layout", "run", checkpoint_with("other keys", "run"), "cannot resume", True),
    ("resealed sweep checkpoint", "sweep", checkpoint_with("groups", "sweep"), "cannot resume", False),
    *[(f"resealed checkpoint: {change}", "run", checkpoint_with(change, "run"), f"progress['{COUNTERS[change][0]}']",
       True) for change in COUNTERS],
    ("window too long", "run", [*QUICK, "--set", "chains.window=[5, 500]"], "chains.window", True),
    ("unknown residue", "run", [*QUICK, "--set", "chains.sequences=[EVQLXZ]"], "chains.sequences", True),
    ("unequal lengths", "run", [*QUICK, "--set", "chains.sequences=[EVQL, EVQLV]"], "chains.sequences", True),
    ("600 residues", "run", [*QUICK, "--set", f"chains.sequences=[{'A' * 600}]"], "chains.sequences", True),
    ("temperature overflow", "run", [*QUICK, "--set", "temperatures=[1e-310, 1.0]"], "temperature", True),
    ("sweep --devices 0", "sweep", ["--devices", "0", *TOY_SWEEP], "--devices", False),
    ("sweep --devices -3", "sweep", ["--devices", "-3", *TOY_SWEEP], "--devices", False),
    ("window centre 5000", "sweep", [*ANTIBERTY_SWEEP, "--set", "context.window_center=5000"],
     "context.window_center", True),
    ("sweep grid longer than the sequence", "sweep", [*ANTIBERTY_SWEEP, "--set", "grid.lengths=[500]"],
     "grid.lengths", True),
    ("a mapping set to a number", "run", ["--set", "sampler=3"], "sampler must be a mapping", False),
    ("resume with fewer steps", "run", fewer_steps, "run.num_steps: 1 is below step 2", True),
    ("semantics --resume", "semantics", ["--resume"], "--resume", False),
    ("rectangle-table --resume", "rectangle-table", ["--resume"], "--resume", False),
]


@pytest.mark.parametrize(("command", "arguments", "message", "antiberty"), [case[1:] for case in CLI_CASES],
                         ids=[case[0] for case in CLI_CASES])
def test_bad_command_lines_end_in_one_line_naming_the_parameter(tmp_path, capsys, monkeypatch, command, arguments,
                                                                 message, antiberty):
    if antiberty:
        pytest.importorskip("antiberty")
    if callable(arguments):
        arguments = arguments(tmp_path)
        capsys.readouterr()
    out = [] if "--out" in arguments else ["--out", str(tmp_path / "out")]
    try:
        code = main([command, *out, *arguments])
    except SystemExit as exit_:  # argparse: its usage, then one error line
        code = exit_.code
        lines = capsys.readouterr().err.strip().splitlines()
        assert code == 2 and lines[0].startswith("usage:") and message in lines[-1], lines
        return
    lines = capsys.readouterr().err.strip().splitlines()
    assert code == 2, lines
    assert len(lines) == 1 and lines[0].startswith("mlm-dynamics: error:") and message in lines[0], lines


@pytest.mark.parametrize("name", ["", "some/missing.yaml", "DIR", "binary.yaml", "sweep-isin"])
def test_presets_refuses_what_is_not_a_preset_in_one_line(tmp_path, capsys, monkeypatch, name):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "DIR").mkdir()
    (tmp_path / "binary.yaml").write_bytes(bytes(range(256)))
    assert main(["presets", name]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and f"presets: {name!r} is not a packaged preset" in lines[0] and "sweep-ising" in lines[0]


def _csv_run(root: Path, text: str) -> Path:
    (root / "logs" / "version_0").mkdir(parents=True)
    (root / "logs" / "version_0" / "metrics.csv").write_text(text)
    return root / "logs"


def _refuse_reading(monkeypatch, name: str) -> None:
    """Reading a file called ``name`` raises PermissionError, as an unreadable file would."""
    real = Path.read_text

    def refuse(self, *args, **kwargs):
        if self.name == name:
            raise PermissionError(13, "Permission denied")
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Path, "read_text", refuse)


def _unreadable_csv(root: Path, monkeypatch) -> Path:
    folder = _csv_run(root, "step,mixing/train/censored_fraction\n1,0.5\n")
    _refuse_reading(monkeypatch, "metrics.csv")
    return folder


def _csv_with_bad_draws(root: Path, monkeypatch) -> Path:
    folder = _csv_run(root, "step,mixing/train/censored_fraction\n1,0.5\n")
    good = '{"step": 1, "key": "mixing/train", "draws": [{"x": "a b", "y": "a c"}]}'
    (folder / "version_0" / "mlm_dynamics-draws.jsonl").write_text(good + "\n" + good[:30] + "\n")
    return folder


def _unreadable_draws(root: Path, monkeypatch) -> Path:
    folder = _csv_with_bad_draws(root, monkeypatch)
    _refuse_reading(monkeypatch, "mlm_dynamics-draws.jsonl")
    return folder


def _wandb_with_bad_record(root: Path, monkeypatch) -> Path:
    """A .wandb file whose one chunk passes its checksum but does not decode as a Record."""
    import struct
    import zlib

    data = b"\xff\xff\xff"  # a truncated varint: protobuf's DecodeError
    chunk = struct.pack("<IHB", zlib.crc32(bytes([1]) + data), len(data), 1) + data
    folder = root / "wandb" / "offline-run-1"
    folder.mkdir(parents=True)
    (folder / "run-1.wandb").write_bytes(b":W&B" + bytes([0xCE, 0xC0, 0x00]) + chunk)
    return root / "wandb"


@pytest.mark.parametrize(("setup", "message"), [
    (lambda root, mp: _csv_run(root, ""), "line 1: not a metrics log"),
    (lambda root, mp: _csv_run(root, "step,mixing/train/censored_fraction\n1,0.5\n2,0.6"), "ends inside a line"),
    (lambda root, mp: _csv_run(root, "step,mixing/train/censored_fraction\n1,zero\n"), "line 2: column"),
    (lambda root, mp: _csv_run(root, "step,loss\n1,0.5\n"), "no diagnostics keys found in"),
    (_unreadable_csv, "metrics.csv: cannot be read (Permission denied)"),
    (_wandb_with_bad_record, "record 0 is not a W&B record"),
    (_csv_with_bad_draws, "mlm_dynamics-draws.jsonl, line 2: not a draws record"),
    (_unreadable_draws, "mlm_dynamics-draws.jsonl: cannot be read (Permission denied)"),
    # values no run logs: each refused naming the file, line, key and step
    (lambda root, mp: _csv_run(root, "step,mixing/train/censored_fraction\n1,7\n"),
     "line 2: mixing/train/censored_fraction at step 1: 7.0 is outside [0, 1]"),
    (lambda root, mp: _csv_run(root, "step,mixing/train/meeting_time_median\n1,-3\n"),
     "line 2: mixing/train/meeting_time_median at step 1: -3.0 is outside [0, inf]"),
    (lambda root, mp: _csv_run(root, "step,mixing/train/censored_fraction\n-4,0.5\n"),
     "line 2: mixing/train/censored_fraction at step -4: step -4 is negative"),
    (lambda root, mp: _csv_run(root, "step,mixing/train/budget,mixing/train/meeting_time_median\n1,20,1e300\n"),
     "mixing/train/meeting_time_median at step 1: 1e+300 is above the pairs' budget 20"),
    (lambda root, mp: _csv_run(root, "step,mixing/train/meeting_time_median\n1,1e300\n"),
     "mixing/train/meeting_time_median at step 1 is logged without the pairs' budget (mixing/train/budget)"),
], ids=["empty csv", "csv cut in a number", "csv text cell", "no diagnostics keys", "unreadable csv",
        "undecodable W&B record", "damaged draws", "unreadable draws", "a fraction of 7", "a negative meeting time",
        "a negative step", "a median above its budget", "a median without its budget"])
def test_report_refuses_damaged_logs_in_one_line(tmp_path, capsys, monkeypatch, setup, message):
    folder = setup(tmp_path, monkeypatch)
    assert main(["report", str(folder), "--out", str(tmp_path / "report")]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("mlm-dynamics: error:") and message in lines[0], lines


def test_more_devices_than_cores_warns(tmp_path, capsys, monkeypatch):
    import mlm_dynamics.launch as launch

    monkeypatch.setattr("os.cpu_count", lambda: 2)
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    monkeypatch.setattr(launch, "run_sweep_sharded", lambda *args, **kwargs: None)  # (a non-merging rank's end)
    assert main(["sweep", "--out", str(tmp_path / "out"), "--devices", "999", *TOY_SWEEP]) == 0
    assert "--devices 999 is above this machine's 2 CPU cores" in capsys.readouterr().err


def test_an_unreadable_config_names_it(tmp_path, capsys, monkeypatch):
    assert main(["run", "--out", str(tmp_path / "out"), *unreadable_config(tmp_path, monkeypatch)]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "cannot be read: Permission denied" in lines[0]


def test_config_errors_come_before_the_model_loads(tmp_path, capsys, monkeypatch):
    import mlm_dynamics.experiments.run as job

    monkeypatch.setattr(job, "build_model", lambda spec: pytest.fail("the model was loaded"))
    for _, command, arguments, _, antiberty in CLI_CASES:
        if (command == "run" and isinstance(arguments, list) and not antiberty and "--out" not in arguments
                and "model.source=huggingface" not in arguments):
            assert main(["run", "--out", str(tmp_path / "out"), *arguments]) == 2, arguments
            capsys.readouterr()


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_cuda_device_on_a_cpu_machine(tmp_path, capsys):
    assert main(["run", "--out", str(tmp_path), "--set", "model.device=cuda"]) == 2
    assert "no CUDA device" in capsys.readouterr().err


def test_a_checkpoint_write_that_hits_a_file_size_limit_names_the_file(tmp_path):
    """RLIMIT_FSIZE (as a full disk would) during the first checkpoint write: one line naming the checkpoint, exit 2,
    and no torn file left in place of a checkpoint."""
    import subprocess
    import sys
    import textwrap

    child = textwrap.dedent(f"""
        import resource, signal, sys
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # the write fails with EFBIG instead of killing the process
        resource.setrlimit(resource.RLIMIT_FSIZE, (20000, 20000))
        from mlm_dynamics.cli import main
        sys.exit(main(["sweep", "--out", {str(tmp_path / 'out')!r}, *{TOY_SWEEP!r}, "--set", "grid.pairs=200",
                       "--set", "grid.lengths=[40]"]))
    """)
    done = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, timeout=300)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2, done.stderr[-2000:]
    assert len(lines) == 1 and "sweep-checkpoint.pt could not be written" in lines[0], lines
    assert not (tmp_path / "out" / "sweep-checkpoint.pt").exists()


# library calls: (id, callable, exception type, text the message must contain)
def _mrf():
    return PairwiseMRFDenoiser.random(3, 3, generator=0)


def _chain_state() -> dict:
    return GlauberSampler(_mrf()).init_state(torch.zeros(1, 3, dtype=torch.long), generator=0).state_dict()


def _hf_callback(**kwargs):
    pytest.importorskip("accelerate", reason="the Hugging Face Trainer needs accelerate (the hf extra)")
    from mlm_dynamics.integrations.transformers import DiagnosticsCallback

    return DiagnosticsCallback(**kwargs)


def _hf_model(kind: str):
    """(model, tokenizer): a tiny sequence classifier, or a masked LM with a tokenizer whose mask token is unset."""
    from transformers import BertConfig, BertForMaskedLM, BertForSequenceClassification, BertTokenizer

    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "b"]
    tokenizer = BertTokenizer(vocab={w: i for i, w in enumerate(words)})
    config = BertConfig(vocab_size=7, hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=8)
    if kind == "classifier":
        return BertForSequenceClassification(config), tokenizer
    tokenizer.mask_token = None
    return BertForMaskedLM(config), tokenizer


ALLOWED = torch.ones(2, dtype=torch.bool)
LIBRARY_CASES = [
    ("coupling rows summing to 2", lambda: maximal_coupling(torch.tensor([[1.0, 1.0, 0.0]]),
                                                            torch.tensor([[0.0, 1.0, 1.0]]), torch.Generator()),
     ValueError, "sum to 1"),
    ("bf16 coupling rows summing to 2", lambda: maximal_coupling(
        torch.full((1, 256), 2 / 256, dtype=torch.bfloat16), torch.full((1, 256), 1 / 256, dtype=torch.bfloat16),
        torch.Generator()), ValueError, "sum to 1"),
    ("infinite probability", lambda: maximal_coupling(torch.tensor([[math.inf, 0.0]]), torch.tensor([[0.5, 0.5]]),
                                                      torch.Generator()), ValueError, "finite"),
    ("integer probabilities", lambda: maximal_coupling(torch.tensor([[1, 0]]), torch.tensor([[1, 0]]),
                                                       torch.Generator()), ValueError, "floating-point"),
    ("repeated influence sites", lambda: estimate_influence(_mrf(), torch.zeros(1, 3, dtype=torch.long),
                                                            sites=torch.tensor([0, 0])), ValueError, "distinct"),
    ("no contexts", lambda: estimate_influence(_mrf(), torch.zeros(0, 3, dtype=torch.long)), ValueError, "contexts"),
    ("float sites", lambda: estimate_influence(_mrf(), torch.zeros(1, 3, dtype=torch.long),
                                               sites=torch.tensor([0.0, 1.7])), ValueError, "sites must be an integer"),
    ("zero influence temperature", lambda: estimate_influence(_mrf(), torch.zeros(1, 3, dtype=torch.long),
                                                              temperatures=[0.0]), ValueError, "temperature"),
    ("float tokens", lambda: GlauberSampler(_mrf()).init_state(torch.zeros(2, 3), generator=0), ValueError,
     "tokens must be an integer"),
    ("float chain sites", lambda: GlauberSampler(_mrf()).init_state(torch.zeros(2, 3, dtype=torch.long), generator=0,
                                                                    sites=torch.tensor([[0.0, 1.9]] * 2)),
     ValueError, "sites must be an integer"),
    ("boolean temperature", lambda: check_temperature(True), ValueError, "temperature"),
    ("zero temperature", lambda: GlauberSampler(_mrf(), temperature=0.0), ValueError, "temperature"),
    ("boolean top_k", lambda: GlauberSampler(_mrf(), top_k=True), ValueError, "top_k"),
    ("top_k 0", lambda: tempered_log_probs(torch.zeros(2), ALLOWED, 1.0, top_k=0), ValueError, "top_k"),
    ("top_p 0", lambda: tempered_log_probs(torch.zeros(2), ALLOWED, 1.0, top_p=0.0), ValueError, "top_p"),
    ("no allowed token", lambda: tempered_log_probs(torch.zeros(2), torch.zeros(2, dtype=torch.bool), 1.0),
     ValueError, "allowed"),
    ("every allowed logit -inf", lambda: tempered_log_probs(torch.tensor([-math.inf, -math.inf]), ALLOWED, 1.0),
     ValueError, "logits"),
    ("float32 overflow", lambda: tempered_log_probs(torch.tensor([3e38, -3e38]), ALLOWED, 0.5, dtype=torch.float32),
     FloatingPointError, "temperature"),
    ("float64 overflow", lambda: tempered_log_probs(torch.tensor([1.0, 2.0]), ALLOWED, 1e-310, dtype=torch.float64),
     FloatingPointError, "temperature"),
    ("denoiser with V + 1 logits", lambda: FullSequenceDenoiser(
        lambda x: torch.zeros(*x.shape, 7), VocabInfo(size=6, mask_id=5)).conditional_logits(
        torch.zeros(1, 4, dtype=torch.long), torch.tensor([1])), RuntimeError, "vocab.size is 6"),
    ("empty margin sites", lambda: local_margins(_mrf(), torch.zeros(1, 3, dtype=torch.long),
                                                 sites=torch.zeros(1, 0, dtype=torch.long)), ValueError, "sites"),
    ("swap_every 1.5", lambda: ReplicaExchange(_mrf(), [1.0, 2.0], mode="exact", energy=_mrf().energy,
                                               swap_every=1.5), ValueError, "swap_every"),
    ("Ising chain of 0 spins", lambda: PairwiseMRFDenoiser.ising_chain(0, 1.0), ValueError, "n must be"),
    ("chain state without rng", lambda: ChainState.from_state_dict(
        {k: v for k, v in GlauberSampler(_mrf()).init_state(torch.zeros(1, 3, dtype=torch.long), generator=0)
         .state_dict().items() if k != "rng"}), ValueError, "rng"),
    ("mixing temperature 0", lambda: MixingDiagnostics(temperature=0), ValueError, "temperature"),
    ("mixing budget -1", lambda: MixingDiagnostics(max_steps=-1), ValueError, "max_steps"),
    ("mixing budget 2.5", lambda: MixingDiagnostics(max_steps=2.5), ValueError, "max_steps"),
    ("lag 0", lambda: MixingDiagnostics(lag=0), ValueError, "lag"),
    ("one rectangle token", lambda: RectangleTest(num_tokens=1), ValueError, "num_tokens"),
    ("no rectangle pairs", lambda: RectangleTest(pairs_per_context=0), ValueError, "pairs_per_context"),
    ("influence temperature 0", lambda: InfluenceProbe(temperatures=[0]), ValueError, "temperature"),
    ("no influence temperatures", lambda: InfluenceProbe(temperatures=[]), ValueError, "temperatures"),
    ("budget 0", lambda: SemanticDrift(budget_seconds=0), ValueError, "budget_seconds"),
    ("negative budget", lambda: SemanticDrift(budget_seconds=-5), ValueError, "budget_seconds"),
    ("every 0", lambda: SemanticDrift(every=0), ValueError, "every"),
    ("threshold 3", lambda: SemanticDrift(thresholds=[3.0]), ValueError, "thresholds"),
    ("every_n_train_steps 0", lambda: RectangleTest(every_n_train_steps=0), ValueError, "every_n_train_steps"),
    ("topic threshold 2", lambda: TrapDetector(topic_threshold=2.0), ValueError, "topic_threshold"),
    ("float start tokens", lambda: TrapDetector(start_tokens=torch.zeros(2, 3)), ValueError, "start_tokens"),
    ("ModuleOutputEmbedder arguments swapped", lambda: ModuleOutputEmbedder(_mrf(), "layers.0"), TypeError,
     r"the submodule's name comes first, then the denoiser; got a PairwiseMRFDenoiser and then 'layers.0' \(swap"),
    ("mask id beyond the vocabulary", lambda: VocabInfo(size=3, mask_id=7), ValueError, "VocabInfo.mask_id"),
    ("chain state of float tokens", lambda: ChainState.from_state_dict({**_chain_state(), "tokens": torch.zeros(1, 3)}),
     ValueError, r"state\['tokens'\] must be an int64 tensor"),
    ("chain state with a foreign rng", lambda: ChainState.from_state_dict(
        {**_chain_state(), "rng": torch.zeros(5, dtype=torch.uint8)}), ValueError, "not a CPU generator state"),
    ("chain state at step -1", lambda: ChainState.from_state_dict({**_chain_state(), "step": -1}), ValueError,
     r"state\['step'\]"),
    ("chain state with sites past the end", lambda: ChainState.from_state_dict(
        {**_chain_state(), "sites": torch.tensor([[0, 9]])}), ValueError, r"state\['sites'\]"),
    ("chain state that is a list", lambda: ChainState.from_state_dict([1, 2]), ValueError, "a chain state needs"),
    ("1-D batch", lambda: batch_rows(torch.arange(10), 4), ValueError, r"batch: token ids must be an integer tensor"),
    ("float input_ids", lambda: batch_rows({"input_ids": torch.rand(2, 5) * 9}, 4), ValueError,
     r"batch\['input_ids'\]: token ids must be an integer"),
    ("a 1-D batch with strict=True", lambda: ScheduledProbe(RectangleProbe(), strict=True).capture(torch.arange(9)),
     ValueError, "token ids must be an integer"),
    ("overhead 5 %", lambda: ScheduledProbe(RectangleProbe(), overhead=5), ValueError, "overhead must be a fraction"),
    ("workspace prefix None", lambda: workspace("e", "p", prefix=None), ValueError, "prefix must be a string"),
    ("workspace without entity", lambda: workspace("", ""), ValueError, "entity must be a non-empty string"),
    ("workspace stage TRAIN", lambda: workspace("e", "p", stage="TRAIN"), ValueError, "stage must be one of"),
    ("workspace x empty", lambda: workspace("e", "p", x=""), ValueError, "x must be a non-empty string"),
    ("HF callback every 0 steps", lambda: _hf_callback(every_n_steps=0), ValueError, "every_n_steps must be"),
    ("HF callback probes by name", lambda: _hf_callback(probes=["mixing"]), ValueError,
     "probes must be Probe objects"),
    ("HF callback on a sequence classifier", lambda: _hf_callback().build_denoiser(*_hf_model("classifier")),
     ValueError, "BertForSequenceClassification, which gives no masked-token conditionals"),
    ("HF callback with a tokenizer without mask", lambda: _hf_callback().build_denoiser(*_hf_model("no mask")),
     ValueError, r"the tokenizer \(BertTokenizer\) defines no mask token"),
    ("flat start tokens", lambda: TrapDetector(start_tokens=[1, 2, 3]), ValueError, "start_tokens"),
    # one check of each argument, whichever entry point takes it
    ("HF callback overhead 1.5", lambda: _hf_callback(overhead=1.5), ValueError, "overhead must be a fraction"),
    ("HF callback overhead True", lambda: _hf_callback(overhead=True), ValueError, "overhead must be a fraction"),
    ("Lightning callback overhead True", lambda: MixingDiagnostics(overhead=True), ValueError,
     "overhead must be a fraction"),
    ("keep(nan)", lambda: _profile().keep(math.nan), ValueError, r"target must be an error in \(0, 1\), got nan"),
    ("keep(-0.5)", lambda: _profile().keep(-0.5), ValueError, "target must be an error in"),
    ("keep('0.05')", lambda: _profile().keep("0.05"), ValueError, "target must be an error in"),
    ("rule_outcome with a nan parameter", lambda: _profile().rule_outcome("threshold", math.nan), ValueError,
     r"rule_outcome\(rule, parameter\): the rule must be one of"),
    ("tokens of rank 1 with positions", lambda: _mrf().conditional_logits(torch.zeros(3, dtype=torch.long),
                                                                          torch.tensor([1])),
     ValueError, r"tokens must be an integer tensor of shape \[B, L\]"),
    ("a diffusion LM on CUDA where there is none", lambda: _cuda_load(), ValueError,
     "device is 'cuda' but no CUDA device is available"),
    ("weights on the meta device", lambda: _meta_model().conditional_logits(torch.zeros(1, 4, dtype=torch.long),
                                                                            torch.tensor([1])),
     ValueError, "weights are on the meta device"),
]


def _meta_model():
    from transformers import BertConfig, BertForMaskedLM

    from mlm_dynamics import MaskedLMDenoiser

    with torch.device("meta"):
        model = BertForMaskedLM(BertConfig(vocab_size=30, hidden_size=16, num_attention_heads=2, intermediate_size=16,
                                           num_hidden_layers=1))
    return MaskedLMDenoiser(model, mask_id=3)


@pytest.mark.parametrize(("edit", "message"), [
    (lambda folder: (folder / "config.json").unlink() or (folder / "config.json").mkdir(),
     "its config.json is not a file"),
    (lambda folder: (folder / "config.json").unlink(), "has no config.json: not a Hugging Face model directory"),
    (lambda folder: (folder / "config.json").write_text(
        json.dumps({**json.loads((folder / "config.json").read_text()), "vocab_size": "30"})),
     "its config.json cannot be used here (StrictDataclassFieldValidationError: Validation error for field "
     "'vocab_size'"),
    (lambda folder: (folder / "config.json").write_text("{not json"), "its config.json cannot be used here"),
], ids=["config.json a folder", "no config.json", "a string vocab_size", "config.json not JSON"])
def test_a_damaged_config_is_one_line_naming_the_model(tmp_path, capsys, edit, message):
    """Through the command line as a user meets it: exit 2, one line naming the model and its config.json."""
    from transformers import BertConfig, BertForMaskedLM

    folder = tmp_path / "model"
    BertForMaskedLM(BertConfig(vocab_size=30, hidden_size=16, num_attention_heads=2, intermediate_size=16,
                               num_hidden_layers=1)).save_pretrained(folder)
    edit(folder)
    capsys.readouterr()  # the save's progress bar
    code = main(["rectangle-table", "--out", str(tmp_path / "out"), "--set",
                 f"models=[{{name: m, source: huggingface, name_or_path: '{folder}'}}]", "--set", "contexts=1"])
    lines = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and f"model '{folder}'" in lines[0] and message in lines[0], lines


def _profile():
    from mlm_dynamics.diagnostics.parallel import confidence_profile

    return confidence_profile(PairwiseMRFDenoiser.random(4, 3, generator=0), torch.zeros(2, 4, dtype=torch.long),
                              torch.tensor([[0, 1, 2], [1, 2, 3]]), max_k=2, samples=4)


def _cuda_load():
    """The device is checked before any weight is read: the folder does not even exist."""
    from mlm_dynamics.models.families import load_diffusion_lm

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    return load_diffusion_lm("/nonexistent/model", device="cuda")


@pytest.mark.parametrize(("call", "error", "message"), [case[1:] for case in LIBRARY_CASES],
                         ids=[case[0] for case in LIBRARY_CASES])
def test_bad_library_inputs_raise_errors_naming_the_parameter(call, error, message):
    with pytest.raises(error, match=message):
        call()


def test_log_probability_outputs_with_minus_infinity_are_accepted():
    """A denoiser that returns log-probabilities (-inf for tokens of probability 0, as MDLM does) samples: the -inf
    tokens are never drawn."""
    vocab = VocabInfo(size=4, mask_id=3, forbidden_ids=(3,))

    def log_probs(x):
        out = torch.log(torch.tensor([0.5, 0.5, 0.0, 0.0])).expand(*x.shape, 4).clone()
        return out

    denoiser = FullSequenceDenoiser(log_probs, vocab)
    state = GlauberSampler(denoiser).init_state(torch.zeros(64, 3, dtype=torch.long), generator=0)
    for _ in GlauberSampler(denoiser).run(state, 20):
        pass
    assert (state.tokens < 2).all()


def test_a_module_without_a_denoiser_fails_when_fit_starts():
    import lightning as L
    from torch.utils.data import DataLoader

    class NoDenoiser(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(1, 1)

        def training_step(self, batch, batch_idx):
            pytest.fail("training started")

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    trainer = L.Trainer(max_steps=1, callbacks=[RectangleTest(every_n_train_steps=1)], logger=False,
                        enable_progress_bar=False, enable_checkpointing=False, enable_model_summary=False)
    with pytest.raises(AttributeError, match="'denoiser' attribute"):
        trainer.fit(NoDenoiser(), DataLoader(torch.zeros(4, 3, dtype=torch.long), batch_size=2))
