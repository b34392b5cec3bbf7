"""``ensml postprocess``: apply trained checkpoints to any number of forecast files, exactly once."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import torch
from jsonargparse.typing import PositiveInt
from rich.console import Console

from ensml.cluster.connection import Connection, job_script
from ensml.cluster.interrupt import interrupted, poll, stopping_on_signals
from ensml.cluster.options import ClusterKind, JobQueue
from ensml.cluster.spec import ClusterSpec
from ensml.data.outputs import STATE_DIR, OutputFolder
from ensml.errors import EnsmlError, PartialFailure
from ensml.postprocess.execute import execute
from ensml.postprocess.generated import GENERATIVE
from ensml.postprocess.manifest import MANIFEST, Manifest, data_sha256
from ensml.postprocess.models import ModelSet
from ensml.postprocess.options import Device, OutputFormat, Products, check_products
from ensml.postprocess.plan import (
    SUFFIX,
    ZARR_STORE,
    Settings,
    expand_inputs,
    netcdf_units,
    plan_run,
    unit_identities,
    zarr_units,
)
from ensml.postprocess.progress import run_progress, summary
from ensml.postprocess.stations import StationModels, is_station_model
from ensml.postprocess.worker import Job, ModelPlugin, Unit, run_unit
from ensml.provenance import command
from ensml.times import format_leads

COMMAND = "postprocess"


def postprocess(
    checkpoints: list[str],
    forecasts: str | list[str],
    analysis: str | list[str] | None = None,
    out_dir: str = "runs/postprocess",
    format: OutputFormat = "netcdf",
    products: Products | None = None,
    cluster: ClusterKind = "local",
    workers: PositiveInt | None = None,
    threads_per_worker: PositiveInt = 1,
    scheduler_file: str | None = None,
    scheduler_address: str | None = None,
    jobqueue: JobQueue | None = None,
    device: Device = "cpu",
    verify: bool = False,
    force: bool = False,
    dry_run: bool = False,
    stations: str | None = None,
) -> dict[str, int]:
    """Post-process forecast files with trained checkpoints into calibrated products.

    Each input file gives one CF-1.8 netCDF output (or a region of one zarr store) with, for
    every variable, level and lead time the checkpoints cover: the predictive mean and std (or
    the estimated spread), quantiles, exceedance probabilities and calibrated ECC members. A
    manifest makes reruns skip what is complete and current; the output folder's lock keeps two
    runs apart, and its ledger says which files are the run's (:mod:`ensml.data.outputs`).

    Parameters
    ----------
    checkpoints
        One checkpoint per target lead time (``ensml fit`` output; all MixedTask or all SpreadTask,
        same variables, levels and grid), or one station model (``station_model.pt`` of ``ensml
        fit`` with a station config): its products are at stations (see ``stations``).
    forecasts
        Forecast files or globs (netCDF, GRIB; one or many init times per file).
    analysis
        Analysis files or globs, needed only when the checkpoints use the analysis at
        initialisation (a MixedTask trained with ``use_analysis: true``).
    out_dir
        Output folder: new, empty or an earlier post-processing's (a non-empty folder ensml did
        not write is refused). It holds the products, ``manifest.jsonl`` and ``.ensml`` (ledger,
        lock, staging); files of the user's there are never replaced or removed.
    format
        ``netcdf`` (one file per input) or ``zarr`` (one store, ``products.zarr``, one region per
        init); station products: ``netcdf`` (CF discrete sampling geometry, ``featureType:
        timeSeries``) or ``csv`` (one row per station, init and lead), one file per input.
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
    stations
        With a station model: the stations to forecast for, a station list (CSV: id, latitude,
        longitude, elevation) or an observations file (default: the model's own stations).
        Stations the model was not trained on get an embedding by its rule (the nearest trained
        station's, or zero); an id the model knows at another place is refused.

    Returns
    -------
    dict
        Counts of units ``done``, ``up_to_date`` and ``failed``.
    """
    with stopping_on_signals():  # a signal stops the run at a safe point (see ensml.cluster.interrupt)
        products = products or Products()
        spec = ClusterSpec(
            kind=cluster,
            workers=workers,
            threads_per_worker=threads_per_worker,
            scheduler_file=scheduler_file,
            scheduler_address=scheduler_address,
            jobqueue=jobqueue or JobQueue(),
            log_dir=os.path.join(os.path.abspath(out_dir), STATE_DIR, "logs"),  # batch logs: not the cwd
        )
        spec.check(submit=not dry_run)
        models = _models(checkpoints, stations, format)
        meta = models.run_meta()
        thresholds = check_products(
            products, models.variables, models.levels, meta.families, generative=models.task == GENERATIVE
        )
        inputs = expand_inputs(forecasts)
        analysis_files = _analysis_files(models, analysis)
        out = Path(out_dir)
        names = _output_names(inputs, out, format)  # every output, checked before any side effect
        settings = Settings(models, format, products, thresholds, analysis_files, force, verify)
        console = Console(highlight=False)
        if dry_run:
            return _dry_run(inputs, out, settings, spec, console)

        start = time.perf_counter()
        # The folder's lock keeps two runs apart; what a killed run staged is removed on opening.
        with OutputFolder.open(out, COMMAND, names=names) as folder:
            manifest = Manifest(out, folder)
            plan = plan_run(inputs, folder, settings)
            for record in plan.unplanned:
                manifest.append(record)
            stale = [
                u
                for u in plan.units
                if force or not _current(folder, manifest, u, plan.identities[u.key], verify)
            ]
            todo = _stage(folder, stale)
            job = Job(
                models=models,
                products=plan.products,
                thresholds=tuple(thresholds),
                analysis=analysis_files,
                format=format,
                device=device,
                attrs=settings.attrs,
                history=command(),
            )
            progress = run_progress(len(todo))
            conn = Connection(spec, ModelPlugin(models, device, spec.torch_threads))
            # this run's records, the inputs that could not be planned first
            finish = _Finisher(folder, manifest, plan.identities, progress, list(plan.unplanned))

            try:
                if todo:
                    if spec.kind == "none" and not spec.joins:
                        torch.set_num_threads(spec.torch_threads)
                    with conn:
                        if conn.client is None:  # --cluster none: each unit in this process
                            for unit in todo:
                                poll()  # a signal stops the run between units
                                finish(unit, run_unit(unit, job))
                        else:
                            execute(todo, job, conn.client, finish, conn.supervisor)
            except KeyboardInterrupt:  # a signal (ensml.cluster.interrupt): the connection cancelled the jobs
                n = progress.done + progress.failed
                raise interrupted(
                    f" after {n} of {len(todo)} units{conn.jobs_note()}; run the same command again to finish"
                ) from None
            except PartialFailure:
                raise
            except EnsmlError as exc:  # e.g. the manifest cannot be written (a full disk)
                if not progress.done:
                    raise
                left = len(todo) - progress.done
                raise PartialFailure(
                    f"{exc}; {progress.done} of {len(todo)} units done and recorded; run the same command "
                    f"again for the other {left}"
                ) from None
            finally:
                progress.close()
            _close(folder, manifest, todo)  # after an error: the records appended so far are durable
        elapsed = time.perf_counter() - start
        up_to_date = len(plan.units) - len(todo)
        return _report(finish.records, up_to_date, elapsed, conn.where(), manifest, console)


@dataclass
class _Finisher:
    """What is done as each unit ends: its manifest record, the ledger, the progress bar; the
    run's records gather in :attr:`records`."""

    folder: OutputFolder
    manifest: Manifest
    identities: dict[str, dict[str, Any]]
    progress: Any
    records: list[dict[str, Any]] = field(default_factory=list)

    def __call__(self, unit: Unit, result: dict[str, Any]) -> None:
        stamp = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        output = str(self.folder.final(unit.output))
        record = {**self.identities[unit.key], **result, "output": output, "finished": stamp}
        if record["status"] == "done" and unit.region is None:
            self.folder.place([unit.output])  # in place once recorded (a zarr store: when the run ends)
        self.manifest.append(record)
        self.records.append(record)
        self.progress.advance(ok=record["status"] == "done")


def _models(checkpoints: list[str], stations: str | None, format: OutputFormat) -> ModelSet | StationModels:
    """The grid checkpoints or the station model of the run, checked against the format."""
    if isinstance(checkpoints, list) and any(is_station_model(p) for p in checkpoints):
        if len(checkpoints) != 1:
            raise EnsmlError(
                f"checkpoints: a station model is post-processed alone, got {len(checkpoints)} files"
            )
        if format == "zarr":
            raise EnsmlError("format: station products are netcdf or csv files, not zarr")
        return StationModels.from_path(checkpoints[0], stations)
    if stations is not None:
        raise EnsmlError(
            "stations: products at stations come from a station model (ensml fit with a station config); "
            "to score grid products at stations use ensml evaluate --observations"
        )
    if format == "csv":
        raise EnsmlError("format: csv is for station products; grid products are netcdf or zarr")
    return ModelSet.from_paths(checkpoints)


def _analysis_files(
    models: ModelSet | StationModels, analysis: str | list[str] | None
) -> tuple[str, ...] | None:
    """The analysis files, for checkpoints that use the analysis at initialisation (else None)."""
    if not models.uses_analysis:
        return None
    if not analysis:
        raise EnsmlError(
            f"checkpoint {models.checkpoints[0].path} uses the analysis at initialisation: set analysis"
        )
    return tuple(str(p) for p in expand_inputs(analysis, "analysis"))


def _report(
    records: list[dict[str, Any]],
    up_to_date: int,
    elapsed: float,
    cluster: str,
    manifest: Manifest,
    console: Console,
) -> dict[str, int]:
    """Print the summary table and the failures; return the counts, or raise if a unit failed."""
    table, failures = summary(records, up_to_date, elapsed, cluster, str(manifest.path.parent))
    console.print(table)
    for line in failures:
        print(line)
    counts = {"done": sum(r["status"] == "done" for r in records), "up_to_date": up_to_date}
    counts["failed"] = len(records) - counts["done"]
    if counts["failed"]:
        total = sum(counts.values())
        message = f"{counts['failed']} of {total} units failed (reasons above and in {manifest.path})"
        raise PartialFailure(message)  # exit status 2: the rest is complete
    return counts


def _current(
    folder: OutputFolder, manifest: Manifest, unit: Unit, identity: dict[str, Any], verify: bool
) -> bool:
    if not manifest.is_current(unit.key, identity, _netcdf_output(unit), verify):
        return False
    if verify and unit.region is not None:
        import xarray as xr

        with xr.open_zarr(folder.final(unit.output)) as ds:
            region = ds.isel(init_time=slice(unit.region, unit.region + 1)).load()
        return data_sha256(region) == manifest.records[unit.key].get("output_sha256")
    return True


def _netcdf_output(unit: Unit) -> str | None:
    """The output name whose ledger entry says whether ``unit``'s file is current; None for a
    zarr region (checked against its store)."""
    return unit.output if unit.region is None else None


def _output_names(inputs: list[Path], out: Path, format: OutputFormat) -> list[str]:
    """The manifest and every output name (relative to ``out``), checked as the output folder's
    (:meth:`OutputFolder.check`: the folder is new, empty or ensml's, no name is a user's file).
    Only reads the file system."""
    OutputFolder.check(out, COMMAND, names=[MANIFEST])  # the folder first: `/`, a file, a user's folder
    products = (
        [ZARR_STORE] if format == "zarr" else [u.output for u in netcdf_units(inputs, out, SUFFIX[format])]
    )
    OutputFolder.check(out, COMMAND, names=[MANIFEST, *products])
    return [MANIFEST, *products]


def _stage(folder: OutputFolder, units: list[Unit]) -> list[Unit]:
    """Reserve the outputs of ``units`` before any work is submitted (a kill at any moment then
    leaves only files the ledger knows), and give each unit the staging its worker writes
    through: its own output and nothing else."""
    stores = list(dict.fromkeys(u.output for u in units if u.region is not None))
    folder.reserve(stores, kind="dir")  # zarr: filled in place, region by region
    folder.reserve([u.output for u in units if u.region is None])
    return [replace(u, staging=folder.staging([u.output])) for u in units]


def _close(folder: OutputFolder, manifest: Manifest, todo: list[Unit]) -> None:
    """When the units are done: record the zarr store they filled, and rewrite the manifest with
    one line per key."""
    stores = list(dict.fromkeys(u.output for u in todo if u.region is not None))
    folder.adopt(stores)
    manifest.compact()


def _dry_run(
    inputs: list[Path], out: Path, settings: Settings, spec: ClusterSpec, console: Console
) -> dict[str, int]:
    """Print what the run would do (and the batch job script for slurm/pbs); write nothing."""
    models, verify = settings.models, settings.verify
    manifest = Manifest(out) if out.is_dir() else None
    if settings.format == "zarr":
        units, _ = zarr_units(inputs, lambda p, r: console.print(f"  would fail: {p}: {r}"))
    else:
        units = netcdf_units(inputs, out, SUFFIX[settings.format])
    identities = unit_identities(units, models, settings.options())
    current = (
        0
        if settings.force or manifest is None
        else sum(manifest.is_current(u.key, identities[u.key], _netcdf_output(u), verify) for u in units)
    )
    console.print(
        f"postprocess (dry run): {len(units)} units from {len(inputs)} files, {len(units) - current} to do, "
        f"{current} up to date; leads {format_leads(models.leads)}; {spec.describe()}; output {out}"
    )
    if spec.kind in ("slurm", "pbs") and not spec.joins:
        console.print(job_script(spec), markup=False)
    return {"done": 0, "up_to_date": current, "failed": 0}
