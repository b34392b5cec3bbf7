"""The checkpoints of one post-processing run: inspected on the client, loaded once per worker.

Design: **each lead time from one checkpoint**. Each checkpoint (a ``MixedTask``, ``SpreadTask``
or ``GenerativeTask`` of any architecture, as ``ensml fit`` writes it) predicts its target lead(s); a
run takes any number of them, covering distinct leads, and the outputs hold every lead they
cover. All checkpoints of a run are of one task and share variables, levels and grid; each reads
its own input leads and its own K first members.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ensml.errors import EnsmlError
from ensml.names import family_names
from ensml.predictions import RunMeta, file_sha256
from ensml.times import format_lead, parse_leads
from ensml.train.checkpoint_file import check_same_grid, read_checkpoint
from ensml.train.tasks import EnsembleTask

TASKS = ("MixedTask", "SpreadTask", "GenerativeTask")


@dataclass(frozen=True)
class CheckpointInfo:
    """What the client knows about one checkpoint (no network is built)."""

    path: str
    sha256: str
    class_path: str
    hparams: dict[str, Any]
    grid: dict[str, Any] | None  # latitude, longitude, members of the training data
    grid_shape: tuple[int, ...]  # (latitude, longitude) sizes of the per-point statistics
    surface: tuple[str, ...] = ()  # surface (single-level) variables (ensml.data.surface)

    @property
    def task(self) -> str:
        return self.class_path.rsplit(".", 1)[-1]

    @property
    def target_leads(self) -> np.ndarray:
        """The lead times (timedelta64) the checkpoint predicts, in the order of its output fields."""
        return parse_leads(self.hparams["target_leads"])

    @property
    def input_leads(self) -> np.ndarray:
        """The lead times (timedelta64) the checkpoint reads, in the order of its inputs."""
        return parse_leads(self.hparams["input_leads"])

    @property
    def k(self) -> int:
        return int(self.hparams["k"])

    @property
    def uses_analysis(self) -> bool:
        return self.task in ("MixedTask", "GenerativeTask") and bool(self.hparams.get("use_analysis", True))

    @property
    def families(self) -> tuple[str, ...]:
        """The predictive family of each variable (a mixed model's; a spread model has none)."""
        if self.task != "MixedTask":
            return ()
        variables = [str(v) for v in self.hparams.get("variables", ())]
        option = f"checkpoint {self.path}: distribution"
        return family_names(variables, self.hparams.get("distribution"), option)


def inspect_checkpoint(path: str | Path) -> CheckpointInfo:
    """Read and check a checkpoint (:func:`~ensml.train.checkpoint_file.read_checkpoint`); raise a
    one-line error if it is not a mixed, spread or generative task of this ensml."""
    ckpt = read_checkpoint(path)
    if ckpt.task_class.__name__ not in TASKS:
        raise EnsmlError(
            f"checkpoint {path} is not an ensml MixedTask, SpreadTask or GenerativeTask "
            f"(class {ckpt.class_path})"
        )
    hp = ckpt.hparams
    mask = ckpt.state_dict.get("surface")
    surface = tuple(
        str(v) for v, s in zip(hp.get("variables", ()), [] if mask is None else mask.tolist()) if s
    )
    return CheckpointInfo(
        str(ckpt.path), file_sha256(ckpt.path), ckpt.class_path, hp, ckpt.grid, ckpt.grid_shape, surface
    )


@dataclass(frozen=True)
class ModelSet:
    """Checkpoints for distinct target leads, consistent in task, variables, levels and grid."""

    checkpoints: tuple[CheckpointInfo, ...]  # sorted by first target lead

    @classmethod
    def from_paths(cls, paths: Sequence[str | Path]) -> ModelSet:
        if isinstance(paths, str | Path) or not paths:
            raise EnsmlError("postprocess needs a list of one or more checkpoints (checkpoints: [a.ckpt, …])")
        infos = sorted((inspect_checkpoint(p) for p in paths), key=lambda c: c.target_leads[0])
        first = infos[0]
        for other in infos[1:]:
            if other.task != first.task:
                raise EnsmlError(
                    f"checkpoints {first.path} ({first.task}) and {other.path} ({other.task}) are of "
                    "different tasks: post-process mixed, spread and generative models in separate runs"
                )
        leads = np.concatenate([c.target_leads for c in infos])
        values, counts = np.unique(leads, return_counts=True)
        if (counts > 1).any():
            twice = values[counts > 1][0]
            paths = [c.path for c in infos if twice in c.target_leads]
            raise EnsmlError(
                f"checkpoints {' and '.join(paths)} both predict lead {format_lead(twice)}: give one "
                "checkpoint per target lead time"
            )
        for other in infos[1:]:
            if other.k != first.k:
                raise EnsmlError(
                    f"checkpoints {first.path} (k={first.k}) and {other.path} (k={other.k}) read different "
                    "member subsets: post-process checkpoints of one k in one run"
                )
            for key in ("variables", "levels"):
                if [str(x) for x in other.hparams[key]] != [str(x) for x in first.hparams[key]]:
                    raise EnsmlError(
                        f"checkpoints {first.path} and {other.path} differ in {key} "
                        f"({first.hparams[key]} vs {other.hparams[key]}): all must cover the same fields"
                    )
            if other.families != first.families:
                raise EnsmlError(
                    f"checkpoints {first.path} and {other.path} predict different families "
                    f"({_families_text(first)} vs {_families_text(other)}): "
                    "post-process one family per variable"
                )
            if first.grid and other.grid and not _same_grid(first.grid, other.grid):
                raise EnsmlError(f"checkpoints {first.path} and {other.path} were trained on different grids")
        return cls(tuple(infos))

    @property
    def task(self) -> str:
        return self.checkpoints[0].task

    def with_absolute_paths(self) -> ModelSet:
        """The same checkpoints named by absolute paths (for workers in another folder)."""
        return replace(
            self, checkpoints=tuple(replace(c, path=os.path.abspath(c.path)) for c in self.checkpoints)
        )

    @property
    def variables(self) -> list[str]:
        return [str(v) for v in self.checkpoints[0].hparams["variables"]]

    @property
    def levels(self) -> list[float]:
        return [float(x) for x in self.checkpoints[0].hparams["levels"]]

    @property
    def surface(self) -> list[str]:
        """The surface variables among :attr:`variables`: their products have no level."""
        return list(self.checkpoints[0].surface)

    @property
    def leads(self) -> np.ndarray:
        """Target leads covered (timedelta64), ascending: the outputs' ``lead_time``."""
        return np.sort(np.concatenate([c.target_leads for c in self.checkpoints]))

    @property
    def read_leads(self) -> np.ndarray:
        """Every lead read from a forecast (timedelta64, ascending): the union of the input leads."""
        return np.unique(np.concatenate([c.input_leads for c in self.checkpoints]))

    @property
    def k(self) -> int:
        """The member subset every checkpoint reads (members 0 … k-1)."""
        return self.checkpoints[0].k

    def run_meta(self) -> RunMeta:
        """The run metadata every product of these checkpoints carries (:mod:`ensml.predictions`)."""
        grid = self.grid or {}
        return RunMeta(
            task=self.task,
            k=self.k,
            members=tuple(range(self.k)),
            ensemble_size=int(grid.get("members", 0)),
            variables=tuple(self.variables),
            levels=tuple(self.levels),
            leads=tuple(self.leads),
            checkpoints=tuple(self.identity),
            surface=tuple(self.surface),
            families=self.checkpoints[0].families,
        )

    @property
    def uses_analysis(self) -> bool:
        return any(c.uses_analysis for c in self.checkpoints)

    @property
    def grid(self) -> dict[str, Any] | None:
        return next((c.grid for c in self.checkpoints if c.grid), None)

    @property
    def digest(self) -> dict[str, str]:
        """``{path: sha256}`` of the checkpoints (provenance)."""
        return {c.path: c.sha256 for c in self.checkpoints}

    @property
    def identity(self) -> list[str]:
        """The checkpoints' SHA-256, by lead: what an output depends on (not where the files are)."""
        return [c.sha256 for c in self.checkpoints]


def _families_text(info: CheckpointInfo) -> str:
    return ", ".join(f"{v}: {f}" for v, f in zip(info.hparams["variables"], info.families)) or "none"


def _same_grid(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return all(
        len(a[d]) == len(b[d]) and np.allclose(a[d], b[d], atol=1e-6) for d in ("latitude", "longitude")
    )


def check_grid(models: ModelSet, latitude: np.ndarray, longitude: np.ndarray, what: str) -> None:
    """Raise unless the forecast's grid is the checkpoints' training grid."""
    shape = models.checkpoints[0].grid_shape
    check_same_grid(models.grid, shape, latitude, longitude, what, "the checkpoints")


# -- loading, once per process ----------------------------------------------------------------
_LOADED: dict[tuple, list[EnsembleTask]] = {}
_LOCK = threading.Lock()
LOAD_COUNT = {"n": 0}  # how many times this process built the networks (checked by the tests)


def resolve_device(device: str) -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        raise EnsmlError("device: cuda was asked for, but torch sees no CUDA device on this worker")
    return torch.device(device)


def load_models(models: ModelSet, device: str = "cpu") -> list[EnsembleTask]:
    """The networks of ``models`` (in the order of ``models.checkpoints``), in eval mode, built
    once per process."""
    key = (tuple(models.identity), device)
    with _LOCK:
        if key not in _LOADED:
            dev = resolve_device(device)
            _LOADED.clear()  # one run's models at a time
            _LOADED[key] = [_build(c, dev) for c in models.checkpoints]
            LOAD_COUNT["n"] += 1
        return _LOADED[key]


def _build(info: CheckpointInfo, device: torch.device) -> EnsembleTask:
    checkpoint = read_checkpoint(info.path)  # checked again: the file is read again here
    if file_sha256(info.path) != info.sha256:
        raise EnsmlError(f"checkpoint {info.path} changed while post-processing ran")
    return checkpoint.build().eval().to(device)
