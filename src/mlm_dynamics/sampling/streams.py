"""Counter-based random streams: each chain draws uniforms that are a pure function of its own key and step.

A chain (or coupled pair) ``r`` with key ``k_r`` draws, at step ``t``, the uniforms

    u_{r,t,j} = top53( mix(k_r XOR mix(t S + j)) ) / 2^53,   j = 0 .. S - 1,

with ``mix`` the SplitMix64 finaliser (Steele, Lea & Flood 2014) and ``S`` the slots a step uses. Nothing is shared
between chains and nothing is carried from step to step, so a chain's path does not depend on which other chains
are in the batch, on the order they are stored in, on chains that left the batch, on how the work is split over
processes, or on where a run was interrupted: a cell of a sweep gives the same meeting times alone, inside any grid
and after a resume. Keys come from :func:`stream_key` on the values that identify a chain (a seed, the cell's
temperature and length, the pair's index), never on its position in a batch.

The arithmetic is 64-bit integer arithmetic modulo ``2^64``: int64 tensors wrap on overflow in PyTorch's CPU and
CUDA kernels (two's complement), and the right shifts are made logical by masking. :func:`mix_int` is the
pure-Python reference the tests compare against. Cost: a handful of integer operations per uniform.
"""

from __future__ import annotations

import torch
from torch import Tensor

from .._random import _GOLDEN, _M1, _M2, _signed, mix_int, stream_key


def _logical_shift(x: Tensor, bits: int) -> Tensor:
    return (x >> bits) & ((1 << (64 - bits)) - 1)


def mix(x: Tensor) -> Tensor:
    """SplitMix64 finaliser on int64 tensors, elementwise (bit-identical to :func:`mix_int`)."""
    z = x + _signed(_GOLDEN)
    z = (z ^ _logical_shift(z, 30)) * _signed(_M1)
    z = (z ^ _logical_shift(z, 27)) * _signed(_M2)
    return z ^ _logical_shift(z, 31)


def uniforms(keys: Tensor, step: int | Tensor, slots: int) -> Tensor:
    """``[R, slots]`` float64 uniforms in ``[0, 1)`` of the streams ``keys [R]`` (int64) at ``step`` (one for all
    rows, or ``[R]``: each row's own step, e.g. its age when rows started at different times)."""
    if isinstance(step, Tensor):
        counters = step.to(keys.device).long()[:, None] * slots + torch.arange(slots, device=keys.device)
        bits = mix(keys[:, None] ^ mix(counters))
        return _logical_shift(bits, 11).double() * 2.0**-53
    counters = torch.arange(step * slots, (step + 1) * slots, dtype=torch.int64, device=keys.device)
    bits = mix(keys[:, None] ^ mix(counters)[None, :])
    return _logical_shift(bits, 11).double() * 2.0**-53


__all__ = ["mix", "mix_int", "stream_key", "uniforms"]
