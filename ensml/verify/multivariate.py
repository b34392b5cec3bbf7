"""Multivariate verification on the grid: whether ensembles have the weather's spatial structure.

``ensml evaluate --multivariate true`` scores every ensemble of the frame (the raw ensemble, the
raw subset, and the members given with ``--members``: ECC's or generated ones) as fields, not
point by point, in each region of :data:`REGIONS` (the globe and three latitude bands), at every
lead, variable and level:

* the **energy score** of the region's field (:func:`ensml.scores.multivariate.energy_score`),
  area-weighted: each grid point's value is multiplied by the square root of its cell-area
  weight, so that the Euclidean norm is the area-weighted one (still a proper score);
* the **variogram score** of order 0.5 (Scheuerer & Hamill 2015), on at most
  :data:`MAX_VARIOGRAM_COMPONENTS` points of the region (every s-th latitude and longitude; its
  cost grows with the square of the points), with equal pair weights;
* **rank histograms through pre-rank functions** (Thorarinsdottir, Scheuerer & Heinz 2016;
  :func:`ensml.scores.prerank.prerank_ranks`): of the area mean (a region's mean, the quantity a
  basin or a wind farm integrates) and of the band depth (centrality of the field among the
  members), each summarised by its flatness (:func:`ensml.scores.calibration.histogram_flatness`,
  0: flat), beside the flatness a calibrated ensemble of that size would show on as many cases;
* the **zonal power spectra** of the members against the analysis's
  (:func:`ensml.scores.spectra.zonal_power_spectrum`), summarised as the mean absolute log ratio
  of the mean spectra over zonal wavenumbers ≥ 1 (0: the members have the truth's variance at
  every scale; members too smooth show a deficit at high wavenumbers).

Each score is computed per init time; the skill of the energy and variogram scores over the raw
ensemble gets its 95 % moving-block bootstrap interval over init times and a Diebold–Mariano
test (:func:`ensml.scores.significance.skill_test`), and each flatness and spectrum error gets a
95 % moving-block bootstrap interval over init times. The raw scores (``fair``) follow
``evaluate``'s estimator.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import xarray as xr

from ensml.data.frame import EnsembleFrame, LeadFrame
from ensml.data.grid import horizontal_dims
from ensml.data.subset import Subset
from ensml.errors import EnsmlError
from ensml.names import INIT_TIME, LATITUDE, LEVEL, LONGITUDE, MEMBER
from ensml.scores.calibration import histogram_flatness
from ensml.scores.multivariate import energy_score, variogram_score
from ensml.scores.prerank import prerank_ranks
from ensml.scores.significance import block_bootstrap, forecast_horizon, skill_test
from ensml.scores.spectra import WAVENUMBER, zonal_power_spectrum
from ensml.times import lead_hours
from ensml.verify.charts import rank_histogram_chart
from ensml.verify.frame_scores import lead_ensembles
from ensml.verify.tables import to_markdown

#: Regions scored, by name: (south, north) latitude bounds in degrees, every longitude.
REGIONS: dict[str, tuple[float, float]] = {
    "globe": (-90.0, 90.0),
    "northern extratropics": (20.0, 90.0),
    "tropics": (-20.0, 20.0),
    "southern extratropics": (-90.0, -20.0),
}
#: Order of the variogram score.
VARIOGRAM_P = 0.5
#: Most grid points of a region the variogram score takes (its cost is O(M D²)).
MAX_VARIOGRAM_COMPONENTS = 2048
#: Pre-rank functions of the rank histograms.
PRERANKS = ("area_mean", "band_depth")
#: Bootstrap replications of the flatness and spectrum intervals.
REPS = 500


@dataclass
class FieldScores:
    """One ensemble's scores as whole fields, per init time (:func:`field_scores`)."""

    members: int
    energy: np.ndarray  # (init,)
    variogram: np.ndarray  # (init,)
    ranks: dict[str, np.ndarray]  # (init,) by pre-rank function: 1 … members + 1, 0 left out
    spectrum: np.ndarray  # (init, wavenumber): the members' mean zonal spectrum
    truth_spectrum: np.ndarray  # (init, wavenumber)


