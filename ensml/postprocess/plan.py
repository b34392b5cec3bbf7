"""Which inputs become which outputs, cut into work units.

A unit's output is a name relative to the output folder, the name its ledger records
(:mod:`ensml.data.outputs`). netCDF output: one unit per input file, written to ``<path
relative to the inputs' common folder>.nc`` (the input folders are mirrored, so equal names in
different folders do not collide); CSV output (station products) the same with ``.csv``.
zarr output: one unit per init time, each a region of ``products.zarr``.

What a run plans from them (:func:`plan_run`): the :class:`Settings` it was asked for, each unit's
identity (what the manifest compares to say whether an output is current) and, for zarr, the
store made from one init's placeholder products before any unit fills its region.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from ensml import __version__
from ensml.data.open import expand_paths, open_forecast
from ensml.data.outputs import OutputFolder, create_zarr_store
from ensml.errors import EnsmlError
from ensml.names import INIT_TIME, LATITUDE, LONGITUDE, MEMBER
from ensml.postprocess.generated import GENERATIVE, members_to_draw
from ensml.postprocess.manifest import input_identity, zarr_store_id
from ensml.postprocess.models import ModelSet
from ensml.postprocess.options import OutputFormat, Products, ThresholdSet, plain_options
from ensml.postprocess.products import placeholder_params, product_dataset, product_encoding
from ensml.postprocess.stations import StationModels
from ensml.postprocess.worker import Unit
from ensml.provenance import command

ZARR_STORE = "products.zarr"
#: The file suffix of each output format with one file per input.
SUFFIX = {"netcdf": ".nc", "csv": ".csv"}
ECC_REFERENCE = "ECC-Q: Schefzik, Thorarinsdottir and Gneiting (2013), Statistical Science 28, 616-640"
#: What a generative run's members follow (ensml.train.generative).
GENERATIVE_REFERENCE = (
    "generated members trained on proper multivariate scores: Chen, Janke, Steinke and Lerch (2024), "
    "Ann. Appl. Stat. 18(1)"
)


@dataclass
class Settings:
    """What a run was asked for, checked before any side effect: the checkpoints and the options
    that shape every output."""

    models: ModelSet | StationModels
    format: OutputFormat
    products: Products
    thresholds: list[ThresholdSet]
    analysis: tuple[str, ...] | None
    force: bool = False
    verify: bool = False

    def options(self, products: Products | None = None, **extra: Any) -> dict[str, Any]:
        """The options a unit's identity records (``products`` as planned, if given)."""
        products = self.products if products is None else products
        return dict(format=self.format, products=products.identity(), analysis=self.analysis, **extra)

    @cached_property
    def attrs(self) -> dict[str, Any]:
        """The global attributes of every product: what made it (the run metadata) and how."""
        models = self.models
        return {
            "title": f"ensml post-processed ensemble forecast ({models.task})",
            "source": f"ensml {__version__} postprocess, {models.task}",
            "references": GENERATIVE_REFERENCE if models.task == GENERATIVE else ECC_REFERENCE,
            **models.run_meta().to_attrs(),
            "ensml_checkpoints": "; ".join(f"{p} (sha256 {h})" for p, h in models.digest.items()),
            "ensml_command": command(),
        }


@dataclass
class Plan:
    """The units of a run, each one's identity (what the manifest compares), the products
    settings they share (zarr fixes the number of members), and a failed record for each input
    that could not be planned (zarr: an unreadable input gives no unit)."""

    units: list[Unit]
    identities: dict[str, dict[str, Any]]
    products: Products
    unplanned: list[dict[str, Any]] = field(default_factory=list)


def expand_inputs(patterns: str | Sequence[str], what: str = "forecast") -> list[Path]:
    """Files named by ``patterns`` (paths or globs, :func:`~ensml.data.open.expand_paths`), each once."""
    items = [patterns] if isinstance(patterns, str | Path) else list(patterns)
    if not items:
        raise EnsmlError(f"no {what} files given")
    found: dict[Path, None] = {}
    for item in items:  # each checked by the one reader's rules (a literal name before a glob)
        for p in expand_paths(str(item), what):
            found.setdefault(p.resolve(), None)
    return list(found)


