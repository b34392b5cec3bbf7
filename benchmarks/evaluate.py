"""``ensml evaluate`` and ``report`` on a dask cluster: throughput, speed-up, worker memory.

Run by hand (``python benchmarks/evaluate.py``; the quotable run is the default, full
resolution: 361 × 720, 10 members, z and t at 500/850 hPa, leads 24 and 48 h, 60 inits);
prints one line per comparison:

* inits/s of ``evaluate`` in one process (``cluster: none``) and on a 2-worker local cluster
  (``--scheduler_address`` of a cluster started once and warmed, set up as ``evaluate --cluster
  local`` sets it up; its workers open the inputs afresh in every run, as one process does),
  the median and the fastest of ``--repeats`` interleaved repeats, and the
  speed-up (ratio of medians; the target on 2 cores is 1.8x);
* the peak resident memory of each worker (fresh clusters) and of this process against the
  archive's length (``--lengths``, e.g. 20, 40 and 60 inits): a worker holds one block of
  ``--init_block`` init times at one lead, so its peak stays flat;
* the same for ``ensml report --cluster`` (its page written to a scratch folder), whose workers
  also compute the analysis's monthly climatology, a few times at a time.

``--only memory`` skips the timed runs (``--only timing`` the memory runs).

The tables of both runs are checked identical (the cluster's promise). Every process uses one
thread for numpy's BLAS (``OMP_NUM_THREADS=1``, set before numpy loads; distributed's nannies set
it for the workers too) and one dask thread per worker.

The data are generated as an archive grows, in periods of a week (``ensml data synth``, one
init a day), each week's forecast written one init per file (``ensml data archive``) and the
analyses joined into one file (the first week's values where two weeks overlap). Tiny setting
for a smoke run: ``--n_lat 16 --n_lon 32 --inits 8 --lengths 4,8 --repeats 1``.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")  # before numpy: one BLAS thread per process

import argparse
import logging
import math
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
import xarray as xr

from ensml.cluster.workers import peak_rss_mb
from ensml.data.archive import archive
from ensml.data.synth.generate import synth
from ensml.logs import configure
from ensml.report.assemble import report
from ensml.verify.distributed import forget_frames
from ensml.verify.evaluate import evaluate
from ensml.verify.on_cluster import INIT_BLOCK

START = np.datetime64("2021-01-04")


def prepare(work: Path, n_lat: int, n_lon: int, inits: int) -> tuple[list[str], str]:
    """The archive (a file per init, ``inits`` of them, one a day) and the analysis file."""
    analyses, t0 = [], time.perf_counter()
    for week in range(math.ceil(inits / 7)):
        first = START + np.timedelta64(7 * week, "D")
        last = first + np.timedelta64(min(7, inits - 7 * week) - 1, "D")
        files = synth(
            str(work / f"week{week}"),
            n_lat=n_lat,
            n_lon=n_lon,
            start=str(first),
            end=str(last),
            every_days=1,
            seed=week,
        )
        archive(str(files["forecast"]), str(work / "archive"))
        os.remove(files["forecast"])
        os.remove(files["oracle"])
        analyses.append(str(files["analysis"]))
    with xr.open_mfdataset(analyses, combine="nested", concat_dim="time") as an:
        an = an.isel(time=~pd.Index(an["time"].values).duplicated())
        an.to_netcdf(work / "analysis.nc")
    for path in analyses:
        os.remove(path)
    paths = sorted(str(p) for p in (work / "archive").glob("*.nc"))
    size = sum(os.path.getsize(p) for p in paths) / 2**20
    print(
        f"data {n_lat}x{n_lon}: {len(paths)} inits in {time.perf_counter() - t0:.0f} s, archive {size:.0f} MB"
    )
    return paths, str(work / "analysis.nc")


class Cluster:
    """A 2-worker local cluster as ``evaluate --cluster local`` starts it (one thread a worker)."""

    def __init__(self, workers: int = 2) -> None:
        import dask
        from distributed import Client, LocalCluster

        from ensml.cluster.connection import WORKER_CONFIG
        from ensml.cluster.workers import ScoringPlugin

        with dask.config.set(WORKER_CONFIG):
            self.cluster = LocalCluster(
                n_workers=workers, threads_per_worker=1, dashboard_address=":0", silence_logs=logging.ERROR
            )
        self.client = Client(self.cluster)
        self.client.register_plugin(ScoringPlugin(), name=ScoringPlugin.name)
        self.address = self.cluster.scheduler_address

    def peak_rss_mb(self) -> list[float]:
        return sorted(self.client.run(peak_rss_mb).values())

    def close(self) -> None:
        self.client.close()
        self.cluster.close()


def run_evaluate(
    forecast: list[str], analysis: str, on: Cluster | None = None, **cluster: object
) -> tuple[float, pd.DataFrame]:
    """Seconds and the CRPS table of one ``evaluate``; on ``on``, its workers open the inputs
    afresh, as the one-process run does."""
    if on is not None:
        on.client.run(forget_frames)
        cluster["scheduler_address"] = on.address
    start = time.perf_counter()
    scores = evaluate(forecast, analysis, variables=["z", "t"], out_dir=None, **cluster)
    return time.perf_counter() - start, scores.table


def line(label: str, times: list[float], n: int) -> float:
    rate = n / statistics.median(times)
    print(
        f"  {label}: {rate:.3f} inits/s (median of {len(times)}: {statistics.median(times):.1f} s for "
        f"{n} inits; fastest {n / min(times):.3f} inits/s)"
    )
    return rate


def run(
    n_lat: int, n_lon: int, inits: int, lengths: list[int], repeats: int, init_block: int, only: str | None
) -> None:
    configure(quiet=True)  # no progress lines between the results
    with tempfile.TemporaryDirectory(prefix="ensml-bench-evaluate-") as tmp:
        paths, analysis = prepare(Path(tmp), n_lat, n_lon, max(inits, *lengths))
        if only != "memory":
            timing(paths[:inits], analysis, n_lat, n_lon, repeats, init_block)
        if only != "timing":
            for verb in ("evaluate", "report"):
                memory(verb, paths, analysis, n_lat, n_lon, lengths, init_block, Path(tmp))
        what = "the cluster's client alone" if only == "memory" else "one-process runs included"
        print(f"evaluate peak memory of this process ({what}): {peak_rss_mb():.0f} MB")


def timing(forecast: list[str], analysis: str, n_lat: int, n_lon: int, repeats: int, init_block: int) -> None:
    """The timed runs: one process against a warm 2-worker cluster, interleaved."""
    on = Cluster()
    warm = {"on": on, "init_block": init_block}
    run_evaluate(forecast[: 2 * init_block], analysis, **warm)  # the workers import ensml
    times: dict[str, list[float]] = {"serial": [], "two": []}
    for _ in range(repeats):  # interleaved, so that the machine's slow spells hit both alike
        t, serial_table = run_evaluate(forecast, analysis)
        times["serial"].append(t)
        t, cluster_table = run_evaluate(forecast, analysis, **warm)
        times["two"].append(t)
        pd.testing.assert_frame_equal(serial_table, cluster_table, check_exact=True)
    on.close()
    n = len(forecast)
    print(
        f"evaluate benchmark: {n} inits, {n_lat}x{n_lon}, 10 members, z/t x 500/850 hPa, leads 24/48 h; "
        f"1 BLAS thread per process, 1 dask thread per worker, init_block {init_block}; {repeats} "
        "interleaved repeats; tables identical"
    )
    s = line("one process (cluster: none)", times["serial"], n)
    c = line("2-worker local cluster", times["two"], n)
    print(
        f"evaluate {n} inits {n_lat}x{n_lon}: 2 workers {c:.3f} inits/s vs one process {s:.3f} inits/s "
        f"-> {c / s:.2f}x"
    )


def memory(
    verb: str,
    paths: list[str],
    analysis: str,
    n_lat: int,
    n_lon: int,
    lengths: list[int],
    init_block: int,
    work: Path,
) -> None:
    """The peak memory of each worker of a fresh 2-worker cluster running ``verb`` on the first
    ``length`` inits of the archive, for each of ``lengths``."""
    peaks = {}
    for length in lengths:  # fresh workers: ru_maxrss is a peak since the process started
        on = Cluster()
        if verb == "evaluate":
            run_evaluate(paths[:length], analysis, on, init_block=init_block)
        else:
            out = work / f"report{length}"
            report(
                paths[:length], analysis, out_dir=str(out), variables=["z", "t"], scheduler_address=on.address
            )
        peaks[length] = on.peak_rss_mb()
        on.close()
    shown = ", ".join(f"{k} inits {max(v):.0f} MB" for k, v in peaks.items())
    first, last = lengths[0], lengths[-1]
    block = f"init_block {init_block if verb == 'evaluate' else INIT_BLOCK}"
    print(
        f"{verb} peak memory per worker ({n_lat}x{n_lon}, {block}): {shown} -> "
        f"{max(peaks[last]) / max(peaks[first]):.2f}x for {last / first:.1f}x the inits"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n_lat", type=int, default=361)
    parser.add_argument("--n_lon", type=int, default=720)
    parser.add_argument("--inits", type=int, default=60, help="inits timed (default 60)")
    parser.add_argument("--lengths", default="20,40,60", help="archive lengths of the memory runs")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--init_block", type=int, default=4, help="evaluate's (the report's is 4)")
    parser.add_argument(
        "--only", choices=["timing", "memory"], help="the timed runs or the memory runs alone"
    )
    ns = parser.parse_args()
    lengths = [int(x) for x in ns.lengths.split(",")]
    run(ns.n_lat, ns.n_lon, ns.inits, lengths, ns.repeats, ns.init_block, ns.only)
