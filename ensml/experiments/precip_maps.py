"""The figures of heavy precipitation: a probability map beside the truth, and its reliability.

Drawn by ``notebooks/precipitation_wind.ipynb``, which writes the guide's
``docs/_static/precip_probability_map.png`` and ``precip_reliability.png``:

* :func:`probability_map`: P(Y > threshold) of one forecast on a map beside the truth (the
  verifying analysis), the points where the analysis exceeded the threshold hatched on both,
  through the one map helper (:func:`ensml.verify.maps.draw_maps`, offline coastlines);
* :func:`reliability_rows`: the reliability-diagram data of several probability forecasts of
  the same events (:func:`ensml.scores.probability.probability_reliability`, per lead time) as
  the rows that ``evaluate``'s chart draws (:func:`ensml.verify.charts.reliability_diagram`);
  :func:`reliability_deviation` sums each forecast's rows up in one number per lead.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd
import xarray as xr

from ensml.errors import EnsmlError
from ensml.names import INIT_TIME, LATITUDE, LEAD_TIME, LONGITUDE
from ensml.scores.probability import THRESHOLD, probability_reliability
from ensml.times import format_lead, hours_of
from ensml.verify.maps import Panel, display_units, draw_maps

#: Equal bins of [0, 1] of the reliability diagrams (as ``evaluate``'s).
RELIABILITY_BINS = 10


def probability_map(
    prob: xr.DataArray, truth: xr.DataArray, threshold: float, *, name: str, coastlines: bool = True
) -> bytes:
    """PNG bytes of P(Y > ``threshold``) of the forecast ``name`` beside the truth.

    Parameters
    ----------
    prob
        (latitude, longitude) probability of exceeding ``threshold``, in [0, 1]; shown in %.
    truth
        (latitude, longitude) verifying analysis, named after its variable (``tp``), in the
        variable's units; its scalar ``init_time`` and ``lead_time`` coordinates, where present,
        go into the title. Where it exceeds ``threshold`` is hatched on both panels.
    threshold
        The event's threshold, in the units of ``truth``.
    name
        The forecast, as the panel's title names it (``"csg0 EMOS"``).
    coastlines
        False for a world without land.

    Raises
    ------
    EnsmlError
        ``prob`` and ``truth`` are not (latitude, longitude) fields of one grid.
    """
    for what, field in (("probability", prob), ("truth", truth)):
        if set(field.dims) != {LATITUDE, LONGITUDE}:
            dims = f"({LATITUDE}, {LONGITUDE})"
            raise EnsmlError(f"probability_map: the {what} must be a {dims} field, got dims {field.dims}")
    if prob.shape != truth.transpose(*prob.dims).shape:
        raise EnsmlError(f"probability_map: probability {prob.shape} and truth {truth.shape} differ in grid")
    var = str(truth.name or "")
    _, _, units, label = display_units(var, "field")
    exceeded = truth > threshold
    event = f"{var} > {threshold:g} {units}"
    top = max(2.0 * threshold, float(np.nanpercentile(truth.values, 99)))
    chance = Panel(100.0 * prob, f"P({event}): {name}", "probability", "%", "Blues", 0.0, 100.0)
    field = Panel(truth, f"truth: the analysis ({var})", label, units, "YlGnBu", 0.0, top)
    for panel in (chance, field):
        panel.hatch, panel.coastlines = exceeded, coastlines
    when = []
    if INIT_TIME in truth.coords:
        when.append(f"from {np.datetime_as_string(truth[INIT_TIME].values, unit='h')}")
    if LEAD_TIME in truth.coords:
        when.append(f"at {format_lead(truth[LEAD_TIME].values)}")
    title = " ".join([f"{label} > {threshold:g} {units}", *when])
    return draw_maps([[chance, field]], f"{title}; hatched: the analysis above {threshold:g}")


def reliability_rows(
    probs: Mapping[str, xr.DataArray],
    obs: xr.DataArray,
    *,
    weights: xr.DataArray | None = None,
    n_bins: int = RELIABILITY_BINS,
) -> pd.DataFrame:
    """The reliability-diagram rows of each forecast in ``probs``, per lead time and threshold.

    Parameters
    ----------
    probs
        ``{forecast name: probability}``: probabilities of ``y > t`` with a ``threshold`` dim (its
        coordinate the thresholds, in the units of ``obs``), a ``lead_time`` dim and otherwise
        dims among those of ``obs`` (e.g. :func:`ensml.scores.predictive.exceedance_family`).
    obs
        The verifying analysis (init_time, lead_time, latitude, longitude).
    weights
        Area weights of the means in each bin (e.g. :func:`ensml.data.weights.latitude_weights`).
    n_bins
        Equal bins of [0, 1].

    Returns
    -------
    pd.DataFrame
        Columns ``forecast``, ``threshold``, ``lead_h``, ``bin``, ``bin_lower``, ``bin_upper``,
        ``forecast_probability``, ``observed_frequency`` (weighted means of the bin) and
        ``count`` (points in the bin), in the order of ``probs``: one threshold's rows are what
        :func:`ensml.verify.charts.reliability_diagram` draws (its first forecast's counts as
        the sharpness).
    """
    tables = []
    for name, p in probs.items():
        if THRESHOLD not in p.dims or LEAD_TIME not in p.dims:
            dims = f"'{THRESHOLD}' and '{LEAD_TIME}' dims"
            raise EnsmlError(f"reliability_rows: the probability of {name!r} needs {dims}")
        rel = probability_reliability(p, obs, n_bins=n_bins, preserve_dims=[LEAD_TIME], weights=weights)
        df = rel.to_dataframe().reset_index()
        df["lead_h"] = hours_of(df[LEAD_TIME])
        tables.append(df.drop(columns=[LEAD_TIME]).assign(forecast=name))
    columns = ["forecast", THRESHOLD, "lead_h", "bin", "bin_lower", "bin_upper"]
    columns += ["forecast_probability", "observed_frequency", "count"]
    return pd.concat(tables, ignore_index=True)[columns]


def reliability_deviation(rows: pd.DataFrame) -> pd.DataFrame:
    """Each forecast's mean distance from the diagonal, ``Σ n_b |ō_b − p̄_b| / Σ n_b`` over the
    bins ``b`` with points (``n_b`` the count, ``ō_b`` the observed frequency, ``p̄_b`` the mean
    probability): 0 for a perfectly reliable forecast, in probability units.

    ``rows`` as :func:`reliability_rows` gives them; returns one row per forecast and threshold,
    one column per lead (hours), the forecasts in the order of ``rows``.
    """
    full = rows[rows["count"] > 0]
    gap = (full["observed_frequency"] - full["forecast_probability"]).abs() * full["count"]
    keys = [full["forecast"], full[THRESHOLD], full["lead_h"]]
    out = (gap.groupby(keys).sum() / full["count"].groupby(keys).sum()).unstack("lead_h")
    order = list(dict.fromkeys(rows["forecast"]))
    return out.reindex(order, level="forecast")


__all__ = ["RELIABILITY_BINS", "probability_map", "reliability_deviation", "reliability_rows"]
