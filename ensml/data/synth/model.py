"""The generative model of the synthetic ensemble: truth, oracle and members as arrays.

See :mod:`ensml.data.synth.generate` for the model in words; this module draws it. Random streams are
separate per component (0 activity, 1 weather, 2 error process, 3 analysis noise, 4 storms, 5
spread errors, 6 one per init for the members; with ``precip_wind`` 7 the reveals of tp and si10
and 8 one per init for their members, :mod:`.precip_wind`; 9 one per init for the oracle members,
:mod:`.oracle_members`), so the members of one init do not depend on how the work is batched, and
z and t do not depend on ``precip_wind``.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ensml.data.synth import precip_wind as pw
from ensml.data.synth.fields import (
    DAY_HOURS,
    YEAR_DAYS,
    GaussianFields,
    Storm,
    VerticalStructure,
    activity_climatology,
    anomaly_envelope,
    climatology,
    draw_storms,
    lat_lon_grid,
    sample_fields,
    season,
    storm_profile,
    stream,
)
from ensml.times import from_hours, hours_of

# Parameters of the generative model (documented in ensml.data.synth.generate).
TAU_ACTIVITY_H, STD_ACTIVITY, LEN_ACTIVITY = 72.0, 0.4, 25.0
TAU_P_H, LEN_P = 120.0, 25.0
TAU_U_H, LEN_U, S_U = 240.0, 15.0, 0.3
LEN_NOISE = 10.0
S_NOISE = np.array([0.04, 0.10])[:, None, None, None]  # analysis noise of (z, t), units of scale
STORM_Q_PER_H = 0.09 / DAY_HOURS  # variance rate of the storm-intensity Brownian motion
# Fraction of the known storm that the members hold: 1 - 0.25 per day of lead, at least 0.5.
STORM_KEEP_PER_DAY, STORM_KEEP_MIN = 0.25, 0.5
STORM_MASK = 0.25
LEN_DELTA, STD_DELTA = 30.0, 0.2  # error of the ensemble's own spread (log-factor field per init)
LEN_ETA, TAU_ETA_H = 8.0, 48.0  # member perturbations


def _ou(
    rng: np.random.Generator, gf: GaussianFields, hours: np.ndarray, tau: float, n_fields: int, intensity
):
    """AR(1) sequence of fields on irregular times; returns ``(x (time, n_fields, lat, lon), phi (time,))``.

    ``x_k = phi_k x_{k-1} + sqrt(1 - phi_k²) · intensity_{k-1} · xi_k`` with ``phi_k =
    exp(-(t_k - t_{k-1}) / tau)`` (an Ornstein–Uhlenbeck process sampled exactly), and
    ``x_0 = intensity_0 · xi_0``. ``intensity`` is a scalar or ``(time, lat, lon)``.
    """
    nt = len(hours)
    x = sample_fields(rng, gf, nt, n_fields)  # innovations, overwritten in place by the process
    inten = np.broadcast_to(np.asarray(intensity, dtype=np.float32), (nt, gf.n_lat, gf.n_lon))
    phi = np.ones(nt)
    phi[1:] = np.exp(-np.diff(hours) / tau)
    x[0] *= inten[0]
    for k in range(1, nt):
        x[k] *= np.float32(np.sqrt(1 - phi[k] ** 2)) * inten[k - 1]
        x[k] += np.float32(phi[k]) * x[k - 1]
    return x, phi


def _bias_pattern(lat: np.ndarray, levels: np.ndarray) -> np.ndarray:
    """Shape of the systematic error per (variable, level, lat), ``(2, level, lat, 1)``; |.| ≲ 1.2."""
    phi = np.deg2rad(lat)[None, :]
    p = levels[:, None]
    z = 0.4 + 0.8 * np.cos(2 * phi - 0.3 * p / 500.0)
    t = -0.3 + 0.9 * np.sin(3 * phi + p / 1000.0)
    return np.stack([z, t])[..., None]


def generate(
    *,
    n_lat: int,
    n_lon: int,
    levels: np.ndarray,
    inits: np.ndarray,
    leads: np.ndarray,
    members: int,
    storms_per_year: float,
    seed: int,
    precip_wind: bool = False,
) -> dict:
    """Draw truth, oracle and members. Shapes use v = (z, t), k = level.

    Returns a dict with ``latitude``, ``longitude``, ``times`` (the analysis times: every init
    and valid time), ``truth[v] (time, k, lat, lon)``, ``mean[v]``/``std[v] (init, lead, k, lat,
    lon)``, ``event_mask (init, lead, lat, lon)`` (uint8), ``storms`` (a dict of per-storm
    arrays), ``member_spread (init, lead, v, k, lat, lon)``, the designed spread of the members
    (float32), ``member_centre`` (same shape), the mean they are drawn around (biased, storms
    damped), and ``member_block(i0, i1)``, a function that draws the members of inits ``i0:i1``
    as float32 ``(v, init, lead, member, k, lat, lon)`` (deterministic per init, so blocks can
    be drawn in any order, lazily, while the file is written), and ``oracle_state``, what a draw
    from the oracle's joint distribution needs (:func:`.oracle_members.oracle_member_drawer`):
    the state grid (``hours``, ``ki``, ``kv``), ``act``, ``phi``, ``vs``, ``scale``, ``levels``,
    ``lat``, ``lon``, the storms (:class:`~.fields.Storm`) and the oracle's ``mean``/``std``
    ``(init, lead, v, k, lat, lon)`` float64 (those of ``mean[v]``/``std[v]``).

    With ``precip_wind`` (z and t unchanged, bit for bit), also ``surface``: a dict with
    ``truth`` (``tp``, ``si10``: ``(time, lat, lon)``), ``oracle`` (``tp_shape``, ``tp_scale``,
    ``tp_shift``, ``si10_loc``, ``si10_scale``: ``(init, lead, lat, lon)``) and
    ``member_spread (init, lead, 2, lat, lon)`` (tp, si10), all float32; ``member_block`` then
    returns a pair: the z/t members and the tp/si10 members ``(2, init, lead, member, lat, lon)``.
    """
    lat, lon = lat_lon_grid(n_lat, n_lon)
    times, ki, kv, hours, doy = _state_times(inits, leads)
    vs = VerticalStructure.anomalies(levels)
    scale = vs.amp[:, :, None, None] * anomaly_envelope(lat)  # (v, k, lat, 1)
    truth, known, act, u_base, phi, flow = _atmosphere(
        seed, levels, lat, lon, hours, doy, vs, scale, flow=precip_wind
    )
    # The oracle: the truth at valid time given what a forecast from init knows; then the storms.
    mean, var_nostorm = _oracle_without_storms(known, u_base, act, phi, ki, kv, vs, scale)
    if precip_wind:
        flow["u_rot"] = _rotate(u_base, 3)
    del known, u_base
    var = var_nostorm.copy()
    storms, storm_known, event = _add_storms(
        seed, storms_per_year, levels, lat, lon, hours, ki, kv, truth, var
    )
    mean += storm_known
    std = np.sqrt(var)
    # The ensemble: biased, under-dispersive, imperfect spread, damped storms, coherent members.
    factor = _spread_factor(seed, lat, n_lon, len(inits))
    spread32 = _member_spread(factor, var_nostorm)
    centre = _member_centre(lat, levels, leads, scale, mean, storm_known)
    surface, drawer = None, None
    if precip_wind:
        surface = _precip_wind(seed, lat, lon, hours, doy, ki, kv, leads, act, phi, flow, storms, factor)
        drawer = surface.pop("drawer")
    out = {
        "latitude": lat,
        "longitude": lon,
        "times": times,
        "truth": {"z": truth[:, 0], "t": truth[:, 1]},
        "mean": {"z": mean[:, :, 0], "t": mean[:, :, 1]},
        "std": {"z": std[:, :, 0], "t": std[:, :, 1]},
        "member_block": _member_drawer(seed, members, leads, lat, n_lon, vs, spread32, centre, drawer),
        "member_spread": spread32,
        "member_centre": centre,
        "event_mask": event.astype(np.uint8),
        "storms": _storm_table(storms, times[0]),
        "oracle_state": {
            "hours": hours,
            "ki": ki,
            "kv": kv,
            "act": act,
            "phi": phi,
            "vs": vs,
            "scale": scale,
            "levels": levels,
            "lat": lat,
            "lon": lon,
            "storms": storms,
            "mean": mean,
            "std": std,
        },
    }
    if surface is not None:
        out["surface"] = surface
    return out


def _rotate(base: np.ndarray, rows: int) -> np.ndarray:
    """Unit fields ``base (time, 3, lat, lon)`` in the first ``rows`` directions of
    :data:`.precip_wind.BASIS` (row 0: the low index ``-z'`` at 850 hPa), ``(time, rows, lat, lon)``."""
    return np.einsum("dj,tjyx->tdyx", pw.BASIS[:rows].astype(base.dtype), base)


def _precip_wind(seed, lat, lon, hours, doy, ki, kv, leads, act, phi, flow, storms, factor) -> dict:
    """tp and si10 (:mod:`.precip_wind`): truth, oracle, the members' spread and their drawer."""
    storm_sum = pw.storm_sum(storms, hours, lat, lon)
    known = pw.known_fields(lat, doy, act, flow["gain"], flow["p_low"], storm_sum)
    incr = pw.Increments(flow["u_rot"], S_U * act, phi)
    drawn = pw.draw(seed, lat, lon, hours, ki, kv, leads, known, incr, flow["n_rot"])
    params = pw.member_parameters(drawn, lat, leads, _storm_keep(leads))
    coher = np.exp(-np.diff(hours_of(leads), prepend=0.0) / TAU_ETA_H)
    gf = GaussianFields(len(lat), len(lon), LEN_ETA)
    return {
        "truth": drawn.truth,
        "oracle": drawn.oracle,
        "member_spread": pw.member_spread(params, factor, leads),
        "drawer": pw.surface_drawer(seed, params, factor, leads, gf, coher),
    }


def _state_times(inits: np.ndarray, leads: np.ndarray) -> tuple:
    """The state grid: every init and valid time, and where the forecasts' times fall in it.

    Returns ``times`` (sorted, unique datetime64), ``ki (init,)`` and ``kv (init, lead)``, the
    indices of the init and valid times in it, ``hours (time,)`` since its first time and
    ``doy (time,)``, the fractional day of the year.
    """
    valid = inits[:, None] + leads[None, :]
    times = np.unique(np.concatenate([inits, valid.ravel()]))
    ki, kv = np.searchsorted(times, inits), np.searchsorted(times, valid)
    hours = hours_of(times - times[0])
    stamp = pd.DatetimeIndex(times)
    doy = np.asarray(stamp.day_of_year + stamp.hour / DAY_HOURS, dtype=float)
    return times, ki, kv, hours, doy


def _atmosphere(
    seed: int, levels, lat, lon, hours, doy, vs: VerticalStructure, scale, *, flow: bool = False
) -> tuple:
    """The true atmosphere without storms, ``clim + s (g P + U + n)``, and its known part.

    Draws the flow activity ``act``, the predictable weather ``P``, the unpredictable error
    process ``U`` and the analysis noise ``n`` (random streams 0 to 3). Returns ``truth (time,
    v, k, lat, lon)`` float32 (the files are float32), ``known`` (same shape, float64) = clim +
    s g P, ``act (time, lat, lon)``, ``u_base (time, 3, lat, lon)``, the unit fields of ``U``,
    and ``phi (time,)``, its AR(1) factors between state times; with ``flow``, a dict of P's unit
    low index (``-z'`` at 850 hPa) ``p_low (time, lat, lon)``, n's unit fields in the first two
    directions of :data:`.precip_wind.BASIS` ``n_rot (time, 2, lat, lon)`` and P's seasonal
    factor ``gain (time, lat, 1)``, else None.
    """
    n_lat, n_lon, nt = len(lat), len(lon), len(hours)
    act_clim = activity_climatology(doy, lat)  # (time, lat, 1)
    r, _ = _ou(stream(seed, 0), GaussianFields(n_lat, n_lon, LEN_ACTIVITY), hours, TAU_ACTIVITY_H, 1, 1.0)
    act = act_clim * np.exp(STD_ACTIVITY * r[:, 0] - STD_ACTIVITY**2 / 2)  # (time, lat, lon)
    p_base, _ = _ou(stream(seed, 1), GaussianFields(n_lat, n_lon, LEN_P), hours, TAU_P_H, 3, 1.0)
    g_p = 1.0 + 0.2 * season(doy, lat) * (np.abs(lat) > 20)[None, :, None]  # (time, lat, 1)
    u_base, phi = _ou(stream(seed, 2), GaussianFields(n_lat, n_lon, LEN_U), hours, TAU_U_H, 3, S_U * act)
    n_base = sample_fields(stream(seed, 3), GaussianFields(n_lat, n_lon, LEN_NOISE), nt, 3)
    lows = {"p_low": _rotate(p_base, 1)[:, 0], "n_rot": _rotate(n_base, 2), "gain": g_p} if flow else None

    z_clim, t_clim = climatology(levels, lat, lon, doy)
    known = np.stack([z_clim, t_clim], axis=1)  # (time, v, k, lat, lon): climatology + P
    del z_clim, t_clim
    known += scale * (g_p[:, None, None] * vs.combine(p_base))
    del p_base
    truth = vs.combine(n_base)  # float32 from here: the files are float32
    truth *= (S_NOISE * act[:, None, None]).astype(np.float32)
    truth += vs.combine(u_base)
    truth *= scale.astype(np.float32)
    truth += known
    return truth, known, act, u_base, phi, lows


def _u_given_init(phi: np.ndarray, act: np.ndarray, ki: np.ndarray, kv: np.ndarray) -> tuple:
    """``U(valid) | U(init)``, unit-free: ``var_u (init, lead, lat, lon)`` and ``phi_prod (init, lead)``.

    ``U(valid) = phi_prod U(init) + e`` with ``Var[e] = var_u``, stepped through the state
    times between init and valid (the OU process of :func:`_ou`).
    """
    ni, nl = kv.shape
    var_u = np.empty((ni, nl, *act.shape[1:]))
    phi_prod = np.empty((ni, nl))
    for i in range(ni):
        v, f, k = np.zeros(act.shape[1:]), 1.0, ki[i]
        for j in range(nl):
            while k < kv[i, j]:
                k += 1
                v = phi[k] ** 2 * v + (1 - phi[k] ** 2) * (S_U * act[k - 1]) ** 2
                f *= phi[k]
            var_u[i, j], phi_prod[i, j] = v, f
    return var_u, phi_prod


def _oracle_without_storms(known, u_base, act, phi, ki, kv, vs: VerticalStructure, scale) -> tuple:
    """Oracle mean and variance ``(init, lead, v, k, lat, lon)`` before storms: U conditioned on U(init).

    P, ``act`` (and the storm tracks) are known; the mean is ``known(valid) + s phi_prod
    U(init)``, the variance ``s² (var_u + noise²)``.
    """
    var_u, phi_prod = _u_given_init(phi, act, ki, kv)
    u_init = vs.combine(u_base[ki])  # (init, v, k, lat, lon)
    mean = known[kv] + scale * phi_prod[:, :, None, None, None, None] * u_init[:, None]
    var_nostorm = scale**2 * (var_u[:, :, None, None] + (S_NOISE * act[kv][:, :, None, None]) ** 2)
    return mean, var_nostorm


def _add_storms(seed: int, storms_per_year: float, levels, lat, lon, hours, ki, kv, truth, var) -> tuple:
    """Draw the storms (random stream 4); add them to ``truth`` and to the oracle ``var``, in place.

    Returns the storms, ``storm_known (init, lead, v, k, lat, lon)``, the part of the storms a
    forecast knows (the intensity with ``B`` at init), and ``event (init, lead, lat, lon)``
    (bool), where a storm's envelope at valid time is above ``STORM_MASK``.
    """
    srng = stream(seed, 4)
    span_years = (hours[-1] + 3 * DAY_HOURS) / (DAY_HOURS * YEAR_DAYS)
    storms = draw_storms(srng, int(srng.poisson(storms_per_year * span_years)), 0.0, float(hours[-1]))
    prof = storm_profile(levels)[:, :, None, None]  # (v, k, 1, 1)
    storm_known = np.zeros_like(var)
    event = np.zeros((*kv.shape, len(lat), len(lon)), dtype=bool)
    for s in storms:
        idx = s.active(hours)
        if idx.size == 0:
            continue
        es = s.envelope_shape(hours[idx], lat, lon)
        b = _intensity_walk(srng, s, hours[idx])
        truth[idx] += prof * (es * (s.amplitude + b[:, None, None]))[:, None, None]
        _storm_oracle(s, idx, es, b, prof, hours, ki, kv, storm_known, var, event)
    return storms, storm_known, event


def _intensity_walk(srng: np.random.Generator, s: Storm, hours: np.ndarray) -> np.ndarray:
    """``B`` at the storm's active ``hours``: a Brownian motion from genesis (rate ``STORM_Q_PER_H``)."""
    since = np.maximum(hours - np.concatenate([[s.genesis_hours], hours[:-1]]), 0.0)
    return np.cumsum(np.sqrt(STORM_Q_PER_H * since) * srng.standard_normal(hours.size))


def _storm_oracle(s: Storm, idx, es, b, prof, hours, ki, kv, storm_known, var, event) -> None:
    """Add storm ``s`` to every forecast valid while it is active, in place.

    ``idx`` are its active state times, ``es`` its envelope there and ``b`` its ``B``. The known
    part uses ``B(init)`` (0 before genesis); the unknown intensity adds ``q`` times the hours
    from ``max(init, genesis)`` to valid to the variance.
    """
    pos = np.full(len(hours), -1)
    pos[idx] = np.arange(idx.size)
    for i, j in zip(*np.nonzero(pos[kv] >= 0)):
        n = pos[kv[i, j]]
        b_known = b[pos[ki[i]]] if pos[ki[i]] >= 0 else 0.0
        unknown_h = hours[kv[i, j]] - max(hours[ki[i]], s.genesis_hours)
        storm_known[i, j] += prof * (es[n] * (s.amplitude + b_known))
        var[i, j] += prof**2 * es[n] ** 2 * STORM_Q_PER_H * max(unknown_h, 0.0)
        event[i, j] |= es[n] > STORM_MASK


def _spread_factor(seed: int, lat: np.ndarray, n_lon: int, n_init: int) -> np.ndarray:
    """The members' spread relative to the oracle's, ``(init, lat, lon)``.

    Under-dispersive (``alpha(lat)``) and imperfect: a smooth random log-factor ``delta`` per
    init (random stream 5).
    """
    alpha = 0.7 - 0.15 * np.exp(-(((np.abs(lat) - 45.0) / 20.0) ** 2))[:, None]  # (lat, 1)
    delta = STD_DELTA * GaussianFields(len(lat), n_lon, LEN_DELTA).sample(stream(seed, 5), n_init)
    return alpha * np.exp(delta - STD_DELTA**2 / 2)


def _member_spread(factor: np.ndarray, var_nostorm: np.ndarray) -> np.ndarray:
    """The members' designed spread ``(init, lead, v, k, lat, lon)`` float32: the
    :func:`_spread_factor` times the oracle's spread without the storm term."""
    return (factor[:, None, None, None] * np.sqrt(var_nostorm)).astype(np.float32)


def _storm_keep(leads: np.ndarray) -> np.ndarray:
    """The fraction of the known storms the members hold, ``(lead,)``."""
    lead_days = hours_of(leads) / DAY_HOURS
    return np.maximum(STORM_KEEP_MIN, 1.0 - STORM_KEEP_PER_DAY * lead_days)


def _member_centre(lat, levels, leads, scale, mean, storm_known) -> np.ndarray:
    """What the members are drawn around ``(init, lead, v, k, lat, lon)``: biased, storms damped.

    The oracle mean plus a bias growing with lead, less the share ``1 - keep(lead)`` of the
    known storms that the members miss.
    """
    lead_days = hours_of(leads) / DAY_HOURS
    track = activity_climatology(np.array([15.0 + YEAR_DAYS / 4]), lat)[0]  # (lat, 1), no season
    bias = scale * track * _bias_pattern(lat, levels) * (0.02 + 0.05 * lead_days)[:, None, None, None, None]
    keep = _storm_keep(leads)[None, :, None, None, None, None]
    return mean - (1 - keep) * storm_known + bias[None]


def _member_drawer(
    seed: int, members: int, leads, lat, n_lon: int, vs: VerticalStructure, spread32, centre, surface=None
):
    """``member_block(i0, i1)`` of :func:`generate`: coherent perturbations around ``centre``.

    The perturbations are unit z/t-coherent fields (one random stream per init), an AR(1)
    across leads (e-folding ``TAU_ETA_H``), scaled by ``spread32``. With ``surface`` (the
    drawer of :func:`.precip_wind.surface_drawer`), the tp/si10 members drawn from the same
    perturbations too (a pair).
    """
    nl = len(leads)
    coher = np.exp(-np.diff(hours_of(leads), prepend=0.0) / TAU_ETA_H)  # (lead,)
    gf_eta = GaussianFields(len(lat), n_lon, LEN_ETA)

    def member_block(i0: int, i1: int) -> np.ndarray:
        """Members of inits ``i0:i1`` as float32 ``(v, init, lead, member, k, lat, lon)``."""
        white = np.empty((i1 - i0, *gf_eta.white_shape(members, nl, 3)), dtype=np.float32)
        for n, i in enumerate(range(i0, i1)):
            stream(seed, 6, i).standard_normal(out=white[n], dtype=np.float32)
        xi = gf_eta.filter(white)  # (init, M, lead, 3, lat, lon)
        for j in range(1, nl):  # AR(1) across leads, in place
            xi[:, :, j] = coher[j] * xi[:, :, j - 1] + np.sqrt(1 - coher[j] ** 2) * xi[:, :, j]
        x = vs.combine(xi) * spread32[i0:i1, None]  # (init, M, lead, v, k, lat, lon)
        x += centre[i0:i1, None]
        x = np.ascontiguousarray(x.transpose(3, 0, 2, 1, 4, 5, 6))
        return x if surface is None else (x, surface(i0, i1, xi))

    return member_block


def _storm_table(storms: list[Storm], t0: np.datetime64) -> dict[str, np.ndarray]:
    """Per-storm arrays: genesis time (datetime64[ns]), position (degrees), lifetime (h), amplitude."""
    return {
        "genesis_time": t0 + from_hours([s.genesis_hours for s in storms]),
        "lat0": np.array([s.lat0 for s in storms]),
        "lon0": np.array([s.lon0 for s in storms]),
        "lifetime_hours": np.array([s.lifetime_hours for s in storms]),
        "amplitude": np.array([s.amplitude for s in storms]),
    }
