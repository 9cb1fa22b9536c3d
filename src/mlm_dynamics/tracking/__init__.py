"""Online, framework-free tracking of running chains: drift, traps, basins, topics, and :class:`ChainMonitor`."""

from .drift import DriftTracker
from .interventions import InterventionEvent, TrapIntervention
from .monitor import ChainMonitor
from .traps import TopicAttraction, TrapEvent, TrapTracker

__all__ = ["ChainMonitor", "DriftTracker", "InterventionEvent", "TopicAttraction", "TrapEvent", "TrapIntervention",
           "TrapTracker"]
