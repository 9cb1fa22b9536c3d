import os

import pytest
import torch
from hypothesis import settings

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "offline")
torch.set_num_threads(2)
# property tests draw the same examples on every run (CI stays reproducible); explore with --hypothesis-seed
settings.register_profile("reproducible", derandomize=True)
settings.load_profile("reproducible")
# scripts that made the reference data (they need arviz etc.) and the families' model code (loaded as remote code from
# a model directory): not test modules, and no doctests
collect_ignore_glob = ["data/*.py", "family_models/*"]


@pytest.fixture(scope="session")
def antiberty():
    pytest.importorskip("antiberty")
    from mlm_dynamics.models import load_antiberty

    return load_antiberty()


@pytest.fixture(scope="session")
def installed_wheel(tmp_path_factory):
    """The project as a user gets it from ``pip install``: its wheel, built as pip builds it, installed into a fresh
    virtual environment outside the checkout. Only the dependencies come from this interpreter (a ``.pth`` line to
    its site-packages, no network); the checkout's ``src/`` is on no path. Returns ``(venv, environment)``."""
    import subprocess
    import sys
    import sysconfig
    from pathlib import Path

    root = tmp_path_factory.mktemp("wheel")
    repo = Path(__file__).resolve().parent.parent
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(root / "dist"), str(repo)],
                   check=True, capture_output=True, timeout=600)
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    site = next(venv.glob("lib/python*/site-packages"))
    (site / "dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    wheel = next((root / "dist").glob("mlm_dynamics-*.whl"))
    subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)],
                   check=True, timeout=300)
    environment = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "WANDB_MODE": "offline",
                   "PATH": f"{venv / 'bin'}:/usr/bin:/bin", "HOME": str(root)}
    return venv, environment
