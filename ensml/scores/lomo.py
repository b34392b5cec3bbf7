"""Leave-one-member-out ("perfect model") verification of an ensemble without observations.

Each member in turn plays the truth and the other M - 1 members the ensemble; the scores are
pooled over all M choices. For an ensemble whose members are exchangeable (statistically
indistinguishable, as a perfect ensemble's are), the truth is one more draw from the same
distribution, so the pooled spread-skill ratio (with the (M' + 1)/M' correction for the M' =
M - 1 member ensemble) is 1; deviations show how far the members are from exchangeable.

Everything goes through the public score functions of :mod:`ensml.scores`
(:func:`crps_ensemble`, :func:`spread_skill_ratio`, :func:`ensemble_mean_rmse`,
:func:`rank_histogram`), so this is also a test of them on real data.

Points below ground
-------------------
Pressure-level analyses hold values extrapolated below the surface (e.g. 850 hPa over the
Tibetan plateau, the Andes, Antarctica), where the members barely differ. Pass ``orography``
(surface geopotential, m2 s-2, on the same grid) to :func:`below_ground` and the resulting
``mask`` to :func:`leave_one_member_out` to leave those points out (score NaN → not averaged).
"""

from __future__ import annotations

import numpy as np
import xarray as xr

from ensml.data.weights import latitude_weights
from ensml.errors import EnsmlError
from ensml.names import LATITUDE, LEVEL, MEMBER
from ensml.scores.calibration import ensemble_mean_rmse, rank_histogram, spread_skill_ratio
from ensml.scores.crps import crps_ensemble
from ensml.scores.reduce import reduce_score

TRUTH = "truth_member"


def below_ground(z: xr.DataArray, orography: xr.DataArray) -> xr.DataArray:
    """True where the pressure level lies below the surface: ``z < orography``.

    ``z`` is the geopotential of the pressure levels (m2 s-2; any dims, e.g. member, time,
    level, latitude, longitude) and ``orography`` the surface geopotential (m2 s-2) over
    latitude/longitude. With members, a point counts as below ground if any member says so.
    """
    if not set(orography.dims) <= set(z.dims):
        raise EnsmlError(f"below_ground: orography dims {orography.dims} are not among z's {z.dims}")
    for d in orography.dims:
        if orography.sizes[d] != z.sizes[d]:
            raise EnsmlError(
                f"below_ground: orography has {orography.sizes[d]} points along {d}, z {z.sizes[d]}"
            )
    under = z < orography
    return under.any(MEMBER) if MEMBER in under.dims else under


def leave_one_member_out(
    ens: xr.DataArray,
    *,
    mask: xr.DataArray | None = None,
    preserve_dims: list[str] | None = None,
    fair: bool = False,
) -> xr.Dataset:
    """Pooled leave-one-member-out scores of an ensemble ``ens`` (member, ...).

    Parameters
    ----------
    ens
        The ensemble, with a ``member`` dim of M >= 3 and latitude (for the cell-area weights).
    mask
        Boolean, True where a point is to be left out (e.g. :func:`below_ground`); over a
        subset of ``ens``'s dims other than member.
    preserve_dims
        Dims kept in the scores (default: ``level`` when present).
    fair
        Score with the fair CRPS.

    Returns
    -------
    xr.Dataset
        Pooled over the M choices of truth, area-weighted: ``crps``; ``rmse`` of the ensemble
        mean; ``mean_spread`` (mean of the M'-member std, ddof 1) and ``mean_spread_over_rmse``;
        ``spread_skill_ratio`` (root-mean variance over RMSE, with the (M'+1)/M' correction);
        ``rank_histogram`` (relative frequencies of M ranks); and ``crps_by_member``
        (truth_member, ...), which shows members that differ from the others.

    Notes
    -----
    Pooled over all choices of truth, the root-mean-square ``spread_skill_ratio`` and the rank
    histogram are calibrated *by construction* (at every point, sum_i (mean_{-i} - x_i)^2 is a
    fixed multiple of the members' variance, and each member takes each rank once): they come
    out 1 and flat for any ensemble, which checks the score code, not the ensemble. The
    informative numbers are the CRPS (by member) and ``mean_spread_over_rmse`` (mean std over
    RMSE), which falls below 1 where the spread varies from point to point, e.g. with 850 hPa
    points below ground (ERA5 EDA, 3°, 2017-01-01/02: about 0.89 for z500, 0.76 for t850).
    """
    if MEMBER not in ens.dims:
        raise EnsmlError(f"leave_one_member_out: the ensemble has no member dimension (dims: {ens.dims})")
    m = ens.sizes[MEMBER]
    if m < 3:
        raise EnsmlError(f"leave_one_member_out: needs at least 3 members, got {m}")
    if LATITUDE not in ens.dims:
        raise EnsmlError(f"leave_one_member_out: the ensemble has no latitude dimension (dims: {ens.dims})")
    if preserve_dims is None:
        preserve_dims = [LEVEL] if LEVEL in ens.dims else []
    fcs, obs = [], []
    for i in range(m):
        others = ens.isel({MEMBER: [j for j in range(m) if j != i]})
        fcs.append(others.assign_coords({MEMBER: np.arange(m - 1)}))
        obs.append(ens.isel({MEMBER: i}, drop=True))
    truths = xr.DataArray(ens[MEMBER].values, dims=[TRUTH])
    fc = xr.concat(fcs, dim=truths)
    y = xr.concat(obs, dim=truths)
    if mask is not None:
        if MEMBER in mask.dims or not set(mask.dims) <= set(y.dims):
            raise EnsmlError(
                f"leave_one_member_out: mask dims {mask.dims} must be among {y.dims}, without member"
            )
        y = y.where(~mask.astype(bool))
    w = latitude_weights(ens[LATITUDE])
    kw = {"preserve_dims": preserve_dims, "weights": w}
    by_member = crps_ensemble(fc, y, fair=fair, preserve_dims=[TRUTH, *preserve_dims], weights=w)
    hist = rank_histogram(fc, y, **kw)
    rmse = ensemble_mean_rmse(fc, y, **kw)
    spread = fc.std(MEMBER, ddof=1).where(y.notnull())
    mean_spread = reduce_score(spread, **kw, func="leave_one_member_out")
    return xr.Dataset(
        {
            "crps": crps_ensemble(fc, y, fair=fair, **kw),
            "rmse": rmse,
            "mean_spread": mean_spread.assign_attrs(units=ens.attrs.get("units", "")),
            "mean_spread_over_rmse": (mean_spread / rmse).assign_attrs(units="1"),
            "spread_skill_ratio": spread_skill_ratio(fc, y, finite_ensemble_correction=True, **kw),
            "rank_histogram": hist / hist.sum("rank"),
            "crps_by_member": by_member,
        },
        attrs={"members": m, "ensemble_size": m - 1, "masked": str(mask is not None)},
    )


__all__ = ["below_ground", "leave_one_member_out"]
