"""The Hugging Face Trainer adapter: one callback attaches the diagnostics to a collator fine-tune, logs through the
Trainer's report_to integrations, leaves the fit bit-identical, runs once per optimizer step under gradient
accumulation, and continues its streams from the Trainer's checkpoints."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("accelerate", reason="the Hugging Face Trainer needs accelerate (the hf extra)")

from transformers import (
    AutoTokenizer,
    BertConfig,
    BertForMaskedLM,
    DataCollatorForLanguageModeling,
    Trainer,
    TrainerCallback,
    TrainingArguments,
)

from mlm_dynamics.integrations.transformers import STATE_FILE, DiagnosticsCallback
from mlm_dynamics.models.pretrained import english_mlm_dir

TEXTS = ["the old man walked slowly down the road with his dog", "god created the heaven and the earth",
         "the ship sailed across the sea at dawn", "call me ishmael some years ago never mind how long",
         "the union is strong and the people are free", "and the sea was calm that night"]


@pytest.fixture(scope="module")
def tokenizer():
    return AutoTokenizer.from_pretrained(str(english_mlm_dir()))


class Recorder(TrainerCallback):
    """What a report_to integration receives: every on_log call, with its step."""

    def __init__(self) -> None:
        self.logged: list[tuple[int, dict]] = []

    def on_log(self, args, state, control, logs=None, **kwargs):
        self.logged.append((state.global_step, dict(logs or {})))


class StopAt(TrainerCallback):
    """Ends training after optimizer step ``step``, as a kill after that step's checkpoint would."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == self.step:
            control.should_training_stop = True


def fine_tune(tokenizer, out, callbacks, *, steps=4, accumulation=1, resume=None, save_steps=2, report_to=()):
    """A BertForMaskedLM fine-tune with the stock collator (dynamic padding, random masking) and dropout on."""
    torch.manual_seed(0)
    model = BertForMaskedLM(BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=32, num_hidden_layers=1,
                                       num_attention_heads=2, intermediate_size=64))
    args = TrainingArguments(output_dir=str(out), max_steps=steps, per_device_train_batch_size=3, logging_steps=1,
                             gradient_accumulation_steps=accumulation, save_steps=save_steps, seed=0,
                             report_to=list(report_to), disable_tqdm=True, use_cpu=True, learning_rate=1e-3)
    trainer = Trainer(model=model, args=args, train_dataset=[tokenizer(text) for text in TEXTS * 4],
                      data_collator=DataCollatorForLanguageModeling(tokenizer), processing_class=tokenizer,
                      callbacks=callbacks)
    trainer.train(resume_from_checkpoint=resume)
    return trainer


def losses(trainer) -> list[tuple[int, float]]:
    return [(entry["step"], entry["loss"]) for entry in trainer.state.log_history if "loss" in entry]


@pytest.mark.parametrize("accumulation", [1, 2])
def test_one_callback_attaches_logs_and_leaves_the_fit_bit_identical(tmp_path, tokenizer, accumulation):
    bare = fine_tune(tokenizer, tmp_path / "bare", [], accumulation=accumulation)
    state_after_bare = torch.random.get_rng_state()
    recorder = Recorder()
    diagnostics = DiagnosticsCallback(every_n_steps=2, overhead=None)
    watched = fine_tune(tokenizer, tmp_path / "watched", [recorder, diagnostics], accumulation=accumulation)
    # the fit it watched is the fit without it
    assert losses(watched) == losses(bare) and len(losses(bare)) == 4
    assert all(torch.equal(a, b) for a, b in zip(watched.model.parameters(), bare.model.parameters(), strict=True))
    assert torch.equal(torch.random.get_rng_state(), state_after_bare)
    assert watched.model.training == bare.model.training
    # each value reached the integrations once, at the optimizer step it was measured (2 and 4, also when two
    # micro-batches make a step), beside the Trainer's own logs, which still arrive at every step
    measured = [(step, logs) for step, logs in recorder.logged if "mixing/train/meeting_time_median" in logs]
    assert [step for step, _ in measured] == [2, 4]
    assert all("rectangle/train/prevalence" in logs and "loss" not in logs for _, logs in measured)
    assert [step for step, logs in recorder.logged if "loss" in logs] == [1, 2, 3, 4]
    history = [entry for entry in watched.state.log_history if "mixing/train/censored_fraction" in entry]
    assert [entry["step"] for entry in history] == [2, 4]
    # the model was wrapped, not copied, and the input hook is gone after training
    assert diagnostics.denoiser is not None and diagnostics.denoiser.model is watched.model
    assert not watched.model._forward_pre_hooks


class Resuming(DiagnosticsCallback):
    """Records its state as it stands when training (re)starts."""

    def on_train_begin(self, args, state, control, **kwargs):
        super().on_train_begin(args, state, control, **kwargs)
        self.at_start = self.state_dict()


def same(a, b) -> bool:
    """Nested states equal, tensors bit for bit (wall-clock measurements aside: seconds spent, the loop's seconds,
    the cost estimate and the realised overhead logged from them)."""
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(
            same(a[k], b[k]) for k in a
            if k not in ("seconds_used", "loop_seconds", "estimate") and not str(k).endswith("/overhead"))
    if isinstance(a, (list, tuple)):
        return isinstance(b, (list, tuple)) and len(a) == len(b) and all(map(same, a, b))
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    return a == b


