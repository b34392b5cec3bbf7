"""The monthly climatology of the analysis that the report's reliability diagrams measure against.

The event of the diagrams is "the analysis above its monthly mean + 1 std" at each point
(:mod:`ensml.report.lead_sums`). Its mean and std are those of every time of the analysis in
that calendar month, read a few times at a time (dask, :data:`CLIMATE_TIMES` times to a chunk
where the analysis is not chunked already), so that a process holds a few times of the analysis
and the twelve months' results, however long the archive: a cluster's worker computes them once.
"""

from __future__ import annotations

import dask
import xarray as xr

from ensml.names import TIME

#: Times of the analysis read at once while its climatology is computed.
CLIMATE_TIMES = 8


def monthly_climate(an: xr.DataArray) -> tuple[xr.DataArray, xr.DataArray]:
    """The monthly mean and std of the analysis at each point (dims month, level, grid), in memory.

    Where the analysis does not vary in a month (std 0: no rain all month, one sample) the std is
    NaN: those points have no standardised anomaly and are left out of the reliability
    diagrams, rather than giving an infinite anomaly.
    """
    if an.chunks is None:
        an = an.chunk({TIME: CLIMATE_TIMES})
    clim = an.groupby(f"{TIME}.month")
    mean, std = dask.compute(clim.mean(TIME), clim.std(TIME))
    return mean, std.where(std > 0)


__all__ = ["CLIMATE_TIMES", "monthly_climate"]