def field_scores(x: xr.DataArray, y: xr.DataArray, weights: xr.DataArray, fair: bool = False) -> FieldScores:
    """The scores of ensemble ``x`` (init_time, member, latitude, longitude) against ``y``
    (init_time, latitude, longitude) as whole fields (see the module docstring); ``weights`` the
    cell-area weights over latitude (or latitude and longitude)."""
    x = x.transpose(INIT_TIME, MEMBER, LATITUDE, LONGITUDE)
    y = y.transpose(INIT_TIME, LATITUDE, LONGITUDE)
    w = weights.sel({LATITUDE: y[LATITUDE]})
    root = np.sqrt(w / w.mean())
    over, keep = (LATITUDE, LONGITUDE), [INIT_TIME]
    energy = energy_score(x * root, y * root, over=over, fair=fair, preserve_dims=keep)
    step = max(1, math.ceil(math.sqrt(y[LATITUDE].size * y[LONGITUDE].size / MAX_VARIOGRAM_COMPONENTS)))
    thin = {LATITUDE: slice(None, None, step), LONGITUDE: slice(None, None, step)}
    variogram = variogram_score(
        x.isel(thin), y.isel(thin), over=over, p=VARIOGRAM_P, fair=fair, preserve_dims=keep
    )
    fc = x.values.reshape(x.sizes[INIT_TIME], x.sizes[MEMBER], -1).astype(np.float64)
    ob = y.values.reshape(y.sizes[INIT_TIME], -1).astype(np.float64)
    area = (w.broadcast_like(y.isel({INIT_TIME: 0}, drop=True)).transpose(*over)).values.ravel()
    ranks = {
        method: prerank_ranks(fc, ob, method, component_weights=area if method == "area_mean" else None)
        for method in PRERANKS
    }
    members = zonal_power_spectrum(x).mean(MEMBER).transpose(INIT_TIME, WAVENUMBER).values
    truth = zonal_power_spectrum(y).transpose(INIT_TIME, WAVENUMBER).values
    return FieldScores(x.sizes[MEMBER], energy.values, variogram.values, ranks, members, truth)


def compare(scored: dict[str, FieldScores], h: int, reference: str | None = None) -> list[dict]:
    """A row per ensemble of ``scored`` (one cell): its scores, the skill of its energy and
    variogram scores over ``reference`` (default: the first ensemble) with 95 % block-bootstrap
    intervals and DM tests (horizon ``h`` init steps), the flatness of its rank histograms and its
    spectrum error, each with its interval."""
    ref = scored[reference if reference is not None else next(iter(scored))]
    rows = []
    for name, s in scored.items():
        row: dict = {"forecast": name, "members": s.members}
        for score, base, label in (
            (s.energy, ref.energy, "energy"),
            (s.variogram, ref.variogram, "variogram"),
        ):
            test = skill_test(score, base, h)
            row |= {
                label: float(np.nanmean(score)),
                f"{label}_skill": test.skill,
                f"{label}_skill_low": test.low,
                f"{label}_skill_high": test.high,
                f"{label}_dm_p": test.p_value,
            }
        for method, ranks in s.ranks.items():
            value, low, high = _flatness(ranks, s.members)
            row |= {f"{method}_flatness": value, f"{method}_low": low, f"{method}_high": high}
        n = int(min((r > 0).sum() for r in s.ranks.values()))
        row["flatness_if_calibrated"] = math.sqrt(2 * s.members / (math.pi * max(n, 1)))
        value, low, high = _spectrum_error(s.spectrum, s.truth_spectrum)
        row |= {"spectrum_error": value, "spectrum_low": low, "spectrum_high": high, "n_inits": n}
        rows.append(row)
    return rows


