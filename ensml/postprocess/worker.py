"""The work of one unit (an input file, or one init of it for zarr output), on a worker or in-process.

A unit opens its forecast file, checks it against the checkpoints (variables, levels, leads,
members, grid), then for each init time reads one block of data, runs every checkpoint on the
member subset it was trained with, and writes the products. User problems (an unreadable file,
another grid, NaNs, no analysis at initialisation) fail the unit with a one-line reason; they
never stop the run.
"""

from __future__ import annotations

import functools
import os
import socket
import time
import traceback
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import dask
import numpy as np
import torch
import xarray as xr
from distributed.diagnostics.plugin import WorkerPlugin

from ensml.cluster.workers import peak_rss_mb, restore_malloc_thresholds
from ensml.data.open import open_analysis, open_inputs
from ensml.data.outputs import Staging, append_netcdf_init, write_zarr_region
from ensml.data.sample_read import (
    ANALYSIS_SAMPLE_DIMS,
    FORECAST_SAMPLE_DIMS,
    read_block,
    select,
    subset_moments,
)
from ensml.data.samples import to_tensors
from ensml.data.subset import Subset
from ensml.errors import EnsmlError
from ensml.names import INIT_TIME, LATITUDE, LEAD_TIME, LEVEL, LONGITUDE, TIME
from ensml.postprocess.generated import GENERATIVE, init_index, members_to_draw
from ensml.postprocess.manifest import data_sha256
from ensml.postprocess.models import LOAD_COUNT, ModelSet, check_grid, load_models
from ensml.postprocess.options import OutputFormat, Products, ThresholdSet
from ensml.postprocess.products import product_dataset, product_encoding
from ensml.postprocess.stations import StationForecast, StationModels, load_station_model, products_csv
from ensml.predictions import file_sha256

PLUGIN_NAME = "ensml-models"


@dataclass(frozen=True)
class Job:
    """What every unit of a run shares (small: pickled with each task, models load per worker)."""

    models: ModelSet | StationModels
    products: Products
    thresholds: tuple[ThresholdSet, ...]
    analysis: tuple[str, ...] | None
    format: OutputFormat
    device: str
    attrs: dict[str, Any]
    history: str


@dataclass(frozen=True)
class Unit:
    """One piece of work: ``input`` → ``output`` (a netCDF file, or a zarr store's region).

    ``output`` is a name relative to the output folder; ``staging`` (given by the run once it
    reserved the name) is how the worker writes it, and the only name it may write.
    """

    key: str
    input: str
    output: str
    init: np.datetime64 | None = None  # zarr: the init of this region
    region: int | None = None  # zarr: its index along the store's init_time
    staging: Staging | None = None


class _Forecast:
    """One forecast file opened lazily and checked against the checkpoints (:func:`open_inputs`)."""

    def __init__(self, path: str, models: ModelSet, analysis: tuple[str, ...] | None) -> None:
        self.what = f"forecast file {path}"
        if models.uses_analysis and not analysis:
            raise EnsmlError("the checkpoints use the analysis at initialisation: set analysis")
        an_what = f"analysis {', '.join(analysis)}" if models.uses_analysis else ""

        def trained_on(fc: xr.Dataset, what: str) -> None:
            """The variables on levels or at the surface, and the grid, as the checkpoints were trained."""
            for var in models.variables:
                if (LEVEL not in fc[var].dims) != (var in models.surface):
                    kind = "a surface variable" if var in models.surface else "on pressure levels"
                    raise EnsmlError(
                        f"{what}: the checkpoints were trained with {var!r} {kind}, the file differs"
                    )
            check_grid(models, fc[LATITUDE].values, fc[LONGITUDE].values, what)

        inputs = open_inputs(
            path,
            _open_analysis(analysis, tuple(models.variables)) if models.uses_analysis else None,
            variables=models.variables,
            levels=models.levels,
            leads=models.read_leads,
            k=models.k,
            names=(self.what, an_what),
            check=trained_on,
        )
        fc = inputs.forecast
        self.members = inputs.members
        self.inits = np.atleast_1d(fc[INIT_TIME].values).astype("datetime64[ns]")  # unique: open_forecast
        self.fc = select(fc, {LEVEL: models.levels, LEAD_TIME: list(models.read_leads)})
        self.latitude, self.longitude = fc[LATITUDE].values, fc[LONGITUDE].values
        self.an = None
        if inputs.analysis is not None:
            missing = np.setdiff1d(self.inits, inputs.verified(self.inits, [0]))
            if missing.size:
                raise EnsmlError(
                    f"{an_what} has no field at init {str(missing[0])[:16]} of "
                    f"{self.what} (the checkpoints use the analysis at initialisation)"
                )
            self.an = select(inputs.analysis, {LEVEL: models.levels})
            self.an_what = an_what


