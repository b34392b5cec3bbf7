"""Ensemble CRPS: ensml against properscoring, scoringrules and scores, in one run.

Prints one line per comparison, e.g.
``crps 10x1e6 float32: ensml 0.012 s, properscoring 0.129 s -> 10.7x``, the bandwidth bound
(input bytes over the read bandwidth of a numpy array copy) and, in a child process, the
peak memory of scoring a dask input several times larger than its chunks.

Usage: ``python benchmarks/crps.py [--quick]``. Every implementation is compiled/warmed on a
small input first; times are the best of several runs. Run by hand; tests never time.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import threading
import time
from collections.abc import Callable

import numpy as np


def best_time(fn: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def copy_bandwidth(nbytes: int) -> float:
    """Bytes read per second by a numpy copy of an array of ``nbytes``."""
    a = np.ones(nbytes // 4, dtype=np.float32)
    b = np.empty_like(a)
    t = best_time(lambda: np.copyto(b, a), 7)
    return a.nbytes / t


def peers(fc: np.ndarray, obs: np.ndarray) -> dict[str, Callable[[], object]]:
    """The other libraries on the same (points, members) float32 arrays, members last."""
    import properscoring as ps
    import scores.probability
    import scoringrules as sr
    import xarray as xr

    fda = xr.DataArray(fc, dims=("point", "member"))
    oda = xr.DataArray(obs, dims=("point",))
    return {
        "properscoring": lambda: ps.crps_ensemble(obs, fc),
        "scoringrules[numba]": lambda: sr.crps_ensemble(obs, fc, backend="numba"),
        "scoringrules[numpy]": lambda: sr.crps_ensemble(obs, fc, backend="numpy"),
        "scores": lambda: scores.probability.crps_for_ensemble(fda, oda, "member", preserve_dims="all"),
    }


def compare(m: int, n: int, label: str, bandwidth: float, repeats: int) -> None:
    from ensml.eval.crps import crps_ensemble_array

    rng = np.random.default_rng(0)
    # geopotential-like values: the kernel must stay exact around 5.5e4 in float32
    fc = (5.5e4 + 300 * rng.standard_normal((n, m), dtype=np.float32)).astype(np.float32)
    obs = (5.5e4 + 300 * rng.standard_normal(n, dtype=np.float32)).astype(np.float32)
    small_fc, small_obs = fc[:1000], obs[:1000]

    ours = {
        "ensml": lambda f, o: crps_ensemble_array(f, o, axis=-1),
        "ensml fair": lambda f, o: crps_ensemble_array(f, o, axis=-1, fair=True),
    }
    for fn in ours.values():
        fn(small_fc, small_obs)  # compile / load the numba cache
    t_ours = {k: best_time(lambda fn=fn: fn(fc, obs), repeats * 3) for k, fn in ours.items()}

    results: dict[str, float] = {}
    for fn in peers(small_fc, small_obs).values():
        fn()  # warm-up (numba JIT of the peers)
    for name, fn in peers(fc, obs).items():
        results[name] = best_time(fn, repeats)

    ref = crps_ensemble_array(fc[:2000], obs[:2000], axis=-1).astype(np.float64)
    exact = crps_ensemble_array(fc[:2000].astype(np.float64) - obs[:2000, None], np.zeros(2000), axis=-1)
    rel = float(np.max(np.abs(ref - exact) / exact))

    tag = f"crps {label} float32"
    t = t_ours["ensml"]
    for name, tp in results.items():
        print(f"{tag}: ensml {t:.4f} s, {name} {tp:.4f} s -> {tp / t:.1f}x", flush=True)
    fastest = min(results, key=results.get)
    print(
        f"{tag}: ensml {t:.4f} s, fastest peer ({fastest}) {results[fastest]:.4f} s "
        f"-> {results[fastest] / t:.1f}x",
        flush=True,
    )
    nbytes = fc.nbytes + obs.nbytes
    bound = nbytes / bandwidth
    print(
        f"{tag}: ensml {t:.4f} s, bandwidth bound {bound:.4f} s ({nbytes / 1e6:.0f} MB at "
        f"{bandwidth / 1e9:.1f} GB/s) -> {100 * bound / t:.0f}% of bound",
        flush=True,
    )
    print(
        f"{tag} fair: ensml {t_ours['ensml fair']:.4f} s; max relative error vs float64 "
        f"centred reference {rel:.1e}",
        flush=True,
    )


def rss() -> int:
    """Resident set size of this process now, in bytes (Linux)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize()


