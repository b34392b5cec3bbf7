"""Hersbach CRPS decomposition: one dask pass vs numpy on the loaded array vs two dask passes.

A synthetic archive, 200 inits x 20 members x 64 x 128 float32 (131 MB; ``--quick``: 20 inits),
in dask chunks of 10 inits (members in one chunk), is decomposed three ways, in interleaved
rounds (so a burst of load hits all alike), one line each with the min and the median over
``--repeats`` and the ratio of the medians to the one-pass dask run:

* ``dask one pass``: :func:`~ensml.scores.crps_decomposition` of the dask arrays (one
  ``dask.compute``: every forecast chunk read once; the CRPS comes with it);
* ``numpy loaded``: the same of the numpy arrays (single-threaded numpy);
* ``dask two passes``: :func:`~ensml.scores.crps_ensemble` computed first, then the
  decomposition (what a script that wants both would do without the decomposition's CRPS).

Then the sort behind the uncertainty term (what ``evaluate`` sorts per lead, variable and
level: the analysis of 16 inits x 361 x 720 points pooled, float32, 4.2 million values):
:func:`~ensml.scores.uncertainty.stable_order` (64-bit value|position keys) against numpy's
``argsort(kind="stable")``, which it reproduces (checked), min and median of the same rounds.

Then, in a child process each, the peak memory (RSS sampled every 5 ms, above the level
before the compute) of the one-pass dask run and of the numpy run (the arrays already loaded).
Usage: ``python benchmarks/hersbach.py [--quick] [--repeats N] [--workers W]``. Run by hand on
a quiet machine; tests never time.
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # numpy's matmul on one thread, as dask's workers

import argparse
import resource
import subprocess
import sys
import threading
import time
from collections.abc import Callable

import numpy as np

M, LAT, LON, CHUNK = 20, 64, 128, 10


def archive(inits: int, chunked: bool):
    """(forecast, observation) DataArrays; dask-backed in chunks of CHUNK inits when ``chunked``."""
    import xarray as xr

    rng = np.random.default_rng(0)
    signal = 5.5e4 + 300 * rng.standard_normal((inits, LAT, LON), dtype=np.float32)
    fc = signal[:, None] + 300 * rng.standard_normal((inits, M, LAT, LON), dtype=np.float32)
    obs = signal + 330 * rng.standard_normal((inits, LAT, LON), dtype=np.float32)
    lat = np.linspace(87.2, -87.2, LAT)
    f = xr.DataArray(fc, dims=("init_time", "member", "latitude", "longitude"), coords={"latitude": lat})
    o = xr.DataArray(obs, dims=("init_time", "latitude", "longitude"), coords={"latitude": lat})
    if chunked:
        f, o = f.chunk(init_time=CHUNK), o.chunk(init_time=CHUNK)
    return f, o


def timings(fns: dict[str, Callable[[], object]], repeats: int) -> dict[str, tuple[float, float]]:
    """``{name: (min, median)}`` seconds over ``repeats`` interleaved rounds of every function."""
    times: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    return {k: (min(v), float(np.median(v))) for k, v in times.items()}


def rss() -> int:
    """Resident set size of this process now, in bytes (Linux)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize()


def memory_child(inits: int, chunked: bool, workers: int) -> None:
    """Print the peak RSS above the pre-compute level of one decomposition."""
    import dask

    from ensml.data.weights import latitude_weights
    from ensml.scores import crps_decomposition

    f, o = archive(inits, chunked)
    w = latitude_weights(o)
    crps_decomposition(f.isel(init_time=slice(0, 1)), o.isel(init_time=slice(0, 1)), weights=w)  # warm
    base = rss()
    peak = [base]
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], rss())
            time.sleep(0.005)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    with dask.config.set(scheduler="threads", num_workers=workers):
        d = crps_decomposition(f, o, weights=w)
    done.set()
    sampler.join()
    kind = f"dask one pass ({workers} workers)" if chunked else "numpy loaded"
    nbytes = f.nbytes + o.nbytes
    print(
        f"peak memory, {kind}: +{(peak[0] - base) / 1e6:.0f} MB over the pre-compute level "
        f"({(peak[0] - base) / nbytes:.2f}x the {nbytes / 1e6:.0f} MB input); crps {float(d.crps):.3f}, "
        f"reliability {float(d.reliability):.3f}, resolution {float(d.resolution):.3f}, "
        f"uncertainty {float(d.uncertainty):.3f} m2 s-2",
        flush=True,
    )


