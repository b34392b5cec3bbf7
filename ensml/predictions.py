"""Run metadata: what made a predictions or products file, written into it once and read back.

Every file of predictions (``ensml predict``) and of products (``ensml postprocess``) carries, as
global attributes, the facts of the run that made it: the task, the member subset the model
read (``k`` and which members), the size of the ensemble it was trained on, the variables,
levels (and which variables are surface ones) and lead times it covers, the SHA-256 of the
checkpoint(s) and the ensml version. Readers take these facts from the files
(:meth:`RunMeta.from_attrs`): ``k`` and the leads are never again given by a flag that could
disagree, and files of two runs are never scored as one (:func:`one_run`).

The attributes are plain netCDF/zarr attributes (``ensml_task``, ``ensml_k``, ``ensml_leads``,
…), so xarray, cdo, Panoply or ncview users see them without ensml. Lead times are ISO 8601
durations (``PT24H``), the edge format of :mod:`ensml.names`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from ensml import __version__
from ensml.errors import EnsmlError
from ensml.times import format_leads, iso_lead, parse_leads

PREFIX = "ensml_"
#: The tasks whose outputs carry run metadata.
TASKS = ("MixedTask", "SpreadTask", "StationDRN", "GenerativeTask")


def file_sha256(path: str | Path, chunk: int = 1 << 20) -> str:
    """Hex SHA-256 of a file's bytes (a checkpoint's identity)."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            digest.update(block)
    return digest.hexdigest()


