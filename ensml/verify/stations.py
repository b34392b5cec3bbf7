"""``ensml evaluate --observations``: score the forecast ensemble against station observations.

The forecast is taken at the stations (:mod:`ensml.data.station_frame`: ``nearest`` grid point
or ``bilinear``, 2 m temperature optionally moved to the stations' heights along a lapse rate)
at the valid time of each observation. A pair (station, init time) is scored where the station
observed the variable at ``init_time + lead``; a value not observed (NaN) is left out and the
pairs scored are counted (``n_pairs``). For the raw ensemble and the raw subset (members 0 …
k-1), by lead, variable and level:

* ``crps``: the ensemble CRPS (:func:`ensml.scores.crps.crps_ensemble`; the fair CRPS with
  ``fair``), the unweighted mean over the station-times observed; ``skill_vs_raw_ensemble``
  ``1 - crps / crps_raw``;
* ``rmse``, ``mae``: of the ensemble mean;
* ``spread``: the square root of the mean ensemble variance (ddof 1) over the same pairs, and
  ``spread_skill`` = sqrt((M+1)/M) · spread / rmse, 1 for a reliable ensemble of M members
  (Fortin et al. 2014, J. Hydrometeor. 15, 1708).

With ``predictions``, station products of ``ensml postprocess`` (a station model's
predictive distribution at each station, :mod:`ensml.postprocess.stations`) are scored too: the
CRPS of their family in closed form (:meth:`ensml.scores.distributions.Family.crps`), on the
stations they share with the observations and the init times they cover; the raw ensemble and
subset are then scored on the same station-times, so that every row compares the same pairs.
A products file names the stations it holds (``ensml_station_set``): a file whose stations
differ from it, or a station id at another place than in the observations, is refused.

Every forecast's pooled skill over the raw ensemble gets its 95 % interval (a moving-block
bootstrap over init times of the station-mean scores) and the Diebold-Mariano test against the
raw ensemble (``skill_low``, ``skill_high``, ``dm_stat``, ``dm_p``, ``block_length``:
:mod:`ensml.scores.significance`, as on the grid).

``scores.csv``/``scores.md`` pool every station; ``stations.csv`` has the same per station
(means over its init times); ``stations.nc`` the CRPS of every station-time (``lead_time``,
``init_time``, ``[level]``, ``station``; NaN where not observed).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import xarray as xr

from ensml.data.heights import STANDARD_LAPSE_RATE
from ensml.data.layouts.options import ReaderOptions
from ensml.data.outputs import OutputFolder
from ensml.data.runfiles import leads_option, scan_run
from ensml.data.station_frame import StationFrame, StationLead, build_station_frame
from ensml.data.stations import EMBEDDING
from ensml.data.subset import Subset, raw_subset
from ensml.errors import EnsmlError
from ensml.names import (
    COORD_ATTRS,
    ELEVATION,
    INIT_TIME,
    LEAD_TIME,
    MEMBER,
    STATION,
    VALID_TIME,
    raw_ensemble_name,
    units_of,
)
from ensml.progress import Progress, note, seconds
from ensml.scores.crps import crps_ensemble
from ensml.scores.significance import skill_tests
from ensml.times import LEAD_DTYPE, format_lead, lead_hours
from ensml.verify.charts import station_skill_map
from ensml.verify.levels import at, levels_of, table_level
from ensml.verify.options import Selection
from ensml.verify.rows import NO_TEST, skill_test_columns, slug
from ensml.verify.station_sources import (
    StationOracle,
    StationProducts,
    read_station_oracle,
    read_station_products,
)
from ensml.verify.tables import Content, to_markdown, write_files

#: What ``evaluate --observations`` writes.
FILES = ["scores.csv", "scores.md", "stations.csv", "stations.nc"]
#: The columns of ``scores.csv`` (pooled) and ``stations.csv`` (per station), in order.
COLUMNS = [
    "variable",
    "level_hPa",
    "lead_h",
    "forecast",
    "estimator",
    "crps",
    "units",
    "skill_vs_raw_ensemble",
    "skill_low",
    "skill_high",
    "dm_stat",
    "dm_p",
    "block_length",
    "gap_closed",
    "n_pairs",
    "rmse",
    "mae",
    "spread",
    "spread_skill",
]
STATION_COLUMNS = [STATION, "latitude", "longitude", "elevation_m", *COLUMNS]
#: How the pooled means are taken, for captions.
POOLING = "unweighted means over the station-times observed"


@dataclass
class StationScores:
    """What :func:`evaluate_stations` scored and wrote; printed by ``ensml evaluate`` like :class:`Scores`."""

    table: pd.DataFrame  # pooled over stations: a row per lead, variable, level and forecast
    stations: pd.DataFrame  # the same per station
    per_pair: xr.Dataset  # the CRPS of every station-time (``stations.nc``)
    n_stations: int
    n_inits: int  # init times with an observation at some lead
    leads: np.ndarray  # timedelta64[ns]
    variables: list[str]
    extraction: str
    height_note: str = ""  # how 2 m temperature was corrected ("" when not)
    spread: None = None  # no spread-model table (as ``Scores.spread``)
    dropped: np.ndarray = field(default_factory=lambda: np.array([], dtype=LEAD_DTYPE))
    weighting: str = "uniform over the station-times observed"
    out_dir: Path | None = None

    @property
    def leads_note(self) -> str:
        return ""

    @property
    def title(self) -> str:
        """The terminal table's title."""
        n = self.n_inits
        return f"CRPS at {self.n_stations} stations over {n} init time{'s' if n != 1 else ''}"

    @property
    def caption(self) -> str:
        """How the table's numbers were made (terminal caption, ``scores.md`` header)."""
        parts = [
            f"{POOLING} (n_pairs); forecast at the stations by {self.extraction} extraction",
            "rmse, mae: of the ensemble mean; spread_skill: sqrt((M+1)/M) spread / rmse",
        ]
        return "; ".join(parts + ([self.height_note] if self.height_note else []))

    def files(self) -> dict[str, Content]:
        """``scores.csv``, ``scores.md``, ``stations.csv`` and ``stations.nc`` by name."""
        header = f"{self.title}: {self.caption}.\n\n"
        per_pair = self.per_pair.copy()
        per_pair.attrs.update(
            title="ensml CRPS at stations, per station-time", pooling=POOLING, extraction=self.extraction
        )
        files: dict[str, Content] = {
            "scores.csv": self.table.to_csv(index=False),
            "scores.md": header + to_markdown(self.table),
            "stations.csv": self.stations.to_csv(index=False),
            "stations.nc": per_pair,
        }
        return files | self.skill_maps()

    def skill_maps(self) -> dict[str, bytes]:
        """``figures/station_skill_<var>[_<level>].png``: each station product's CRPS skill
        over the raw ensemble by station, a map per lead (none without station products)."""
        out = {}
        rows = self.stations
        level = rows["level_hPa"].map(lambda v: None if pd.isna(v) else float(v))
        products = [f for f in rows["forecast"].unique() if str(f).startswith("station DRN")]
        for name in products:
            for var, lev in dict.fromkeys(zip(rows["variable"][rows["forecast"] == name], level)):
                part = rows[(rows["variable"] == var) & (level.map(lambda v, lev=lev: v == lev))]
                reference = next(f for f in part["forecast"].unique() if str(f).startswith("raw ensemble"))
                suffix, where = ("", "") if lev is None else (f"_{lev:g}", f" {lev:g} hPa")
                title = f"{var}{where}: {name} against the observations"
                out[f"figures/station_skill_{var}{suffix}.png"] = station_skill_map(
                    part, name, reference, title
                )
        return out


