"""Verification scores: CRPS family, calibration, extreme events (numpy/dask, xarray API).

Every score takes DataArrays with the names of :mod:`ensml.names` and averages with
``reduce_dims`` / ``preserve_dims`` and optional ``weights`` (see
:func:`ensml.data.weights.latitude_weights`).

Multivariate: energy and variogram scores (:mod:`~ensml.scores.multivariate`), rank histograms
of vectors through pre-rank functions (:func:`prerank_histogram`: area means, average ranks,
band depth, minimum spanning trees) and zonal power spectra of fields (:mod:`~ensml.scores.spectra`);
the fair scores of samples in torch that train generated members are
:mod:`ensml.scores.fair_samples`.

Also here: leave-one-member-out verification without observations (:func:`leave_one_member_out`,
:func:`below_ground`). Area weights are properties of the grid (:mod:`ensml.data.weights`); maps
are drawn by :mod:`ensml.verify.maps`.

NaN and Inf policy, the same for every score here (shared checks in :mod:`ensml.scores.reduce`):

* **±Inf is an error.** Infinite values in a forecast, an observation, a Gaussian μ or σ, a
  score given to :func:`skill_score` / :func:`bootstrap_ci`, or a pointwise score (overflow)
  raise :class:`~ensml.errors.EnsmlError`: one line naming the function, the argument and the
  count (in memory: also the first position; dask: checked chunk by chunk when computed).
  No weather quantity is infinite: an Inf is a broken file or an overflow, never data.
* **NaN is a missing value.** A NaN member is dropped wherever the score is defined for any
  number of members: ensemble CRPS and twCRPS (the fair estimators need two valid members),
  Brier score, exceedance probability and reliability (p over the valid members),
  ensemble-mean bias and RMSE (mean of the valid members), spread-skill ratio (variance of
  at least two). The rank histogram ranks the observation among all M members, so there a
  point with any NaN member is missing.
* **A missing point scores NaN**: a NaN observation, no (or too few) valid members, a NaN μ
  or σ. Reductions leave it out of the (weighted) mean and of the sum of weights; the spread-
  skill ratio averages spread and error over the same points.
* **Nothing valid gives NaN, never 0**: a reduced slice without a valid point is NaN in
  means, rank-histogram counts and reliability counts alike (an empty reliability *bin*
  within valid points counts 0).
* **One exception**: :func:`crps_decomposition` refuses NaN in the forecast or the observation
  (Hersbach's bins need every case with all N members and its observation).
"""

from ensml.scores.brier_roc import brier_decomposition, roc_curve
from ensml.scores.calibration import (
    ensemble_mean_bias,
    ensemble_mean_rmse,
    histogram_flatness,
    pit_histogram,
    rank_histogram,
    spread_skill_ratio,
    spread_skill_terms,
)
from ensml.scores.climate import climate_quantiles, model_climate
from ensml.scores.crps import crps_ensemble, crps_ensemble_array
from ensml.scores.efi import eecrps, extreme_forecast_index, reforecast_efi
from ensml.scores.gaussian import crps_gaussian, crps_gaussian_xr
from ensml.scores.hersbach import crps_decomposition
from ensml.scores.interval import interval_score, quantile_score
from ensml.scores.logscore import dawid_sebastiani_score, log_score_gaussian
from ensml.scores.lomo import below_ground, leave_one_member_out
from ensml.scores.multivariate import energy_score, variogram_score
from ensml.scores.prerank import prerank_histogram, prerank_ranks
from ensml.scores.probability import brier_score, exceedance_probability, reliability
from ensml.scores.reduce import reduce_score
from ensml.scores.skill import bootstrap_ci, skill_score
from ensml.scores.sot import shift_of_tails
from ensml.scores.spectra import mean_abs_log_ratio, spectrum_ratio, zonal_power_spectrum
from ensml.scores.twcrps import twcrps_ensemble, twcrps_ensemble_array

__all__ = [
    "below_ground",
    "bootstrap_ci",
    "brier_decomposition",
    "brier_score",
    "climate_quantiles",
    "crps_decomposition",
    "crps_ensemble",
    "crps_ensemble_array",
    "crps_gaussian",
    "crps_gaussian_xr",
    "dawid_sebastiani_score",
    "eecrps",
    "energy_score",
    "ensemble_mean_bias",
    "ensemble_mean_rmse",
    "exceedance_probability",
    "extreme_forecast_index",
    "histogram_flatness",
    "interval_score",
    "leave_one_member_out",
    "log_score_gaussian",
    "mean_abs_log_ratio",
    "model_climate",
    "pit_histogram",
    "prerank_histogram",
    "prerank_ranks",
    "quantile_score",
    "rank_histogram",
    "reduce_score",
    "reforecast_efi",
    "reliability",
    "roc_curve",
    "shift_of_tails",
    "skill_score",
    "spectrum_ratio",
    "spread_skill_ratio",
    "spread_skill_terms",
    "twcrps_ensemble",
    "twcrps_ensemble_array",
    "variogram_score",
    "zonal_power_spectrum",
]
