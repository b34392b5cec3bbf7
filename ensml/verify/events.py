r"""Threshold events and tails of the bounded variables (precipitation, wind speed) in ``evaluate``.

For a variable whose predictive family is bounded below (``tp``: censored shifted gamma,
``si10``: truncated normal; or any scored source's family with a lower bound), ``evaluate``
scores, beside the CRPS, at each lead:

- the **Brier score** of each event ``y > t`` (:func:`ensml.scores.probability.probability_brier_score`):
  P(Y > t) of a distribution (:func:`ensml.scores.predictive.exceedance_family`), the fraction
  of members above ``t`` of an ensemble (with ``fair``: minus p(1 − p)/(M − 1), Ferro 2014),
  and the **reliability diagram** data of the same probabilities in 10 equal bins
  (:func:`~ensml.scores.probability.probability_reliability`);
- the **threshold-weighted CRPS** of the upper tail, weight 1{z > u}
  (:func:`ensml.scores.predictive.twcrps_family`; ensembles:
  :func:`ensml.scores.twcrps.twcrps_ensemble`);
- the **PIT histogram** in M + 1 bins (M the raw ensemble's members) and its flatness, with a
  95 % moving-block bootstrap interval over init times: the randomised PIT of a distribution
  (uniform for a calibrated forecast even on dry days,
  :func:`~ensml.scores.predictive.pit_family`), the rank histogram of an ensemble (its members
  + 1 bins);
- for precipitation, **SEEPS** of the median (:func:`ensml.scores.precipitation.seeps`), with
  the climatology of each point from the analysis before the first scored init time (the
  training and validation periods; all of it when that holds fewer than
  :data:`MIN_CLIMATE` days), and the **fractions skill score** of the median at each event
  threshold over windows of :data:`FSS_WINDOW` grid points
  (:func:`ensml.scores.precipitation.fractions_skill_score`), over the init times whose
  analysis is complete.

The thresholds are those of :mod:`ensml.verify.thresholds` (precipitation 0.1, 1, 5, 10 and
25 mm per 24 h, twCRPS at 10 and 25 mm; wind speed 10, 15 and 20 m s-1, twCRPS at 15 and 20),
or ``evaluate``'s ``thresholds`` option.

Every score but the FSS and the flatness is a mean over init times and area of a per-point
score, so its rows carry the skill over the raw ensemble, its 95 % interval and the
Diebold-Mariano test, exactly as the CRPS rows (:func:`ensml.scores.significance.skill_tests`),
and the gap closed towards the oracle. The FSS (higher is better) is one ratio of sums over
every window and init time: no skill interval. A raw ensemble whose score is 0 (no event
forecast or observed) gives no skill.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import xarray as xr

from ensml.data.frame import EnsembleFrame
from ensml.data.grid import horizontal_dims
from ensml.errors import EnsmlError
from ensml.names import INIT_TIME, LEVEL, MEMBER, TIME
from ensml.progress import note
from ensml.scores.calibration import RANK, histogram_flatness, pit_value_histogram, rank_histogram
from ensml.scores.distributions import Family
from ensml.scores.precipitation import DRY_THRESHOLD, fractions_skill_score, seeps, seeps_climatology
from ensml.scores.predictive import (
    CHAINED_FAMILIES,
    exceedance_family,
    median_family,
    pit_family,
    twcrps_family,
)
from ensml.scores.probability import (
    THRESHOLD,
    exceedance_probability,
    probability_brier_score,
    probability_reliability,
)
from ensml.scores.significance import block_bootstrap, skill_tests
from ensml.scores.twcrps import twcrps_ensemble
from ensml.times import format_lead, lead_hours
from ensml.verify.families import family_params
from ensml.verify.levels import at, levels_of, per_level, table_level
from ensml.verify.rows import score_rows
from ensml.verify.thresholds import EventThresholds, bounded_variables, thresholds_for

#: Reliability bins (equal, over [0, 1]).
RELIABILITY_BINS = 10
#: The fractions skill score's window, grid points along the two horizontal dims.
FSS_WINDOW = (3, 3)
#: Fewer analysis days than this before the first scored init: SEEPS' climatology takes all of them.
MIN_CLIMATE = 30
#: The seed of the randomised PIT (the same inputs give the same histogram).
PIT_SEED = 0


@dataclass
class EventTables:
    """The event scores of ``evaluate``, over every lead (see the module docstring)."""

    rows: list[dict] = field(default_factory=list)  # the per-variable score tables
    reliability: list[dict] = field(default_factory=list)  # reliability diagram data
    pit: list[dict] = field(default_factory=list)  # PIT / rank histograms


def climatology(frame: EnsembleFrame, var: str, dry: float) -> xr.Dataset:
    """SEEPS' climatology of ``var`` (:func:`~ensml.scores.precipitation.seeps_climatology`) from
    the analysis before the first scored init time; all of it with fewer than :data:`MIN_CLIMATE`
    times there (the tables then score against a climatology that includes the test period)."""
    an = frame.analysis[var]
    if LEVEL in an.dims:
        an = an.sel({LEVEL: frame.levels})
    times = an[TIME].values
    before = times[times < frame.inits.min()]
    if before.size >= MIN_CLIMATE:
        an, period = an.sel({TIME: before}), f"{before.size} analysis times before the first scored init"
    else:
        period = f"all {times.size} analysis times (only {before.size} before the first scored init)"
        note(f"evaluate: SEEPS climatology of {var} from {period}")
    clim = seeps_climatology(an.load(), TIME, dry_threshold=dry)
    return clim.assign_attrs(period=period)


def event_setups(
    frame: EnsembleFrame, families: dict[str, dict[str, Family]], given: dict[str, list[float]] | None
) -> dict[str, tuple[EventThresholds, xr.Dataset | None]]:
    """The thresholds (and SEEPS' climatology, for precipitation) of each variable that gets the
    event scores (:func:`ensml.verify.events.bounded_variables`)."""
    unknown = [v for v in (given or {}) if v not in frame.variables]
    if unknown:
        raise EnsmlError(
            f"evaluate: thresholds name {', '.join(map(str, unknown))}, not among the scored variables "
            f"({', '.join(frame.variables)})"
        )
    setups = {}
    for var in bounded_variables(frame, families, given):
        thr = thresholds_for(var, frame.analysis[var].attrs, given)
        if thr is None:
            note(
                f"evaluate: {var} has a bounded family but no default thresholds; give them with --thresholds"
            )
            continue
        clim = (
            climatology(frame, var, thr.dry) if thr.kind == "precipitation" and thr.dry is not None else None
        )
        setups[var] = (thr, clim)
    return setups


def crps_as_event_row(row: dict) -> dict:
    """A CRPS row of the CRPS table as a row of the per-variable table (``score`` ``crps``)."""
    out = {k: v for k, v in row.items() if k != "crps"}
    return {**out, "score": "crps", "threshold": np.nan, "value": row["crps"]}


def score_events(
    frame: EnsembleFrame,
    y: xr.DataArray,
    var: str,
    lead: np.timedelta64,
    ensembles: Mapping[str, xr.DataArray],
    dists: Mapping[str, tuple[xr.Dataset, Family]],
    thresholds: EventThresholds,
    raw_key: str,
    out: EventTables,
    *,
    fair: bool = False,
    climate: xr.Dataset | None = None,
    units: str | None = None,
) -> None:
    """Score ``var`` at ``lead`` (analysis ``y``) for every ensemble and distribution; add the
    rows, reliability data and histograms to ``out``."""
    h, weights, levels = lead_hours(lead), frame.weights, frame.levels
    dims = [d for d in [INIT_TIME, LEVEL, *(horizontal_dims(frame.forecast) or ())] if d in y.dims]
    params = {name: family_params(ds, var, fam, name) for name, (ds, fam) in dists.items()}
    fams = {name: fam for name, (_, fam) in dists.items()}
    oracle = next((name for name in dists if name.startswith("oracle")), None)
    names = [*ensembles, *dists]
    common = {"var": var, "levels": levels, "lead_h": h, "raw_key": raw_key, "oracle_key": oracle}
    events = list(thresholds.events)

    def rows(
        fields: dict[str, xr.DataArray],
        score: str,
        threshold: float | None,
        unit: str,
        estimators: dict,
        frequency: xr.DataArray | None = None,
    ) -> None:
        tests = _tests(fields, weights, raw_key, lead)
        out.rows += score_rows(
            fields,
            weights,
            **common,
            score=score,
            threshold=threshold,
            units=unit,
            estimators=estimators,
            tests=tests,
            event_frequency=frequency,
        )

    # Brier score and reliability of each event
    probs = {name: _member_fraction(x, events).transpose(THRESHOLD, *y.dims) for name, x in ensembles.items()}
    probs.update(
        {n: exceedance_family(fams[n], params[n], events).transpose(THRESHOLD, *y.dims) for n in dists}
    )
    brier = {name: probability_brier_score(p, y, preserve_dims=dims) for name, p in probs.items()}
    if fair:
        for name, x in ensembles.items():
            m = x.notnull().sum(MEMBER)
            p = probs[name]
            brier[name] = brier[name] - p * (1 - p) / (m - 1).where(m > 1)
    ens_est = "fair member fraction" if fair else "member fraction"
    brier_est = {n: ens_est if n in ensembles else f"P(Y > t) of {fams[n].name}" for n in names}
    observed = y.notnull()
    for u in events:
        freq = (y > u).astype(np.float64).where(observed)
        rows(
            {n: b.sel({THRESHOLD: u}, drop=True) for n, b in brier.items()}, "brier", u, "1", brier_est, freq
        )
    keep = per_level(y)
    for name, p in probs.items():
        rel = probability_reliability(p, y, n_bins=RELIABILITY_BINS, preserve_dims=keep, weights=weights)
        out.reliability += reliability_rows(rel, var, levels, h, name, units or "")
    # threshold-weighted CRPS of the tail
    unit = units or ""
    ens = "fair ensemble" if fair else "empirical ensemble"
    tw_est = {n: ens if n in ensembles else _tw_estimator(fams[n]) for n in names}
    for u in thresholds.tail:
        tw = {name: _twcrps_ensemble(x, y, u, fair, dims) for name, x in ensembles.items()}
        tw.update({n: twcrps_family(fams[n], params[n], y, u, preserve_dims=dims) for n in dists})
        freq = (y > u).astype(np.float64).where(observed)
        rows(tw, "twcrps", u, unit, tw_est, freq)
    # PIT and rank histograms
    bins = next(iter(ensembles.values())).sizes[MEMBER] + 1
    hists = {
        name: rank_histogram(x, y, preserve_dims=[INIT_TIME, *keep], weights=weights)
        for name, x in ensembles.items()
    }
    for n in dists:
        pit = pit_family(fams[n], params[n], y, seed=PIT_SEED)
        hists[n] = pit_value_histogram(pit, bins=bins, preserve_dims=[INIT_TIME, *keep], weights=weights)
    n_observed = observed.sum([d for d in y.dims if d != LEVEL])
    _histogram_rows(hists, var, levels, h, ensembles, n_observed, out)
    if thresholds.kind != "precipitation" or climate is None:
        return
    # SEEPS and the FSS of the median
    medians = {name: x.median(MEMBER, skipna=True) for name, x in ensembles.items()}
    medians.update({n: median_family(fams[n], params[n]).transpose(*y.dims) for n in dists})
    dry = thresholds.dry if thresholds.dry is not None else DRY_THRESHOLD
    scores = {
        name: seeps(m.where(observed), y, climate, dry_threshold=dry, preserve_dims=dims)
        for name, m in medians.items()
    }
    med_est = {n: "median of the members" if n in ensembles else f"median of {fams[n].name}" for n in names}
    if any(bool(s.notnull().any()) for s in scores.values()):
        rows(scores, "seeps", None, "1", med_est)
    else:
        note(
            f"evaluate: SEEPS of {var} at +{format_lead(lead)}: no point with a dry-day probability "
            "in [0.1, 0.85]"
        )
    out.rows += _fss_rows(medians, y, events, var, levels, h, med_est, frame)


def _member_fraction(x: xr.DataArray, events: list[float]) -> xr.DataArray:
    t = xr.DataArray(np.asarray(events, dtype=np.float64), dims=[THRESHOLD], coords={THRESHOLD: events})
    return exceedance_probability(x, t)


def _tw_estimator(family: Family) -> str:
    exact = family.name in CHAINED_FAMILIES
    return f"{family.name} {'closed form' if exact else 'quantile quadrature'}"


def _twcrps_ensemble(x: xr.DataArray, y: xr.DataArray, u: float, fair: bool, dims: list[str]) -> xr.DataArray:
    """The ensemble twCRPS; 0 where no member and no analysis value reaches ``u`` anywhere
    (:func:`~ensml.scores.twcrps.twcrps_ensemble` refuses that case: every chained value is ``u``)."""
    try:
        return twcrps_ensemble(x, y, u, fair=fair, preserve_dims=dims)
    except EnsmlError:
        if bool((x > u).any()) or bool((y > u).any()):
            raise
        return xr.zeros_like(y, dtype=np.float64).where(y.notnull() & x.notnull().any(MEMBER))


def _tests(
    fields: dict[str, xr.DataArray], weights: xr.DataArray, raw_key: str, lead: np.timedelta64
) -> dict | None:
    """The skill tests of ``fields`` against ``raw_key``; None where its mean score is 0 (no skill)."""
    ref = fields[raw_key]
    if not bool((ref.fillna(0.0) != 0).any()):
        return None
    with np.errstate(divide="ignore", invalid="ignore"):  # resamples of init times that all score 0
        return skill_tests(fields, weights, raw_key, lead)


#: The columns of ``reliability_<var>.csv`` after the forecast's.
RELIABILITY_COLUMNS = [
    "threshold",
    "bin",
    "bin_lower",
    "bin_upper",
    "forecast_probability",
    "observed_frequency",
    "count",
]


def _head(var: str, lev: float | None, h: int, name: str) -> dict:
    """The first columns of every row: variable, level, lead and forecast."""
    return {"variable": var, "level_hPa": table_level(lev), "lead_h": h, "forecast": name}


def reliability_rows(
    rel: xr.Dataset, var: str, levels: Sequence[float], h: int, name: str, units: str
) -> list[dict]:
    """The rows of one forecast's reliability table (``probability_reliability``), per level."""
    out = []
    for lev in levels_of(rel["count"], levels):
        table = at(rel, lev).to_dataframe().reset_index()[RELIABILITY_COLUMNS]
        out += [{**_head(var, lev, h, name), **rec, "units": units} for rec in table.to_dict("records")]
    return out


def _histogram_rows(
    hists: dict[str, xr.DataArray],
    var: str,
    levels: Sequence[float],
    h: int,
    ensembles: Mapping[str, xr.DataArray],
    observed: xr.DataArray,
    out: EventTables,
) -> None:
    """Pooled histograms into ``out.pit``; their flatness, with the block-bootstrap interval of
    the per-init histograms, into ``out.rows`` (``n_scored``: the ``observed`` values)."""
    for name, hist in hists.items():
        nbins = hist.sizes[RANK]
        what = "rank histogram" if name in ensembles else "randomised PIT histogram"
        edges = np.linspace(0.0, 1.0, nbins + 1)
        for lev in levels_of(hist, levels):
            values = at(hist, lev).transpose(INIT_TIME, RANK).values
            interval = block_bootstrap(lambda v: float(histogram_flatness(v.sum(0))), values)
            pooled = np.nansum(values, axis=0)
            share = pooled / pooled.sum() if pooled.sum() > 0 else np.full(nbins, np.nan)
            head = _head(var, lev, h, name)
            out.pit += [
                {
                    **head,
                    "histogram": what,
                    "bin": r,
                    "bin_lower": edges[r],
                    "bin_upper": edges[r + 1],
                    "count": float(pooled[r]),
                    "frequency": float(share[r]),
                }
                for r in range(nbins)
            ]
            out.rows.append(
                {
                    **head,
                    "score": "pit_flatness",
                    "threshold": np.nan,
                    "value": interval.value,
                    "units": "1",
                    "estimator": f"{what}, {nbins} bins (area-weighted)",
                    "value_low": interval.low,
                    "value_high": interval.high,
                    "n_scored": int(at(observed, lev)),
                }
            )


def _fss_rows(
    medians: dict[str, xr.DataArray],
    y: xr.DataArray,
    events: list[float],
    var: str,
    levels: Sequence[float],
    h: int,
    estimators: dict[str, str],
    frame: EnsembleFrame,
) -> list[dict]:
    """The FSS of each median field over the init times whose analysis (and every median) is
    complete (``n_scored``: their values)."""
    spatial = horizontal_dims(frame.forecast)
    if spatial is None or any(y.sizes[d] < w for d, w in zip(spatial, FSS_WINDOW)):
        return []
    whole = y.notnull().all([d for d in y.dims if d != INIT_TIME])
    for m in medians.values():
        whole = whole & m.notnull().all([d for d in m.dims if d != INIT_TIME])
    if not bool(whole.any()):
        return []
    yk = y.sel({INIT_TIME: whole})
    n_scored = int(whole.sum()) * int(np.prod([y.sizes[d] for d in spatial]))
    window = f"{FSS_WINDOW[0]}x{FSS_WINDOW[1]} points"
    rows = []
    for name, m in medians.items():
        mk = m.sel({INIT_TIME: whole}).transpose(*y.dims)
        fss = fractions_skill_score(
            mk, yk, events, window=FSS_WINDOW, spatial_dims=spatial, preserve_dims=per_level(y)
        )
        for lev in levels_of(fss, levels):
            rows += [
                {
                    **_head(var, lev, h, name),
                    "score": "fss",
                    "threshold": u,
                    "value": float(at(fss, lev).sel({THRESHOLD: u})),
                    "units": "1",
                    "estimator": f"{estimators[name]}, {window}",
                    "n_scored": n_scored,
                }
                for u in events
            ]
    return rows


__all__ = [
    "FSS_WINDOW",
    "MIN_CLIMATE",
    "RELIABILITY_BINS",
    "EventTables",
    "climatology",
    "crps_as_event_row",
    "event_setups",
    "reliability_rows",
    "score_events",
]
