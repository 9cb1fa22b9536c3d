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


def test_run_stops_every_pair_at_a_witness_temperature_at_the_witness_step():
    # At the witness temperature (tau = 1) the 3 coupled pairs and the 2 added (witness_pairs 5) stop at step 10,
    # censored there (budget 10); at tau = 2 the pairs run to the budget of 30. Per-temperature counts are read in
    # the order of witness_temperatures; a count list of another length is refused naming the key.
    pytest.importorskip("antiberty")
    from mlm_dynamics.experiments.config import ConfigError

    overrides = ["model.num_layers=1", "chains.num_chains=2", "temperatures=[1.0, 2.0]", "run.num_steps=30",
                 "coupling.num_pairs=3", "coupling.max_steps=30", "coupling.witness_steps=10",
                 "rectangle.enabled=false", "margins.enabled=false", "influence.enabled=false",
                 "semantics.enabled=false"]
    config = load_config(RunConfig, "antiberty-default", [*overrides, "coupling.witness_temperatures=[1.0, 4.0]",
                                                            "coupling.witness_pairs=[5, 7]"])
    assert [config.coupling.witness_pairs_at(t) for t in (1.0, 2.0, 4.0)] == [5, 0, 7]
    result = run_chains(config)
    assert result.coupling is not None
    cold, warm = result.coupling.times[1.0], result.coupling.times[2.0]
    assert cold.budget == 10 and bool((cold.times <= 10).all()) and warm.budget == 30
    rows = {row["temperature"]: row for row in run_report(result)["mixing"]["by_temperature"]}
    assert (rows[1.0]["witness_pairs"], rows[1.0]["budget"], rows[2.0]["witness_pairs"], rows[2.0]["budget"]) == \
        (5, 10, 3, 30)
    with pytest.raises(ConfigError, match=r"coupling\.witness_pairs"):
        load_config(RunConfig, "antiberty-default", [*overrides, "coupling.witness_pairs=[5, 7, 9]"])