def _summaries(
    ens: xr.DataArray | None, centre: xr.DataArray, y: xr.DataArray, crps: xr.DataArray, dims: list[str]
) -> dict[str, xr.DataArray]:
    """n_pairs, crps, rmse, mae, spread, spread_skill over ``dims``, on the pairs ``y`` observes.

    ``centre``: the ensemble mean, or a predictive distribution's mean (``ens`` None: no spread).
    """
    seen = np.isfinite(y)
    err = centre - y
    n = seen.sum(dims)
    m = ens.sizes[MEMBER] if ens is not None else 0
    spread = (
        np.sqrt(ens.var(MEMBER, ddof=1).where(seen).mean(dims)) if m > 1 else xr.full_like(n, np.nan, float)
    )
    rmse = np.sqrt((err**2).mean(dims))
    return {
        "crps": crps.mean(dims),
        "n_pairs": n,
        "rmse": rmse,
        "mae": np.abs(err).mean(dims),
        "spread": spread,
        "spread_skill": np.sqrt((m + 1) / m) * spread / rmse if m else spread,
    }


def _rows(
    frame: StationFrame,
    sl: StationLead,
    var: str,
    subset: Subset,
    fair: bool,
    per_pair: dict,
    products: StationProducts | None = None,
    oracle: StationOracle | None = None,
) -> tuple[list, list]:
    """Pooled and per-station rows of ``var`` at one lead; its per-pair CRPS added to ``per_pair``."""
    x, y = sl.forecast[var], sl.observed[var]
    ensembles = subset.ensembles(x)
    raw_key = raw_ensemble_name(x.sizes[MEMBER])
    scopes = {"pooled": [INIT_TIME, STATION], "station": [INIT_TIME]}
    est = "fair ensemble" if fair else "empirical ensemble"
    crps_of = {name: crps_ensemble(ens, y, preserve_dims="all", fair=fair) for name, ens in ensembles.items()}
    estimators = dict.fromkeys(ensembles, est)
    centres = {name: ens.mean(MEMBER) for name, ens in ensembles.items()}
    if products is not None and var in products.variables:
        name, crps, centre = products.score(var, sl, y)
        crps_of[name], estimators[name], centres[name] = crps, f"{products.family(var)} closed form", centre
    best = None
    if oracle is not None and var in oracle.families:
        best, crps, centre = oracle.score(var, sl, y)
        crps_of[best], estimators[best], centres[best] = (
            crps,
            f"{oracle.families[var].name} closed form",
            centre,
        )
    summary: dict[str, dict[str, dict[str, xr.DataArray]]] = {}
    for name, crps in crps_of.items():
        per_pair[f"crps_{slug(name)}_{var}"] = crps.drop_vars([LEAD_TIME, VALID_TIME], errors="ignore")
        with warnings.catch_warnings():  # a station or lead with nothing observed: NaN, counted 0
            warnings.simplefilter("ignore", RuntimeWarning)
            ens = ensembles.get(name)
            summary[name] = {
                scope: _summaries(ens, centres[name], y, crps, dims) for scope, dims in scopes.items()
            }
    weights = xr.ones_like(y[STATION], dtype=float)
    tests = skill_tests(crps_of, weights, raw_key, sl.lead)
    units = y.attrs.get("units") or x.attrs.get("units") or units_of(var)
    out: dict[str, list[dict]] = {"pooled": [], "station": []}
    for name in crps_of:
        for scope, s in ((scope, summary[name][scope]) for scope in scopes):
            for lev in levels_of(s["crps"], frame.levels):
                head = {
                    "variable": var,
                    "level_hPa": table_level(lev),
                    "lead_h": lead_hours(sl.lead),
                    "forecast": name,
                    "estimator": estimators[name],
                    "units": units,
                }
                vals = {key: at(v, lev) for key, v in s.items()}
                vals["skill_vs_raw_ensemble"] = 1.0 - vals["crps"] / at(summary[raw_key][scope]["crps"], lev)
                if best is not None:  # the share of the raw ensemble's excess over the oracle removed
                    raw, low = (at(summary[n][scope]["crps"], lev) for n in (raw_key, best))
                    vals["gap_closed"] = (raw - vals["crps"]) / (raw - low)
                if scope == "pooled":
                    row = {**head, **{key: v.item() for key, v in vals.items()}}
                    row.update(NO_TEST if name == raw_key else skill_test_columns(tests[name, lev]))
                    out[scope].append(row)
                else:
                    out[scope] += _station_rows(head, vals)
    return out["pooled"], out["station"]


