import json
import math
from pathlib import Path

import pytest
import torch

from mlm_dynamics.diagnostics import ess, rhat

# Reference values from ArviZ 0.23.4 on fixed draws; data/make_convergence_reference.py records how they were made.
REFERENCE = json.loads((Path(__file__).parent / "data" / "convergence_reference.json").read_text())["cases"]


@pytest.mark.parametrize("case", sorted(REFERENCE))
def test_rhat_and_ess_match_arviz(case):
    values = REFERENCE[case]
    draws = torch.tensor(values["draws"], dtype=torch.float64)
    if case == "one_chain":
        # the one convention where we differ: ArviZ refuses a single chain (nan); split R-hat compares its halves
        assert math.isnan(values["rhat_rank"]) and math.isfinite(float(rhat(draws)))
    else:
        assert float(rhat(draws, method="rank")) == pytest.approx(values["rhat_rank"], abs=1e-6)
    assert float(ess(draws, method="bulk")) == pytest.approx(values["ess_bulk"], rel=1e-3)
    assert float(ess(draws, method="tail")) == pytest.approx(values["ess_tail"], rel=1e-3)


def test_leading_dimensions_are_independent_grids():
    cases = [torch.tensor(REFERENCE[name]["draws"], dtype=torch.float64)[:, :200] for name in ("iid", "ar1")]
    grid = torch.stack(cases)[None].expand(3, -1, -1, -1)  # a (3 x 2) grid of [chains, draws] sets
    for method in ("rank", "bulk", "folded"):
        values = rhat(grid, method=method)
        assert values.shape == (3, 2)
        for k, case in enumerate(cases):
            assert float(values[2, k]) == pytest.approx(float(rhat(case, method=method)), abs=1e-12)
    for method in ("bulk", "tail"):
        values = ess(grid, method=method)
        assert values.shape == (3, 2)
        for k, case in enumerate(cases):
            assert float(values[1, k]) == pytest.approx(float(ess(case, method=method)), rel=1e-9)


def test_bad_methods_and_shapes_are_named():
    with pytest.raises(ValueError, match="method"):
        rhat(torch.randn(2, 10), method="split")
    with pytest.raises(ValueError, match="method"):
        ess(torch.randn(2, 10), method="mean")
    with pytest.raises(ValueError, match="draws must have shape"):
        ess(torch.randn(10))
    with pytest.raises(ValueError, match="finite"):
        rhat(torch.tensor([[1.0, 2.0, float("nan"), 3.0]]))
