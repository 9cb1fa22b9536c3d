"""Names that moved, kept importable for one release: the old name gives the new object with a DeprecationWarning."""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Callable, Mapping
from typing import Any


def moved(module: str, targets: Mapping[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` for the names of ``targets`` (``{"old": "new.module:name"}``) that ``module`` no
    longer holds; the new module is imported only when an old name is used."""

    def __getattr__(name: str) -> Any:
        if name not in targets:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        where, attribute = targets[name].split(":")
        warnings.warn(f"{module}.{name} moved to {where}.{attribute}; the old name goes in the next release",
                      DeprecationWarning, stacklevel=2)
        return getattr(importlib.import_module(where), attribute)

    return __getattr__


__all__ = ["moved"]
