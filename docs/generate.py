"""Write the documentation pages that are generated from the code: ``python docs/generate.py``.

``tests/test_docs_generated.py`` fails when a committed page differs from what this writes.
"""

from __future__ import annotations

from pathlib import Path

from mlm_dynamics.probes.keys import metric_key_page

PAGES = {"metric-keys.md": metric_key_page}


def main() -> None:
    here = Path(__file__).parent
    for name, page in PAGES.items():
        (here / name).write_text(page())
        print(f"wrote {here / name}")


if __name__ == "__main__":
    main()
