"""Cost of the diagnostic callbacks during training, as ratios against the same fit without them.

A masked-denoiser fit (``MaskedDenoiserModule`` around a randomly initialised BERT of ``--hidden`` x ``--layers``,
vocabulary ``--vocab``, batch ``--batch`` x ``--length``) measured in one process:

1. the median optimizer-step time of the bare fit (``--steps`` steps after one warm-up step);
2. the same with the callbacks attached but not due (they only copy the first rows of each batch): the per-step
   cost of attaching; 1 and 2 alternate over ``--rounds`` rounds, so a slow spell of the machine hits both;
3. one run of each callback (the README's set: ``MixingDiagnostics(max_steps=200)``, ``RectangleTest()``,
   ``TrapDetector(steps_per_run=50)``, 4 start rows each), timed by the callbacks themselves.

The overhead at a schedule of one run every N steps is ``(N t_attached + sum of run times) / (N t_bare)``: printed
for ``--every`` and the smallest N that keeps it within 1.03x. ``--preset bert-base`` is 12 x 768, V = 30,522,
batch 16 x 128; ``--preset tiny`` the 2 x 64 model of earlier figures.

``--realised F [F ...]``: the budget the user sets. For each fraction F, a fit of about ``--seconds`` seconds of bare
training with the three callbacks due at every step and ``overhead=F/3`` each (so F in all), against the same fit
bare, before and after: realised overhead = (attached fit's step seconds - bare fits') / bare fits', measured from
the outside in wall and CPU seconds (a shared machine's noise floor: the two bare fits' difference), next to the
callbacks' own account (their seconds over the loop's). The same for the Hugging Face Trainer
(``--trainer hf``): ``DiagnosticsCallback(overhead=F)`` on a ``BertForMaskedLM`` of the preset's size fine-tuned with
the stock collator on the shipped English MLM's tokenizer. A run's cost is kept small (``--probe-steps``) so that
many runs fit in the time: the budget's granularity is one run.

Usage: python benchmarks/bench_callbacks.py [--preset bert-base|tiny] [--steps 3] [--every 500]
       python benchmarks/bench_callbacks.py --preset tiny --realised 0.01 0.05 0.2 [--seconds 60] [--trainer hf]
"""

from __future__ import annotations

import argparse
import math
import statistics
import tempfile
import time
from typing import Any

import lightning as L
import torch
from torch.utils.data import DataLoader
from transformers import BertConfig, BertForMaskedLM, TrainerCallback

from mlm_dynamics import MaskedLMDenoiser
from mlm_dynamics.callbacks import MixingDiagnostics, RectangleTest, TrapDetector
from mlm_dynamics.integrations.transformers import DiagnosticsCallback
from mlm_dynamics.probes import MeetingTimeProbe, RectangleProbe
from mlm_dynamics.training import MaskedDenoiserModule

PRESETS = {"bert-base": dict(hidden=768, layers=12, vocab=30522, batch=16, length=128),
           "small": dict(hidden=256, layers=4, vocab=8000, batch=16, length=64),
           "tiny": dict(hidden=64, layers=2, vocab=2000, batch=16, length=64)}


class Times:
    """Wall and CPU seconds (all of the process's threads) of each optimizer step: a machine that shares its cores
    slows the wall clock of a step, much less its CPU seconds."""

    def __init__(self) -> None:
        self.times: list[float] = []
        self.cpu: list[float] = []
        self.started = (0.0, 0.0)

    def begin(self) -> None:
        self.started = (time.perf_counter(), time.process_time())

    def end(self) -> None:
        self.times.append(time.perf_counter() - self.started[0])
        self.cpu.append(time.process_time() - self.started[1])


class StepTimer(L.Callback, Times):
    """Each optimizer step, from batch start to the end of the callbacks listed before the timer (so the
    diagnostics' per-batch work is counted)."""

    def __init__(self) -> None:
        Times.__init__(self)

    def on_train_batch_start(self, trainer: L.Trainer, module: L.LightningModule, batch: Any, index: int) -> None:
        self.begin()

    def on_train_batch_end(self, trainer: L.Trainer, module: L.LightningModule, outputs: Any, batch: Any,
                           index: int) -> None:
        self.end()