def test_resumed_fine_tune_continues_the_diagnostics_streams(tmp_path, tokenizer):
    fine_tune(tokenizer, tmp_path / "whole", [DiagnosticsCallback(every_n_steps=2, overhead=None)], steps=4)
    fine_tune(tokenizer, tmp_path / "split", [DiagnosticsCallback(every_n_steps=2, overhead=None), StopAt(2)], steps=4)
    saved = torch.load(tmp_path / "split" / "checkpoint-2" / STATE_FILE, weights_only=True)
    # what a checkpoint keeps is a function of the run up to it: the same as the uninterrupted fine-tune's
    assert same(saved, torch.load(tmp_path / "whole" / "checkpoint-2" / STATE_FILE, weights_only=True))
    resumed = Resuming(every_n_steps=2, overhead=None)
    fine_tune(tokenizer, tmp_path / "split", [resumed], steps=4, resume=str(tmp_path / "split" / "checkpoint-2"))
    assert same(resumed.at_start, saved)  # schedule, budget, streams and starts continue from the checkpoint
    assert not same(Resuming(every_n_steps=2, overhead=None).state_dict(), saved)  # (a fresh callback's state differs)
    assert [s.runs for s in resumed.scheduled] == [2, 2]  # one run restored, one after the resume


def test_a_resume_into_another_output_dir_finds_the_state_and_a_resume_without_one_says_so(tmp_path, tokenizer):
    fine_tune(tokenizer, tmp_path / "first", [DiagnosticsCallback(every_n_steps=2, overhead=None), StopAt(2)], steps=4)
    checkpoint = tmp_path / "first" / "checkpoint-2"
    resumed = Resuming(every_n_steps=2, overhead=None)
    fine_tune(tokenizer, tmp_path / "second", [resumed], steps=4, resume=str(checkpoint))  # another output_dir
    assert same(resumed.at_start, torch.load(checkpoint / STATE_FILE, weights_only=True))
    assert [s.runs for s in resumed.scheduled] == [2, 2]
    (checkpoint / STATE_FILE).unlink()  # a checkpoint written without the callback
    with pytest.warns(RuntimeWarning, match="resumed at step 2 but no diagnostics state"):
        fine_tune(tokenizer, tmp_path / "third", [DiagnosticsCallback(every_n_steps=2, overhead=None)], steps=4,
                  resume=str(checkpoint))


def test_ids_come_from_the_model_config_without_a_tokenizer_or_an_error_says_what_to_pass(tokenizer):
    model = BertForMaskedLM(BertConfig(vocab_size=40, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                       intermediate_size=32, pad_token_id=0))
    callback = DiagnosticsCallback()
    with pytest.raises(ValueError, match=r"the Trainer has no tokenizer .* as processing_class"):
        callback.build_denoiser(model, None)
    model.config.mask_token_id = 3
    denoiser = callback.build_denoiser(model, None)
    assert denoiser.vocab.mask_id == 3 and 0 in denoiser.vocab.frame_ids
    sized = BertForMaskedLM(BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=16, num_hidden_layers=1,
                                       num_attention_heads=2, intermediate_size=32))
    assert callback.build_denoiser(sized, tokenizer).vocab.mask_id == tokenizer.mask_token_id  # the tokenizer first
    with pytest.raises(ValueError, match="probes"):
        DiagnosticsCallback(probes=[])


def test_values_reach_tensorboard_through_report_to_and_read_back_as_the_callbacks_keys(tmp_path, tokenizer):
    from mlm_dynamics.report.logs import read_logs

    fine_tune(tokenizer, tmp_path, [DiagnosticsCallback(every_n_steps=2, overhead=None)], report_to=["tensorboard"])
    run = read_logs(tmp_path / "runs")  # logged as train/mixing/train/... by the integration, read back without it
    assert [step for step, _ in run.scalars["mixing/train/meeting_time_median"]] == [2, 4]
    assert "rectangle/train/prevalence" in run.scalars
    # the draws went beside the events, as the tokenizer's tokens
    assert [(record["step"], record["key"]) for record in run.draws] == [(2, "mixing/train"), (4, "mixing/train")]
    start = run.draws[0]["draws"][0]["x (start row) at step 0"].split(" ")
    assert start[0] == tokenizer.cls_token and start[-1] == tokenizer.sep_token


def test_a_trainer_that_only_evaluates_gets_the_validation_diagnostics(tmp_path, tokenizer):
    torch.manual_seed(0)
    model = BertForMaskedLM(BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=32, num_hidden_layers=1,
                                       num_attention_heads=2, intermediate_size=64))
    recorder = Recorder()
    trainer = Trainer(model=model, args=TrainingArguments(output_dir=str(tmp_path), report_to=[], use_cpu=True,
                                                          per_device_eval_batch_size=3),
                      eval_dataset=[tokenizer(text) for text in TEXTS], processing_class=tokenizer,
                      data_collator=DataCollatorForLanguageModeling(tokenizer),
                      callbacks=[recorder, DiagnosticsCallback(start_tokens=[tokenizer(TEXTS[0])["input_ids"]],
                                                               overhead=None)])
    trainer.evaluate()
    assert any("mixing/val/meeting_time_median" in logs for _, logs in recorder.logged)
