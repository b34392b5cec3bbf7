"""``ensml data archive``: split a forecast into one file per init time, as an archive holds them."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from ensml.data.open import open_forecast
from ensml.data.outputs import OutputFolder, format_name
from ensml.data.splits import split_init_times
from ensml.errors import EnsmlError, PartialFailure
from ensml.names import INIT_TIME, LEAD_TIME, as_list
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
        Folder for the files: new, empty or an earlier archive's (created if missing).
    period
        ``[start, end]`` dates (inclusive); default: every init time.
    name
        File name pattern, relative to ``out_dir`` (it may name sub-folders); ``{init}`` is the
        init time (a ``datetime``, so strftime codes apply). A name leaving ``out_dir`` is refused.
    variables
        Variables to keep (default: all).

    Returns
    -------
    list of Path
        The files written, in init order. Every name is checked before the first write (inside
        ``out_dir``, no file of the user's in the way); each file is staged in ``out_dir/.ensml``
        and renamed into place when complete, so a killed run leaves only complete files, all in
        the folder's ledger (a rerun replaces them).

    Raises
    ------
    EnsmlError
        A bad forecast, period or name template; an ``out_dir`` that is not ensml's (a non-empty
        folder without its ledger), a file or read-only; a name that is a user's file; a write
        that fails (full disk: one line naming the file).
    """
    fc = open_forecast(forecast, as_list(variables, "variables"))
    inits = fc[INIT_TIME].values.astype("datetime64[ns]")
    if period is not None:
        max_lead = np.max(fc[LEAD_TIME].values) if fc.sizes.get(LEAD_TIME) else np.timedelta64(0, "ns")
        inits = split_init_times(inits, {"period": period}, max_lead, source=f"forecast {forecast}")["period"]
    names = _names(name, inits)
    OutputFolder.check(out_dir, "archive", names=names)  # every name, before the first write
    written = []
    with OutputFolder.open(out_dir, "archive", names=names) as folder:
        with Progress("archive", len(inits), "files", every_s=EVERY_S) as progress:
            for init, file_name in zip(inits, names):
                one = fc.sel({INIT_TIME: [init]}).load()
                # Each file is renamed into place (and recorded) as soon as it is complete.
                try:
                    folder.write_netcdf(one, file_name, history=command())
                except EnsmlError as exc:  # a full disk: the files written so far are complete
                    if not written:
                        raise
                    raise PartialFailure(
                        f"{exc}; {len(written)} of {len(names)} files written and recorded; run the same "
                        f"command again for the other {len(names) - len(written)}"
                    ) from None
                written.append(Path(out_dir) / file_name)
                progress.advance()
    return written


def _names(template: str, inits: np.ndarray) -> list[str]:
    """The output name of every init time from ``template``: relative names inside out_dir
    (:func:`format_name`, normalised), all different.

    Raises
    ------
    EnsmlError
        A field the template does not know, a name leaving out_dir, or two init times given one
        name (a template without a field that varies).
    """
    first: dict[str, str] = {}
    for t in inits:
        when = pd.Timestamp(t).to_pydatetime()
        try:
            name = format_name(template, init=when)
        except EnsmlError as exc:
            raise EnsmlError(f"archive: {exc}") from None
        if name in first:
            raise EnsmlError(
                f"archive: name template {template!r} gives {name!r} to init times {first[name]} and "
                f"{when:%Y-%m-%d %H:%M}; use a field that varies, such as {{init:%Y%m%d%H}}"
            )
        first[name] = f"{when:%Y-%m-%d %H:%M}"
    return list(first)