def fit(args: argparse.Namespace, callbacks: list[L.Callback], steps: int) -> Times:
    """Per-step times of a fit of ``steps`` steps after a warm-up step (which is dropped)."""
    config = BertConfig(vocab_size=args.vocab, hidden_size=args.hidden, num_hidden_layers=args.layers,
                        num_attention_heads=max(1, args.hidden // 64), intermediate_size=4 * args.hidden,
                        max_position_embeddings=args.length, pad_token_id=0)
    with torch.random.fork_rng():
        torch.manual_seed(0)
        model = BertForMaskedLM(config)
    denoiser = MaskedLMDenoiser(model, mask_id=3, special_ids=(0, 1, 2, 3), frame_ids=(0, 1, 2), pad_id=0)
    data = torch.randint(4, args.vocab, (args.batch * (steps + 1), args.length))
    data[:, 0], data[:, -1] = 1, 2
    timer = StepTimer()
    trainer = L.Trainer(max_steps=steps + 1, callbacks=[*callbacks, timer], logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, accelerator="cpu",
                        num_sanity_val_steps=0, limit_val_batches=0)
    trainer.fit(MaskedDenoiserModule(denoiser), DataLoader(data, batch_size=args.batch))
    timer.times, timer.cpu = timer.times[1:], timer.cpu[1:]
    return timer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--preset", choices=sorted(PRESETS), default="bert-base")
    parser.add_argument("--steps", type=int, default=3, help="timed optimizer steps per fit")
    parser.add_argument("--rounds", type=int, default=2, help="alternating bare / attached fits")
    parser.add_argument("--every", type=int, default=500, help="the schedule to report: one run every N steps")
    parser.add_argument("--realised", type=float, nargs="+", help="measure the realised overhead at these fractions")
    parser.add_argument("--seconds", type=float, default=60.0, help="bare training seconds per realised fit")
    parser.add_argument("--probe-steps", type=int, default=50, help="chain steps of a meeting-time run (realised)")
    parser.add_argument("--trainer", choices=["lightning", "hf"], default="lightning")
    args = parser.parse_args()
    for key, value in PRESETS[args.preset].items():
        setattr(args, key, value)
    if args.realised:
        realised(args)
        return

    def callbacks(every: int) -> list[L.Callback]:
        common = dict(every_n_train_steps=every, on_validation_end=False, num_starts=4, overhead=None)
        return [MixingDiagnostics(max_steps=200, **common), RectangleTest(**common),
                TrapDetector(steps_per_run=50, **common)]

    bare_times: list[float] = []
    attached_times: list[float] = []
    for _ in range(args.rounds):
        bare_times += fit(args, [], args.steps).times
        attached_times += fit(args, callbacks(10**9), args.steps).times  # attached, never due
    bare, attached = statistics.median(bare_times), statistics.median(attached_times)
    running = callbacks(1)
    fit(args, running, 0)  # one step: one run of each
    run_seconds = {type(cb).__name__: cb.seconds_used / cb.runs for cb in running}
    total = sum(run_seconds.values())
    print(f"BERT-style {args.hidden}x{args.layers}, V={args.vocab}, batch {args.batch}x{args.length}, "
          f"{torch.get_num_threads()} threads; median of {args.rounds} x {args.steps} steps")
    print(f"optimizer step: bare {bare:.3f} s, callbacks attached (not due) {attached:.3f} s: "
          f"{attached / bare:.3f}x")
    print("one run: " + ", ".join(f"{name} {seconds:.1f} s" for name, seconds in run_seconds.items())
          + f" (total {total:.1f} s = {total / bare:.1f} bare steps)")
    ratio = (args.every * attached + total) / (args.every * bare)
    print(f"every {args.every} steps: {ratio:.3f}x the bare fit (target <= 1.03x)")
    margin = 1.03 * bare - attached
    if margin > 0:
        print(f"within 1.03x from every {math.ceil(total / margin)} steps")
    else:
        print("attaching alone costs more than 3 %")


def realised(args: argparse.Namespace) -> None:
    """Print the realised overhead of the budgeted callbacks at each of ``args.realised``, measured from outside."""
    step = statistics.median((fit(args, [], 5) if args.trainer == "lightning" else hf_fit(args, None, 5)).times)
    steps = max(10, round(args.seconds / step))
    print(f"{args.trainer}: BERT-style {args.hidden}x{args.layers}, V={args.vocab}; bare step {step:.4f} s, "
          f"{steps} steps per fit, meeting-time runs of {args.probe_steps} steps")
    for fraction in args.realised:
        if args.trainer == "lightning":
            common = dict(every_n_train_steps=1, on_validation_end=False, num_starts=4, overhead=fraction / 3)
            attached = [MixingDiagnostics(max_steps=args.probe_steps, **common), RectangleTest(**common),
                        TrapDetector(steps_per_run=args.probe_steps // 4, **common)]
            before, attached_times, after = fit(args, [], steps), fit(args, attached, steps), fit(args, [], steps)
            scheduled = [callback.scheduled for callback in attached]
        else:
            callback = DiagnosticsCallback([MeetingTimeProbe(max_steps=args.probe_steps), RectangleProbe()],
                                           every_n_steps=1, at_evaluate=False, overhead=fraction)
            before, attached_times, after = (hf_fit(args, None, steps), hf_fit(args, callback, steps),
                                             hf_fit(args, None, steps))
            scheduled = callback.scheduled
        outside = {}
        for clock in ("times", "cpu"):  # a bare fit on each side: their difference is the noise floor
            seconds = [sum(getattr(timed, clock)) for timed in (before, attached_times, after)]
            bare = (seconds[0] + seconds[2]) / 2
            outside[clock] = ((seconds[1] - bare) / bare, abs(seconds[0] - seconds[2]) / bare)
        inside = sum(s.seconds_used / s.loop_seconds for s in scheduled)
        runs = sum(s.runs for s in scheduled)
        skipped = sum(s.skipped_runs for s in scheduled)
        (wall, wall_noise), (cpu, cpu_noise) = outside["times"], outside["cpu"]
        print(f"overhead={fraction:g}: by the callbacks' account {inside:.4f} ({inside / fraction:.2f}x the request); "
              f"from outside {wall:.4f} wall ({wall / fraction:.2f}x; bare-vs-bare {wall_noise:.4f}), {cpu:.4f} CPU "
              f"({cpu / fraction:.2f}x; bare-vs-bare {cpu_noise:.4f}); {runs} runs, {skipped} skipped")


def hf_fit(args: argparse.Namespace, callback: DiagnosticsCallback | None, steps: int) -> Times:
    """Per-step times of a Hugging Face Trainer fine-tune (collator, dynamic masking) of ``steps`` steps after a
    warm-up step; ``callback`` attached when given (listed before the timer)."""
    from transformers import AutoTokenizer, DataCollatorForLanguageModeling, Trainer, TrainingArguments

    from mlm_dynamics.models.pretrained import english_mlm_dir

    tokenizer = AutoTokenizer.from_pretrained(str(english_mlm_dir()))
    config = BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=args.hidden, num_hidden_layers=args.layers,
                        num_attention_heads=max(1, args.hidden // 64), intermediate_size=4 * args.hidden)
    with torch.random.fork_rng():
        torch.manual_seed(0)
        model = BertForMaskedLM(config)
    texts = [" ".join(f"word{(7 * i + j) % 97}" for j in range(args.length - 2)) for i in range(args.batch * 4)]
    timer = HFStepTimer()
    with tempfile.TemporaryDirectory() as out:
        training = TrainingArguments(output_dir=out, max_steps=steps + 1, per_device_train_batch_size=args.batch,
                                     save_strategy="no", report_to=[], disable_tqdm=True, use_cpu=True,
                                     logging_strategy="no")
        trainer = Trainer(model=model, args=training, train_dataset=[tokenizer(t) for t in texts],
                          data_collator=DataCollatorForLanguageModeling(tokenizer), processing_class=tokenizer,
                          callbacks=[*([callback] if callback else []), timer])
        trainer.train()
    timer.times, timer.cpu = timer.times[1:], timer.cpu[1:]
    return timer


class HFStepTimer(TrainerCallback, Times):
    """Each optimizer step of a Hugging Face Trainer, to the end of the callbacks listed before it."""

    def __init__(self) -> None:
        Times.__init__(self)

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.begin()

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.end()


if __name__ == "__main__":
    main()
