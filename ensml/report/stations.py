"""``ensml report --observations``: the verification report at stations.

The stations are scored once, by ``evaluate``'s station verb
(:func:`ensml.verify.stations.evaluate_stations`): the raw ensemble and subset at the stations,
the station products of ``ensml postprocess`` (``predictions``) in their family and the station
oracle (``oracle``), on the same station-times, with each skill's 95 % interval and the
Diebold-Mariano test. The report shows the pooled table, the CRPS and its skill by lead time,
the map of each product's skill by station and, with products, one station's forecast plume
against its observations (the station observed most often, at the report's lead). Its files are
the report's (``report.md``, ``report.html``, ``figures/``) and evaluate's station tables under
``tables/``.
"""

from __future__ import annotations

import numpy as np
import xarray as xr

from ensml.data.stations import read_observations
from ensml.names import STATION, TIME
from ensml.report import plots
from ensml.report.render import Figure
from ensml.times import format_lead, lead_hours
from ensml.verify.charts import station_plume
from ensml.verify.stations import StationScores
from ensml.verify.tables import to_markdown

#: The pooled table's columns in the report (those the table has), in this order.
SHOWN = (
    "variable",
    "level_hPa",
    "lead_h",
    "forecast",
    "n_pairs",
    "crps",
    "skill_vs_raw_ensemble",
    "skill_low",
    "skill_high",
    "dm_p",
    "gap_closed",
    "spread_skill",
)


def station_blocks(
    title: str,
    scores: StationScores,
    sources: dict[str, str],
    lead: np.timedelta64,
    maps: dict[str, bytes],
    products: xr.Dataset | None = None,
) -> list:
    """The report's blocks (:func:`ensml.report.render.render`) for the station ``scores``.

    ``sources``: what was scored, by role (``forecast``, ``observations``, ``predictions``, …),
    as the report names them; ``lead``: the lead of the plume; ``maps``: the skill maps by
    station (:meth:`~ensml.verify.stations.StationScores.skill_maps`, by file name); ``products``:
    the station products (for the plume; none: no plume).
    """
    table = scores.table
    named = ", ".join(f"{role} `{path}`" for role, path in sources.items())
    out: list = [
        ("h1", title),
        ("p", f"{scores.title}; {named}."),
        ("p", f"{scores.caption}."),
        ("h2", "Scores pooled over the stations"),
        ("md", to_markdown(table[[c for c in SHOWN if c in table]])),
        ("h2", "By lead time"),
        Figure(
            "crps_by_lead.png",
            plots.scores_by_lead(table, "crps", "CRPS"),
            "CRPS by lead time, at the stations.",
        ),
    ]
    if table["lead_h"].nunique() > 0 and "skill_vs_raw_ensemble" in table:
        caption = "CRPS skill over the raw ensemble by lead time, with its 95 % interval."
        out.append(Figure("crps_skill_by_lead.png", plots.skill_by_lead(table), caption))
    if maps:
        out.append(("h2", "Skill by station"))
        for name, png in maps.items():
            what = name.removeprefix("figures/station_skill_").removesuffix(".png")
            caption = f"{what}: each station product's CRPS skill over the raw ensemble, by station and lead."
            out.append(Figure(name.removeprefix("figures/"), png, caption))
    if products is not None:
        out += _plumes(products, sources["observations"], lead)
    return out


def _plumes(products: xr.Dataset, observations: str, lead: np.timedelta64) -> list:
    """One station's forecast plume per variable: the station observed most often at ``lead``."""
    obs = read_observations(observations)
    out: list = [("h2", f"A station's forecast at +{format_lead(lead)}")]
    for var in [v for v in obs.data_vars if f"{v}_quantile" in products]:
        stations = np.intersect1d(products[STATION].values.astype(str), obs[STATION].values.astype(str))
        if stations.size == 0:
            continue
        valid = products["init_time"].values + np.timedelta64(lead, "ns")
        seen = obs[var].sel({STATION: stations}).reindex({TIME: valid})
        count = np.isfinite(seen.transpose(STATION, ...).values).reshape(stations.size, -1).sum(axis=1)
        best = str(stations[int(np.argmax(count))])
        png = station_plume(products, obs, best, str(var), lead)
        caption = (
            f"{var} at station {best} (observed most often): the products' quantiles at "
            f"+{lead_hours(lead):g} h against the observations."
        )
        out.append(Figure(f"station_plume_{var}.png", png, caption))
    return out


def products_of(paths: str | list[str] | None) -> xr.Dataset | None:
    """The station products of ``paths`` (opened lazily, combined by init time), or None."""
    if paths is None:
        return None
    return xr.open_mfdataset(
        paths, combine="by_coords", data_vars="minimal", coords="minimal", compat="override"
    )


__all__ = ["SHOWN", "products_of", "station_blocks"]
