"""The report's scores of one variable at one lead as sums per init time, and their rows.

What the report shows by lead beyond ``evaluate``'s tables (spread, RMSE and SSR of each
ensemble and distribution, the raw ensemble's rank histograms, the reliability of the
climatological event) are all area-weighted means or weighted counts over the init times and
the points. :func:`lead_sums` keeps them as sums per init time (and level): the weighted sums
over the points and the sums of the weights, each init time's from its own values alone
(:func:`ensml.scores.reduce.weighted_sums`), the ties of the rank histograms broken by draws
seeded by the init time. So the sums of a block of init times are those of the same init times
in the whole lead, and :meth:`LeadSums.join` of consecutive blocks gives, to the last bit, the
sums of all of them: ``ensml report --cluster`` scores blocks of init times on its workers, each
holding one block whatever the length of the archive, and the client adds the sums in init order
as one process does (:meth:`LeadSums.rows`, :meth:`LeadSums.histograms`,
:meth:`LeadSums.reliability`).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
import xarray as xr

from ensml.data.frame import EnsembleFrame, LeadFrame
from ensml.data.grid import horizontal_dims
from ensml.names import INIT_TIME, LEAD_TIME, MEMBER, VALID_TIME, raw_ensemble_name
from ensml.scores.calibration import observation_ranks, spread_skill_fields
from ensml.scores.distributions import Family
from ensml.scores.probability import exceedance_probability, probability_bins
from ensml.scores.reduce import weighted_sums
from ensml.verify.blocks import join_inits
from ensml.verify.families import family_members, family_moments, family_params
from ensml.verify.levels import at, levels_of, table_level

#: Bins of the climatological event's reliability diagrams (as ``reliability``'s default).
CLIMATE_BINS = 10
#: The threshold of the climatological event in standardised anomalies: "above mean + 1 std".
EVENT_STD = 1.0
#: Seeds the draws that break the rank histograms' ties, with the init time.
RANK_SEED = 0
#: An instant before every ``datetime64[ns]``: init times as seconds since it seed the draws.
_EPOCH = np.datetime64("1677-09-01", "s")


@dataclass
class LeadSums:
    """One variable's sums per init time at one lead (:func:`lead_sums`), on some init times.

    ``moments``: by forecast, in the rows' order, the sums of the spread (the member variance, or
    a distribution's variance), of the squared error of the mean and, for an ensemble, of the two
    terms of its spread-skill ratio, each with its sum of weights (``<term>`` and
    ``<term>_weight``, dims ``init_time`` and the level). ``ranks``: the raw ensemble's weighted
    rank counts (``count``, dims ``init_time``, level, ``rank``) and its number of valid points
    (``valid``). ``events``: by forecast, by level, the climatological event's binned sums
    (``probability``, ``observed``, ``weight``, ``count``, dims ``init_time`` and ``bin``) and
    ``valid``; empty for a variable without that event.
    """

    lead: np.timedelta64
    var: str
    levels: list[float | None]
    moments: dict[str, xr.Dataset]
    ensembles: list[str]
    ranks: xr.Dataset
    events: dict[str, dict[float | None, xr.Dataset]]

    @classmethod
    def join(cls, blocks: list[LeadSums]) -> LeadSums:
        """The sums of consecutive blocks of init times, in init order, as one."""
        if len(blocks) == 1:
            return blocks[0]
        first, cat = blocks[0], join_inits
        return cls(
            lead=first.lead,
            var=first.var,
            levels=first.levels,
            moments={name: cat([b.moments[name] for b in blocks]) for name in first.moments},
            ensembles=first.ensembles,
            ranks=cat([b.ranks for b in blocks]),
            events={
                name: {lev: cat([b.events[name][lev] for b in blocks]) for lev in by_level}
                for name, by_level in first.events.items()
            },
        )

    def rows(self, lead_h: int) -> list[dict]:
        """The rows of the table by lead (``crps`` aside): spread, RMSE and SSR of each forecast
        at each level, from the sums added over the init times."""
        rows = []
        for name, sums in self.moments.items():
            total = sums.sum(INIT_TIME)
            mean = {term: total[term] / total[f"{term}_weight"] for term in ("spread", "mse")}
            spread, rmse = np.sqrt(mean["spread"]), np.sqrt(mean["mse"])
            if name in self.ensembles:  # the (M+1)/M-corrected spread over the points both terms have
                ssr = np.sqrt(total["ssr_spread"] / total["ssr_mse"])  # their weights are the same
            else:
                ssr = spread / rmse
            scores = {"spread": spread, "rmse": rmse, "ssr": ssr}
            for lev in self.levels:
                row = {
                    "variable": self.var,
                    "level_hPa": table_level(lev),
                    "lead_h": lead_h,
                    "forecast": name,
                }
                rows.append({**row, **{key: float(at(v, lev)) for key, v in scores.items()}})
        return rows

    def histograms(self) -> dict[tuple[str, float | None], xr.DataArray]:
        """The raw ensemble's rank histogram of each level, ``{(var, level): counts}``: the
        weighted counts of the observation's rank over the init times and points, NaN in every
        rank where no point is valid (as :func:`ensml.scores.calibration.rank_histogram`)."""
        total = self.ranks.sum(INIT_TIME)
        counts = total["count"].where(total["valid"] > 0)
        counts = counts.rename("rank_histogram").assign_attrs(units="1", long_name="rank histogram count")
        return {(self.var, lev): at(counts, lev) for lev in self.levels}

    def reliability(self) -> dict[str, dict[float | None, xr.Dataset]]:
        """The reliability table of the climatological event of each forecast at each level,
        ``{forecast: {level: table}}``, as :func:`ensml.scores.probability.reliability` gives it:
        the weighted mean probability and observed frequency per bin and the count of points."""
        out: dict[str, dict[float | None, xr.Dataset]] = {}
        for name, by_level in self.events.items():
            for lev, sums in by_level.items():
                total = sums.sum(INIT_TIME)
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", RuntimeWarning)  # an empty bin: 0/0
                    fp = total["probability"] / total["weight"]
                    of = total["observed"] / total["weight"]
                out.setdefault(name, {})[lev] = _table(fp, of, total["count"].where(total["valid"] > 0))
        return out


def _table(fp: xr.DataArray, of: xr.DataArray, count: xr.DataArray) -> xr.Dataset:
    edges = np.linspace(0.0, 1.0, CLIMATE_BINS + 1)
    coords = {
        "bin": np.arange(CLIMATE_BINS),
        "bin_lower": ("bin", edges[:-1]),
        "bin_upper": ("bin", edges[1:]),
    }
    return (
        xr.Dataset(
            {
                "forecast_probability": fp.assign_attrs(units="1"),
                "observed_frequency": of.assign_attrs(units="1"),
                "count": count.assign_attrs(units="1"),
            }
        )
        .assign_coords(coords)
        .assign_attrs(threshold=EVENT_STD)
    )


def lead_sums(
    frame: EnsembleFrame,
    lf: LeadFrame,
    var: str,
    ensembles: dict[str, xr.DataArray],
    dists: dict[str, tuple[xr.Dataset, Family]],
    climate: tuple[xr.DataArray, xr.DataArray] | None,
) -> LeadSums:
    """The sums per init time of ``var`` at the lead of ``lf``, on ``lf``'s init times.

    ``ensembles``: its raw ensemble (first), raw subset and members; ``dists``: its predictive
    distributions, by label; ``climate``: the monthly mean and std at each init's valid time
    (None: no climatological event for ``var``, whose reliability is ``evaluate``'s).
    """
    w, over = frame.weights, list(horizontal_dims(frame.forecast))
    levels = levels_of(frame.forecast[var], frame.levels)  # [None] for a surface variable
    x, y = _fields(lf.forecast[var]), lf.analysis[var]
    moments = {}
    for name, ens in ensembles.items():
        ens = _fields(ens)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # an all-NaN point: NaN
            variance, error = ens.var(MEMBER, ddof=1), (ens.mean(MEMBER) - y) ** 2
        corrected, skill = spread_skill_fields(ens, y, finite_ensemble_correction=True)
        terms = {"spread": variance, "mse": error, "ssr_spread": corrected, "ssr_mse": skill}
        moments[name] = _sums(terms, w, over)
    for name, (ds, family) in dists.items():
        mu, sd = family_moments(family, family_params(_fields(ds), var, family, f"{name} {var}"))
        moments[name] = _sums({"spread": sd**2, "mse": (mu - y) ** 2}, w, over)
    events = {} if climate is None else _climate_events(frame, lf, var, x, dists, climate, levels)
    return LeadSums(
        lead=lf.lead,
        var=var,
        levels=levels,
        moments=moments,
        ensembles=list(ensembles),
        ranks=_rank_sums(x, y, w, over),
        events=events,
    )


def _fields(da: xr.DataArray | xr.Dataset) -> xr.DataArray | xr.Dataset:
    """A field at one lead without its lead-time coordinates."""
    return da.drop_vars([LEAD_TIME, VALID_TIME], errors="ignore")


def _sums(terms: dict[str, xr.DataArray], w: xr.DataArray, over: list[str]) -> xr.Dataset:
    """Each term's weighted sum over the points per init time (and level), and its weights'."""
    out = {}
    for name, field in terms.items():
        out[name], out[f"{name}_weight"] = weighted_sums(field, w, over, func="report")
    return xr.Dataset(out)


def tie_breaks(y: xr.DataArray) -> xr.DataArray:
    """Uniform draws shaped as ``y``, each init time's from a generator seeded by that init time
    (and :data:`RANK_SEED`): the same draws whichever block of init times ``y`` is."""
    y = y.transpose(INIT_TIME, ...)
    draws = np.empty(y.shape)
    for i, t in enumerate(y[INIT_TIME].values):
        seconds = int((t.astype("datetime64[s]") - _EPOCH) // np.timedelta64(1, "s"))
        draws[i] = np.random.default_rng([RANK_SEED, seconds]).random(y.shape[1:])
    return y.copy(data=draws)


def _rank_sums(x: xr.DataArray, y: xr.DataArray, w: xr.DataArray, over: list[str]) -> xr.Dataset:
    """The raw ensemble's weighted rank counts per init time (and level), and its valid points."""
    rank = observation_ranks(x, y, tie_breaks(y))
    valid = rank >= 0
    counts = []
    for r in range(x.sizes[MEMBER] + 1):
        counts.append(weighted_sums((rank == r).astype(np.float64).where(valid), w, over, func="report")[0])
    count = xr.concat(counts, dim=xr.DataArray(np.arange(len(counts)), dims=["rank"], name="rank"))
    return xr.Dataset({"count": count, "valid": valid.sum(over).astype(np.float64)})


def _climate_events(
    frame: EnsembleFrame,
    lf: LeadFrame,
    var: str,
    x: xr.DataArray,
    dists: dict[str, tuple[xr.Dataset, Family]],
    climate: tuple[xr.DataArray, xr.DataArray],
    levels: list[float | None],
) -> dict[str, dict[float | None, xr.Dataset]]:
    """The binned sums of "analysis > monthly mean + 1 std" of each distribution (its 100
    quantiles) and of the raw ensemble, per init time, by level."""
    w, over = frame.weights, list(horizontal_dims(frame.forecast))
    m0, s0 = climate
    ystd = (lf.analysis[var] - m0) / s0  # standardised anomaly w.r.t. the monthly climatology
    events: dict[str, dict[float | None, xr.Dataset]] = {}
    for name, (ds, family) in dists.items():
        params = family_params(_fields(ds), var, family, f"{name} {var}")
        for lev in levels:
            q = _standardised_members(
                family, {p: at(f, lev) for p, f in params.items()}, at(m0, lev), at(s0, lev)
            )
            events.setdefault(name, {})[lev] = _event_sums(q, at(ystd, lev), w, over)
    raw = raw_ensemble_name(x.sizes[MEMBER])
    for lev in levels:
        events.setdefault(raw, {})[lev] = _event_sums(at((x - m0) / s0, lev), at(ystd, lev), w, over)
    return events


def _event_sums(members: xr.DataArray, ystd: xr.DataArray, w: xr.DataArray, over: list[str]) -> xr.Dataset:
    """Per init time and bin: the weighted sums of the probability of the event and of its
    occurrence, their weights and the count of points, binned as ``reliability`` bins them."""
    p = exceedance_probability(members, EVENT_STD)
    o = (ystd > EVENT_STD).astype(np.float64).where(ystd.notnull())
    valid = p.notnull() & o.notnull()
    k = probability_bins(p, CLIMATE_BINS)
    parts: dict[str, list[xr.DataArray]] = {"probability": [], "observed": [], "weight": [], "count": []}
    for b in range(CLIMATE_BINS):
        in_bin = (k == b) & valid
        prob, weight = weighted_sums(p.where(in_bin), w, over, func="report")
        parts["probability"].append(prob)
        parts["weight"].append(weight)
        parts["observed"].append(weighted_sums(o.where(in_bin), w, over, func="report")[0])
        parts["count"].append(in_bin.sum(over).astype(np.float64))
    bins = xr.DataArray(np.arange(CLIMATE_BINS), dims=["bin"], name="bin")
    out = {name: xr.concat(fields, dim=bins) for name, fields in parts.items()}
    return xr.Dataset({**out, "valid": valid.sum(over).astype(np.float64)})


def _standardised_members(
    family: Family, params: dict[str, xr.DataArray], m0: xr.DataArray, s0: xr.DataArray
) -> xr.DataArray:
    """The 100 quantiles of ``family(params)`` as anomalies ``(Q − m0)/s0``: for a normal, the
    quantiles of N((mean − m0)/s0, (std/s0)²), as the report drew them before the families."""
    if family.name == "normal":
        return family_members(family, {"mean": (params["mean"] - m0) / s0, "std": params["std"] / s0})
    return (family_members(family, params) - m0) / s0


__all__ = ["LeadSums", "lead_sums", "tie_breaks"]
