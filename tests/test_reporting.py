import math

import pytest
import torch

from mlm_dynamics.diagnostics import quantile_key, quantile_summary, quantiles
from mlm_dynamics.experiments import RunConfig, load_config, run_chains
from mlm_dynamics.metrics import MeetingTimeMetric, RectanglePrevalence
from mlm_dynamics.report.run_report import run_report


def test_quantiles_of_observed_values_are_type_7():
    values = torch.tensor([4.0, 1.0, 3.0, 2.0])
    levels = (0.0, 0.25, 0.5, 0.9, 1.0)
    torch.testing.assert_close(quantiles(values, levels), torch.quantile(values.double(), torch.tensor(levels,
                                                                          dtype=torch.float64)))
    assert quantile_summary("t", values, (0.5, 0.9)) == {"t_median": 2.5, "t_q90": pytest.approx(3.7)}
    assert [quantile_key(p) for p in (0.5, 0.9, 0.025)] == ["median", "q90", "q2.5"]
    batched = quantiles(torch.stack([values, 2 * values]), (0.5,))
    assert batched.shape == (2, 1) and batched[1, 0] == 5.0
    with pytest.raises(ValueError, match="levels"):
        quantiles(values, (1.5,))


def test_cli_report_and_callback_metrics_agree_on_the_same_data():
    pytest.importorskip("antiberty")
    config = load_config(RunConfig, "antiberty-default", [
        "model.num_layers=1", "chains.num_chains=2",
        "temperatures=[1.0, 2.0]", "run.num_steps=4", "run.record_every=2",
        "coupling.num_pairs=3", "coupling.max_steps=4", "rectangle.pairs_per_context=2", "rectangle.num_tokens=3",
        "influence.enabled=false", "parallel.enabled=true", "parallel.window=3", "parallel.samples=4"])
    result = run_chains(config)
    report = run_report(result)
    assert result.parallel is not None and report["parallel"] == result.parallel.summary()  # the section, as measured
    assert report["parallel"]["tv_k1"] == 0 and 0 <= report["parallel"]["tv_k3"] <= report["parallel"]["tv_high_k3"]
    assert result.coupling is not None and result.rectangle is not None
    # the callbacks log f"{group}/{key}" for key, value in metric.compute(): same keys, same values as the report
    meeting = MeetingTimeMetric()
    meeting.update(result.coupling.times[config.main_temperature])
    for key, value in meeting.compute().items():  # nan: a censored quantile, missing in both
        assert report["mixing"][key] == value or (math.isnan(report["mixing"][key]) and math.isnan(value)), key
    rectangle = RectanglePrevalence()
    rectangle.update(result.rectangle)
    for key, value in rectangle.compute().items():
        assert report["rectangle"][key] == pytest.approx(value, rel=1e-12), key
    assert report["mixing"]["budget"] == 4 and 0 <= report["mixing"]["censored_fraction"] <= 1