@dataclass(frozen=True)
class RunMeta:
    """The facts of the run that made a predictions or products file.

    Attributes
    ----------
    task
        ``MixedTask`` (a Gaussian predictive distribution of the analysis), ``SpreadTask``
        (the estimated spread of the full ensemble) or ``StationDRN`` (a predictive
        distribution at stations, :mod:`ensml.train.station_model`).
    k
        Members the model read as input.
    members
        Which members, as positions along the forecast's ``member`` dimension (``0 … k-1``).
    ensemble_size
        Members of the ensemble the model was trained on (M; a spread model estimates their std).
    variables, levels
        What the file covers (levels in hPa); ``surface`` names the surface (single-level)
        variables among ``variables``, which have no level dimension.
    leads
        The lead times the file holds (``timedelta64[ns]``, ascending).
    checkpoints
        SHA-256 of each checkpoint that made the file (one per group of target leads), or empty
        for a model that was never trained.
    families
        The predictive family of each variable (``MixedTask``), in the order of ``variables``
        (:mod:`ensml.scores.distributions`); empty for a spread model, and for files written
        before families existed, whose predictions are all Gaussian.
    station_set
        The identity of the station list of station products
        (:func:`ensml.data.stations.station_set_id`); empty for a grid.
    version
        The ensml version that wrote the file.
    """

    task: str
    k: int
    members: tuple[int, ...]
    ensemble_size: int
    variables: tuple[str, ...]
    levels: tuple[float, ...]
    leads: tuple[np.timedelta64, ...]
    checkpoints: tuple[str, ...] = ()
    surface: tuple[str, ...] = ()
    families: tuple[str, ...] = ()
    station_set: str = ""
    version: str = field(default=__version__)

    def __post_init__(self) -> None:
        leads = tuple(np.sort(parse_leads(list(self.leads))))
        object.__setattr__(self, "leads", leads)
        families = tuple(str(f) for f in self.families)
        if families and len(families) != len(self.variables):
            raise EnsmlError(
                f"run metadata names {len(families)} families for {len(self.variables)} variables"
            )
        if not families and self.task in ("MixedTask", "StationDRN"):
            families = ("normal",) * len(self.variables)
        object.__setattr__(self, "families", families)
        object.__setattr__(self, "members", tuple(int(m) for m in self.members))
        object.__setattr__(self, "levels", tuple(float(x) for x in self.levels))

    def family_of(self, var: str) -> str:
        """The predictive family of ``var`` (``normal``, ``csg0``, …), as the file says."""
        if not self.families:
            raise EnsmlError(f"a {self.task} file holds no predictive distribution of {var}")
        if var not in self.variables:
            raise EnsmlError(f"the run has no variable {var!r} (it has {', '.join(self.variables)})")
        return self.families[self.variables.index(var)]

    @property
    def is_spread(self) -> bool:
        """Whether the file holds a spread model's estimates (else a Gaussian predictive distribution)."""
        return self.task == "SpreadTask"

    def to_attrs(self) -> dict[str, Any]:
        """The metadata as global attributes of a netCDF or zarr file."""
        return (
            {
                f"{PREFIX}task": self.task,
                f"{PREFIX}k": int(self.k),
                f"{PREFIX}members": " ".join(str(m) for m in self.members),
                f"{PREFIX}ensemble_size": int(self.ensemble_size),
                f"{PREFIX}variables": " ".join(self.variables),
                f"{PREFIX}surface_variables": " ".join(self.surface),
                f"{PREFIX}levels": " ".join(f"{x:g}" for x in self.levels),
                f"{PREFIX}leads": " ".join(iso_lead(lead) for lead in self.leads),
                f"{PREFIX}checkpoint_sha256": " ".join(self.checkpoints),
                f"{PREFIX}version": self.version,
            }
            | (
                {f"{PREFIX}distribution": " ".join(f"{v}:{f}" for v, f in zip(self.variables, self.families))}
                if self.families
                else {}
            )
            | ({f"{PREFIX}station_set": self.station_set} if self.station_set else {})
        )

    @classmethod
    def from_attrs(cls, attrs: Mapping[str, Any], source: str) -> RunMeta:
        """Read the metadata back from ``attrs`` (of the file ``source``, named in errors).

        Raises
        ------
        EnsmlError
            When an attribute is missing or cannot be read: the file was not written by this
            version of ``ensml predict`` or ``ensml postprocess``.
        """

        def get(key: str, default: Any = None) -> str:
            value = attrs.get(PREFIX + key, default)
            if value is None:
                raise EnsmlError(
                    f"{source} has no {PREFIX}{key} attribute: it was not written by ensml predict or "
                    "ensml postprocess of this version, so what made it cannot be checked"
                )
            return str(value)

        try:
            task = get("task")
            if task not in TASKS:
                raise ValueError(f"{PREFIX}task is {task!r}")
            variables = tuple(get("variables").split())
            return cls(
                task=task,
                k=int(get("k")),
                members=tuple(int(m) for m in get("members").split()),
                ensemble_size=int(get("ensemble_size")),
                variables=variables,
                levels=tuple(float(x) for x in get("levels").split()),
                leads=tuple(parse_leads(get("leads").split())),
                checkpoints=tuple(get("checkpoint_sha256", "").split()),
                surface=tuple(get("surface_variables", "").split()),
                families=_families(get("distribution", ""), variables),
                station_set=get("station_set", ""),
                version=get("version"),
            )
        except (ValueError, EnsmlError) as exc:
            if isinstance(exc, EnsmlError) and str(exc).startswith(source):
                raise
            raise EnsmlError(f"{source} has unreadable ensml run metadata ({exc})") from None

    def describe(self) -> str:
        """One line: ``MixedTask from members 0-4 of 10, leads 24, 48 h, checkpoint 1a2b3c4d``."""
        checkpoints = ", ".join(sha[:12] for sha in self.checkpoints) or "none (untrained)"
        first, last = (self.members[0], self.members[-1]) if self.members else (0, -1)
        return (
            f"{self.task} from members {first}-{last} of {self.ensemble_size}, leads "
            f"{format_leads(self.leads)}, checkpoint(s) {checkpoints}"
        )

    def without_leads(self) -> RunMeta:
        """The metadata with the leads left out, to compare runs whose files cover other leads."""
        return replace(self, leads=())


