"""Tiny GRIB files in the layouts real ensembles come in, written with eccodes.

Run as a script (``python -m tests.data.grib_files OUT_DIR``): the tests call it in a
subprocess, because writing with eccodes and then reading with cfgrib in one process crashes at
interpreter exit (a double free in the two libraries' shared state). Writes:

- ``ens10/ens10_pl_MMDD.grib`` and ``ens10/ens10_sfc_MMDD.grib``: the ENS-10 layout, one file
  per calendar date holding that date of every year (2016-2018), members 0-2 (perturbed), steps
  0/24/48 h, z and t at 500/850 hPa; 2t and msl in the surface files; ``ens10_gap/``: the same
  with the 2017 fields missing from the 01-05 files;
- ``cfpf.grib``: an operational file with the control (``dataType=cf``, number 0) and three
  perturbed members, z and t at 500/850 hPa and 2t; ``cfpf_dup.grib``: the control twice
  (once more as a perturbed member numbered 0).

Values are smooth, plausible fields (z ≈ 5.5e4 m² s⁻² at 500 hPa, t ≈ 250-280 K, 2t ≈ 285 K,
msl ≈ 1e5 Pa) plus a member- and date-dependent perturbation, so every field differs.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

N_LAT, N_LON = 5, 8  # a 45° global grid, 90 → -90, 0 → 315
DATES = ("01-02", "01-05")
YEARS = (2016, 2017, 2018)
STEPS = (0, 24, 48)
LEVELS = (500, 850)
BASE = {"z": {500: 5.5e4, 850: 1.4e4}, "t": {500: 252.0, 850: 275.0}, "2t": 285.0, "msl": 1.0e5}


def field(short: str, level: int, number: int, year: int, day: int, step: int) -> np.ndarray:
    """A (lat, lon) field: the variable's base value plus a small smooth pattern."""
    lat = np.linspace(90, -90, N_LAT)[:, None]
    lon = np.arange(N_LON)[None, :] * 360.0 / N_LON
    base = BASE[short][level] if isinstance(BASE[short], dict) else BASE[short]
    pattern = np.cos(np.deg2rad(lat)) * np.sin(np.deg2rad(lon + 10 * number + day)) + 0.01 * step
    return base * (1 + 0.01 * pattern + 0.001 * (year - 2016) + 0.0005 * number)


def _message(out, short: str, level: int | None, data_type: str, number: int, date: int, step: int) -> None:
    import eccodes as ec

    surface = level is None
    h = ec.codes_grib_new_from_samples("regular_ll_sfc_grib2" if surface else "regular_ll_pl_grib2")
    try:
        for key, value in (
            ("setLocalDefinition", 1),
            ("grib2LocalSectionNumber", 1),
            ("productDefinitionTemplateNumber", 1),  # an ensemble member
            ("type", data_type),
            ("stream", "enfo"),
            ("number", number),
            ("numberOfForecastsInEnsemble", 10),
            ("dataDate", date),
            ("dataTime", 0),
            ("step", step),
            ("Ni", N_LON),
            ("Nj", N_LAT),
            ("latitudeOfFirstGridPointInDegrees", 90),
            ("latitudeOfLastGridPointInDegrees", -90),
            ("longitudeOfFirstGridPointInDegrees", 0),
            ("longitudeOfLastGridPointInDegrees", 360 - 360 / N_LON),
            ("iDirectionIncrementInDegrees", 360 / N_LON),
            ("jDirectionIncrementInDegrees", 180 / (N_LAT - 1)),
        ):
            ec.codes_set(h, key, value)
        if surface:
            ec.codes_set(h, "typeOfLevel", "heightAboveGround" if short == "2t" else "meanSea")
            if short == "2t":
                ec.codes_set(h, "level", 2)
        else:
            ec.codes_set(h, "typeOfLevel", "isobaricInhPa")
            ec.codes_set(h, "level", level)
        ec.codes_set(h, "shortName", short)
        year, day = date // 10000, date % 100
        ec.codes_set_values(h, field(short, level or 0, number, year, day, step).ravel())
        ec.codes_write(h, out)
    finally:
        ec.codes_release(h)


def write_ens10(folder: Path, drop: tuple[str, int] | None = None, members: int = 3) -> list[Path]:
    """The ENS-10 layout in ``folder``; ``drop=(MM-DD, year)`` leaves that date out of its files."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for mmdd in DATES:
        for kind, shorts in (("pl", ("z", "t")), ("sfc", ("2t", "msl"))):
            path = folder / f"ens10_{kind}_{mmdd.replace('-', '')}.grib"
            with path.open("wb") as out:
                for year in YEARS:
                    if drop == (mmdd, year):
                        continue
                    date = int(f"{year}{mmdd.replace('-', '')}")
                    for step in STEPS:
                        for number in range(members):
                            for short in shorts:
                                for level in LEVELS if kind == "pl" else (None,):
                                    _message(out, short, level, "pf", number, date, step)
            paths.append(path)
    return paths


def write_cf_pf(path: Path, members: int = 3, duplicate_control: bool = False) -> Path:
    """Control (number 0) and ``members`` perturbed members of one forecast, 20170102 00 UTC."""
    with path.open("wb") as out:
        numbers = [("cf", 0)] + [("pf", n) for n in range(1, members + 1)]
        if duplicate_control:
            numbers.append(("pf", 0))
        for data_type, number in numbers:
            for step in (0, 24):
                for short in ("z", "t"):
                    for level in LEVELS:
                        _message(out, short, level, data_type, number, 20170102, step)
                _message(out, "2t", None, data_type, number, 20170102, step)
    return path


def main(out_dir: str) -> None:
    out = Path(out_dir)
    write_ens10(out / "ens10")
    write_ens10(out / "ens10_gap", drop=("01-05", 2017))
    write_cf_pf(out / "cfpf.grib")
    write_cf_pf(out / "cfpf_dup.grib", duplicate_control=True)


if __name__ == "__main__":
    main(sys.argv[1])
