"""What generated members cost: inference per member at 361 × 720, and post-processing an archive.

Run by hand (``python benchmarks/generative.py``); prints one line per comparison:

* **inference at 361 × 720** (the ENS-10 0.5° grid), z and t at 500/850 hPa, three input leads,
  the main job's U-Net (width 16, depth 3) as the mixed task's network and the generative task's
  trunk, the generative task's default head: the seconds of 1, 10 and 50 generated members (one
  trunk pass, then the head on chunks of :data:`ensml.train.generative.CHUNK_POINTS` grid
  points: 16 members at this size) against one pass of the mixed task (one predictive
  distribution), what each further member adds, and the peak resident memory of each case,
  measured in a fresh process per case;
* **an archive post-processed** (the embedded 32 × 64 grid, one init per file, ``cluster:
  none``, one torch thread): the files/s of today's products (the mixed checkpoint: mean, std,
  quantiles, exceedance, 10 ECC members) against the generative checkpoint writing 50 generated
  members with the same quantiles and thresholds; the issue's bound is 2× today's time.

Every case is timed ``--repeats`` times in turn (so the machine's slow spells hit each alike);
the median and the fastest are printed, the median is the figure to quote. Weights do not
change the cost: the networks are freshly initialised (inference) or fitted for a few batches
(archive).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
GRID = (361, 720)


def _inference(kind: str, members: int, repeats: int, threads: int) -> dict:
    """Run in a fresh process: build ``kind``'s task on the 361 × 720 grid, time ``repeats``
    draws of ``members`` members (or passes), report the seconds and the peak memory."""
    import resource

    import numpy as np
    import torch

    from ensml.train.generative import GenerativeTask
    from ensml.train.tasks import MixedTask

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    cls = GenerativeTask if kind == "generative" else MixedTask
    task = cls(width=16, depth=3, location_inputs=True, local_affine=True, grid_shape=GRID).eval()
    h, w = GRID
    lat = np.linspace(90, -90, h)
    stats = {
        "clim_mean": np.full((2, 2, h, w), 250.0),
        "anom_std": np.ones((2, 2)),
        "spread_scale": np.ones((2, 2)),
    }
    task.set_stats(stats, lat, np.linspace(0, 359.5, w))
    batch = {
        "mean_k": torch.randn(1, 2, 3, 2, h, w) + 250,
        "std_k": torch.rand(1, 2, 3, 2, h, w),
        "analysis_init": torch.randn(1, 2, 2, h, w) + 250,
        "index": torch.tensor([0]),
    }
    times = []
    with torch.no_grad():
        for _ in range(repeats + 1):  # the first is a warm-up
            start = time.perf_counter()
            if kind == "generative":
                task.draw(batch, members)
            else:
                task.distributions(batch)
            times.append(time.perf_counter() - start)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # MiB (Linux: KiB)
    return {"times": times[1:], "peak_mib": peak}


def inference(repeats: int, threads: int) -> None:
    cases = [("mixed", 1), ("generative", 1), ("generative", 10), ("generative", 50)]
    results = {}
    for kind, n in cases:
        code = (
            f"import json, sys; sys.path.insert(0, {str(REPO)!r}); "
            "from benchmarks.generative import _inference; "
            f"print(json.dumps(_inference({kind!r}, {n}, {repeats}, {threads})))"
        )
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
        results[kind, n] = json.loads(out.stdout.strip().splitlines()[-1])
    mixed = statistics.median(results["mixed", 1]["times"])
    one = statistics.median(results["generative", 1]["times"])
    for (kind, n), r in results.items():
        med, low = statistics.median(r["times"]), min(r["times"])
        per = ""
        if kind == "generative":
            per = f", {med / mixed:.2f}x a mixed pass"
        if kind == "generative" and n > 1:
            more = (med - one) / (n - 1)
            per += f", each member after the first {more:.3f} s ({more / mixed:.3f}x a mixed pass)"
        print(
            f"inference 361x720 {kind} {n} member(s), {threads} threads: median {med:.2f} s "
            f"(min {low:.2f}){per}; peak memory {r['peak_mib']:.0f} MiB"
        )


def archive(repeats: int, n_files: int) -> None:
    from ensml.cli.main import main
    from ensml.data.archive import archive as split
    from ensml.data.synth.generate import synth

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        files = synth(work / "synth", start="2019-01-01", end="2020-12-31", every_days=2, seed=3)
        here = Path.cwd()
        os.chdir(work)
        try:
            data = [
                f"--data.forecast={files['forecast']}",
                f"--data.analysis={files['analysis']}",
                "--data.train_period=[2019-01-01, 2019-12-31]",
                "--data.val_period=[2020-01-01, 2020-01-31]",
                "--data.test_period=[2020-02-01, 2020-12-31]",
                "--data.target_leads=48",
                "--trainer.max_epochs=1",
                "--trainer.limit_train_batches=2",
                "--trainer.limit_val_batches=1",
            ]
            for name in ("mixed", "generative"):
                assert main(["fit", "--config", str(REPO / "configs" / f"{name}.yaml"), *data]) == 0
            split(str(files["forecast"]), str(work / "archive"), period=("2020-02-01", "2020-12-31"))
            inputs = sorted((work / "archive").glob("*.nc"))[:n_files]
            (work / "some").mkdir()
            for path in inputs:
                os.link(path, work / "some" / path.name)
            products = "{thresholds: {t850: [273.15, 283.15]}, members: %s}"
            runs = {
                "today (mixed, 10 ECC members)": ("runs/mixed/checkpoints/best.ckpt", products % "null"),
                "generated (50 members)": ("runs/generative/checkpoints/best.ckpt", products % "50"),
            }
            times: dict[str, list[float]] = {name: [] for name in runs}
            for r in range(repeats):
                for name, (ckpt, prods) in runs.items():
                    out = work / f"out-{r}-{len(times[name])}-{name[:5]}"
                    args = [
                        "postprocess",
                        f"--checkpoints=[{ckpt}]",
                        f"--forecasts={work / 'some'}/*.nc",
                        f"--analysis={files['analysis']}",
                        f"--out_dir={out}",
                        "--cluster=none",
                        "--threads_per_worker=1",
                        f"--products={prods}",
                        "-q",
                    ]
                    start = time.perf_counter()
                    assert main(args) == 0
                    times[name].append(time.perf_counter() - start)
        finally:
            os.chdir(here)
    base = statistics.median(times["today (mixed, 10 ECC members)"])
    for name, t in times.items():
        med, low = statistics.median(t), min(t)
        print(
            f"postprocess {n_files} files 32x64, 1 thread, {name}: median {med:.1f} s (min {low:.1f}), "
            f"{n_files / med:.2f} files/s, {med / base:.2f}x today's time"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--files", type=int, default=30)
    parser.add_argument("--skip", choices=["inference", "archive"], default=None)
    args = parser.parse_args()
    if args.skip != "inference":
        inference(args.repeats, args.threads)
    if args.skip != "archive":
        archive(args.repeats, args.files)
