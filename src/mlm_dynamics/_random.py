"""The one place a seed becomes a ``torch.Generator``, and the keys of named random streams.

Every function of the package that draws takes ``generator: Randomness`` - a ``torch.Generator``, or an int seed
that :func:`as_generator` turns into one - and never touches the global random state. Independent streams from one
seed are named (``as_generator(seed, "bootstrap")``), not made by seed arithmetic (``seed + 1``): the name is hashed
into the key with :func:`stream_key` (SplitMix64, Steele, Lea & Flood 2014), so streams of different names are
unrelated and a stream does not depend on which other streams exist.
"""

from __future__ import annotations

import hashlib
import struct

import torch

_MASK = (1 << 64) - 1
_GOLDEN, _M1, _M2 = 0x9E3779B97F4A7C15, 0xBF58476D1CE4E5B9, 0x94D049BB133111EB


def _signed(value: int) -> int:
    """``value mod 2^64`` as the int64 with the same bits."""
    value &= _MASK
    return value - (1 << 64) if value >> 63 else value


def mix_int(x: int) -> int:
    """SplitMix64 finaliser on Python integers (the reference)."""
    z = (x + _GOLDEN) & _MASK
    z = ((z ^ (z >> 30)) * _M1) & _MASK
    z = ((z ^ (z >> 27)) * _M2) & _MASK
    return z ^ (z >> 31)


def stream_key(seed: int, *parts: int | float) -> int:
    """The int64 key of the stream identified by ``seed`` and ``parts`` (integers, or floats by their bits)."""
    key = mix_int(seed & _MASK)
    for part in parts:
        bits = struct.unpack("<q", struct.pack("<d", part))[0] if isinstance(part, float) else part
        key = mix_int(key ^ (bits & _MASK))
    return _signed(key)


Randomness = torch.Generator | int
"""What every drawing function takes as ``generator``: a ``torch.Generator``, or an int seed (:func:`as_generator`)."""


def as_generator(source: Randomness, *parts: int | float | str, device: torch.device | str | None = None
                 ) -> torch.Generator:
    """The one place a seed becomes a generator.

    An int ``source`` gives a new generator on ``device`` seeded with it, or with :func:`stream_key` of it and
    ``parts`` (a name per purpose gives independent streams from one seed, instead of ``seed + 1``). A generator is
    returned as it is when no ``parts`` are given and its device type matches; otherwise a new generator on
    ``device`` is seeded from one draw of it.
    """
    target = torch.device(device) if device is not None else None
    if isinstance(source, torch.Generator):
        if not parts and (target is None or source.device.type == target.type):
            return source
        seed = int(torch.randint(2**62, (1,), generator=source, device=source.device))
        return torch.Generator(device=target or source.device).manual_seed(stream_key(seed, *map(_part, parts))
                                                                           & (2**63 - 1))
    if isinstance(source, bool) or not isinstance(source, int) or not 0 <= source < 2**63:
        raise ValueError(f"generator must be a torch.Generator or an int seed in [0, 2^63), got {source!r}")
    seed = stream_key(source, *map(_part, parts)) & (2**63 - 1) if parts else source
    return torch.Generator(device=target or "cpu").manual_seed(seed)


def _part(part: int | float | str) -> int | float:
    """A named stream as a number (the first 8 bytes of the name's SHA-256)."""
    if isinstance(part, str):
        return int.from_bytes(hashlib.sha256(part.encode()).digest()[:8], "little")
    return part


__all__ = ["Randomness", "as_generator", "mix_int", "stream_key"]
