"""Every checkpoint ensml reads, read by one function and checked before it is used.

:func:`read_checkpoint` is the one way from a ``.ckpt`` file to a task: ``predict``, ``test``,
``validate`` and ``fit --ckpt_path`` (:mod:`ensml.train.lightning_cli`), ``prune`` and
``postprocess`` all go through it. It refuses, in one line naming the file:

- a file that is missing, unreadable or not a checkpoint of an ensml task;
- a hyperparameter this ensml's task does not know (a checkpoint written by a newer ensml);
- a state dict whose keys or tensor shapes are not those of the model its hyperparameters build
  (a renamed, missing or unexpected key, a wrong shape: the first one is named);
- data of this run with other variables, levels, leads, member subset or grid (:class:`RunData`;
  both grids are named);
- a model option given in the config or on the command line that disagrees with the
  checkpoint's hyperparameter (the option and both values are named): a checkpoint is applied,
  or resumed, as it was trained. Options of how a network runs (:data:`RUNNING_KEYS`) change
  no weight and may differ.

The model is built on torch's ``meta`` device to compare shapes: no memory, no weights.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ensml import __version__
from ensml.errors import EnsmlError
from ensml.models.memory import MemoryPolicy
from ensml.models.speed import SpeedOptions
from ensml.names import LATITUDE, LONGITUDE
from ensml.train.hparams import DATA_KEYS, GRID_KEY, SAMPLING_KEYS, check_compatible
from ensml.train.task_base import DATA_BUFFERS, EnsembleTask

#: Hyperparameters of how a network runs (the memory policy's and the speed options' fields): no
#: weight depends on them, so the config's value may differ from the checkpoint's
#: (:class:`ensml.train.task_base.EnsembleTask`).
RUNNING_KEYS = tuple(f.name for f in (*fields(MemoryPolicy), *fields(SpeedOptions)))
#: Hyperparameters linked from the data: compared with the data (:class:`RunData`), not as options.
LINKED_KEYS = (*DATA_KEYS, "grid_shape")
#: State keys a checkpoint may lack (older checkpoints; the task fills them in on loading).
OPTIONAL_STATE = ("surface", "target_scale")


@dataclass(frozen=True)
class RunData:
    """What the data of a run says a checkpoint must agree with.

    ``hparams`` holds the data's :data:`~ensml.train.hparams.DATA_KEYS` (variables, levels,
    leads, k, static variables); ``latitude`` and ``longitude`` its grid (degrees).
    """

    what: str
    hparams: Mapping[str, Any]
    latitude: np.ndarray | None = None
    longitude: np.ndarray | None = None

    @classmethod
    def of(cls, datamodule: Any, what: str = "the data") -> RunData:
        """The data of an opened :class:`~ensml.data.datamodule.EnsembleDataModule`."""
        coords = getattr(datamodule, "coords", None) or {}
        return cls(what, dict(datamodule.hparams), coords.get(LATITUDE), coords.get(LONGITUDE))


@dataclass(frozen=True)
class Checkpoint:
    """A checkpoint file read and checked against this ensml and its own model."""

    path: Path
    saved: dict[str, Any]  # the file's content (weights only: no code was run to read it)
    task_class: type[EnsembleTask]
    hparams: dict[str, Any]  # the task's hyperparameters, without Lightning's ``_`` entries

    @property
    def class_path(self) -> str:
        return f"{self.task_class.__module__}.{self.task_class.__name__}"

    @property
    def state_dict(self) -> dict[str, torch.Tensor]:
        return self.saved["state_dict"]

    @property
    def grid(self) -> dict[str, Any] | None:
        """Latitude, longitude (degrees) and ensemble size of the training data, where recorded."""
        return self.saved.get(GRID_KEY)

    @property
    def grid_shape(self) -> tuple[int, ...]:
        """``(latitude, longitude)`` sizes of the training grid; ``()`` where nothing says."""
        if self.grid:
            return (len(self.grid["latitude"]), len(self.grid["longitude"]))
        if self.hparams.get("grid_shape"):
            return tuple(int(n) for n in self.hparams["grid_shape"])
        clim = self.state_dict.get("clim_mean")
        return tuple(int(n) for n in clim.shape[-2:]) if clim is not None and clim.ndim >= 2 else ()

    def build(self) -> EnsembleTask:
        """The task with the checkpoint's weights and statistics (on the CPU, in train mode)."""
        task = self.task_class(**self.hparams)
        task.load_state_dict(self.state_dict)
        return task

    def check_data(self, data: RunData) -> None:
        """Raise unless ``data`` has the checkpoint's variables, levels, leads, k and grid."""
        check_compatible(self.hparams, data.hparams, f"checkpoint {self.path}")
        if data.latitude is not None and data.longitude is not None:
            lat, lon = np.asarray(data.latitude), np.asarray(data.longitude)
            check_same_grid(self.grid, self.grid_shape, lat, lon, data.what, f"checkpoint {self.path}")

    def check_options(self, options: Mapping[str, Any], prefix: str = "--model.init_args.") -> None:
        """Raise if an option given for the model (``{name: value}``) disagrees with the checkpoint.

        Options linked from the data, the predictive family (compared as families by the CLI), the
        running options (:data:`RUNNING_KEYS`) and how members are drawn
        (:data:`~ensml.train.hparams.SAMPLING_KEYS`) are not compared here.
        """
        for key, value in options.items():
            if (
                key in (*LINKED_KEYS, *RUNNING_KEYS, *SAMPLING_KEYS, "distribution")
                or key not in self.hparams
            ):
                continue
            if _plain(value) != _plain(self.hparams[key]):
                raise EnsmlError(
                    f"option {prefix}{key} {_show(value)} disagrees with checkpoint {self.path}, "
                    f"trained with {key} {_show(self.hparams[key])}: a checkpoint is applied and resumed "
                    "as it was trained (drop the option, or fit anew)"
                )


