"""``ensml postprocess``: apply trained checkpoints to any number of forecast files, exactly once."""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
import torch
from rich.console import Console

from ensml import __version__
from ensml.data.open import open_forecast
from ensml.data.outputs import STATE_DIR
from ensml.data.writers import remove_temporaries
from ensml.errors import EnsmlError, PartialFailure
from ensml.names import LATITUDE, LONGITUDE, MEMBER, format_leads
from ensml.postprocess.cluster import ClusterSpec, Connection, job_script
from ensml.postprocess.execute import execute
from ensml.postprocess.interrupt import interrupted, stops_on_signals
from ensml.postprocess.manifest import Manifest, input_identity, output_lock
from ensml.postprocess.models import ModelSet
from ensml.postprocess.options import (
    ClusterKind,
    Device,
    JobQueue,
    OutputFormat,
    Products,
    ThresholdSet,
    check_products,
    plain_options,
)
from ensml.postprocess.outputs import create_zarr_store, data_sha256, zarr_store_id
from ensml.postprocess.plan import ZARR_STORE, expand_inputs, netcdf_units, zarr_units
from ensml.postprocess.products import product_dataset
from ensml.postprocess.progress import run_progress, summary
from ensml.postprocess.worker import Job, ModelPlugin, Unit
from ensml.progress import note
from ensml.provenance import command


