import math

import lightning as L
import pytest
import torch
from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger, WandbLogger
from torch.utils.data import DataLoader

from helpers import potts_corpus
from mlm_dynamics import GlauberSampler, PairwiseMRFDenoiser, as_generator
from mlm_dynamics.callbacks import (
    InfluenceProbe,
    MixingDiagnostics,
    ParallelDecoding,
    RectangleTest,
    SemanticDrift,
    TrapDetector,
)
from mlm_dynamics.diagnostics.meeting import meeting_times_of
from mlm_dynamics.sampling.coupling import CoupledGlauberChains, randomize_sites
from mlm_dynamics.training import MaskedDenoiserModule, tiny_bert_denoiser


def tensorboard_tags(path):
    """Scalar tags in a TensorBoard event file."""
    from tensorboardX.proto.event_pb2 import Event

    from mlm_dynamics.report.logs import tfrecords

    return {value.tag for record in tfrecords(path) for value in Event.FromString(record).summary.value}


def callbacks():
    common = dict(every_n_train_steps=2, num_starts=3, seed=0, overhead=None)  # every due run
    return [MixingDiagnostics(max_steps=15, lag=3, t_values=(0, 6), **common),
            RectangleTest(pairs_per_context=2, num_tokens=3, **common),
            InfluenceProbe(temperatures=(1.0, 4.0), max_sites=4, **common),
            SemanticDrift(steps_per_run=8, every=4, **common),
            TrapDetector(steps_per_run=8, every=4, dwell=4, radius=0.5, with_margins=True,
                         topic_anchors={"anchor": torch.randn(32)}, **common),
            ParallelDecoding(window=3, samples=8, top_m=2, **common)]


def fit(tmp_path, max_steps, ckpt_path=None, cbs=None):
    module = MaskedDenoiserModule(tiny_bert_denoiser(), lr=3e-3)
    data = potts_corpus()
    cbs = cbs or callbacks()
    loggers = [CSVLogger(tmp_path, name="csv"), WandbLogger(save_dir=str(tmp_path), offline=True, project="t"),
               TensorBoardLogger(tmp_path, name="tb")]
    trainer = L.Trainer(max_steps=max_steps, logger=loggers, callbacks=cbs, accelerator="cpu",
                        enable_progress_bar=False, enable_model_summary=False, limit_val_batches=1,
                        val_check_interval=4, num_sanity_val_steps=1, default_root_dir=tmp_path)
    trainer.fit(module, DataLoader(data, batch_size=8, shuffle=True), DataLoader(data[:8], batch_size=8),
                ckpt_path=ckpt_path)
    loggers[1].experiment.finish()  # each fit gets its own offline W&B run
    return trainer, module, [cb for cb in trainer.callbacks if hasattr(cb, "runs")]