def netcdf_units(inputs: Sequence[Path], out_dir: Path, suffix: str = ".nc") -> list[Unit]:
    """One unit per input; outputs (``suffix``: ``.nc``, or ``.csv`` for station products as
    CSV) mirror the inputs' folders below their common folder."""
    root = Path(os.path.commonpath([p.parent for p in inputs]))
    real = out_dir.resolve()
    units, seen = [], {}
    for p in inputs:
        if p.is_relative_to(real):
            raise EnsmlError(f"forecast file {p} is inside the output folder {out_dir}")
        name = (p.parent.relative_to(root) / (p.name.removesuffix(p.suffix) + suffix)).as_posix()
        if name in seen:
            raise EnsmlError(f"forecast files {seen[name]} and {p} would both be written to {out_dir / name}")
        seen[name] = p
        units.append(Unit(key=str(p), input=str(p), output=name))
    return units


def zarr_units(inputs: Sequence[Path], on_bad: Callable[[Path, str], None]) -> tuple[list[Unit], np.ndarray]:
    """One unit per init time of every readable input (unreadable ones go to ``on_bad``), each
    a region of the store :data:`ZARR_STORE`.

    Returns the units and the store's init times (sorted); an init in two files is an error.
    """
    by_init: dict[np.datetime64, Path] = {}
    for p in inputs:
        try:
            with open_forecast(p) as fc:
                inits = np.atleast_1d(fc[INIT_TIME].values).astype("datetime64[ns]")
        except EnsmlError as exc:
            on_bad(p, str(exc))
            continue
        for init in inits:
            if init in by_init:
                raise EnsmlError(
                    f"init {str(init)[:16]} is in both {by_init[init]} and {p}: "
                    "one zarr store holds each init once"
                )
            by_init[init] = p
    inits = np.array(sorted(by_init), dtype="datetime64[ns]")
    units = [
        Unit(key=f"{by_init[t]}@{str(t)[:16]}", input=str(by_init[t]), output=ZARR_STORE, init=t, region=i)
        for i, t in enumerate(inits)
    ]
    return units, inits


def plan_run(inputs: list[Path], folder: OutputFolder, settings: Settings) -> Plan:
    """The run's units, their identities and the products they share.

    zarr: the store is created (through ``folder``) unless one with these inits and variables
    exists, so that the units only fill its regions.
    """
    models, products = settings.models, settings.products
    if settings.format != "zarr":
        units = netcdf_units(inputs, Path(folder.display), SUFFIX[settings.format])
        return Plan(units, unit_identities(units, models, settings.options()), products)

    unplanned: list[dict[str, Any]] = []

    def on_bad(path: Path, reason: str) -> None:
        unplanned.append(
            {
                **input_identity(path),
                "key": str(path),
                "status": "failed",
                "reason": reason,
                "checkpoints": models.identity,
                "options": plain_options(**settings.options()),
            }
        )

    units, inits = zarr_units(inputs, on_bad)
    if not units:
        return Plan(units, {}, products, unplanned)
    with open_forecast(units[0].input, models.variables) as fc:
        m = fc.sizes[MEMBER]
        lat, lon = fc[LATITUDE].values, fc[LONGITUDE].values
    n = m if products.members is None else products.members
    products = replace(products, members=n)  # every region holds the same number of members
    template = region_template(inits[0], models, products, settings.thresholds, lat, lon, max(n, 1))
    store_id = zarr_store_id(folder.final(ZARR_STORE), inits, list(template.data_vars))
    if store_id is None or settings.force:
        store_attrs = {**settings.attrs, "ensml_inputs": len(inputs), **template.attrs}
        encoding = product_encoding(template, zarr=True)
        store_id = create_zarr_store(folder, ZARR_STORE, template, inits, encoding, store_attrs, command())
    identities = unit_identities(units, models, settings.options(products, store=store_id))
    return Plan(units, identities, products, unplanned)


def region_template(
    init: np.datetime64,
    models: ModelSet,
    products: Products,
    thresholds: list[ThresholdSet],
    lat: np.ndarray,
    lon: np.ndarray,
    m: int,
) -> Any:
    """One init's products made of placeholder values: the structure of every region."""
    meta = models.run_meta()
    shape = (len(models.leads), len(models.levels), lat.size, lon.size)
    raw = np.zeros((len(models.variables), shape[0], m, *shape[1:]), np.float32)
    params = placeholder_params(meta, shape, members_to_draw(products, m))
    return product_dataset(init, meta, lat, lon, params, raw, products, thresholds)


def unit_identities(
    units: Iterable[Unit], models: ModelSet | StationModels, options: dict[str, Any]
) -> dict[str, dict[str, Any]]:
    opts = plain_options(**options)
    return {
        u.key: {"key": u.key, **input_identity(u.input), "checkpoints": models.identity, "options": opts}
        for u in units
    }
