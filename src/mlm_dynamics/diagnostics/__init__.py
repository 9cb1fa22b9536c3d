"""Pure diagnostics: functions over tensors and result dataclasses, each with one ``summary() -> dict[str, float]``.

Quantiles everywhere follow :mod:`.quantiles` (one convention, one naming scheme).
"""

from .convergence import ess, rhat
from .influence import InfluenceEstimate, estimate_influence, mixing_time_bound, softmax_tv_bound
from .margins import LocalMargins, escape_probability_bound, local_margins
from .meeting import HittingTimes, MeetingTimes
from .quantiles import DEFAULT_LEVELS, quantile_key, quantile_summary, quantiles
from .rectangle import RectangleReport, float_tolerance, rectangle_grid, sample_rectangles
from .scaling import BoundaryPoint, ScalingFit, fit_by_temperature, fit_n_log_n, fit_scaling, phase_boundary

__all__ = [
           "DEFAULT_LEVELS",
           "BoundaryPoint",
           "HittingTimes",
           "InfluenceEstimate",
           "LocalMargins",
           "MeetingTimes",
           "RectangleReport",
           "ScalingFit",
           "escape_probability_bound",
           "ess",
           "estimate_influence",
           "fit_by_temperature",
           "fit_n_log_n",
           "fit_scaling",
           "float_tolerance",
           "local_margins",
           "mixing_time_bound",
           "phase_boundary",
           "quantile_key",
           "quantile_summary",
           "quantiles",
           "rectangle_grid",
           "rhat",
           "sample_rectangles",
           "softmax_tv_bound",
]
