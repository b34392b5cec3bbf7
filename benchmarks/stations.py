"""Station models' cost: fitting on 1,000 stations × 300 init times, applying to 10,000 stations.

The targets of the stations issue: a station model trains on 1,000 stations × 300 init times in
at most 5 minutes on 2 cores, and post-processing 10,000 stations for one init takes at most a
few seconds. The rows are drawn here (no files) with the shape of the station table's
(:func:`ensml.data.station_table.table_rows`: 11 features, one lead) and a known truth per
station, ``y = a_s + b·m + σ_s·ε``; each fit is scored on fresh rows against that truth (the
ratio of the closed-form normal CRPS, scoringrules), so a fast fit that learnt nothing shows.

Timed, in interleaved rounds (``--repeats``, min and median printed, the median quoted):

* ``fit_drn`` with its defaults (:mod:`ensml.train.drn`), against the 5-minute target;
* station-wise EMOS (:func:`ensml.train.emos.fit_emos`, local, one lead: the baseline);
* ``drn_distribution`` on 10,000 stations' rows of one init (the products' cost), against
  a few seconds.

Usage: ``python benchmarks/stations.py [--quick] [--repeats N] [--threads T]`` (torch threads,
default 2). Run by hand on a quiet machine; tests never time.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import scoringrules as sr
import torch

from ensml.train.drn import drn_distribution, fit_drn
from ensml.train.emos import emos_distribution, fit_emos

TARGET_FIT_S = 300.0
TARGET_APPLY_S = 5.0
N_FEATURES = 11


def draw(rng: np.random.Generator, n_stations: int, n_inits: int, truth: dict) -> tuple:
    """Rows ``(features, station, obs, mean, std)`` of every station at every init."""
    station = np.repeat(np.arange(n_stations), n_inits)
    features = rng.normal(size=(station.size, N_FEATURES)).astype(np.float32)
    m, s = features[:, 0], np.abs(features[:, 1]) + 0.5
    mean = truth["a"][station] + 1.2 * m
    std = np.sqrt(truth["sigma"][station] ** 2 + 0.3 * s**2)
    obs = (mean + std * rng.standard_normal(station.size)).astype(np.float32)
    features[:, 1] = s
    return features, station, obs, mean, std


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="100 stations × 100 inits, one repeat")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    n_stations, n_inits = (100, 100) if args.quick else (1000, 300)
    repeats = 1 if args.quick else args.repeats
    rng = np.random.default_rng(0)
    truth = {"a": rng.uniform(-3, 3, n_stations), "sigma": rng.uniform(0.5, 2.0, n_stations)}
    x, s, y, _, _ = draw(rng, n_stations, n_inits, truth)
    xt, st, yt, mt, sdt = draw(np.random.default_rng(1), n_stations, 50, truth)
    best = float(np.mean(sr.crps_normal(yt, mt, sdt)))
    lat, lon = rng.uniform(-60, 60, n_stations), rng.uniform(0, 360, n_stations)
    many = draw(np.random.default_rng(2), 10_000, 1, {"a": np.zeros(10_000), "sigma": np.ones(10_000)})[:2]

    def grid(a: np.ndarray, n: int) -> torch.Tensor:  # rows ordered by station: (init, 1, 1, 1, station)
        return torch.from_numpy(np.ascontiguousarray(a.reshape(-1, n).T, dtype=np.float64))[
            :, None, None, None, :
        ]

    times: dict[str, list[float]] = {"drn": [], "emos": [], "apply": []}
    crps: dict[str, float] = {}
    for _ in range(repeats):
        t0 = time.perf_counter()
        model = fit_drn(x, s, y, n_stations=n_stations, station_lat=lat, station_lon=lon, seed=0)
        times["drn"].append(time.perf_counter() - t0)
        p = drn_distribution(model, "normal", xt, st)
        crps["drn"] = float(np.mean(sr.crps_normal(yt, p["mean"].numpy(), p["std"].numpy())))

        t0 = time.perf_counter()
        emos = fit_emos(grid(x[:, 0], n_inits), grid(x[:, 1], n_inits), grid(y, n_inits), mode="local")
        times["emos"].append(time.perf_counter() - t0)
        q = emos_distribution(emos, "normal", grid(xt[:, 0], 50), grid(xt[:, 1], 50))
        mean = q["mean"][:, 0, 0, 0, :].T.reshape(-1).numpy()
        std = q["std"][:, 0, 0, 0, :].T.reshape(-1).numpy()
        crps["emos"] = float(np.mean(sr.crps_normal(yt, mean, std)))

        grown = model.with_new_stations(rng.uniform(-60, 60, 10_000), rng.uniform(0, 360, 10_000))
        t0 = time.perf_counter()
        drn_distribution(grown, "normal", many[0], many[1] + n_stations)
        times["apply"].append(time.perf_counter() - t0)

    def line(name: str, what: str, target: float) -> None:
        v = times[name]
        med = float(np.median(v))
        print(
            f"{what}: min {min(v):.3g} / median {med:.3g} s ({args.threads} torch threads) -> "
            f"{med / target:.3g} of the {target:g} s target"
        )

    print(f"{n_stations} stations x {n_inits} inits ({x.shape[0]} rows), {repeats} repeats")
    line("drn", "fit_drn (defaults)", TARGET_FIT_S)
    line("emos", "station-wise EMOS (fit_emos, local)", TARGET_FIT_S)
    line("apply", "drn_distribution, 10,000 stations of one init", TARGET_APPLY_S)
    for name in ("drn", "emos"):
        print(f"{name}: test CRPS {crps[name]:.4f} = {crps[name] / best:.3f} x the truth's {best:.4f}")


if __name__ == "__main__":
    main()
