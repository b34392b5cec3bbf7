"""Station models on the physics testbed's stations, whose errors depend on the flow.

Fits, on the first ``--train`` init times of ``DATA`` (``ensml data physics --stations N``),
station-wise EMOS (:func:`ensml.train.station_emos.fit_station_emos`, the baseline to beat) and
the station DRN (:func:`ensml.train.station_fit.fit_stations`) with and without the flow
(``predictors: [z850, t850]``) and the day of the year (the testbed has no seasons), and scores
them on the other init times with scoringrules' closed-form truncated-normal CRPS (the raw
subset with ``crps_ensemble``). Each skill over station-wise EMOS comes with its 95 % interval
(a moving-block bootstrap over init times of the station-mean CRPS) and the Diebold-Mariano p
(:func:`ensml.scores.significance.skill_test`). One torch thread.

    ensml data physics --out_dir data/physics-stations --inits 120 --members 5 --leads '[0,24,48]' \\
        --spinup_days 100 --stations 300 --workers 1
    python benchmarks/physics_stations.py data/physics-stations
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data", help="a folder of `ensml data physics --stations N`")
    parser.add_argument("--train", type=int, default=80, help="init times to train on (the first ones)")
    parser.add_argument("--k", type=int, default=5, help="members of the raw subset")
    parser.add_argument("--variable", default="si10", help="the observed surface variable (truncated normal)")
    args = parser.parse_args()

    import numpy as np
    import scoringrules as sr
    import torch

    from ensml.data.station_frame import build_station_frame
    from ensml.data.station_table import station_table
    from ensml.data.subset import Subset
    from ensml.scores.significance import forecast_horizon, skill_test
    from ensml.times import format_lead
    from ensml.train.station_emos import fit_station_emos
    from ensml.train.station_fit import fit_stations

    torch.set_num_threads(1)
    var, k, leads = args.variable, args.k, ["24h", "48h"]
    forecast, observations = f"{args.data}/forecast.nc", f"{args.data}/stations.nc"
    print(f"torch threads {torch.get_num_threads()}, load {os.getloadavg()}", flush=True)

    def table(predictors: list[str]):
        frame = build_station_frame(
            forecast, observations, variables=[var], k=k, leads=leads, predictors=predictors
        )
        return station_table(frame, Subset.first(k), radius_km=800).load()

    base = table([])
    inits = base["init_time"].values
    train = (str(inits[0])[:10], str(inits[args.train - 1])[:10])
    test = (str(inits[args.train])[:10], str(inits[-1])[:10])
    print(f"train {train}, test {test}", flush=True)
    dims = ("lead_time", "init_time", "station")
    scored = base.sel(init_time=slice(*test))
    y = scored[f"{var}_obs"].transpose(*dims).values

    def crps_tn(params) -> np.ndarray:
        loc, scale = (params[p].transpose(*dims).values for p in ("loc", "scale"))
        return sr.crps_tnormal(y, loc, scale, lower=0.0)

    crps = {f"raw subset ({k} members)": sr.crps_ensemble(y, scored[var].transpose(*dims, "member").values)}
    start = time.perf_counter()
    emos = fit_station_emos(base.sel(init_time=slice(*train)), var, family="truncnormal")
    crps["EMOS, station-wise"] = crps_tn(emos.distribution(scored))
    cost = {"EMOS, station-wise": time.perf_counter() - start}
    variants = {
        "DRN": ([], []),
        "DRN + flow (z850, t850)": (["z850", "t850"], []),
        "DRN, no day of year": ([], ["doy_sin", "doy_cos"]),
        "DRN + flow, no day of year": (["z850", "t850"], ["doy_sin", "doy_cos"]),
    }
    with tempfile.TemporaryDirectory() as work:
        for i, (name, (predictors, drop)) in enumerate(variants.items()):
            start = time.perf_counter()
            fit = fit_stations(
                forecast,
                observations,
                variables=[var],
                k=k,
                leads=leads,
                radius_km=800,
                predictors=predictors,
                drop_features=drop,
                train_period=train,
                test_period=None,
                out_dir=f"{work}/{i}",
            )
            cost[name] = time.perf_counter() - start
            params = fit.model.distribution(table(predictors).sel(init_time=slice(*test)))[var]
            crps[name] = crps_tn(params)
    reference = crps["EMOS, station-wise"]
    print(
        f"\n{var}: CRPS on {test[0]} … {test[1]}; skill over station-wise EMOS [95 %], DM p; fit s (1 thread)"
    )
    for i, lead in enumerate(scored["lead_time"].values):
        h = forecast_horizon(lead, scored["init_time"].values)
        for name, c in crps.items():
            t = skill_test(np.nanmean(c[i], axis=-1), np.nanmean(reference[i], axis=-1), h)
            fit_s = f"{cost[name]:.0f}" if name in cost else ""
            print(
                f"+{format_lead(lead)}  {name:28s} {np.nanmean(c[i]):.4f}  "
                f"{t.skill:+.1%} [{t.low:+.1%}, {t.high:+.1%}]  p {t.p_value:.2g}  {fit_s}"
            )
    print(f"load {os.getloadavg()}")


if __name__ == "__main__":
    main()