def peek_checkpoint(path: str | Path) -> dict[str, Any]:
    """A checkpoint's top-level entries (step, callback states...), its tensors mapped, not read;
    ``{}`` for a file that is not a readable checkpoint (:func:`read_checkpoint` says why when the
    file is used). For choosing among checkpoints, e.g. which one a requeued SLURM job resumes."""
    try:
        saved = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except Exception:  # damaged, truncated, not a checkpoint
        return {}
    return saved if isinstance(saved, dict) else {}


def read_checkpoint(path: str | Path, *, task_class: type[EnsembleTask] | str | None = None) -> Checkpoint:
    """Read the checkpoint at ``path`` and check it against this ensml and its own model; raise
    :class:`EnsmlError` (one line) if it is bad. A run then checks its data
    (:meth:`Checkpoint.check_data`) and the model options it was given
    (:meth:`Checkpoint.check_options`) once it knows them.

    Parameters
    ----------
    path
        A checkpoint written by ``ensml fit`` or ``ensml prune``.
    task_class
        The task (or its class path) for a checkpoint that does not name its own.
    """
    path = Path(path)
    if path.is_dir():
        raise EnsmlError(f"checkpoint {path} is a folder, not a checkpoint file")
    if not path.is_file():
        raise EnsmlError(f"checkpoint {path} does not exist")
    try:
        # weights_only: a checkpoint is data, never code to run.
        saved = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # a damaged file: pickle, zip, EOF, OS and torch errors alike
        raise EnsmlError(
            f"checkpoint {path} cannot be read, truncated or not a checkpoint ({type(exc).__name__})"
        ) from exc
    if not isinstance(saved, dict) or not {"hyper_parameters", "state_dict"} <= saved.keys():
        raise EnsmlError(f"checkpoint {path} holds no ensml model (no hyper_parameters or state_dict)")
    raw = dict(saved["hyper_parameters"])
    cls = _task_class(path, raw.get("_class_path") or task_class)
    hparams = {k: v for k, v in raw.items() if not str(k).startswith("_")}
    unknown = [k for k in hparams if k not in known_hparams(cls)]
    if unknown:
        raise EnsmlError(
            f"checkpoint {path} was written by a newer ensml? unknown hyperparameter {unknown[0]!r} of "
            f"{cls.__name__} (this is ensml {__version__})"
        )
    checkpoint = Checkpoint(path, saved, cls, hparams)
    _check_state(checkpoint)
    return checkpoint


def known_hparams(cls: type[EnsembleTask]) -> set[str]:
    """The keyword arguments of ``cls`` (its own and, through ``**kwargs``, its bases' up to the task)."""
    names: set[str] = set()
    for klass in cls.__mro__:
        if "__init__" not in vars(klass):
            continue
        params = inspect.signature(klass.__init__).parameters.values()
        names |= {p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)} - {"self"}
        if klass is EnsembleTask or not any(p.kind is p.VAR_KEYWORD for p in params):
            break
    return names


def check_same_grid(
    grid: Mapping[str, Any] | None,
    shape: tuple[int, ...],
    latitude: np.ndarray,
    longitude: np.ndarray,
    what: str,
    trained: str,
) -> None:
    """Raise unless ``latitude`` × ``longitude`` (degrees), the grid of ``what``, is the training grid.

    ``grid`` is a checkpoint's record of its training grid (:data:`~ensml.train.hparams.GRID_KEY`);
    without one (checkpoints from before grids were recorded) the sizes ``shape`` are compared.
    ``trained`` names the checkpoint(s) in the message.
    """
    have = (latitude.size, longitude.size)
    if grid is None:
        if shape and tuple(shape) != have:
            raise EnsmlError(
                f"{what} is on another grid than {trained}: {have[0]} × {have[1]} points, trained on "
                f"{shape[0]} × {shape[1]}"
            )
        return
    want_lat, want_lon = np.asarray(grid["latitude"]), np.asarray(grid["longitude"])
    same = all(
        a.shape == b.shape and np.allclose(a, b, atol=1e-6)
        for a, b in ((latitude, want_lat), (longitude, want_lon))
    )
    if not same:
        raise EnsmlError(
            f"{what} is on another grid than {trained}: {_grid_text(latitude, longitude)}, trained on "
            f"{_grid_text(want_lat, want_lon)}"
        )