def _open_analysis(paths: tuple[str, ...], variables: tuple[str, ...]) -> Any:
    """The analysis, opened once per process while its files are unchanged (a long record
    serves every forecast file of a run)."""
    stamp = tuple((p, os.stat(p).st_size, os.stat(p).st_mtime_ns) for p in paths)
    return _open_analysis_cached(stamp, variables)


@functools.lru_cache(maxsize=2)
def _open_analysis_cached(stamp: tuple, variables: tuple[str, ...]) -> Any:
    return open_analysis([p for p, _, _ in stamp], list(variables))


def predict_init(
    fc: _Forecast,
    init: np.datetime64,
    models: ModelSet,
    nets: Sequence[Any],
    device: str,
    n_members: int | None = None,
) -> tuple[list[dict[str, np.ndarray]], np.ndarray]:
    """The predictive distribution's parameters and the raw members at the target leads of one init.

    ``n_members`` is how many members a generative run draws (default: as many as the raw
    members; :func:`ensml.postprocess.generated.members_to_draw`).

    Returns
    -------
    params
        One dict per variable (``models.variables`` order) of its family's parameters, each
        (L, D, H, W) by target lead: ``mean``, ``std`` of the calibrated Gaussian or of a spread
        model's N(K-member mean, estimated spread²); a family's own (``shape``, ``scale``,
        ``shift``, …) of a MixedTask in another family; ``members`` (L, N, D, H, W) of a
        generative run.
    raw
        (V, L, M, D, H, W): the raw members, the ECC template.
    """
    block = read_block(fc.fc, {INIT_TIME: init}, FORECAST_SAMPLE_DIMS, models.variables, fc.what)
    analysis = None
    if fc.an is not None:
        analysis = read_block(fc.an, {TIME: init}, ANALYSIS_SAMPLE_DIMS, models.variables, fc.an_what)
    read = list(models.read_leads)
    by_lead: dict[np.timedelta64, list[dict[str, np.ndarray]]] = {}
    for info, task in zip(models.checkpoints, nets):
        inputs = block[:, [read.index(lead) for lead in info.input_leads]]
        item = subset_moments(inputs, np.array(Subset.first(info.k).members), info.k)
        if info.uses_analysis:
            item["analysis_init"] = analysis
        batch = {key: value[None].to(device) for key, value in to_tensors(item, 0).items()}
        with torch.inference_mode():
            if models.task == GENERATIVE:  # the init's own noise, as many members as asked
                batch["index"] = torch.tensor([init_index(init)])
                out = {"members": task.draw(batch, n_members or block.shape[2])}
            else:
                out = task.predict_step(batch, 0)
        fields = _params_by_lead(out, item, task, info, models.variables, block.shape[3:])
        by_lead.update(zip(info.target_leads, fields))
    params = []
    for i, var in enumerate(models.variables):
        names = {tuple(by_lead[lead][i]) for lead in models.leads}
        if len(names) > 1:
            raise EnsmlError(
                f"the checkpoints give {var} different parameters at different leads "
                f"({' vs '.join(', '.join(n) for n in sorted(names))}): one family per variable"
            )
        params.append({k: np.stack([by_lead[lead][i][k] for lead in models.leads]) for k in names.pop()})
    raw = block[:, [read.index(lead) for lead in models.leads]]
    return params, raw


def _params_by_lead(
    out: dict[str, Any], item: dict[str, Any], task: Any, info: Any, variables: Sequence[str], grid: tuple
) -> list[list[dict[str, np.ndarray]]]:
    """``predict_step``'s output as [target lead][variable] → {param: (D, H, W)}.

    A SpreadTask gives the estimated spread ``std`` (B, T·V, D, H, W), lead-major; its
    distribution is the normal centred on the subset mean. A MixedTask gives every variable's
    parameters (B, T, D, H, W), as ``out["params"][var][param]`` or as ``out[f"{var}_{param}"]``
    for the parameters of ``task.families``.
    """
    n_lead = len(info.target_leads)

    def numpy(x: torch.Tensor) -> np.ndarray:
        return x[0].float().cpu().numpy()

    if "members" in out:  # a GenerativeTask: (B, N, T·V, D, H, W), lead-major
        members = numpy(out["members"]).reshape(-1, n_lead, len(variables), *grid)
        return [[{"members": members[:, t, i]} for i in range(len(variables))] for t in range(n_lead)]

    if "std" in out:  # a SpreadTask
        std = numpy(out["std"]).reshape(n_lead, len(variables), *grid)
        per_lead = []
        for t, lead in enumerate(info.target_leads):
            centre = item["mean_k"][:, list(info.input_leads).index(lead)]  # the subset mean at that lead
            per_lead.append([{"mean": centre[i], "std": std[t, i]} for i in range(len(variables))])
        return per_lead
    given = out.get("params") or {
        var: {p: out[f"{var}_{p}"] for p in family.params} for var, family in zip(variables, task.families)
    }
    fields = {var: {k: numpy(v) for k, v in given[var].items()} for var in variables}
    return [[{k: v[t] for k, v in fields[var].items()} for var in variables] for t in range(n_lead)]