def test_fit_logs_finite_diagnostics_to_every_logger(tmp_path):
    trainer, module, cbs = fit(tmp_path, max_steps=4)
    metrics = trainer.callback_metrics
    expected = ["mixing/{}/meeting_time_median_low", "mixing/{}/censored_fraction", "mixing/{}/lagged/tv_bound_t0",
                "rectangle/{}/prevalence", "rectangle/{}/abs_r_median", "influence/{}/dobrushin_tau1",
                "influence/{}/tau_star_sensitivity", "drift/{}/drift_mean", "drift/{}/hamming_to_start",
                "traps/{}/trap_rate", "traps/{}/margin_mean", "traps/{}/topic/anchor", "parallel/{}/tv_k3",
                "parallel/{}/tv_high_k3", "parallel/{}/threshold0.9/violated"]
    for key in expected:
        for stage in ("train", "val"):  # distinct keys per stage
            assert key.format(stage) in metrics, key.format(stage)
        assert "parallel/train/k_for_tv0.05" not in metrics  # 3 rows a run: too few for a setting's guarantee (29)
    for stage in ("train", "val"):  # a median, or (censored) only its lower bound: never both, never a budget as value
        median = f"mixing/{stage}/meeting_time_median"
        assert (median in metrics) != (f"{median}_lower_bound" in metrics)
    for key, value in metrics.items():
        assert math.isfinite(float(value)), key  # censored and unbounded values are reported finite or not logged
        assert "@" not in key, key
    assert 0 <= float(metrics["mixing/val/censored_fraction"]) <= 1
    assert 0 <= float(metrics["rectangle/val/prevalence"]) <= 1  # a near-uniform fresh BERT has |R| ~ 0
    assert [cb.runs for cb in cbs] == [3] * 6  # steps 2 and 4, validation at step 4; never in the sanity check
    assert module.training
    csv_header = (tmp_path / "csv" / "version_0" / "metrics.csv").read_text().splitlines()[0]
    assert "rectangle/train/prevalence" in csv_header and "traps/val/trap_rate" in csv_header
    tags = tensorboard_tags(next((tmp_path / "tb" / "version_0").glob("events.out.*")))
    assert {"rectangle/train/prevalence", "rectangle/val/prevalence"} <= tags
    run_dir = next((tmp_path / "wandb").glob("offline-run-*"))
    tables = {path.parent.parent.name + "/" + path.parent.name + "/" + path.name.split("_")[0]
              for path in run_dir.glob("files/media/table/*/*/*.json")}
    assert {"traps/train/states", "drift/val/states", "traps/val/drift"} <= tables  # state tables, trajectories


def test_resume_restores_callback_state(tmp_path):
    trainer, _, _ = fit(tmp_path, max_steps=4)
    checkpoint = tmp_path / "resume.ckpt"
    trainer.save_checkpoint(checkpoint)
    saved = torch.load(checkpoint, weights_only=False)["callbacks"]
    drift_state = next(v for k, v in saved.items() if k.startswith("SemanticDrift"))
    assert drift_state["runs"] == 3 and drift_state["probe"]["chains"]["step"] == 24
    _, _, resumed = fit(tmp_path / "again", max_steps=6, ckpt_path=str(checkpoint))
    drift = next(cb for cb in resumed if isinstance(cb, SemanticDrift))
    assert drift.runs == 4 and drift.probe.chain_state.step == 32  # continued the same chains: 3 runs + 1
    assert len(drift.probe.monitor.history) == 8