@stops_on_signals
def postprocess(
    checkpoints: list[str],
    forecasts: str | list[str],
    analysis: str | list[str] | None = None,
    out_dir: str = "runs/postprocess",
    format: OutputFormat = "netcdf",
    products: Products | None = None,
    cluster: ClusterKind = "local",
    workers: int | None = None,
    threads_per_worker: int = 1,
    scheduler_file: str | None = None,
    scheduler_address: str | None = None,
    jobqueue: JobQueue | None = None,
    device: Device = "cpu",
    verify: bool = False,
    force: bool = False,
    dry_run: bool = False,
) -> dict[str, int]:
    """Post-process forecast files with trained checkpoints into calibrated products.

    Each input file gives one CF-1.8 netCDF output (or a region of one zarr store) with, for
    every variable, level and lead time the checkpoints cover: the predictive mean and std (or
    the estimated spread), quantiles, exceedance probabilities and calibrated ECC members. A
    manifest makes reruns skip what is complete and current; a lock keeps two runs apart.

    Parameters
    ----------
    checkpoints
        One checkpoint per target lead time (``ensml fit`` output; all MixedTask or all SpreadTask,
        same variables, levels and grid).
    forecasts
        Forecast files or globs (netCDF, GRIB; one or many init times per file).
    analysis
        Analysis files or globs, needed only when the checkpoints use the analysis at
        initialisation (a MixedTask trained with ``use_analysis: true``).
    out_dir
        Output folder: the products, ``manifest.jsonl`` and the lock.
    format
        ``netcdf`` (one file per input) or ``zarr`` (one store, ``products.zarr``, one region per init).
    products
        Quantile levels, exceedance thresholds and ECC members (see :class:`Products`).
    cluster
        ``local`` (a LocalCluster), ``slurm`` or ``pbs`` (dask-jobqueue, see ``jobqueue``), or
        ``none`` (in this process, for debugging).
    workers
        Local worker processes (default: cores / threads_per_worker).
    threads_per_worker
        Torch threads of each local worker; every worker processes one file at a time.
    scheduler_file
        Join a running dask cluster through its scheduler file instead of starting one (start its
        workers with ``--nthreads 1``: each then processes one file at a time).
    scheduler_address
        Join a running dask cluster at this address (e.g. ``tcp://10.0.0.5:8786``).
    jobqueue
        SLURM/PBS settings: queue, account, cores, memory, processes, jobs, walltime, directives.
    device
        ``cpu``, ``cuda`` or ``auto`` (cuda where a worker has one).
    verify
        Also compare the SHA-256 of existing outputs with the manifest before skipping them.
    force
        Redo every output, current or not.
    dry_run
        Print what would be done (and the batch job script for slurm/pbs); write nothing.

    Returns
    -------
    dict
        Counts of units ``done``, ``up_to_date`` and ``failed``.
    """
    products = products or Products()
    spec = ClusterSpec(
        cluster, workers, threads_per_worker, scheduler_file, scheduler_address, jobqueue or JobQueue(),
        log_dir=os.path.join(os.path.abspath(out_dir), STATE_DIR, "logs"),  # batch logs: not the cwd
    )  # fmt: skip
    spec.check(submit=not dry_run)
    models = ModelSet.from_paths(checkpoints)
    thresholds = check_products(products, models.variables, models.levels)
    inputs = expand_inputs(forecasts)
    analysis_files = None
    if models.uses_analysis:
        if not analysis:
            raise EnsmlError(
                f"checkpoint {models.checkpoints[0].path} uses the analysis at initialisation: set analysis"
            )
        analysis_files = tuple(str(p) for p in expand_inputs(analysis, "analysis"))
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise EnsmlError(f"out_dir {out} is a file, not a folder")
    options = dict(format=format, products=products, analysis=analysis_files)
    console = Console(highlight=False)
    if dry_run:
        return _dry_run(inputs, out, models, options, spec, force, verify, console)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise EnsmlError(f"cannot create output folder {out}: {err.strerror}") from None

    attrs = {
        "title": f"ensml post-processed ensemble forecast ({models.task})",
        "source": f"ensml {__version__} postprocess, {models.task}",
        "references": "ECC-Q: Schefzik, Thorarinsdottir and Gneiting (2013), Statistical Science 28, 616-640",
        **models.run_meta().to_attrs(),
        "ensml_checkpoints": "; ".join(f"{p} (sha256 {h})" for p, h in models.digest.items()),
        "ensml_command": command(),
    }
    start = time.perf_counter()
    with output_lock(out):
        removed = remove_temporaries(out)
        if removed:
            note(f"postprocess: removed {len(removed)} temporaries left by an interrupted run")
        manifest = Manifest(out)
        records: list[dict[str, Any]] = []  # this run's, including inputs that could not be planned
        units, identities, job_products = _plan(
            inputs, out, models, options, products, thresholds, records, attrs, force
        )
        for record in records:  # zarr: unreadable inputs give no units
            manifest.append(record)
        todo = [u for u in units if force or not _current(manifest, u, identities[u.key], verify)]
        job = Job(models, job_products, tuple(thresholds), analysis_files, format, device, attrs, command())
        progress = run_progress(len(todo))
        conn = Connection(spec, ModelPlugin(models, device, spec.torch_threads))

        def finish(unit: Unit, result: dict[str, Any]) -> None:
            stamp = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
            record = {**identities[unit.key], **result, "finished": stamp}
            manifest.append(record)
            records.append(record)
            progress.advance(ok=record["status"] == "done")

        try:
            if todo:
                if spec.kind == "none" and not spec.joins:
                    torch.set_num_threads(spec.torch_threads)
                with conn:
                    execute(todo, job, conn.client, finish, conn.supervisor)
        except KeyboardInterrupt:  # a signal (see .interrupt): the connection cancelled the jobs
            n = progress.done + progress.failed
            raise interrupted(
                f" after {n} of {len(todo)} units{conn.jobs_note()}; run the same command again to finish"
            ) from None
        finally:
            progress.close()
            manifest.compact()
            remove_temporaries(out)  # of workers killed in this run (a live writer's are kept)
    elapsed = time.perf_counter() - start
    up_to_date = len(units) - len(todo)
    table, failures = summary(records, up_to_date, elapsed, conn.where(), str(out))
    console.print(table)
    for line in failures:
        print(line)
    counts = {"done": sum(r["status"] == "done" for r in records), "up_to_date": up_to_date}
    counts["failed"] = len(records) - counts["done"]
    if counts["failed"]:
        total = sum(counts.values())
        raise PartialFailure(
            f"{counts['failed']} of {total} units failed (reasons above and in {manifest.path})"
        )
    return counts


