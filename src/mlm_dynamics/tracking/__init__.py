"""Online, framework-free tracking of running chains: drift, traps, basins, topics, :class:`ChainMonitor`, and
:func:`monitor_sampler` for decoding loops you cannot edit."""

from .drift import DriftTracker
from .interventions import InterventionEvent, TrapIntervention
from .monitor import ChainMonitor
from .sampler_monitor import SamplerTrace, monitor_sampler
from .traps import TopicAttraction, TrapEvent, TrapTracker

__all__ = ["ChainMonitor", "DriftTracker", "InterventionEvent", "SamplerTrace", "TopicAttraction", "TrapEvent",
           "TrapIntervention", "TrapTracker", "monitor_sampler"]
