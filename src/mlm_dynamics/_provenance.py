"""What every result and report records about how it was made, whatever made it."""

from __future__ import annotations

import datetime
import sys
from pathlib import Path

from ._version import __version__


def generated_by() -> dict[str, str]:
    """The package version, the date (UTC) and the command line that is making a result or report now."""
    return {"mlm_dynamics": __version__,
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "command": " ".join(Path(sys.argv[0]).name if k == 0 else arg for k, arg in enumerate(sys.argv))}


__all__ = ["generated_by"]
