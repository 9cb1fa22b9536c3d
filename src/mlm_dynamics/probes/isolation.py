"""Measuring without disturbing: what a diagnostic run may and may not leave behind in the run it watches.

Inside :func:`isolated` every module is in eval mode and gradients are off; on exit, whatever happened inside, each
submodule's ``training`` flag is what it was (a part the user keeps in eval mode stays in eval mode, the rest goes
back to train mode) and the global CPU random state, and that of the CUDA device measured on, are restored. So the
next dropout mask, the collator's next masking and the data loader's next shuffle are those of a run without the
diagnostics. Diagnostics draw from their own generators, so restoring the global state loses nothing they need.

Gradients are turned off with ``torch.no_grad``, not ``inference_mode``: a model that builds a cache lazily during
a forward pass (rotary tables, say) keeps a normal tensor that training can still use.

:func:`parameter_checksum` tells whether a module's parameters changed: before and after a ``weights=`` context (an
EMA swap that does not restore is an error), and between the start and the end of validation (a module that swapped
its EMA weights in for validation must not have them swapped in a second time).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import Tensor, nn

from ..models.base import evaluating


@contextmanager
def isolated(*modules: nn.Module, device: torch.device) -> Iterator[None]:
    """Eval mode and no gradients inside; modes and the global random state (CPU, and ``device`` if CUDA) restored
    on exit. See the module docstring."""
    cuda = [device.index if device.index is not None else torch.cuda.current_device()] if device.type == "cuda" else []
    with torch.random.fork_rng(devices=cuda), torch.no_grad(), evaluating(*modules):
        yield


@torch.no_grad()
def parameter_checksum(module: nn.Module) -> Tensor:
    """``[P, 2]`` float64 sums and sums of squares of each parameter: equal before and after only if the parameters
    were left as they were (up to a change that keeps both sums, which no weight swap does). Cost: one pass over the
    parameters."""
    sums = [torch.stack([p.double().sum(), p.double().square().sum()]).cpu() for p in module.parameters()]
    return torch.stack(sums) if sums else torch.zeros(0, 2, dtype=torch.float64)


__all__ = ["isolated", "parameter_checksum"]