def test_meeting_time_metric_agrees_with_the_core_on_the_toy_model():
    potts = PairwiseMRFDenoiser.random(4, 3, scale=0.8, generator=2)

    class ToyModule(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.denoiser = potts

    starts = torch.zeros(64, 4, dtype=torch.long)
    callback = MixingDiagnostics(start_tokens=starts, num_starts=64, max_steps=300, seed=7, overhead=None)
    metrics = callback.scheduled.run(ToyModule(), potts, stage="predict")
    # replay the core with the same stream
    generator = torch.Generator().manual_seed(7)
    sites = potts.resampleable_sites(starts)
    y0 = randomize_sites(potts, starts, sites, generator, site_counts=torch.full((64,), 4))
    chains = CoupledGlauberChains(GlauberSampler(potts, 1.0))
    state = chains.init_state(starts, y0, generator=as_generator(generator, "pairs"), sites=sites,
                              site_counts=torch.full((64,), 4))
    core = meeting_times_of(chains.run(state, 300))
    assert metrics["mixing/predict/censored_fraction"] == pytest.approx(core.censored_fraction)
    assert metrics["mixing/predict/meeting_time_median"] == float(core.quantiles([0.5])[0])


def test_rectangle_prevalence_on_the_bundled_mlm(antiberty):
    denoiser, codec = antiberty
    from mlm_dynamics.models import EXAMPLE_ANTIBODIES

    starts = torch.tensor([codec.encode(EXAMPLE_ANTIBODIES[1])])
    callback = RectangleTest(start_tokens=starts, num_starts=1, pairs_per_context=2, num_tokens=3, max_distance=2,
                             overhead=None)
    metrics = callback.scheduled.run(denoiser, denoiser, stage="val")
    assert metrics["rectangle/val/prevalence"] > 0


def test_callback_validation_and_denoiser_hook():
    with pytest.raises(ValueError, match="every_n_train_steps"):
        RectangleTest(every_n_train_steps=0)
    with pytest.raises(ValueError, match="radius"):
        TrapDetector(radius=3.0)
    with pytest.raises(AttributeError, match="'denoiser' attribute"):
        RectangleTest().denoiser(L.LightningModule())


def test_embedders_are_checked_when_fit_starts_and_plain_functions_are_normalised():
    from mlm_dynamics import FullSequenceDenoiser, VocabInfo
    from mlm_dynamics.embedders import FunctionEmbedder, ModuleOutputEmbedder

    backbone = torch.nn.Sequential(torch.nn.Embedding(10, 8), torch.nn.Linear(8, 8), torch.nn.Linear(8, 10))
    denoiser = FullSequenceDenoiser(backbone, VocabInfo(size=10, mask_id=9, forbidden_ids=(9,)))

    class Module(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.denoiser = denoiser

    with pytest.raises(TypeError, match="hidden_module"):
        SemanticDrift().on_fit_start(None, Module())
    hooked = SemanticDrift(hidden_module="model.1")
    hooked.on_fit_start(None, Module())  # a named submodule with [B, L, H] output will do
    with pytest.raises(ValueError, match=r"hidden_module 'model\.7' is not a submodule"):
        SemanticDrift(hidden_module="model.7").on_fit_start(None, Module())
    embedding = ModuleOutputEmbedder("model.1", denoiser)(torch.randint(9, (3, 5)))
    torch.testing.assert_close(embedding.norm(dim=1), torch.ones(3))
    raw = SemanticDrift(embedder=lambda tokens: 7.0 * tokens.float())  # an un-normalised function
    assert isinstance(raw.probe.embedder, FunctionEmbedder)
    torch.testing.assert_close(raw.probe.embedder(torch.ones(2, 4, dtype=torch.long)).norm(dim=1), torch.ones(2))
    with pytest.raises(ValueError, match="dimension 12, the embedder gives 8"):
        TrapDetector(hidden_module="model.1", topic_anchors={"t": [[1.0] * 12]}).on_fit_start(None, Module())
    with pytest.raises(ValueError, match="need a SentenceEmbedder"):
        TrapDetector(hidden_module="model.1", topic_anchors={"t": ["a sentence"]}).on_fit_start(None, Module())


@pytest.mark.parametrize(("temperature", "certified"), [(0.5, True), (4.0, False)])
def test_meeting_time_probe_logs_the_certified_lower_side_from_the_same_pairs(temperature, certified):
    # A Potts chain with 16 colours and strong coupling: at tau = 0.5 a chain from the all-0 start keeps it (a flip
    # costs 2 J / tau = 20 nats) while its partner from a random filling settles in another colour 15 times in 16, so
    # the paired witness certifies t_mix(1/4) > 300 from 64 pairs; at tau = 4 the pairs meet and nothing is certified.
    potts = PairwiseMRFDenoiser.potts_chain(4, 16, 5.0)

    class ToyModule(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.denoiser = potts

    starts = torch.zeros(64, 4, dtype=torch.long)
    callback = MixingDiagnostics(start_tokens=starts, num_starts=64, max_steps=300, seed=3, temperature=temperature,
                                 overhead=None)
    metrics = callback.scheduled.run(ToyModule(), potts, stage="val")
    assert ("mixing/val/mixing_time_exceeds" in metrics) == certified
    if certified:
        assert metrics["mixing/val/mixing_time_exceeds"] == 300 and metrics["mixing/val/d_lower"] > 0.25
        assert metrics["mixing/val/censored_fraction"] > 0.5  # the upper side alone says nothing here
    else:
        assert metrics["mixing/val/tv_lower"] == 0.0  # met pairs count 0
    assert metrics["mixing/val/chains_needed"] == 11
