"""Verification scores: CRPS family, calibration, extreme events (numpy/dask, xarray API).

Every score takes DataArrays with the names of :mod:`ensml.names`, averages with
``reduce_dims`` / ``preserve_dims`` and optional ``weights`` (see
:func:`ensml.eval.weights.latitude_weights`), drops NaN members, and gives NaN (never 0)
where nothing valid is left.
"""

from ensml.eval.calibration import ensemble_mean_bias, ensemble_mean_rmse, rank_histogram, spread_skill_ratio
from ensml.eval.crps import crps_ensemble, crps_ensemble_array
from ensml.eval.efi import eecrps, extreme_forecast_index, model_climate, reforecast_efi
from ensml.eval.gaussian import crps_gaussian, crps_gaussian_xr
from ensml.eval.probability import brier_score, exceedance_probability, reliability
from ensml.eval.reduce import reduce_score
from ensml.eval.skill import bootstrap_ci, skill_score
from ensml.eval.twcrps import twcrps_ensemble
from ensml.eval.weights import latitude_weights

__all__ = [
    "bootstrap_ci",
    "brier_score",
    "crps_ensemble",
    "crps_ensemble_array",
    "crps_gaussian",
    "crps_gaussian_xr",
    "eecrps",
    "ensemble_mean_bias",
    "ensemble_mean_rmse",
    "exceedance_probability",
    "extreme_forecast_index",
    "latitude_weights",
    "model_climate",
    "rank_histogram",
    "reduce_score",
    "reforecast_efi",
    "reliability",
    "skill_score",
    "spread_skill_ratio",
    "twcrps_ensemble",
]