def _plan(
    inputs: list[Path],
    out: Path,
    models: ModelSet,
    options: dict[str, Any],
    products: Products,
    thresholds: list[ThresholdSet],
    bad: list[dict[str, Any]],
    attrs: dict[str, Any],
    force: bool,
) -> tuple[list[Unit], dict[str, dict[str, Any]], Products]:
    """Units, their identities, and the products settings (zarr fixes the number of members)."""
    if options["format"] != "zarr":
        units = netcdf_units(inputs, out)
        return units, _identities(units, models, options), products

    def on_bad(path: Path, reason: str) -> None:
        bad.append({**input_identity(path), "key": str(path), "status": "failed", "reason": reason,
                    "checkpoints": models.identity, "options": plain_options(**options)})  # fmt: skip

    units, inits = zarr_units(inputs, out, on_bad)
    if not units:
        return units, {}, products
    store = out.resolve() / ZARR_STORE
    with open_forecast(units[0].input, models.variables) as fc:
        m = fc.sizes[MEMBER]
        lat, lon = fc[LATITUDE].values, fc[LONGITUDE].values
    n = m if products.members is None else products.members
    products = replace(products, members=n)  # every region holds the same number of members
    options = {**options, "products": products}
    template = _template(inits[0], models, products, thresholds, lat, lon, max(n, 1))
    store_id = zarr_store_id(store, inits, list(template.data_vars))
    if store_id is None or force:
        store_id = create_zarr_store(
            store, template, inits, {**attrs, "ensml_inputs": len(inputs)}, command()
        )
    identities = _identities(units, models, {**options, "store": store_id})
    return units, identities, products


def _template(
    init: np.datetime64,
    models: ModelSet,
    products: Products,
    thresholds: list[ThresholdSet],
    lat: np.ndarray,
    lon: np.ndarray,
    m: int,
) -> Any:
    """One init's products made of placeholder values: the structure of every region."""
    shape = (len(models.variables), len(models.leads), len(models.levels), lat.size, lon.size)
    zeros, ones = np.zeros(shape, np.float32), np.ones(shape, np.float32)
    raw = np.zeros((*shape[:2], m, *shape[2:]), np.float32)
    return product_dataset(init, models.run_meta(), lat, lon, zeros, ones, raw, products, thresholds)


def _identities(
    units: Iterable[Unit], models: ModelSet, options: dict[str, Any]
) -> dict[str, dict[str, Any]]:
    opts = plain_options(**options)
    return {
        u.key: {"key": u.key, **input_identity(u.input), "checkpoints": models.identity, "options": opts}
        for u in units
    }


def _current(manifest: Manifest, unit: Unit, identity: dict[str, Any], verify: bool) -> bool:
    if not manifest.is_current(unit.key, identity, verify):
        return False
    if verify and unit.region is not None:
        import xarray as xr

        with xr.open_zarr(unit.output) as ds:
            region = ds.isel(init_time=slice(unit.region, unit.region + 1)).load()
        return data_sha256(region) == manifest.records[unit.key].get("output_sha256")
    return True


def _dry_run(
    inputs: list[Path],
    out: Path,
    models: ModelSet,
    options: dict[str, Any],
    spec: ClusterSpec,
    force: bool,
    verify: bool,
    console: Console,
) -> dict[str, int]:
    manifest = Manifest(out) if out.is_dir() else None
    if options["format"] == "zarr":
        units, _ = zarr_units(inputs, out, lambda p, r: console.print(f"  would fail: {p}: {r}"))
    else:
        units = netcdf_units(inputs, out)
    identities = _identities(units, models, options)
    current = (
        0
        if force or manifest is None
        else sum(manifest.is_current(u.key, identities[u.key], verify) for u in units)
    )
    console.print(
        f"postprocess (dry run): {len(units)} units from {len(inputs)} files, {len(units) - current} to do, "
        f"{current} up to date; leads {format_leads(models.leads)}; {spec.describe()}; output {out}"
    )
    if spec.kind in ("slurm", "pbs") and not spec.joins:
        console.print(job_script(spec), markup=False)
    return {"done": 0, "up_to_date": current, "failed": 0}
