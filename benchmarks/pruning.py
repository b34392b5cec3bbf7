"""Pruning the U-Net, judged beyond mean CRPS: calibration, storms, shift, noise, size and speed.

Each method (``magnitude``: global unstructured L1; ``channel``: structured L2 over output
channels) and sparsity prunes the checkpoint with ``ensml prune``'s function, iteratively:
``--steps`` steps of its cubic schedule, each retrained ``--retrain_epochs`` epochs (of
``--retrain_batches``, 0: all; at ``--retrain_lr`` times the fit's peak rate: that retraining
restarts the task's AdamW warm-up/cosine schedule). Each model is scored on the test split of
its fit config, in units of the task's spread scale, area-weighted over every field:

- CRPS: the Gaussian CRPS (:func:`ensml.scores.gaussian.crps_gaussian`, ``ensml test``'s);
- CRPS storms: the same at the storm events only: the grid points of ``oracle.nc``'s
  ``event_mask`` (a stored storm above 25% of its peak; the mask that
  :func:`ensml.verify.casefind.storm_cases` makes cases of) at each init and target lead;
- spread/skill: root mean predicted variance over the RMSE of the mean (1: calibrated);
- PIT flatness: :func:`~ensml.scores.calibration.rank_histogram` of the analysis among the
  Gaussian's quantiles i/10, i = 1..9 (the PIT histogram in 10 equal bins), as
  ``mean_r |h_r / mean(h) - 1|`` (0: flat; :func:`~ensml.scores.calibration.histogram_flatness`);
- Brier REL q90: the reliability term of :func:`~ensml.scores.brier_roc.brier_decomposition`
  for "above the climatological 90th percentile" (per point, field and calendar month of the
  valid time, training years' analysis), p from 10 Gaussian quantile members (i - 0.5)/10;
- CRPS shifted year: new weather and a shifted climate: ``synth`` with seed 1, 12 storms a year
  (6 in the data) on the test dates, +2 K in t and the hydrostatic R_d 2 K ln(1000 hPa/p) in z
  added to every input and to the verifying analysis;
- CRPS noise: Gaussian noise of 0.1 and 0.3 x each field's anomaly std (the task's
  ``anom_std``) on the input fields (K-member mean, analysis at initialisation);
- non-zero parameters, and ms per sample of a forward pass of the network(s) on a batch:
  dense, pruned (zeros in dense tensors) and slim (:func:`ensml.models.prune.slim_unet`: the
  channels that are all zero removed; after magnitude pruning hardly any), interleaved after
  two untimed rounds; min/median over ``--repeats``.

Changes are against the dense model under the same conditions (spread/skill: change of
``|ratio - 1|``, x 100). Prune potential: the largest sparsity whose change is at most +1%
(spread/skill: ``|ratio - 1|`` at most 0.01 above the dense's). The "dense + retraining" row
is the dense model retrained as the pruned ones are: the part of each change that is not
pruning; the potentials are printed against it too.

Usage: ``python benchmarks/pruning.py [--ckpt_path CKPT --config FIT.yaml] [--plot PNG]
[--work DIR]``. Without ``--ckpt_path`` it trains ``configs/mixed.yaml`` as it is (8 epochs,
the demo's budget) on ``data/synth`` first. About 7 minutes on 2 cores; run on a quiet machine.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch
import xarray as xr
import yaml
from pruning_report import METRICS, NOISE, plot, potentials, table
from torch import nn
from torch.utils.data import DataLoader

from ensml.cli.main import main as ensml_main
from ensml.data.samples import EnsembleSamples
from ensml.data.synth.generate import synth
from ensml.data.weights import latitude_weights
from ensml.experiments.prune import prune_cli
from ensml.models import prune as pruning
from ensml.postprocess.models import ModelSet, load_models
from ensml.scores.brier_roc import brier_decomposition
from ensml.scores.calibration import histogram_flatness, rank_histogram
from ensml.scores.gaussian import crps_gaussian
from ensml.train.lightning_cli import load_fit_config

REPO = Path(__file__).resolve().parents[1]
WARMUP = 2  # untimed rounds (the first passes of a new shape build oneDNN's kernels)
SHIFT = dict(seed=1, storms_per_year=12.0, warming_k=2.0)
DIMS = ("sample", "field", "level", "latitude", "longitude")


def inline_config(src: Path, base: Path, out: Path, **trainer) -> Path:
    """``src`` with its data section inlined (paths made absolute from ``base``) and ``trainer``
    options changed, written as ``out`` (usable from any folder)."""
    cfg = yaml.safe_load(src.read_text())
    data = cfg["data"]
    if isinstance(data, str):  # jsonargparse reads a nested file relative to the config's folder
        data = yaml.safe_load((src.parent / data).read_text())
    for key in ("forecast", "analysis", "static"):
        if isinstance(data.get(key), str):
            data[key] = str((base / data[key]).resolve())
    cfg["data"] = data
    cfg.setdefault("trainer", {}).update(trainer)
    out.write_text(yaml.safe_dump(cfg))
    return out


def train_dense(work: Path) -> Path:
    """Fit ``configs/mixed.yaml`` as it is (the demo's budget) in ``work``; its best checkpoint."""
    config = inline_config(REPO / "configs/mixed.yaml", REPO, work / "fit.yaml", enable_progress_bar=False)
    assert ensml_main(["-q", "fit", "--config", str(config)]) == 0
    return work / "runs" / "mixed" / "checkpoints" / "best.ckpt"


def networks(task: nn.Module) -> nn.ModuleDict:
    return nn.ModuleDict({n: getattr(task, n) for n in ("net", "net_sigma") if hasattr(task, n)})


# -- the test sets ----------------------------------------------------------------------------
def shifted_batches(data, work: Path) -> list[dict]:
    """The test dates of a new synthetic year (SHIFT), warmed, as batches (empty if not synth)."""
    with xr.open_dataset(data.hparams.forecast) as fc:
        opts = {k[6:]: v for k, v in fc.attrs.items() if k.startswith("synth_")}
    if not opts:
        return []
    inits, spec = data.init_times("test"), data.spec
    with contextlib.redirect_stdout(io.StringIO()):
        paths = synth(
            str(work / "shifted"),
            n_lat=int(opts["n_lat"]),
            n_lon=int(opts["n_lon"]),
            levels=[int(p) for p in np.atleast_1d(opts["levels"])],
            leads=opts["leads"].split(),
            members=int(opts["members"]),
            every_days=int(opts["every_days"]),
            start=str(inits[0])[:10],
            end=str(inits[-1])[:10],
            seed=SHIFT["seed"],
            storms_per_year=SHIFT["storms_per_year"],
            overwrite=True,
        )
    samples = EnsembleSamples(
        str(paths["forecast"]), str(paths["analysis"]), inits, spec, "first", slab=data.slab
    )
    warm = torch.tensor(
        [
            [SHIFT["warming_k"] * (287.05 * np.log(1000.0 / p) if v == "z" else 1.0) for p in spec.levels]
            for v in spec.variables
        ],
        dtype=torch.float32,
    )
    n_t = len(spec.target_leads)
    out = []
    for b in DataLoader(samples, batch_size=data.hparams.batch_size):
        b["mean_k"] = b["mean_k"] + warm[None, :, None, :, None, None]
        b["analysis_init"] = b["analysis_init"] + warm[None, :, :, None, None]
        b["obs"] = b["obs"] + warm.repeat(n_t, 1)[None, :, :, None, None]
        out.append(b)
    samples.close()
    return out


def noisy(batches: list[dict], frac: float, anom_std: torch.Tensor) -> list[dict]:
    """``batches`` with N(0, (frac · anom_std)²) noise on the input fields (seeded by batch)."""
    out, s = [], frac * anom_std  # (V, D)
    for i, b in enumerate(batches):
        gen = torch.Generator().manual_seed(1000 * i + round(100 * frac))
        m = b["mean_k"] + s[:, None, :, None, None] * torch.randn(b["mean_k"].shape, generator=gen)
        a = b["analysis_init"] + s[..., None, None] * torch.randn(b["analysis_init"].shape, generator=gen)
        out.append({**b, "mean_k": m, "analysis_init": a})
    return out


def event_fields(data, index: np.ndarray) -> tuple[np.ndarray | None, np.ndarray]:
    """Storm mask (None without ``oracle.nc``) and climatological q90 of each test value, both
    (N, F, D, H, W) with F the target fields lead-major (as ``obs``)."""
    hp, spec = data.hparams, data.spec
    inits = data.init_times("test")[index]
    leads = np.array(spec.target_leads, dtype="timedelta64[ns]")
    n, t, v, d = len(inits), len(leads), len(spec.variables), len(spec.levels)
    oracle, mask = Path(hp.forecast).with_name("oracle.nc"), None
    if oracle.exists():
        with xr.open_dataset(oracle) as o:
            m = o["event_mask"].sel(init_time=inits, lead_time=leads).values.astype(bool)
        hw = m.shape[-2:]
        mask = np.broadcast_to(m[:, :, None, None], (n, t, v, d, *hw)).reshape(n, t * v, d, *hw)
    with xr.open_dataset(hp.analysis) as an:
        assert np.allclose(an["latitude"].values, data.coords["latitude"]), "latitude order differs"
        train = an[list(spec.variables)].sel(time=slice(*hp.train_period), level=list(spec.levels))
        q = train.groupby("time.month").quantile(0.9, dim="time")
        months = pd.DatetimeIndex((inits[:, None] + leads).ravel()).month.values
        dims = ("month", "level", "latitude", "longitude")
        thr = np.stack([q[x].transpose(*dims).sel(month=months).values for x in spec.variables], axis=1)
    return mask, thr.reshape(n, t * v, d, *thr.shape[-2:]).astype(np.float32)


# -- scores -----------------------------------------------------------------------------------
@torch.no_grad()
def predict(task, batches: list[dict]) -> tuple[np.ndarray, ...]:
    """Spread-scaled μ, σ, observation (N, F, D, H, W) and the sample indices (N,)."""
    task.eval()
    s, out = task.scale(), ([], [], [], [])
    for b in batches:
        mu, sigma = task(b)
        for part, x in zip(out, (mu / s, sigma / s, b["obs"] / s, b["index"]), strict=True):
            part.append(x.numpy())
    return tuple(np.concatenate(p) for p in out)


def wmean(x: np.ndarray, w: np.ndarray, mask: np.ndarray | None = None) -> float:
    """Latitude-weighted mean of (..., H, W) values (``w``: (H,)), over ``mask`` if given."""
    ww = np.broadcast_to(w[:, None], x.shape) * (1.0 if mask is None else mask)
    return float((x * ww).sum() / ww.sum())


def quantile_members(mu: np.ndarray, sigma: np.ndarray, probs: np.ndarray, lat: np.ndarray) -> xr.DataArray:
    z = np.array([statistics.NormalDist().inv_cdf(p) for p in probs], dtype=np.float32)
    x = mu[..., None] + sigma[..., None] * z
    return xr.DataArray(x, dims=(*DIMS, "member"), coords={"latitude": lat})


def calibration(mu, sigma, obs, ctx: dict) -> dict[str, float]:
    """CRPS, storm CRPS, spread/skill, PIT flatness and Brier reliability of scaled arrays."""
    w, lat = ctx["w"], ctx["lat"]
    crps = crps_gaussian(mu, sigma, obs, check=False)
    out = {"crps": wmean(crps, w), "ssr": (wmean(sigma**2, w) / wmean((mu - obs) ** 2, w)) ** 0.5}
    out["storm"] = wmean(crps, w, ctx["storm"]) if ctx["storm"] is not None else float("nan")
    wts = latitude_weights(lat)
    y = xr.DataArray(obs, dims=DIMS, coords={"latitude": lat})
    hist = rank_histogram(quantile_members(mu, sigma, np.arange(1, 10) / 10, lat), y, weights=wts).values
    out["flat"] = float(histogram_flatness(hist))
    thr = ctx["thr"]
    members = quantile_members(mu - thr, sigma, (np.arange(10) + 0.5) / 10, lat)
    rel = brier_decomposition(members, y - thr, 0.0, weights=wts)["reliability"]
    out["rel"] = float(rel.squeeze())
    return out


def evaluate(task, sets: dict[str, list[dict]], ctx: dict) -> dict[str, float]:
    """Every metric of METRICS for one model."""
    mu, sigma, obs, _ = predict(task, sets["test"])
    out = {k: np.nan for k in METRICS} | calibration(mu, sigma, obs, ctx)
    for name in [k for k in sets if k != "test" and sets[k]]:  # no shifted year without synth data
        mu, sigma, obs, _ = predict(task, sets[name])
        out[name] = wmean(crps_gaussian(mu, sigma, obs, check=False), ctx["w"])
    return out


# -- timing -----------------------------------------------------------------------------------
@torch.no_grad()
def time_variants(variants: dict[str, list], x: torch.Tensor, repeats: int) -> dict[str, list[float]]:
    """Seconds per sample of each variant's networks on ``x``, interleaved rounds after warm-ups."""
    times: dict[str, list[float]] = {name: [] for name in variants}
    for r in range(repeats + WARMUP):
        for name, nets in variants.items():
            t = time.perf_counter()
            for net in nets:
                net(x)
            if r >= WARMUP:
                times[name].append((time.perf_counter() - t) / x.shape[0])
    return times


def size_and_speed(dense_nets, nets, x: torch.Tensor, repeats: int) -> dict:
    """Non-zero parameters and min/median ms per sample of dense, pruned and slim networks."""
    variants = {"dense": list(dense_nets.values())}
    if nets is not dense_nets:
        variants["pruned"] = list(nets.values())
        with contextlib.suppress(ValueError):  # no slim copy with GroupNorm or of a temporal network
            variants["slim"] = [pruning.slim_unet(net).eval() for net in nets.values()]
    times = time_variants(variants, x, repeats)
    text = " / ".join(f"{k} {min(v) * 1e3:.2f}/{statistics.median(v) * 1e3:.2f}" for k, v in times.items())
    fastest = min(min(v) for k, v in times.items() if k != "dense" or len(times) == 1)
    return {"nonzero": pruning.sparsity(nets).nonzero, "time": text, "speed": min(times["dense"]) / fastest}


# -- the run ----------------------------------------------------------------------------------
def prune_model(ckpt: Path, out: Path, sparsity: float, method: str, config: Path, args):
    """The task of ``ckpt`` pruned (and retrained) by ``ensml prune``'s function into ``out``."""
    retrain = dict(config=str(config), retrain_epochs=args.retrain_epochs, steps=args.steps)
    with contextlib.redirect_stdout(io.StringIO()):  # its "wrote ..." line
        prune_cli(str(ckpt), str(out), sparsity, method, **(retrain if args.retrain_epochs else {}))
    return load_models(ModelSet.from_paths([str(out / "pruned.ckpt")]))[0]


def setup(args: argparse.Namespace, work: Path) -> tuple:
    """Checkpoint, scoring and retraining configs, data module and the header's first line."""
    cwd, t0 = Path.cwd(), time.perf_counter()
    os.chdir(work)  # whatever Lightning or the fit write goes into the work folder
    if args.ckpt_path:
        ckpt, src, base = (cwd / args.ckpt_path).resolve(), (cwd / args.config).resolve(), cwd
        origin = f"checkpoint {args.ckpt_path} ({args.config})"
    else:
        ckpt, src, base = train_dense(work), REPO / "configs" / "mixed.yaml", REPO
        origin = f"configs/mixed.yaml fitted here as it is (8 epochs) in {time.perf_counter() - t0:.0f} s"
    score_cfg = inline_config(src, base, work / "score.yaml")
    batches = {"limit_train_batches": args.retrain_batches} if args.retrain_batches else {}
    retrain_cfg = inline_config(src, base, work / "retrain.yaml", **batches)
    if args.retrain_lr != 1:  # retraining restarts the task's AdamW schedule at hparams.lr
        saved = torch.load(ckpt, map_location="cpu", weights_only=True)
        saved["hyper_parameters"]["lr"] *= args.retrain_lr
        ckpt = work / "source.ckpt"
        torch.save(saved, ckpt)
    data = load_fit_config(str(score_cfg)).datamodule
    data.setup("test")
    return ckpt, retrain_cfg, data, origin


def run(args: argparse.Namespace, work: Path) -> None:
    t_start = time.perf_counter()
    ckpt, retrain_cfg, data, origin = setup(args, work)
    dense = load_models(ModelSet.from_paths([str(ckpt)]))[0]
    dense_nets = networks(dense)
    sets = {"test": list(data.test_dataloader()), "shift": shifted_batches(data, work)}
    sets.update({f"noise{f}": noisy(sets["test"], f, dense.anom_std) for f in NOISE})
    index = np.concatenate([b["index"].numpy() for b in sets["test"]])
    storm, thr = event_fields(data, index)
    scale = dense.scale().numpy()
    ctx = {"w": dense.lat_weights.numpy(), "lat": data.coords["latitude"], "storm": storm, "thr": thr / scale}
    n_lat, n_lon = data.grid_shape
    shape = dense.network_input_shape(args.batch, n_lat, n_lon)
    x = torch.randn(shape, generator=torch.Generator().manual_seed(0))
    methods = args.methods.split(",")
    total = pruning.sparsity(dense_nets).total
    print(
        f"# {origin}; {len(index)} test samples, grid {n_lat} x {n_lon}; {total:,} network parameters; "
        f"{torch.get_num_threads()} threads"
    )
    print(
        f"# retraining: {args.steps} steps x {args.retrain_epochs} epoch(s) of "
        f"{args.retrain_batches or 'all'} batches at {args.retrain_lr:g} x the fit's rate; "
        f"{0 if storm is None else int(storm.sum())} storm values (points x fields); "
        f"shifted year: synth seed {SHIFT['seed']}, {SHIFT['storms_per_year']:g} storms/yr, "
        f"+{SHIFT['warming_k']:g} K; noise {', '.join(map(str, NOISE))} x anom. std on inputs"
    )
    print(f"# time: batch {args.batch}, ms per sample min/median over {args.repeats} repeats")
    ref = {
        "method": "dense",
        "sparsity": 0.0,
        **evaluate(dense, sets, ctx),
        **size_and_speed(dense_nets, dense_nets, x, args.repeats),
    }
    rows = [ref]
    plan = [("dense + retraining", "magnitude", 0.0)] if args.retrain_epochs else []
    plan += [(m, m, float(s)) for m in methods for s in args.sparsities.split(",") if float(s) > 0]
    for name, method, s in plan:
        t0 = time.perf_counter()
        task = prune_model(ckpt, work / f"{name.replace(' ', '')}-{s:g}", s, method, retrain_cfg, args)
        t1 = time.perf_counter()
        rows.append(
            {
                "method": name,
                "sparsity": s,
                **evaluate(task, sets, ctx),
                **size_and_speed(dense_nets, networks(task), x, args.repeats),
            }
        )
        print(
            f"{name} {s:.0%}: pruned+retrained {t1 - t0:.0f} s, scored {time.perf_counter() - t1:.0f} s",
            file=sys.stderr,
            flush=True,
        )
    print(table(rows, ref))
    controls = [r for r in rows if r["method"] == "dense + retraining"]
    print("\n".join(potentials(rows, r, methods) for r in [ref, *controls]))
    if args.plot:
        plot(rows, ref, methods, args.plot)
    print(f"# total {time.perf_counter() - t_start:.0f} s")


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ckpt_path", help="a task checkpoint (default: train configs/mixed.yaml here)")
    p.add_argument("--config", help="the checkpoint's fit config (its data's test split is scored)")
    p.add_argument("--sparsities", default="0,0.5,0.8,0.9,0.95")
    p.add_argument("--methods", default="magnitude,channel")
    p.add_argument("--retrain_epochs", type=int, default=1, help="retraining after each pruning step")
    p.add_argument("--steps", type=int, default=2, help="prune-retrain steps towards each sparsity")
    p.add_argument("--retrain_batches", type=int, default=0, help="batches per retraining epoch (0: all)")
    p.add_argument("--retrain_lr", type=float, default=1.0, help="retraining's peak rate / the fit's")
    p.add_argument("--batch", type=int, default=8, help="samples per timed forward pass")
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--threads", type=int, default=torch.get_num_threads())
    p.add_argument("--plot", help="a PNG of each metric's change against sparsity")
    p.add_argument("--work", help="keep the checkpoints here (default: a temporary folder)")
    args = p.parse_args()
    if bool(args.ckpt_path) != bool(args.config):
        p.error("give --ckpt_path and --config together (or neither)")
    if args.plot:
        args.plot = str(Path(args.plot).resolve())
    return args


if __name__ == "__main__":
    arguments = parse()
    torch.set_num_threads(arguments.threads)
    with contextlib.ExitStack() as stack:
        work = arguments.work or stack.enter_context(tempfile.TemporaryDirectory(prefix="ensml-pruning-"))
        Path(work).mkdir(parents=True, exist_ok=True)
        run(arguments, Path(work).resolve())
