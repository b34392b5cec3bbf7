"""Write predictions as CF-compliant netCDF, assembled over the whole prediction split."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lightning as L
import numpy as np
import torch
import xarray as xr
from lightning.pytorch.callbacks import BasePredictionWriter

from ensml.data.outputs import OutputFolder
from ensml.data.subset import Subset
from ensml.errors import EnsmlError
from ensml.names import (
    COORD_ATTRS,
    INIT_TIME,
    LATITUDE,
    LEAD_TIME,
    LEVEL,
    LONGITUDE,
    MEMBER,
    VALID_TIME,
    VARIABLE_ATTRS,
)
from ensml.predictions import RunMeta, file_sha256
from ensml.provenance import command

COMMAND = "predict"

DIMS = (INIT_TIME, LEVEL, LATITUDE, LONGITUDE)
SURFACE_DIMS = (INIT_TIME, LATITUDE, LONGITUDE)
LEAD_DIMS = (INIT_TIME, LEAD_TIME, LEVEL, LATITUDE, LONGITUDE)  # a model of several target leads
SURFACE_LEAD_DIMS = (INIT_TIME, LEAD_TIME, LATITUDE, LONGITUDE)


class PredictionWriter(BasePredictionWriter):
    """Collect the predictions of ``ensml predict`` and write one netCDF file.

    Variables: a spread model's ``<var>_std``; a mixed model's predictive distribution as its
    family's parameters ``<var>_<param>`` (``<var>_mean`` and ``<var>_std`` for the normal,
    ``tp_shape``, ``tp_scale``, ``tp_shift`` for a censored shifted gamma, …; the family of each
    variable is in the run metadata), dims (init_time, level, latitude, longitude), at the target lead time;
    a model of several target leads adds a ``lead_time`` dimension after ``init_time``; a surface
    variable's have no ``level`` (see :mod:`ensml.data.surface`). A generative task's members are
    ``<var>`` with a ``member`` dimension after the lead time (:func:`_put_members`).

    The file is ensml's one output in its folder, which may hold the user's other files (the
    fit's run folder, the working folder): the folder is opened ``shared`` through
    :mod:`ensml.data.outputs` when prediction starts (on global rank 0) and held until it ends,
    so a second predict of the same folder is refused at once, naming the first; a file of that
    name that ensml did not write is refused before predicting.

    Parameters
    ----------
    output
        Path of the netCDF file to write (staged in its folder's ``.ensml``, renamed when
        complete). Its folder is created if needed; a path that cannot be written fails before
        predicting.
    """

    def __init__(self, output: str) -> None:
        super().__init__(write_interval="epoch")
        self.output = Path(output)
        self._folder: OutputFolder | None = None

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_folder"] = None  # the lock stays with the process that took it
        return state

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if stage != "predict":
            return
        where, names = self.output.parent, [self.output.name]
        if trainer.is_global_zero and self._folder is None:  # fail before predicting, not after
            self._folder = OutputFolder.open(where, COMMAND, shared=True, names=names)
        else:
            OutputFolder.check(where, COMMAND, shared=True, names=names)

    def teardown(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        self._release()

    def on_exception(
        self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException
    ) -> None:
        self._release(failed=True)

    def _release(self, failed: bool = False) -> None:
        folder, self._folder = self._folder, None
        if folder is not None:
            folder.close(failed=failed)

    def write_on_epoch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, predictions: Any, batch_indices: Any
    ) -> None:
        if not trainer.is_global_zero:
            return  # spatial-parallel prediction: every rank holds the assembled fields; one writes
        if predictions and isinstance(predictions[0], list):  # several dataloaders: take the first
            predictions = predictions[0]
        dm = trainer.datamodule
        hp = pl_module.hparams
        index = torch.cat([p["index"] for p in predictions]).cpu().numpy()
        inits = dm.predict_set.init_times[index]
        leads = pl_module.target_leads
        several = len(leads) > 1
        coords = {
            INIT_TIME: inits,
            LEVEL: np.asarray(hp.levels, dtype=np.float64),
            LATITUDE: dm.coords[LATITUDE],
            LONGITUDE: dm.coords[LONGITUDE],
            LEAD_TIME: leads if several else leads[0],
            VALID_TIME: ((INIT_TIME, LEAD_TIME), inits[:, None] + leads)
            if several
            else (INIT_TIME, inits + leads[0]),
        }
        ds = xr.Dataset(coords=coords)
        kind = type(pl_module).__name__
        dims = (LEAD_DIMS, SURFACE_LEAD_DIMS) if several else (DIMS, SURFACE_DIMS)
        if kind == "SpreadTask":
            values = torch.cat([p["std"] for p in predictions]).float().cpu().numpy()
            values = values.reshape(
                len(values), len(leads), len(hp.variables), *values.shape[2:]
            )  # lead-major
            for i, var in enumerate(hp.variables):
                attrs = _attrs(var, f"predicted {dm.spec.members}-member ensemble standard deviation")
                _put(ds, f"{var}_std", values[:, :, i], attrs, bool(pl_module.surface[i]), several, dims)
        elif kind == "GenerativeTask":
            _put_members(ds, predictions, pl_module, dm.spec.members, several)
        else:
            for i, (var, family) in enumerate(zip(hp.variables, pl_module.families, strict=True)):
                described = family.param_attrs(var, VARIABLE_ATTRS.get(var, {}))
                for param in family.params:
                    values = torch.cat([p[f"{var}_{param}"] for p in predictions]).float().cpu().numpy()
                    if family.name == "normal":  # the Gaussian's names and attributes as before families
                        attrs = _attrs(var, f"predictive {param}")
                    else:
                        attrs = described[param]
                    _put(ds, f"{var}_{param}", values, attrs, bool(pl_module.surface[i]), several, dims)
        for name in ds.coords:
            ds[name].attrs.update(COORD_ATTRS.get(str(name), {}))
        ds = ds.sortby(INIT_TIME)
        ds.attrs.update(
            title=f"ensml {kind} predictions",
            source=f"ensml {kind}, k={hp.k} of {dm.spec.members} members, arch={hp.arch}",
            forecast=str(dm.hparams.forecast),
            checkpoint=str(trainer.ckpt_path or ""),
            **run_meta(pl_module, dm.spec.members, trainer.ckpt_path).to_attrs(),
        )
        encoding = {v: {"zlib": True, "complevel": 4, "dtype": "float32"} for v in ds.data_vars}
        if self._folder is None:
            raise EnsmlError(
                f"{COMMAND}: cannot write {self.output}: its folder was not opened before predicting"
            )
        self._folder.write_netcdf(ds, self.output.name, encoding=encoding, history=command())


def _attrs(var: str, what: str) -> dict[str, str]:
    """The variable's attributes without its standard name, the long name saying ``what``."""
    attrs = dict(VARIABLE_ATTRS.get(var, {}))
    attrs.pop("standard_name", None)
    attrs["long_name"] = f"{attrs.get('long_name', var)}: {what}"
    return attrs


def _put(
    ds: xr.Dataset, name: str, values: np.ndarray, attrs: dict, surface: bool, several: bool, dims: tuple
) -> None:
    """Add one (N, T, D, H, W) field: without ``lead_time`` for one target lead, and without
    ``level`` for a surface variable (its levels are tied: keep one)."""
    field = values if several else values[:, 0]
    if surface:
        ds[name] = (dims[1], field[..., 0, :, :], attrs)
    else:
        ds[name] = (dims[0], field, attrs)


def _put_members(
    ds: xr.Dataset, predictions: list[dict], task: L.LightningModule, ensemble_size: int, several: bool
) -> None:
    """Add a generative task's members: ``<var>`` (init_time, [lead_time], member, [level], lat, lon),
    the raw forecast's name, each member drawn from the network and its own noise."""
    hp = task.hparams
    values = torch.cat([p["members"] for p in predictions]).float().cpu().numpy()  # (S, N, F, D, H, W)
    n, n_lead, n_var = values.shape[1], len(task.target_leads), len(hp.variables)
    values = values.reshape(len(values), n, n_lead, n_var, *values.shape[3:]).swapaxes(1, 2)
    ds.coords[MEMBER] = (MEMBER, np.arange(n, dtype=np.int32))
    lead = (LEAD_TIME,) if several else ()
    for i, var in enumerate(hp.variables):
        attrs = dict(VARIABLE_ATTRS.get(var, {}))
        attrs["long_name"] = f"{attrs.get('long_name', var)}: generated member"
        attrs["generated_by"] = (
            f"{type(task).__name__} from the mean and spread of members 0-{int(hp.k) - 1} of "
            f"{ensemble_size} and noise, sample_seed {int(hp.sample_seed)}"
        )
        field = values[:, :, :, i] if several else values[:, 0, :, i]  # (S, [T,] N, D, H, W)
        if bool(task.surface[i]):
            ds[var] = ((INIT_TIME, *lead, MEMBER, LATITUDE, LONGITUDE), field[..., 0, :, :], attrs)
        else:
            ds[var] = ((INIT_TIME, *lead, MEMBER, LEVEL, LATITUDE, LONGITUDE), field, attrs)
    ds[MEMBER].attrs.update(standard_name="realization", long_name="generated member number")


def run_meta(task: L.LightningModule, ensemble_size: int, checkpoint: str | Path | None) -> RunMeta:
    """The run metadata of ``task``'s predictions (:mod:`ensml.predictions`), from its checkpoint."""
    hp = task.hparams
    has_checkpoint = checkpoint is not None and Path(checkpoint).is_file()
    return RunMeta(
        task=type(task).__name__,
        k=int(hp.k),
        members=Subset.first(int(hp.k)).members,  # what a model reads at inference
        ensemble_size=int(ensemble_size),
        variables=tuple(hp.variables),
        levels=tuple(hp.levels),
        leads=tuple(task.target_leads),
        checkpoints=(file_sha256(checkpoint),) if has_checkpoint else (),
        surface=tuple(v for v, s in zip(hp.variables, task.surface.tolist(), strict=True) if s),
        families=tuple(f.name for f in getattr(task, "families", ())),
    )
