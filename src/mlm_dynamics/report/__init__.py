"""Figures, HTML reports and writers of the jobs' results.

Import what you need from the modules (the package imports none, so the callbacks can draw figures without loading
the jobs): :mod:`.figures` (figures of diagnostics results), :mod:`.sweep_figures`, :mod:`.html` (the report
page), :mod:`.writers` (atomic JSON/CSV/text), and one module per job: :mod:`.run_report`, :mod:`.sweep_report`,
:mod:`.semantics_report`, :mod:`.rectangle_report`.
"""

__all__: list[str] = []
