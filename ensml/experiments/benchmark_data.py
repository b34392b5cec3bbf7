"""The data source of ``ensml benchmark``: the synthetic ensemble or the physics testbed.

Exactly one is used (:func:`choose_source`). Its dataset is generated once into ``data_dir`` and
reused while the generator options stored in the forecast's global attributes
(``synth_<option>`` or ``physics_<option>``) match the config's (:func:`ensure_data`).
"""

from __future__ import annotations

from dataclasses import MISSING, asdict, fields
from pathlib import Path

import numpy as np
import xarray as xr

from ensml.data.physics.stations import STATION_FILES as PHYSICS_STATION_FILES
from ensml.data.synth.generate import synth as make_synth
from ensml.data.synth.stations import STATION_FILES as SYNTH_STATION_FILES
from ensml.errors import EnsmlError
from ensml.experiments.options import PhysicsOptions, SynthOptions
from ensml.names import MEMBER, STATION
from ensml.times import format_leads, parse_date, parse_leads

#: The options of either source.
Source = SynthOptions | PhysicsOptions


def ensure_data(data_dir: Path, opts: Source, stations: int = 0) -> dict[str, Path]:
    """Reuse ``data_dir`` if it holds a dataset made with ``opts``; else generate it there.

    The generator's options are read back from the forecast's global attributes
    ``synth_<option>`` or ``physics_<option>``; the synthetic data's files include the oracle.
    An option the files do not record (data made before the generator had it) matches its
    default value only. A folder holding the other generator's data is refused, never overwritten.
    ``stations``: also observations at this many stations (the generator's ``stations``
    option; their files' paths by their names, ``stations`` and the synthetic data's
    ``stations_oracle`` and ``orography`` or the physics testbed's ``stations_truth``), reused
    while ``stations.nc`` holds that many. The synthetic data's ``oracle_members`` option adds
    ``oracle_members.nc``, its count checked like every other option.
    """
    kind = kind_of(opts)
    names = ("forecast", "analysis", "oracle") if kind == "synth" else ("forecast", "analysis")
    if stations:
        names += station_files(kind)
    if kind == "synth" and getattr(opts, "oracle_members", 0):
        names += ("oracle_members",)
    paths = {name: data_dir / f"{name}.nc" for name in names}
    attrs = {}
    if paths["forecast"].is_file():
        with xr.open_dataset(paths["forecast"]) as ds:
            attrs = dict(ds.attrs)
        other = "physics" if kind == "synth" else "synth"
        if not any(a.startswith(f"{kind}_") for a in attrs) and any(a.startswith(f"{other}_") for a in attrs):
            raise EnsmlError(
                f"benchmark data_dir {data_dir} holds data of the {other} generator ({other}_* "
                f"attributes), the config asks for {kind}: remove it or choose another data_dir"
            )
    if not all(p.is_file() for p in paths.values()):
        return generate(kind, data_dir, opts, stations)
    # counts recorded by their own files: the stations observed, the oracle's members
    counts = {"stations": (STATION, stations), "oracle_members": (MEMBER, getattr(opts, "oracle_members", 0))}
    for name, (dim, want) in counts.items():
        if not want:
            continue
        with xr.open_dataset(paths[name]) as ds:
            have = int(ds.sizes.get(dim, 0))
        if have != int(want):
            raise EnsmlError(
                f"benchmark data_dir {data_dir} holds {have} {name.replace('_', ' ')}, the config asks "
                f"for {name}={want}: remove it or choose another data_dir"
            )
    defaults = {f.name: f.default for f in fields(opts) if f.default is not MISSING}
    for key, want in asdict(opts).items():
        if key == "oracle_members":
            continue
        have = attrs.get(f"{kind}_{key}", defaults.get(key))
        if key == "leads" and have is not None:  # ISO durations in the file, hours in the config
            have, want = format_leads(str(have).split()), format_leads(want)
        if isinstance(want, bool) and have is not None:  # netCDF keeps a flag as "True"/"False" or 0/1
            have = str(have).strip().lower() in ("true", "1")
        same = np.array_equal(np.atleast_1d(have), np.atleast_1d(want)) if have is not None else False
        if not same:
            have = np.asarray(have).tolist() if have is not None else "unknown"
            raise EnsmlError(
                f"benchmark data_dir {data_dir} holds data made with {kind}.{key}={have}, the config "
                f"asks for {key}={want}: remove it or choose another data_dir"
            )
    return paths


def kind_of(opts: Source) -> str:
    """``"synth"`` or ``"physics"``: the generator of ``opts``, as its attributes' prefix."""
    return "physics" if isinstance(opts, PhysicsOptions) else "synth"


def station_files(kind: str) -> tuple[str, ...]:
    """The names of the station files ``kind``'s generator writes (without the suffix)."""
    return SYNTH_STATION_FILES if kind == "synth" else PHYSICS_STATION_FILES


def generate(kind: str, data_dir: Path, opts: Source, stations: int = 0) -> dict[str, Path]:
    """Generate the dataset of ``opts`` (with ``stations``) into ``data_dir`` (the physics
    testbed imported only here)."""
    extra = {"stations": int(stations)} if stations else {}
    if kind == "synth":
        return make_synth(data_dir, **asdict(opts), **extra, overwrite=True)
    from ensml.data.physics.generate import physics as make_physics

    return make_physics(data_dir, **asdict(opts), **extra, overwrite=True)


def choose_source(synth: SynthOptions | None, physics: PhysicsOptions | None, bound: bool) -> Source:
    """The one data source's options: the physics testbed's when given, else the synthetic data's.

    Its dates and leads are checked here, before any data is made, in the words of the options.
    """
    if synth is not None and physics is not None:
        raise EnsmlError(
            "benchmark: give synth or physics options, not both (the synthetic data or the physics testbed)"
        )
    if physics is not None and bound:
        raise EnsmlError(
            "benchmark: bound: true needs the synthetic data's oracle and the physics testbed has "
            "none (no per-point bound): set bound: false"
        )
    source = physics if physics is not None else (synth or SynthOptions())
    kind = kind_of(source)
    for key in ("start", "end") if kind == "synth" else ("start",):
        parse_date(getattr(source, key), f"option --{kind}.{key}")
    parse_leads(source.leads)
    return source


__all__ = ["Source", "choose_source", "ensure_data", "generate", "kind_of", "station_files"]
