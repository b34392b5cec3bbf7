"""What ``ensml evaluate`` reads is checked before anything is scored or written.

Opening, run metadata, kinds, variables and lead times are checked by the one frame builder
(:mod:`ensml.data.frame`); here, the values read. In a forecast or a prediction a NaN or
infinite value, which NaN-skipping means would silently drop, is a one-line error naming the
file and the first position. In the analysis NaN means "not observed" (a radar composite, a
land-only analysis): those points are left out of the scores and counted; an infinite value is
an error there too.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import xarray as xr

from ensml.data.frame import LeadFrame
from ensml.errors import EnsmlError
from ensml.names import INIT_TIME, MEMBER
from ensml.progress import note
from ensml.scores.reduce import describe_position
from ensml.times import format_lead


def check_complete(ds: xr.Dataset, name: str, *, nan_ok: bool = False) -> None:
    """Raise if a variable of ``ds`` (in memory) holds NaN or ±Inf (only ±Inf with ``nan_ok``),
    naming the first position."""
    for var in ds.data_vars:
        values = np.asarray(ds[var].values)
        if not np.issubdtype(values.dtype, np.floating):
            continue
        bad = np.isinf(values) if nan_ok else ~np.isfinite(values)
        if bad.any():
            n_nan = int(np.count_nonzero(np.isnan(values)))
            counts = [(n_nan, "NaN"), (int(np.count_nonzero(bad)) - n_nan, "infinite")]
            what = " and ".join(f"{n} {kind} value{'s' if n != 1 else ''}" for n, kind in counts if n)
            where = describe_position(ds[var], int(np.argmax(bad.ravel())))
            tail = "infinite values are not scored" if nan_ok else "evaluate scores complete fields only"
            raise EnsmlError(f"{name}: {what} in {var!r} (first at {where}); {tail}")


def check_observed(ds: xr.Dataset, name: str) -> None:
    """The analysis check: NaN is "not observed" (scored nowhere, counted), ±Inf an error."""
    check_complete(ds, name, nan_ok=True)


def missing_as_unobserved(lf: LeadFrame) -> LeadFrame:
    """``lf`` with the analysis NaN (not observed) wherever a forecast member is NaN, so that
    every forecast is scored on the same values."""
    an = lf.analysis.copy()
    for var in an.data_vars:
        an[var] = an[var].where(lf.forecast[var].notnull().all(MEMBER))
    return replace(lf, analysis=an)


def count_observed(y: xr.DataArray, var: str, lead: np.timedelta64, fields: dict[str, xr.DataArray]) -> None:
    """Where the analysis ``y`` has NaN (not observed): say how much was scored, and add the
    per-point count of observed init times to ``fields`` (``n_observed_<var>``)."""
    observed = y.notnull()
    n = int(observed.sum())
    if n == y.size:
        return
    note(
        f"evaluate: the analysis observes {n} of {y.size} values of {var} at +{format_lead(lead)} "
        f"({n / y.size:.1%}); the scores are over those"
    )
    count = observed.sum(INIT_TIME).astype("int32")
    fields[f"n_observed_{var}"] = count.assign_attrs(long_name=f"init times with {var} observed")


__all__ = ["check_complete", "check_observed", "count_observed", "missing_as_unobserved"]