def _station_rows(head: dict, vals: dict[str, xr.DataArray]) -> list[dict]:
    """One row per station: its id, position, elevation, ``head`` and ``vals`` (station)."""
    ds = xr.Dataset(vals)
    ds = ds.drop_vars([c for c in ds.coords if ds[c].dims != (STATION,)])
    df = ds.to_dataframe().reset_index().rename(columns={ELEVATION: "elevation_m"})
    for key, value in head.items():
        df[key] = value
    return df.to_dict("records")


def _per_pair(fields: list[xr.Dataset], leads: list[np.timedelta64], frame: StationFrame) -> xr.Dataset:
    """The per-pair CRPS of every lead along ``lead_time`` (init times: their union, NaN elsewhere)."""
    if not fields:
        return xr.Dataset()
    ds = xr.concat(fields, dim=pd.Index(np.array(leads, dtype=LEAD_DTYPE), name=LEAD_TIME), join="outer")
    ds[LEAD_TIME].attrs.update(COORD_ATTRS[LEAD_TIME])
    ds = ds.assign_coords({VALID_TIME: ds[INIT_TIME] + ds[LEAD_TIME]})
    ds[VALID_TIME].attrs.update(COORD_ATTRS[VALID_TIME])
    return ds.assign_coords({c: frame.observations[c] for c in frame.observations[STATION].coords})


