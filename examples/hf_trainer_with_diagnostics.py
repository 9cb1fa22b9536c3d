"""A Hugging Face ``Trainer`` fine-tune of the bundled English MLM with the mixing diagnostics attached in one line.

    pip install -e ".[assets,hf]"
    python examples/hf_trainer_with_diagnostics.py --out runs/hf-trainer          # a few minutes on 2 CPU cores
    python examples/hf_trainer_with_diagnostics.py --smoke                        # seconds: the plumbing only
    python examples/hf_trainer_with_diagnostics.py --one-line --steps 1000        # the defaults over 1000 steps

The model, its tokenizer and the collator are the stock ones (``AutoModelForMaskedLM``, ``AutoTokenizer``,
``DataCollatorForLanguageModeling``: dynamic padding, random masking); the training sentences come from the
vendored public-domain corpus. ``DiagnosticsCallback()`` finds the model being trained, reads its start states from
the collator's batches and the token ids from the Trainer's tokenizer, runs coupled chains and the rectangle test
every ``--every`` optimizer steps and after each evaluation, and logs through ``report_to`` (TensorBoard here:
``tensorboard --logdir OUT/runs``). Its state is saved with each Trainer checkpoint, so ``--resume`` continues the
diagnostics' random streams. At the end the script prints the command that renders the mixing history.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch
from transformers import (
    AutoModelForMaskedLM,
    AutoTokenizer,
    DataCollatorForLanguageModeling,
    Trainer,
    TrainingArguments,
)

from mlm_dynamics.corpus import sample_sentences
from mlm_dynamics.integrations.transformers import DiagnosticsCallback
from mlm_dynamics.models.huggingface import dtype_argument
from mlm_dynamics.models.pretrained import english_mlm_dir
from mlm_dynamics.probes import MeetingTimeProbe, RectangleProbe


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=Path("runs/hf-trainer"))
    parser.add_argument("--steps", type=int, default=200, help="optimizer steps")
    parser.add_argument("--every", type=int, default=50, help="diagnostics every N optimizer steps")
    parser.add_argument("--sentences", type=int, default=2000, help="training sentences from the corpus")
    parser.add_argument("--resume", action="store_true", help="continue from the latest checkpoint in --out")
    parser.add_argument("--smoke", action="store_true", help="four steps on a few sentences (seconds)")
    parser.add_argument("--one-line", action="store_true",
                        help="attach the defaults, DiagnosticsCallback() (default probes, every 500 steps and after "
                             "evaluations, 5 %% overhead), instead of the probes tuned for this example")
    args = parser.parse_args(argv)
    if args.smoke:
        args.steps, args.every, args.sentences = 4, 2, 24

    tokenizer = AutoTokenizer.from_pretrained(english_mlm_dir())
    model = AutoModelForMaskedLM.from_pretrained(english_mlm_dir(), **dtype_argument(torch.float32))
    texts = sample_sentences(args.sentences, generator=0, split="train")
    train = [tokenizer(text, truncation=True, max_length=48) for text in texts]
    held_out = [tokenizer(text, truncation=True, max_length=48)
                for text in sample_sentences(max(8, args.sentences // 20), generator=1, split="heldout")]
    diagnostics = DiagnosticsCallback() if args.one_line else DiagnosticsCallback(
        [MeetingTimeProbe(max_steps=20 if args.smoke else 200),
         RectangleProbe(pairs_per_context=2 if args.smoke else 8)],
        every_n_steps=args.every, num_starts=2 if args.smoke else 8)
    trainer = Trainer(
        model=model,
        args=TrainingArguments(output_dir=str(args.out), max_steps=args.steps, per_device_train_batch_size=8,
                               learning_rate=5e-5, logging_steps=max(1, args.every // 5), eval_strategy="steps",
                               eval_steps=args.every * 2, save_steps=args.every * 2, report_to=["tensorboard"],
                               use_cpu=not torch.cuda.is_available(), seed=0, disable_tqdm=args.smoke),
        train_dataset=train, eval_dataset=held_out, data_collator=DataCollatorForLanguageModeling(tokenizer),
        processing_class=tokenizer, callbacks=[diagnostics])  # the one line
    trainer.train(resume_from_checkpoint=True if args.resume else None)
    print(f"diagnostics at step {trainer.state.global_step}:")
    for name, value in sorted(diagnostics.latest.items()):
        print(f"  {name} = {value:.4g}")
    print(f"mixing history: mlm-dynamics report {args.out / 'runs'} --out {args.out / 'history'}")
    return diagnostics.latest


if __name__ == "__main__":
    main()