def _grid_text(latitude: np.ndarray, longitude: np.ndarray) -> str:
    def span(x: np.ndarray) -> str:
        return f"{x[0]:g} … {x[-1]:g}" if x.size else "none"

    return (
        f"{latitude.size} × {longitude.size} points (latitude {span(latitude)}, longitude {span(longitude)})"
    )


def _task_class(path: Path, class_path: Any) -> type[EnsembleTask]:
    if isinstance(class_path, type):
        if issubclass(class_path, EnsembleTask):
            return class_path
        class_path = f"{class_path.__module__}.{class_path.__name__}"
    name = str(class_path or "")
    if not name.startswith("ensml.") or "." not in name:
        raise EnsmlError(
            f"checkpoint {path} is not a checkpoint of an ensml task (class {name or 'unknown'})"
        )
    module, attr = name.rsplit(".", 1)
    try:
        cls = getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError):
        raise EnsmlError(
            f"checkpoint {path} was written by a newer ensml? unknown task {name} "
            f"(this is ensml {__version__})"
        ) from None
    if not (isinstance(cls, type) and issubclass(cls, EnsembleTask)):
        raise EnsmlError(f"checkpoint {path} is not a checkpoint of an ensml task (class {name})")
    return cls


def _check_state(checkpoint: Checkpoint) -> None:
    """Raise unless the state dict's keys and shapes are those of the model the hyperparameters build."""
    path, cls = checkpoint.path, checkpoint.task_class
    try:
        with torch.device("meta"):  # shapes only: no memory, no initialisation
            model = cls(**checkpoint.hparams)
    except EnsmlError as exc:
        raise EnsmlError(f"checkpoint {path}: {exc}") from None
    except (TypeError, ValueError, RuntimeError) as exc:
        reason = (str(exc).strip().splitlines() or [""])[0]
        raise EnsmlError(
            f"checkpoint {path}: its hyperparameters do not build a {cls.__name__} "
            f"({type(exc).__name__}: {reason})"
        ) from None
    want = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    state = checkpoint.state_dict
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise EnsmlError(f"checkpoint {path}: its state_dict is not a mapping of tensors")
    missing = [k for k in want if k not in state and k not in OPTIONAL_STATE]
    unexpected = [k for k in state if k not in want]
    model_of = f"the {cls.__name__} its hyperparameters build"
    if missing or unexpected:
        parts = []
        if missing:
            parts.append(f"no state key {missing[0]!r}" + _more(missing))
        if unexpected:
            parts.append(f"unexpected state key {unexpected[0]!r}" + _more(unexpected))
        hint = " (renamed?)" if missing and unexpected else ""
        raise EnsmlError(f"checkpoint {path} does not match {model_of}: {', '.join(parts)}{hint}")
    for key, shape in want.items():
        if key in DATA_BUFFERS or key not in state:  # data buffers take the checkpoint's shape
            continue
        if tuple(state[key].shape) != shape:
            raise EnsmlError(
                f"checkpoint {path} does not match {model_of}: state key {key!r} has shape "
                f"{tuple(state[key].shape)}, the model's is {shape}"
            )
    grid, clim = checkpoint.grid, state.get("clim_mean")
    if grid and clim is not None and clim.ndim >= 2:
        recorded = (len(grid["latitude"]), len(grid["longitude"]))
        if tuple(clim.shape[-2:]) != recorded:
            raise EnsmlError(
                f"checkpoint {path} records a {recorded[0]} × {recorded[1]} grid but its statistics "
                f"(clim_mean) are {clim.shape[-2]} × {clim.shape[-1]}"
            )


def _more(keys: list[str]) -> str:
    return f" and {len(keys) - 1} more" if len(keys) > 1 else ""


def _plain(value: Any) -> Any:
    """A value as plain Python for comparison (``4`` equals ``4.0``, a tuple its list)."""
    if hasattr(value, "as_dict"):  # a jsonargparse Namespace
        value = value.as_dict()
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, int | float):
        return float(value)
    return str(value)


def _show(value: Any) -> str:
    return str(value.as_dict() if hasattr(value, "as_dict") else value)


__all__ = [
    "LINKED_KEYS",
    "RUNNING_KEYS",
    "Checkpoint",
    "RunData",
    "check_same_grid",
    "known_hparams",
    "peek_checkpoint",
    "read_checkpoint",
]