def run_unit(unit: Unit, job: Job) -> dict[str, Any]:
    """Process ``unit``; return its manifest record (``status`` done or failed, with the reason)."""
    start = time.perf_counter()
    record: dict[str, Any] = {"key": unit.key, "output": unit.output}
    # A unit's own arrays need no dask parallelism. Without this, xarray inside a dask worker
    # guards every netCDF access with a distributed lock (a round trip to the scheduler), which
    # made a unit 3x slower than in-process.
    with dask.config.set(scheduler="synchronous"):
        return _run_unit(unit, job, record, start)


def _run_unit(unit: Unit, job: Job, record: dict[str, Any], start: float) -> dict[str, Any]:
    try:
        staging = _staging(unit)
        record["output"] = str(staging.final(unit.output))
        if isinstance(job.models, StationModels):
            fc: _Forecast | StationForecast = StationForecast(unit.input, job.models)

            def products(init: np.datetime64) -> Any:
                return fc.products(init, job.products, job.thresholds)

        else:
            nets = load_models(job.models, job.device)
            device = str(nets[0].device)
            fc = _Forecast(unit.input, job.models, job.analysis)

            def products(init: np.datetime64) -> Any:
                n = members_to_draw(job.products, fc.members)
                params, raw = predict_init(fc, init, job.models, nets, device, n)
                meta = job.models.run_meta()
                return product_dataset(
                    init, meta, fc.latitude, fc.longitude, params, raw, job.products, job.thresholds
                )

        inits = fc.inits if unit.init is None else np.array([unit.init], dtype="datetime64[ns]")
        if unit.init is not None and unit.init not in fc.inits:
            raise EnsmlError(f"{fc.what} no longer holds init {str(unit.init)[:16]}")
        attrs = {**job.attrs, "ensml_input": str(unit.input)}

        if job.format == "zarr":
            ds = products(inits[0])
            # In place, in the store the run reserved: regions never share a chunk.
            write_zarr_region(staging.final(unit.output), ds, int(unit.region))
            record.update(output_sha256=data_sha256(ds))
        else:
            # Held in the run's staging folder when every init is in; the run places it (see finish).
            with staging.hold(unit.output) as tmp:
                if job.format == "csv":
                    tmp.write_text(products_csv([products(init) for init in inits]), encoding="utf-8")
                for i, init in enumerate(inits if job.format == "netcdf" else ()):
                    ds = products(init)
                    append_netcdf_init(tmp, ds, i, {**attrs, **ds.attrs}, job.history, product_encoding(ds))
            # Its size and mtime are the folder ledger's, recorded when the run places it.
            record.update(output_sha256=file_sha256(staging.ready(unit.output)))
        record.update(status="done", n_inits=int(inits.size), members=fc.members)
    except EnsmlError as exc:
        record.update(status="failed", reason=str(exc))
    except Exception as exc:  # a bug: keep the traceback in the manifest, fail only this unit
        reason = f"internal error: {type(exc).__name__}: {exc}"
        record.update(status="failed", reason=reason, traceback=traceback.format_exc())
    record["seconds"] = round(time.perf_counter() - start, 3)
    # Where it ran: the worker, how often that process built the networks, and its torch threads.
    record.update(
        worker=f"{socket.gethostname()}:{os.getpid()}",
        worker_loads=LOAD_COUNT["n"],
        torch_threads=torch.get_num_threads(),
    )
    return record


def _staging(unit: Unit) -> Staging:
    """The unit's way to write its output, which the run must have reserved for it."""
    if unit.staging is None or unit.output not in unit.staging.names:
        raise EnsmlError(f"postprocess: the run did not reserve {unit.output} for unit {unit.key}")
    return unit.staging


class ModelPlugin(WorkerPlugin):
    """Set torch's threads and load the checkpoints once, when a worker joins the run."""

    name = PLUGIN_NAME

    def __init__(self, models: ModelSet | StationModels, device: str, torch_threads: int) -> None:
        self.models, self.device, self.torch_threads = models, device, torch_threads

    def setup(self, worker: Any) -> None:
        torch.set_num_threads(self.torch_threads)
        restore_malloc_thresholds()
        try:
            if isinstance(self.models, StationModels):
                load_station_model(self.models)
            else:
                load_models(self.models, self.device)
        except EnsmlError:
            pass  # each unit then fails with the one-line reason


def worker_state() -> dict[str, Any]:
    """This process's torch threads, network builds and peak memory (for benchmarks)."""
    return {"torch_threads": torch.get_num_threads(), "loads": LOAD_COUNT["n"], "max_rss_mb": peak_rss_mb()}
