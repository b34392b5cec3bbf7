"""``ensml postprocess`` throughput and memory: dask workers against a plain serial loop.

Run by hand (``python benchmarks/postprocess.py``); prints one line per comparison:

* files/s of a plain serial loop (checkpoint loaded once, the same per-file work: read, model,
  products, write) and of the dask path ``ensml postprocess`` uses, with 1 and 2 local workers;
  the overhead of dask at 1 worker, and the 2-worker speed-up against 1 worker and against
  perfect scaling of the serial loop (the hardware limit on 2 cores);
* the peak resident memory of a worker after 10 and after 100 files (fresh clusters).

The three modes are timed in turn in every repeat (so the machine's slow spells hit each alike);
the median and the fastest are printed, the median is the figure to quote. Each worker and the
serial loop use one torch thread; the clusters are set up as ``ensml postprocess`` sets them up
(:data:`ensml.cluster.connection.WORKER_CONFIG`, the model plugin) and warmed before timing.

The data: the embedded generator's 32 × 64 grid, z and t at 500/850 hPa, 10 members, leads
0/24/48 h, one init per file; the model: the main job's U-Net (width 16, depth 3) after a short
fit (throughput does not depend on weights).
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import dask
import torch

from ensml.cli.main import main
from ensml.cluster.connection import WORKER_CONFIG
from ensml.data.archive import archive
from ensml.data.synth.generate import synth
from ensml.postprocess.models import ModelSet, load_models
from ensml.postprocess.options import Products, check_products
from ensml.postprocess.plan import expand_inputs, netcdf_units
from ensml.postprocess.run import execute
from ensml.postprocess.worker import Job, ModelPlugin, run_unit, worker_state

CONFIG = Path(__file__).resolve().parents[1] / "configs" / "mixed.yaml"


def prepare(work: Path, n_files: int) -> tuple[ModelSet, Job, list[Path], Path]:
    files = synth(work / "synth", start="2019-01-01", end="2020-12-31", every_days=2, seed=3)
    here = Path.cwd()
    os.chdir(work)  # the config's relative run folder goes under work/
    try:
        args = [
            "fit",
            "--config",
            str(CONFIG),
            f"--data.forecast={files['forecast']}",
            f"--data.analysis={files['analysis']}",
            "--data.train_period=[2019-01-01, 2019-12-31]",
            "--data.val_period=[2020-01-01, 2020-01-31]",
            "--data.test_period=[2020-02-01, 2020-12-31]",
            "--trainer.max_epochs=1",
            "--trainer.limit_train_batches=2",
            "--trainer.limit_val_batches=1",
            "--trainer.enable_progress_bar=false",
            "--trainer.logger=false",
        ]
        assert main(args) == 0
    finally:
        os.chdir(here)
    archive(str(files["forecast"]), str(work / "archive"), period=("2020-02-01", "2020-12-31"))
    inputs = expand_inputs(str(work / "archive" / "*.nc"))[:n_files]
    models = ModelSet.from_paths([str(work / "runs/mixed/checkpoints/best.ckpt")])
    products = Products(thresholds={"t850": [273.15, 283.15], "z500": [54000.0, 56000.0]})
    thresholds = tuple(check_products(products, models.variables, models.levels))
    job = Job(models, products, thresholds, (str(files["analysis"]),), "netcdf", "cpu", {}, "benchmark")
    return models, job, inputs, work


def _units(inputs: list[Path], out: Path) -> list:
    shutil.rmtree(out, ignore_errors=True)
    return netcdf_units(inputs, out)


class Local:
    """A local cluster set up as ``ensml postprocess`` sets it up, warmed (model loaded, first units run)."""

    def __init__(self, job: Job, inputs: list[Path], work: Path, workers: int) -> None:
        from distributed import Client, LocalCluster

        with dask.config.set(WORKER_CONFIG):
            self.cluster = LocalCluster(
                n_workers=workers,
                threads_per_worker=1,
                processes=True,
                dashboard_address=None,
                silence_logs=logging.ERROR,
            )
        self.client = Client(self.cluster)
        self.client.register_plugin(ModelPlugin(job.models, "cpu", 1), name=ModelPlugin.name)
        self.job, self.work, self.workers = job, work, workers
        execute(_units(inputs[: 2 * workers], work / f"warm{workers}"), job, self.client, lambda u, r: None)

    def run(self, inputs: list[Path], tag: str) -> float:
        units = _units(inputs, self.work / f"dask{self.workers}-{tag}")
        done: list[str] = []
        start = time.perf_counter()
        execute(units, self.job, self.client, lambda u, rec, done=done: done.append(rec["status"]))
        elapsed = time.perf_counter() - start
        assert done.count("done") == len(units)
        return elapsed

    def peak_rss_mb(self) -> float:
        return max(s["max_rss_mb"] for s in self.client.run(worker_state).values())

    def close(self) -> None:
        self.client.close()
        self.cluster.close()


def serial(job: Job, inputs: list[Path], work: Path, tag: str) -> float:
    units = _units(inputs, work / f"serial-{tag}")
    start = time.perf_counter()
    for unit in units:
        assert run_unit(unit, job)["status"] == "done"
    return time.perf_counter() - start


def report(label: str, times: list[float], n: int) -> float:
    rate = n / statistics.median(times)
    median = statistics.median(times)
    print(
        f"  {label}: {rate:.2f} files/s (median of {len(times)}: {median:.2f} s for {n} files; "
        f"fastest {n / min(times):.2f} files/s)"
    )
    return rate


def run(n_files: int, repeats: int) -> None:
    with tempfile.TemporaryDirectory(prefix="ensml-bench-") as tmp:
        _, job, inputs, work = prepare(Path(tmp), n_files)
        n = len(inputs)
        torch.set_num_threads(1)
        load_models(job.models)  # the serial loop loads the checkpoint once, outside the timing
        serial(job, inputs[:2], work, "warm")
        one, two = Local(job, inputs, work, 1), Local(job, inputs, work, 2)
        times: dict[str, list[float]] = {"serial": [], "one": [], "two": []}
        for r in range(repeats):  # interleaved, so that the machine's slow spells hit every mode alike
            times["serial"].append(serial(job, inputs, work, str(r)))
            times["one"].append(one.run(inputs, str(r)))
            times["two"].append(two.run(inputs, str(r)))
        one.close()
        two.close()
        print(
            f"postprocess benchmark: {n} files, 32x64 grid, z/t x 500/850 hPa, 10 members, lead 48 h, "
            f"products as in configs/postprocess.yaml; 1 torch thread per worker and in the serial loop; "
            f"{repeats} interleaved repeats"
        )
        s = report("serial loop (checkpoint loaded once)", times["serial"], n)
        w1 = report("dask, 1 worker", times["one"], n)
        w2 = report("dask, 2 workers", times["two"], n)
        print(
            f"postprocess {n} files: dask 1 worker {w1:.2f} files/s vs serial loop {s:.2f} files/s "
            f"-> overhead {100 * (1 - w1 / s):.1f}%"
        )
        print(
            f"postprocess {n} files: dask 2 workers {w2:.2f} files/s vs 1 worker {w1:.2f} files/s "
            f"-> {w2 / w1:.2f}x (2 cores)"
        )
        print(
            f"postprocess {n} files: dask 2 workers {w2:.2f} files/s vs twice the serial loop "
            f"{2 * s:.2f} files/s -> {100 * w2 / (2 * s):.0f}% of the 2-core limit"
        )
        peaks = {}
        for count in (10, n):  # fresh workers: ru_maxrss is a peak since the process started
            local = Local(job, inputs, work, 2)
            local.run(inputs[:count], f"mem{count}")
            peaks[count] = local.peak_rss_mb()
            local.close()
        print(
            f"postprocess peak memory per worker: 10 files {peaks[10]:.0f} MB, {n} files {peaks[n]:.0f} MB "
            f"-> {peaks[n] / peaks[10]:.2f}x"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=3)
    ns = parser.parse_args()
    run(ns.files, ns.repeats)
