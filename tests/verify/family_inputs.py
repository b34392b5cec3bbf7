"""A tiny dataset of bounded variables for ``evaluate``: precipitation, wind speed and 2 m temperature.

Written into a folder (seconds): a 10-member forecast of ``tp`` (kg m-2, dry about half of the
time), ``si10`` (m s-1) and ``t2m`` (K) on a 6 x 8 latitude/longitude grid, six daily inits at
+24 h; an analysis of the same variables from 45 days before the first init (the climatology
of SEEPS) to after the last valid time; predictions with the run metadata of a mixed task whose
families are ``tp: csg0``, ``si10: truncnormal`` and ``t2m: normal``; and an oracle with the
same families named by its ``ensml_distribution`` attribute.

Both hold the families' parameters (``tp_shape``, ``tp_scale``, ``tp_shift``; ``si10_loc``,
``si10_scale``; ``t2m_mean``, ``t2m_std``), and, for the bounded variables, a ``<var>_mean``
(as products do) and a ``<var>_std``: the frame builder (``ensml.data.frame``) still asks every
predictions and oracle file for ``<var>_mean`` and ``<var>_std``. The ``<var>_std`` of the
bounded variables is a constant that no family uses, so a score that took the Gaussian of
``<var>_mean`` and ``<var>_std`` would differ from the family's.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import xarray as xr

from ensml.predictions import RunMeta
from ensml.scores.distributions import get_family

VARIABLES = ("tp", "si10", "t2m")
FAMILIES = ("csg0", "truncnormal", "normal")
UNITS = {"tp": "kg m-2", "si10": "m s-1", "t2m": "K"}
LEADS = np.array([24], "timedelta64[h]").astype("timedelta64[ns]")
LAT = np.linspace(60.0, 10.0, 6)
LON = np.arange(8) * 45.0
N_INITS = 6
MEMBERS = 10


def _params(rng: np.random.Generator, shape: tuple[int, ...]) -> dict[str, np.ndarray]:
    return {
        "tp_shape": rng.uniform(0.5, 1.5, shape),
        "tp_scale": rng.uniform(2.0, 6.0, shape),
        "tp_shift": rng.uniform(0.2, 2.0, shape),
        "si10_loc": rng.normal(8.0, 3.0, shape),
        "si10_scale": rng.uniform(2.0, 5.0, shape),
        "t2m_mean": rng.normal(285.0, 5.0, shape),
        "t2m_std": rng.uniform(0.5, 3.0, shape),
    }


def make_inputs(root: Path, seed: int = 0) -> dict[str, Path]:
    """Write forecast, analysis, predictions and oracle under ``root``; their paths by name."""
    rng = np.random.default_rng(seed)
    root.mkdir(parents=True, exist_ok=True)
    inits = pd.date_range("2020-02-15", periods=N_INITS, freq="D").values
    times = pd.date_range("2020-01-01", "2020-02-25", freq="D").values
    space = (LAT.size, LON.size)
    coords = {"latitude": LAT, "longitude": LON}

    wet = rng.uniform(size=(times.size, *space)) < 0.5
    truth = {
        "tp": np.where(wet, rng.gamma(0.8, 6.0, (times.size, *space)), 0.0),
        "si10": np.abs(rng.normal(9.0, 5.0, (times.size, *space))),
        "t2m": rng.normal(285.0, 6.0, (times.size, *space)),
    }
    an = xr.Dataset(
        {
            v: (("time", "latitude", "longitude"), a.astype("float32"), {"units": UNITS[v]})
            for v, a in truth.items()
        },
        coords={"time": times, **coords},
    )
    an.to_netcdf(root / "analysis.nc")

    shape = (N_INITS, LEADS.size, MEMBERS, *space)
    members = {
        "tp": np.where(rng.uniform(size=shape) < 0.5, rng.gamma(0.8, 6.0, shape), 0.0),
        "si10": np.abs(rng.normal(9.0, 4.0, shape)),
        "t2m": rng.normal(285.0, 5.0, shape),
    }
    dims = ("init_time", "lead_time", "member", "latitude", "longitude")
    fc = xr.Dataset(
        {v: (dims, a.astype("float32"), {"units": UNITS[v]}) for v, a in members.items()},
        coords={"init_time": inits, "lead_time": LEADS, "member": np.arange(MEMBERS), **coords},
    )
    fc.to_netcdf(root / "forecast.nc")

    pshape = (N_INITS, LEADS.size, *space)
    pdims = ("init_time", "lead_time", "latitude", "longitude")

    def dataset(p: dict[str, np.ndarray]) -> xr.Dataset:
        csg = get_family("csg0")
        p = dict(p)
        p["tp_mean"] = csg.mean({k: p[f"tp_{k}"] for k in csg.params})
        p["tp_std"] = np.full(pshape, 3.0)
        p["si10_mean"], p["si10_std"] = p["si10_loc"], np.full(pshape, 3.0)
        return xr.Dataset(
            {k: (pdims, v.astype("float32")) for k, v in p.items()},
            coords={"init_time": inits, "lead_time": LEADS, **coords},
        )

    meta = RunMeta(
        task="MixedTask",
        k=5,
        members=tuple(range(5)),
        ensemble_size=MEMBERS,
        variables=VARIABLES,
        levels=(),
        leads=tuple(LEADS),
        checkpoints=("ab" * 32,),
        surface=VARIABLES,
        families=FAMILIES,
    )
    dataset(_params(rng, pshape)).assign_attrs(meta.to_attrs()).to_netcdf(root / "predictions.nc")
    oracle = dataset(_params(rng, pshape))
    distribution = " ".join(f"{v}:{f}" for v, f in zip(VARIABLES, FAMILIES))
    oracle.assign_attrs(ensml_distribution=distribution).to_netcdf(root / "oracle.nc")
    return {name: root / f"{name}.nc" for name in ("forecast", "analysis", "predictions", "oracle")}