def sort_lines(repeats: int) -> None:
    """The uncertainty's sort against numpy's stable argsort (module docstring)."""
    from ensml.scores.uncertainty import stable_order

    rng = np.random.default_rng(0)
    y = (5500.0 + 50.0 * rng.standard_normal((1, 16 * 361 * 720))).astype(np.float32)
    y[0, ::97] = np.round(y[0, ::97])  # ties
    assert np.array_equal(stable_order(y), np.argsort(y, axis=1, kind="stable"))
    res = timings(
        {
            "stable_order (64-bit keys)": lambda: stable_order(y),
            "numpy argsort(kind='stable')": lambda: np.argsort(y, axis=1, kind="stable"),
        },
        repeats,
    )
    (kmin, kmed), (amin, amed) = res.values()
    print(
        f"uncertainty sort, 16 inits x 361 x 720 float32 ({y.size / 1e6:.1f} M values), same order: "
        f"stable_order min {kmin:.3f} / median {kmed:.3f} s, numpy stable argsort min {amin:.3f} / "
        f"median {amed:.3f} s -> {amed / kmed:.1f}x",
        flush=True,
    )


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="20 inits instead of 200")
    p.add_argument("--repeats", type=int, default=5, help="interleaved rounds per variant")
    p.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="dask threads")
    p.add_argument("--memory-child", nargs=2, type=int, metavar=("INITS", "CHUNKED"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    inits = 20 if args.quick else 200
    if args.memory_child:
        memory_child(args.memory_child[0], bool(args.memory_child[1]), args.workers)
        return
    import dask

    from ensml.data.weights import latitude_weights
    from ensml.scores import crps_decomposition, crps_ensemble

    fl, ol = archive(inits, chunked=False)
    fd, od = fl.chunk(init_time=CHUNK), ol.chunk(init_time=CHUNK)
    w = latitude_weights(ol)
    fns = {
        "dask one pass": lambda: crps_decomposition(fd, od, weights=w),
        "numpy loaded": lambda: crps_decomposition(fl, ol, weights=w),
        "dask two passes": lambda: (
            crps_ensemble(fd, od, weights=w).compute(),
            crps_decomposition(fd, od, weights=w),
        ),
    }
    one, loaded = fns["dask one pass"](), fns["numpy loaded"]()  # warm (numba, imports)
    crps = float(crps_ensemble(fl, ol, weights=w))
    print(
        f"env: {os.cpu_count()} cores, dask threads scheduler with {args.workers} workers, numpy "
        f"{np.__version__}, dask {dask.__version__}, OPENBLAS_NUM_THREADS="
        f"{os.environ.get('OPENBLAS_NUM_THREADS')}; {args.repeats} interleaved repeats, ratios of medians",
        flush=True,
    )
    print(
        f"archive: {inits} inits x {M} members x {LAT} x {LON} float32 ({(fl.nbytes + ol.nbytes) / 1e6:.0f} "
        f"MB) in {inits // CHUNK} chunks of {CHUNK} inits; crps {float(one.crps):.4f} (crps_ensemble "
        f"{crps:.4f}, numpy {float(loaded.crps):.4f}), reli + pot - crps "
        f"{float(one.reliability + one.crps_potential - one.crps):.1e}",
        flush=True,
    )
    with dask.config.set(scheduler="threads", num_workers=args.workers):
        res = timings(fns, args.repeats)
    ref = res["dask one pass"][1]
    for name, (tmin, tmed) in res.items():
        print(
            f"{name}: min {tmin:.3f} / median {tmed:.3f} s -> {tmed / ref:.2f}x the one-pass median",
            flush=True,
        )
    sort_lines(args.repeats)
    for chunked in (1, 0):
        cmd = [sys.executable, os.path.abspath(__file__), "--memory-child", str(inits), str(chunked)]
        subprocess.run([*cmd, "--workers", str(args.workers)], check=True)


if __name__ == "__main__":
    main()
