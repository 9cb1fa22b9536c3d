"""Deprecated: the exact Glauber kernels moved to :mod:`mlm_dynamics.sampling.exact` (they are the sampler's, not a
model's); the old names resolve there with a DeprecationWarning until the next release."""

from .._deprecated import moved

_NAMES = ("expected_meeting_times", "glauber_transition_matrix", "state_index", "stationary_distribution",
          "tv_to_stationarity")
__getattr__ = moved(__name__, {name: f"mlm_dynamics.sampling.exact:{name}" for name in _NAMES})
__all__: list[str] = []