@dataclass
class MultivariateScores:
    """The multivariate scores of ``evaluate``, collected lead by lead (a
    :data:`~ensml.verify.frame_scores.LeadHook`), then :meth:`table` and :meth:`histograms`."""

    frame: EnsembleFrame
    subset: Subset
    fair: bool = False
    regions: dict[str, tuple[float, float]] = field(default_factory=lambda: dict(REGIONS))
    cells: dict[tuple, dict[str, FieldScores]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if tuple(horizontal_dims(self.frame.forecast)) != (LATITUDE, LONGITUDE):
            raise EnsmlError(
                "evaluate --multivariate needs a latitude-longitude grid (regions are latitude bands, "
                f"spectra zonal), the forecast's grid is {', '.join(horizontal_dims(self.frame.forecast))}"
            )

    def __call__(self, lf: LeadFrame, var: str) -> None:
        y = lf.analysis[var]
        ensembles = lead_ensembles(self.frame, lf, var, self.subset)
        levels = [float(v) for v in y[LEVEL].values] if LEVEL in y.dims else [None]
        for level in levels:
            at = {} if level is None else {LEVEL: level}
            for region, (south, north) in self.regions.items():
                rows = (y[LATITUDE] >= south) & (y[LATITUDE] <= north)
                if int(rows.sum()) == 0:
                    continue
                pick = {**at, LATITUDE: rows}
                key = (lead_hours(lf.lead), var, level, region)
                self.cells[key] = {
                    name: field_scores(x.sel(pick), y.sel(pick), self.frame.weights, self.fair)
                    for name, x in ensembles.items()
                }

    def table(self) -> pd.DataFrame:
        """A row per lead, variable, level, region and ensemble (see the module docstring), the
        skills over the raw ensemble (the first of each cell: :func:`lead_ensembles`)."""
        rows = []
        for (lead_h, var, level, region), scored in self.cells.items():
            h = forecast_horizon(np.timedelta64(int(lead_h), "h"), self.frame.inits)
            where = {"lead_h": lead_h, "variable": var, "level_hPa": level, "region": region}
            rows += [where | row for row in compare(scored, h)]
        return pd.DataFrame(rows)

    def histograms(self) -> pd.DataFrame:
        """The counts of every rank histogram: a row per cell, ensemble, pre-rank and rank."""
        rows = []
        for (lead_h, var, level, region), scored in self.cells.items():
            for name, s in scored.items():
                for method, ranks in s.ranks.items():
                    counts = np.bincount(ranks[ranks > 0] - 1, minlength=s.members + 1)
                    for r, c in enumerate(counts):
                        rows.append(
                            {
                                "lead_h": lead_h,
                                "variable": var,
                                "level_hPa": level,
                                "region": region,
                                "forecast": name,
                                "prerank": method,
                                "rank": r,
                                "count": int(c),
                            }
                        )
        return pd.DataFrame(rows)


def multivariate_files(scores: MultivariateScores, header: str) -> dict[str, str | bytes]:
    """``multivariate.csv`` / ``.md``, ``rank_histograms.csv`` and one
    ``rank_histograms_<var>.png`` per variable (the area-mean and band-depth histograms of every
    ensemble over the globe, at the first level and the last lead)."""
    table, hist = scores.table(), scores.histograms()
    files: dict[str, str | bytes] = {
        "multivariate.csv": table.to_csv(index=False),
        "multivariate.md": header + "\n\n" + NOTE + to_markdown(shown_table(table)),
        "rank_histograms.csv": hist.to_csv(index=False),
    }
    for var in dict.fromkeys(hist["variable"]):
        own = hist[(hist["variable"] == var) & (hist["region"] == next(iter(scores.regions)))]
        first_level = own["level_hPa"].fillna(-1) == own["level_hPa"].fillna(-1).iloc[0]
        own = own[(own["lead_h"] == own["lead_h"].max()) & first_level]
        title = f"{var}: rank histograms over the globe"
        files[f"rank_histograms_{var}.png"] = rank_histogram_chart(own, title)
    return files


def shown_table(table: pd.DataFrame) -> pd.DataFrame:
    """:meth:`MultivariateScores.table` as ``multivariate.md`` shows it: values with intervals."""
    shown = table[["lead_h", "variable", "level_hPa", "region", "forecast"]].copy()
    for label in ("energy", "variogram"):
        shown[label] = table[label].map(lambda v: f"{v:.4g}")
        low, high = table[f"{label}_skill_low"], table[f"{label}_skill_high"]
        shown[f"{label} skill"] = [
            _with_interval(v, lo, hi, percent=True) for v, lo, hi in zip(table[f"{label}_skill"], low, high)
        ]
    for label in ("area_mean", "band_depth", "spectrum"):
        value = table["spectrum_error" if label == "spectrum" else f"{label}_flatness"]
        shown[f"{label} {'error' if label == 'spectrum' else 'flatness'}"] = [
            _with_interval(v, lo, hi)
            for v, lo, hi in zip(value, table[f"{label}_low"], table[f"{label}_high"])
        ]
    shown["flat if calibrated"] = table["flatness_if_calibrated"].map(lambda v: f"{v:.2f}")
    return shown


def _with_interval(value: float, low: float, high: float, percent: bool = False) -> str:
    def show(v: float) -> str:
        return f"{100 * v:+.1f}%" if percent else f"{v:.2f}"

    if not np.isfinite(value):
        return ""
    if not (np.isfinite(low) and np.isfinite(high)):
        return show(value)
    return f"{show(value)} [{show(low)}, {show(high)}]"


def _flatness(ranks: np.ndarray, m: int) -> tuple[float, float, float]:
    """Flatness of the rank histogram of ``ranks`` (1 … m + 1; 0: left out) and its 95 % moving-
    block bootstrap interval over init times."""
    r = ranks[ranks > 0] - 1
    if r.size < 2:
        return math.nan, math.nan, math.nan
    out = block_bootstrap(
        lambda onehot: float(histogram_flatness(onehot.sum(0))), np.eye(m + 1)[r], reps=REPS
    )
    return out.value, out.low, out.high


def _spectrum_error(members: np.ndarray, truth: np.ndarray) -> tuple[float, float, float]:
    """Mean |ln(S_members / S_truth)| over wavenumbers ≥ 1 of the spectra's means over init
    times, with its 95 % moving-block bootstrap interval."""
    if members.shape[0] < 2 or members.shape[1] < 2:
        return math.nan, math.nan, math.nan

    def error(m: np.ndarray, t: np.ndarray) -> float:
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = m.mean(0)[1:] / t.mean(0)[1:]
        return float(np.nanmean(np.abs(np.log(ratio))))

    out = block_bootstrap(error, members, truth, reps=REPS)
    return out.value, out.low, out.high


NOTE = (
    "Energy and variogram scores: lower is better, skill over the raw ensemble with its 95 % "
    "block-bootstrap interval; flatness of the rank histograms of area means and band depths: 0 is "
    "flat, a calibrated ensemble of that size shows about the last column on these cases; "
    "spectrum error: mean |ln| of the members' zonal power over the truth's, wavenumbers ≥ 1.\n\n"
)

__all__ = [
    "MAX_VARIOGRAM_COMPONENTS",
    "PRERANKS",
    "REGIONS",
    "VARIOGRAM_P",
    "FieldScores",
    "MultivariateScores",
    "compare",
    "field_scores",
    "multivariate_files",
    "shown_table",
]