def dask_child(m: int, n: int, chunk: int) -> None:
    """Score a lazily generated dask input; print the peak RSS above the pre-compute level."""
    import dask
    import dask.array as da
    import xarray as xr

    from ensml.eval.crps import crps_ensemble, crps_ensemble_array

    crps_ensemble_array(np.zeros((m, 64), np.float32), np.zeros(64, np.float32))  # warm
    rng = da.random.default_rng(0)
    fc = xr.DataArray(
        (5.5e4 + 300 * rng.standard_normal((m, n), chunks=(m, chunk), dtype=np.float32)).astype(np.float32),
        dims=("member", "point"),
    )
    obs = xr.DataArray(
        (5.5e4 + 300 * rng.standard_normal(n, chunks=chunk, dtype=np.float32)).astype(np.float32),
        dims=("point",),
    )
    base = rss()
    peak = [base]
    done = threading.Event()

    def sample() -> None:  # ru_maxrss would include the imports' high-water mark
        while not done.is_set():
            peak[0] = max(peak[0], rss())
            time.sleep(0.005)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    t0 = time.perf_counter()
    with dask.config.set(scheduler="threads", num_workers=2):
        val = float(crps_ensemble(fc, obs).compute())
    dt = time.perf_counter() - t0
    done.set()
    sampler.join()
    peak = peak[0]
    total = (m * n + n) * 4
    chunk_bytes = (m + 1) * chunk * 4
    print(
        f"crps dask {m}x{n:.0e} float32: input {total / 1e6:.0f} MB in {n // chunk} chunks of "
        f"{chunk_bytes / 1e6:.0f} MB, {dt:.2f} s, peak memory +{(peak - base) / 1e6:.0f} MB over "
        f"the pre-compute level ({(peak - base) / total:.2f}x the input), mean CRPS {val:.3f}",
        flush=True,
    )


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="smaller shapes, fewer repeats")
    p.add_argument("--dask-child", nargs=3, type=int, metavar=("M", "N", "CHUNK"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.dask_child:
        dask_child(*args.dask_child)
        return

    import numba

    names = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE", "OMP_NUM_THREADS")
    env = {k: os.environ.get(k, "unset") for k in names}
    print(
        f"env: {os.cpu_count()} cores, numba {numba.__version__} with {numba.get_num_threads()} threads, "
        + ", ".join(f"{k}={v}" for k, v in env.items())
        + " (OPENBLAS_* only affect BLAS, which none of these kernels call)",
        flush=True,
    )
    scale = 10 if args.quick else 1
    repeats = 2 if args.quick else 5
    shapes = [(10, 1_000_000 // scale, "10x1e6"), (50, 200_000 // scale, "50x2e5")]
    bandwidth = copy_bandwidth(44_000_000)
    for m, n, label in shapes:
        if args.quick:
            label += "/10"
        compare(m, n, label, bandwidth, repeats)
    # a dask input 20x (quick: 5x) its chunk size, scored in bounded memory in a fresh process
    n, chunk = (5_000_000, 1_000_000) if args.quick else (20_000_000, 1_000_000)
    subprocess.run(
        [sys.executable, os.path.abspath(__file__), "--dask-child", "10", str(n), str(chunk)], check=True
    )


if __name__ == "__main__":
    main()