def one_run(metas: Mapping[str, RunMeta], what: str) -> RunMeta:
    """The metadata that every file of ``what`` shares, or a one-line error naming two that differ.

    Parameters
    ----------
    metas
        The metadata of each file, by the file's name.
    what
        What the files are, for the message (``"predictions"``).

    Raises
    ------
    EnsmlError
        When two files were made by different checkpoints, tasks, member subsets, variables or
        levels (for example products of two runs in one folder, after the checkpoint changed).
        Files of one run may hold different leads; the caller checks the leads it scores.
    """
    items = list(metas.items())
    if not items:
        raise EnsmlError(f"no {what} files to read")
    name0, first = items[0]
    for name, meta in items[1:]:
        if meta.without_leads() != first.without_leads():
            raise EnsmlError(
                f"{what} files {name0} and {name} come from different runs "
                f"({_difference(first, meta)}); score one run at a time"
            )
    leads = np.unique(np.concatenate([np.asarray(m.leads, dtype="timedelta64[ns]") for _, m in items]))
    return replace(first, leads=tuple(leads))


def _difference(a: RunMeta, b: RunMeta) -> str:
    """What differs between two runs' metadata, checkpoints first."""
    if a.checkpoints != b.checkpoints:
        return f"checkpoint {_shas(a)} vs {_shas(b)}"
    keys = ("task", "k", "members", "ensemble_size", "variables", "levels", "surface", "families", "version")
    for key in keys:
        if getattr(a, key) != getattr(b, key):
            return f"{key} {getattr(a, key)} vs {getattr(b, key)}"
    return "their metadata"


def _families(text: str, variables: tuple[str, ...]) -> tuple[str, ...]:
    """``"z:normal tp:csg0"`` as the family of each variable in order (empty when not written)."""
    if not text.strip():
        return ()
    pairs = parse_distribution(text)
    if set(pairs) != set(variables):
        raise ValueError(f"{PREFIX}distribution names {sorted(pairs)}, the variables are {list(variables)}")
    return tuple(pairs[v] for v in variables)


def parse_distribution(text: str) -> dict[str, str]:
    """``"z:normal tp:csg0 si10:bqn:12"`` as ``{"z": "normal", "tp": "csg0", "si10": "bqn:12"}``."""
    out = {}
    for item in str(text).split():
        var, sep, name = item.partition(":")
        if not sep or not var or not name:
            raise ValueError(
                f"{PREFIX}distribution {text!r} is not a list of variable:family (e.g. 'z:normal tp:csg0')"
            )
        out[var] = name
    return out


def distribution_of(attrs: Mapping[str, Any], variables: Sequence[str], source: str) -> dict[str, str]:
    """The family of each of ``variables`` that a file's ``ensml_distribution`` attribute names.

    The attribute is written into predictions, products and the synthetic oracle; a file without
    it (written before families existed) is Gaussian throughout.

    Raises
    ------
    EnsmlError
        Naming ``source``: the attribute cannot be read or names no family for a variable.
    """
    text = attrs.get(f"{PREFIX}distribution")
    if text is None:
        return dict.fromkeys(variables, "normal")
    try:
        names = parse_distribution(str(text))
    except ValueError as exc:
        raise EnsmlError(f"{source}: {exc}") from None
    missing = [v for v in variables if v not in names]
    if missing:
        raise EnsmlError(
            f"{source}: {PREFIX}distribution names no family for {', '.join(missing)} (it says {text!r})"
        )
    return {v: names[v] for v in variables}


def _shas(meta: RunMeta) -> str:
    return "+".join(sha[:12] for sha in meta.checkpoints) or "none"


def check_k(meta: RunMeta, k: int | None, source: str) -> int:
    """``k`` of the run; a ``k`` given as an option must agree with it (it repeats a fact of the file)."""
    if k is not None and int(k) != meta.k:
        raise EnsmlError(f"k={k} was given, but {source} was made from k={meta.k} members; leave k unset")
    return meta.k


def leads_of(metas: Sequence[RunMeta]) -> np.ndarray:
    """The union of the leads of several runs' files (``timedelta64[ns]``, ascending)."""
    if not metas:
        return np.array([], dtype="timedelta64[ns]")
    return np.unique(np.concatenate([np.asarray(m.leads, dtype="timedelta64[ns]") for m in metas]))


__all__ = [
    "RunMeta",
    "check_k",
    "distribution_of",
    "file_sha256",
    "leads_of",
    "one_run",
    "parse_distribution",
]