def score_stations(
    frame: StationFrame,
    subset: Subset,
    fair: bool = False,
    products: StationProducts | None = None,
    oracle: StationOracle | None = None,
) -> StationScores:
    """Score every lead and variable of ``frame`` (one lead read at a time), and ``products``
    where given (:func:`read_station_products`, on the frame it restricted)."""
    for lead in frame.leads:  # a lead of no whole hours has no row: fail before the work
        lead_hours(lead)
    pooled, by_station, fields, leads, inits = [], [], [], [], []
    progress = Progress("evaluate", len(frame.leads), "leads")
    for lead in frame.leads:
        if frame.inits_at(lead).size == 0:
            note(f"evaluate: no observation at a valid time of +{format_lead(lead)}; no pairs to score")
            progress.advance(f"+{format_lead(lead)}: nothing observed")
            continue
        sl = frame.at(lead)
        per_pair: dict[str, xr.DataArray] = {}
        for var in frame.variables:
            p, s = _rows(frame, sl, var, subset, fair, per_pair, products, oracle)
            pooled += p
            by_station += s
        fields.append(xr.Dataset(per_pair))
        leads.append(lead)
        inits.append(sl.observed[INIT_TIME].values)
        n = sum(
            r["n_pairs"]
            for r in pooled
            if r["lead_h"] == lead_hours(lead) and "raw ensemble" in r["forecast"]
        )
        progress.advance(f"+{format_lead(lead)}: {n} pairs scored in {seconds(progress.lap)}")
    progress.close()
    corrected = frame.model_height is not None
    height_note = f"2 m temperature moved to station heights at {frame.lapse_rate:g} K/m" if corrected else ""
    pooled_df, station_df = pd.DataFrame(pooled), pd.DataFrame(by_station)
    n_inits = np.unique(np.concatenate(inits)).size if inits else 0
    return StationScores(
        pooled_df[[c for c in COLUMNS if c in pooled_df]],
        station_df[[c for c in STATION_COLUMNS if c in station_df]],
        _per_pair(fields, leads, frame),
        n_stations=frame.observations.sizes[STATION],
        n_inits=n_inits,
        leads=frame.leads,
        variables=frame.variables,
        extraction=frame.points.method,
        height_note=height_note,
    )


def station_options(
    analysis: object, observations: str | None, *, verb: str = "evaluate", **others: object
) -> None:
    """Raise unless exactly one of ``analysis`` and ``observations`` is given, and, with
    ``observations``, none of ``others`` (the options that score on the grid); ``verb`` names
    the command in the message."""
    if analysis is not None and observations is not None:
        raise EnsmlError(
            f"{verb}: give --analysis (a gridded analysis) or --observations (stations), not both"
        )
    if observations is None:
        raise EnsmlError(
            f"{verb}: give --analysis (a gridded analysis) or --observations (station observations)"
        )
    given = [name for name, value in others.items() if value]
    if given:
        raise EnsmlError(
            f"{verb}: --{given[0]} does not apply to --observations (station scores are of the raw "
            "ensemble, its subset, station products of --predictions and the station --oracle); drop "
            "it, or score against --analysis"
        )


