"""Verification scores: CRPS family, calibration, extreme events (numpy/dask, xarray API)."""

from ensml.eval.crps import crps_ensemble, crps_ensemble_array
from ensml.eval.gaussian import crps_gaussian, crps_gaussian_xr
from ensml.eval.reduce import reduce_score
from ensml.eval.weights import latitude_weights

__all__ = [
    "crps_ensemble",
    "crps_ensemble_array",
    "crps_gaussian",
    "crps_gaussian_xr",
    "latitude_weights",
    "reduce_score",
]
