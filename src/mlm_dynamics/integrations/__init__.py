"""Adapters for training loops and dashboards other than Lightning's: the Hugging Face ``Trainer``
(:mod:`.transformers`), W&B metric definitions and workspaces (:mod:`.wandb`) and TensorBoard layouts
(:mod:`.tensorboard`). Each is imported on its own, so a user of one never loads the others' frameworks."""

__all__: list[str] = []
