"""``ensml data synth|archive``: the embedded synthetic ensemble; a forecast split into one file per init."""

from __future__ import annotations

from typing import Literal

from jsonargparse.typing import NonNegativeFloat, NonNegativeInt, PositiveInt, restricted_number_type

from ensml.cli.verb import run_function, summary

GridSize = restricted_number_type("GridSize", int, [(">=", 4), ("<=", 2000)])
Members = restricted_number_type("Members", int, [(">=", 2), ("<=", 1000)])


def synth(
    out_dir: str,
    n_lat: GridSize = 32,
    n_lon: GridSize = 64,
    levels: list[int] = (500, 850),  # type: ignore[assignment]
    leads: list[int | str] = (0, 24, 48),  # type: ignore[assignment]
    members: Members = 10,
    start: str = "2017-01-01",
    end: str = "2020-12-31",
    every_days: PositiveInt = 2,
    storms_per_year: NonNegativeFloat = 6.0,
    seed: NonNegativeInt = 0,
    surface: bool = False,
    format: Literal["netcdf", "zarr"] = "netcdf",
    zarr_format: Literal[2, 3] = 3,
    overwrite: bool = False,
) -> None:
    """Generate a synthetic ensemble with a known predictive distribution.

    Writes ``forecast.nc`` (members), ``analysis.nc`` (the verifying truth by valid time) and
    ``oracle.nc`` (the exact Gaussian predictive distribution and storm masks) to ``out_dir``;
    the verifying analysis of forecast (init, lead) is ``analysis.sel(time=init + lead)``. The
    defaults (32 × 64 grid, 731 inits every 2 days in 2017–2020, 3 leads, 10 members, 2 levels)
    take about 16 s on 2 cores and 380 MB. The generative model is described in
    :mod:`ensml.data.synth.generate`.

    Parameters
    ----------
    out_dir
        Output folder, created if missing.
    n_lat
        Latitudes, 4 … 2000: cell centres from 90 - 90/n_lat to -(90 - 90/n_lat) degrees, no pole
        rows (32 gives 87.1875 … -87.1875); at most 2e6 grid points in all.
    n_lon
        Longitudes, 4 … 2000: 0 … 360 - 360/n_lon degrees east.
    levels
        Pressure levels in hPa (1 … 1100), written in this order.
    leads
        Lead times, strictly increasing: hours (``[0, 6, 12]``) or durations (``["0h", "P1D"]``).
    members
        Ensemble size, 2 … 1000.
    start
        First initialisation date (00 UTC).
    end
        Last possible initialisation date (inclusive).
    every_days
        Days between initialisations.
    storms_per_year
        Mean number of storms (intense compact warm-core lows) per year, Poisson; at most 365.
    seed
        Random seed; the same options and seed give the same data.
    surface
        Also write the surface (single-level) variable ``t2m`` (the temperature at 1000 hPa, drawn
        as one more level); ``z`` and ``t`` are the same bit for bit with or without it.
    format
        ``netcdf`` (``forecast.nc`` …) or ``zarr`` (``forecast.zarr`` … stores, zstd-compressed).
        A forecast chunk holds one member's field at one init and lead, as a GRIB message does.
    zarr_format
        Zarr store version, 2 or 3 (with ``format: zarr``).
    overwrite
        Replace the outputs of an earlier ``ensml data synth`` in ``out_dir``.
    """
    options = dict(locals())
    from ensml.data.synth import synth as generate

    paths = generate(**options)
    print(f"ensml data synth: wrote {', '.join(p.name for p in paths.values())} to {out_dir}")


def archive(
    forecast: str | list[str],
    out_dir: str,
    period: tuple[str, str] | None = None,
    name: str = "forecast_{init:%Y%m%d%H}.nc",
    variables: list[str] | None = None,
) -> None:
    """Write every init time of forecast (within period) to its own netCDF file.

    Parameters
    ----------
    forecast
        Forecast file(s) or glob(s) in any layout ensml reads.
    out_dir
        Folder for the files (created if missing).
    period
        ``[start, end]`` dates (inclusive); default: every init time.
    name
        File name pattern inside ``out_dir``; ``{init}`` is the init time (a ``datetime``, so
        strftime codes apply: ``forecast_{init:%Y%m%d%H}.nc``).
    variables
        Variables to keep (default: all).
    """
    options = dict(locals())
    from ensml.data.archive import archive as split

    written = split(**options)
    print(f"ensml data archive: wrote {len(written)} files to {out_dir}")


#: The commands this module runs, and their functions (the help text is each docstring).
COMMANDS = {"data synth": synth, "data archive": archive}
SUMMARIES = {words: summary(fn) for words, fn in COMMANDS.items()}


def run(args: list[str]) -> None:
    """Run ``ensml data synth|archive ARGS``."""
    run_function({words.split()[1]: fn for words, fn in COMMANDS.items()}, args)
