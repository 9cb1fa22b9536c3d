"""Scheduled diagnostics usable from any training or decoding loop, with the non-interference guarantee.

- :mod:`.base`: :class:`Probe` (one diagnostic) and :class:`ScheduledProbe` (its schedule, start states, budget,
  weights, random stream and state);
- :mod:`.mixing`: meeting times of coupled chains, the rectangle test, influence coefficients;
- :mod:`.chains`: long-run chains with drift, traps, basins and topics;
- :mod:`.decoding`: parallel decoding (the error of committing several positions at once);
- :mod:`.starts`: start states from tensors, dicts, ``BatchEncoding`` and collator output (labels, padding);
- :mod:`.isolation`: what a run restores (modes, random state) and checks (weights);
- :mod:`.keys`: the generated table of every metric name.
"""

from .base import STAGES, MetricKey, Probe, ScheduledProbe
from .chains import DriftProbe, TrapProbe
from .decoding import ParallelDecodingProbe
from .isolation import isolated, parameter_checksum
from .keys import metric_key_page, metric_key_table
from .mixing import DobrushinProbe, MeetingTimeProbe, RectangleProbe
from .starts import BatchRows, StartStates, batch_rows, start_states

__all__ = ["STAGES", "BatchRows", "DobrushinProbe", "DriftProbe", "MeetingTimeProbe", "MetricKey",
           "ParallelDecodingProbe", "Probe", "RectangleProbe", "ScheduledProbe", "StartStates", "TrapProbe",
           "batch_rows", "isolated", "metric_key_page", "metric_key_table", "parameter_checksum", "start_states"]
