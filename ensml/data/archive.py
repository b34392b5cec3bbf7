"""``ensml data archive``: split a forecast into one file per init time, as an archive holds them."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from ensml.data.open import open_forecast
from ensml.data.splits import split_init_times
from ensml.data.writers import write_netcdf
from ensml.errors import EnsmlError
from ensml.names import INIT_TIME, LEAD_TIME
from ensml.progress import EVERY_S, Progress
from ensml.provenance import command


def archive(
    forecast: str | list[str],
    out_dir: str,
    period: tuple[str, str] | None = None,
    name: str = "forecast_{init:%Y%m%d%H}.nc",
    variables: list[str] | None = None,
) -> list[Path]:
    """Write every init time of ``forecast`` (within ``period``) to its own netCDF file.

    Parameters
    ----------
    forecast
        Forecast file(s) or glob(s) in any layout ensml reads.
    out_dir
        Folder for the files (created if missing).
    period
        ``[start, end]`` dates (inclusive); default: every init time.
    name
        File name pattern; ``{init}`` is the init time (a ``datetime``, so strftime codes apply).
    variables
        Variables to keep (default: all).

    Returns
    -------
    list of Path
        The files written, in init order. Each is written to a temporary name first, so an
        interrupted run leaves only complete files.
    """
    fc = open_forecast(forecast, variables)
    inits = fc[INIT_TIME].values.astype("datetime64[ns]")
    if period is not None:
        max_lead = np.max(fc[LEAD_TIME].values) if fc.sizes.get(LEAD_TIME) else np.timedelta64(0, "ns")
        inits = split_init_times(inits, {"period": period}, max_lead, source=f"forecast {forecast}")["period"]
    names = [name.format(init=pd.Timestamp(t).to_pydatetime()) for t in inits]
    if len(set(names)) != len(names):
        raise EnsmlError(f"archive name pattern {name!r} gives the same file name to two init times")
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise EnsmlError(f"out_dir {out} is a file, not a folder")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise EnsmlError(f"cannot create {out}: {err.strerror}") from None
    written = []
    with Progress("archive", len(inits), "files", every_s=EVERY_S) as progress:
        for init, file_name in zip(inits, names):
            one = fc.sel({INIT_TIME: [init]}).load()
            written.append(write_netcdf(one, out / file_name, history=command()))
            progress.advance()
    return written