def gridded_options(
    *, extraction: str, model_height: str | None, lapse_rate: float, verb: str = "evaluate"
) -> None:
    """Raise if an option of station observations is given with an analysis (``verb`` names the
    command in the message)."""
    if model_height is not None:
        raise EnsmlError(f"{verb}: --model_height applies with --observations only (station heights)")
    if extraction != "nearest":
        raise EnsmlError(f"{verb}: --extraction applies with --observations only (values at stations)")
    if lapse_rate != STANDARD_LAPSE_RATE:
        raise EnsmlError(f"{verb}: --lapse_rate applies with --observations and --model_height only")


def _embedding_origins(rows: pd.DataFrame, coords: xr.Dataset) -> None:
    """Add to the per-station rows of station products where each station's embedding came from
    (``embedding``: own, nearest or zero, as the products record it; empty for other rows)."""
    if EMBEDDING not in coords or rows.empty:
        return
    origin = dict(zip(coords[STATION].values.astype(str), coords[EMBEDDING].values.astype(str)))
    product = rows["forecast"].astype(str).str.startswith("station DRN")
    rows["embedding"] = np.where(product, rows["station"].astype(str).map(origin).fillna(""), "")


def evaluate_stations(
    forecast: str | list[str],
    observations: str,
    selection: Selection | None = None,
    *,
    fair: bool = False,
    extraction: str = "nearest",
    model_height: str | None = None,
    lapse_rate: float = STANDARD_LAPSE_RATE,
    out_dir: str | None = "runs/eval",
    reader: ReaderOptions | None = None,
    predictions: str | list[str] | None = None,
    oracle: str | None = None,
) -> StationScores:
    """Score ``forecast`` against station ``observations`` (options: :func:`ensml.verify.evaluate.evaluate`;
    ``selection``: its variables, levels, leads and ``k``), and the station products
    ``predictions`` of ``ensml postprocess`` where given (their run sets ``k``), and the station
    ``oracle`` (``stations_oracle.nc``) where given, with each row's ``gap_closed``.

    Raises
    ------
    EnsmlError
        An ``out_dir`` ensml may not write (before any work), a bad lead or lapse rate, and
        what :func:`ensml.data.station_frame.build_station_frame` raises; nothing is written then.
    """
    if out_dir is not None:
        OutputFolder.check(out_dir, "evaluate", names=FILES)  # before the work: fails in seconds
    selection = selection or Selection()
    leads = leads_option(selection.leads)
    if not np.isfinite(lapse_rate) or abs(lapse_rate) > 0.1:  # K/m: 0.1 is ten times the dry adiabat
        standard = STANDARD_LAPSE_RATE
        raise EnsmlError(f"lapse_rate {lapse_rate!r} is not a lapse rate in K/m (the standard is {standard})")
    runs = () if predictions is None else (scan_run(predictions, "station predictions", []),)  # once
    subset = raw_subset(runs, selection.k)  # the products' members, or the first k
    frame = build_station_frame(
        forecast,
        observations,
        variables=selection.variables,
        levels=selection.levels,
        leads=leads,
        k=subset.k,
        extraction=extraction,
        model_height=model_height,
        lapse_rate=lapse_rate,
        reader=reader,
    )
    products = None
    if predictions is not None:
        products, frame = read_station_products(runs[0], frame)
    best = read_station_oracle(oracle, frame) if oracle is not None else None
    scores = score_stations(frame, subset, fair, products, best)
    if products is not None:
        _embedding_origins(scores.stations, products.run.coords)
    if not scores.table.empty:
        n = int(scores.table.loc[scores.table["forecast"].str.startswith("raw ensemble"), "n_pairs"].sum())
        note(
            f"evaluate: {n} station-time pairs scored at {scores.n_stations} stations (values not observed "
            "left out; n_pairs per lead and variable in the table)"
        )
    if out_dir is not None:
        note(f"evaluate: writing the station scores to {out_dir}")
        with OutputFolder.open(out_dir, "evaluate", whole=True) as folder:
            write_files(folder, scores.files())
        scores.out_dir = Path(out_dir)
    return scores


__all__ = [
    "FILES",
    "StationScores",
    "evaluate_stations",
    "gridded_options",
    "score_stations",
    "station_options",
]
