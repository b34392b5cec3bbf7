"""24 h precipitation ``tp`` and 10 m wind speed ``si10`` of the synthetic ensemble (``precip_wind``).

See :mod:`ensml.data.synth.generate` for the model in words; this module draws it from the
generator's own flow: the predictable weather ``P``, the activity ``act``, the storms, the error
process ``U`` and the analysis noise ``n`` (all at 850 hPa, whatever levels are written).

The oracle is exact at every (init, lead) although one analysis verifies every forecast valid
at its time: for each valid time the information arrives as a chain of *reveals*, one at each
init that verifies it (earliest first) and one at the valid time itself. A reveal uses the part
of ``U``'s increment since the previous reveal (standardised: a deepening low) and new
spatially correlated noise, both independent of all that was known before, so that:

* tp: the latent ``X = θ∞ B_1 ⋯ B_J G`` with ``B_j ~ Beta(κ_{j-1}, κ_j - κ_{j-1})`` and
  ``G ~ Gamma(κ_J, 1)``, all independent; given ``B_1 … B_j``, ``X ~ Gamma(κ_j, θ∞ B_1 ⋯ B_j)``
  (the beta–gamma algebra: ``Beta(a, b) · Gamma(a + b) = Gamma(a)``), and ``tp = max(0, X -
  shift)`` is csg0(shape κ_j, scale θ_j, shift) at every reveal. The shape ``κ(h)`` grows as the
  hours ``h`` left to the valid time shrink; ``shift`` is known at all times.
* si10: the latent ``W`` of ``TN(μ, σ²)`` (a normal truncated to [0, ∞)) is revealed in
  Gaussian steps ``μ_j = μ_{j-1} + Δ_j``. Conditioning on ``W >= 0`` tilts each step; it is
  drawn exactly by a provisional ``W* ~ TN(μ_{j-1}, σ_{j-1}²)`` and the Gaussian bridge
  ``Δ_j | W*`` (``W*`` is then forgotten), so that ``si10 | reveals ≤ j ~ TN(μ_j, σ_j²)``.

Every draw is a copula ``F⁻¹(Φ(ζ))`` of a spatially correlated Gaussian ``ζ``, so the fields are
coherent (:mod:`.quantiles`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ensml.data.synth.fields import (
    DAY_HOURS,
    YEAR_DAYS,
    GaussianFields,
    Storm,
    VerticalStructure,
    activity_climatology,
    anomaly_envelope,
    sample_fields,
    season,
    storm_profile,
    stream,
)
from ensml.data.synth.quantiles import beta_quantile, gamma_quantile, truncnorm_quantile
from ensml.times import hours_of

#: CF attributes of the synthetic 24 h precipitation (1 kg m-2 of water is 1 mm).
TP_ATTRS = {
    "standard_name": "precipitation_amount",
    "long_name": "24 hour total precipitation",
    "units": "kg m-2",
    "cell_methods": "time: sum (interval: 24 hours)",
}
#: The flow level the new variables are tied to (whatever levels are written).
FLOW_HPA = 850.0
_VS = VerticalStructure.anomalies(np.array([FLOW_HPA]))
Z_AMP = float(_VS.amp[0, 0])  # m2 s-2: std of the z anomaly at 850 hPa near 50°
Z_STORM = float(storm_profile(np.array([FLOW_HPA]))[0, 0])  # m2 s-2: a storm's peak z at 850 hPa


def _basis(first: np.ndarray) -> np.ndarray:
    """Rows: an orthonormal basis of R³ whose first row is the unit vector ``first``."""
    b2 = np.array([0.0, 1.0, 0.0]) - first[1] * first
    b2 /= np.linalg.norm(b2)
    return np.stack([first, b2, np.cross(first, b2)])


#: Unit weights on the generator's three unit fields: row 0 the low index (``-z'`` at 850 hPa),
#: rows 1 and 2 independent of it (unit fields of P, U, n or the members' perturbations).
BASIS = _basis(-_VS.unit[0, 0])

# tp (kg m-2): latent mean m = base(lat) sat(act / act_clim · exp(a L - a²/2)) + storms, sat(r)
# = r (1 + 1/R) / (1 + r/R) (1 at r = 1, at most 1 + R); shape κ(h).
TP_BASE, TP_TRACK, TP_ITCZ, TP_STORM, TP_LOW, TP_SAT = 0.5, 3.5, 7.0, 40.0, 0.7, 3.0
TP_SHIFT = 0.8  # censoring shift, 1 - 0.3 tanh(L) of it: lower where the weather says a low is
KAPPA_INF, KAPPA_0, TAU_KAPPA_H = 0.8, 12.0, 72.0
# si10 (m s-1): mu0 = hypot(base(lat), C_G |V_g|) from the known z at 850 hPa; sigma(h).
WIND_BASE, WIND_TRADES, WIND_WEST, C_GEO, F_MIN_LAT = 4.5, 3.0, 2.0, 0.7, 20.0
SIG_INF, SIG_INF_PER, SIG_0, SIG_0_PER, TAU_WIND_H = 1.0, 0.12, 0.3, 0.04, 72.0
RHO_TP = 0.6  # weight of the low's increment (rest: new noise) in a reveal of tp, and its members'
WIND_MIX = (0.5, np.sqrt(0.75))  # weights of the increments (low, other) in a reveal of si10
RHO_N = 0.5  # weight of the analysis noise n (rest: new noise) in the last draw
LEN_NOISE_PW = 8.0  # correlation length of the new noise, degrees
TP_SHIFT_BIAS, TP_SHIFT_BIAS_PER_DAY = 0.25, 0.1  # members: drizzle
TP_LOG_BIAS_PER_DAY = (-0.05, 0.35)  # members' log-scale bias a day: a + b sin(3 lat)
WIND_BIAS, WIND_BIAS_PER_DAY = 0.15, 0.25  # members: too weak, m s-1
EARTH_RADIUS, OMEGA = 6.371e6, 7.292e-5


def tp_shape(hours) -> np.ndarray:
    """The oracle's csg0 shape ``κ(h)`` for ``h`` hours to the valid time (``inf``: none known).

    ``1/κ = 1/κ0 + (1/κ∞ - 1/κ0)(1 - exp(-h/τ))``, τ = 72 h: κ∞ = 0.8 (nothing revealed),
    1.54 at 48 h, 2.42 at 24 h, 12 at 0 h (the analysis's own uncertainty).
    """
    h = np.asarray(hours, dtype=float)
    return 1.0 / (1.0 / KAPPA_0 - (1.0 / KAPPA_INF - 1.0 / KAPPA_0) * np.expm1(-h / TAU_KAPPA_H))


def wind_std(hours, s0: np.ndarray, s_inf: np.ndarray) -> np.ndarray:
    """The oracle's scale ``σ(h)``: ``σ² = s0² + (s∞² - s0²)(1 - exp(-h/τ))`` (m s-1)."""
    w = -np.expm1(-np.asarray(hours, dtype=float) / TAU_WIND_H)
    return np.sqrt(s0**2 + (s_inf**2 - s0**2) * w)


def _geostrophic_speed(z: np.ndarray, lat: np.ndarray) -> np.ndarray:
    """``|∇z| / f`` (m s-1) of geopotential ``z (..., lat, lon)`` (m2 s-2).

    ``f`` is held at its ``F_MIN_LAT`` value nearer the equator and the zonal spacing at its
    60° value nearer the poles (the random fields are drawn in degrees, not in metres).
    """
    phi = np.deg2rad(lat)
    dlam = 2 * np.pi / z.shape[-1]
    dzdy = np.gradient(z, phi, axis=-2) / EARTH_RADIUS
    dx = EARTH_RADIUS * dlam * np.maximum(np.cos(phi), 0.5)[:, None]
    dzdx = (np.roll(z, -1, axis=-1) - np.roll(z, 1, axis=-1)) / (2 * dx)
    f = 2 * OMEGA * np.maximum(np.abs(np.sin(phi)), np.sin(np.deg2rad(F_MIN_LAT)))[:, None]
    return np.hypot(dzdx, dzdy) / f


@dataclass(frozen=True)
class Known:
    """What every forecast knows of tp and si10 at each state time, ``(time, lat, lon)``.

    ``m_flow``/``m_storm``: the latent precipitation's mean (kg m-2) from the flow and from the
    storms; ``shift``: tp's censoring shift; ``mu0``/``mu0_calm``: si10's latent mean with and
    without the storms; ``s_inf``/``s0``: its scale with nothing revealed and at the valid time.
    """

    m_flow: np.ndarray
    m_storm: np.ndarray
    shift: np.ndarray
    mu0: np.ndarray
    mu0_calm: np.ndarray
    s_inf: np.ndarray
    s0: np.ndarray


def known_fields(lat, doy, act, gain, p_low, storm_sum) -> Known:
    """The :class:`Known` fields from the known flow.

    ``act (time, lat, lon)`` the activity, ``gain (time, lat, 1)`` P's seasonal factor, ``p_low``
    P's unit low index (``-z'`` at 850 hPa), ``storm_sum`` the storms' known envelopes times
    their intensity ``A0``.
    """
    lat_c = lat[:, None]
    # tp: storm tracks (more in winter), an ITCZ following the sun, dry subtropics and poles.
    track = np.exp(-(((np.abs(lat_c) - 45.0) / 14.0) ** 2)) * (1.0 + 0.3 * season(doy, lat))
    itcz = 6.0 * np.sin(2 * np.pi * (doy - 100.0) / YEAR_DAYS)[:, None, None]
    base = TP_BASE + TP_TRACK * track + TP_ITCZ * np.exp(-(((lat_c - itcz) / 8.0) ** 2))
    r = (act / activity_climatology(doy, lat)) * np.exp(TP_LOW * p_low - TP_LOW**2 / 2)
    m_flow = base * r * (1 + 1 / TP_SAT) / (1 + r / TP_SAT)
    # si10: a base wind (trades, westerlies) and the geostrophic wind of the known z' at 850 hPa.
    speed = WIND_BASE + WIND_TRADES * np.exp(-(((np.abs(lat_c) - 15.0) / 10.0) ** 2))
    speed = speed + WIND_WEST * np.exp(-(((np.abs(lat_c) - 50.0) / 15.0) ** 2))
    z = (-Z_AMP * anomaly_envelope(lat)) * gain * p_low
    mu0_calm = np.hypot(speed, C_GEO * _geostrophic_speed(z, lat))
    z += Z_STORM * storm_sum
    mu0 = np.hypot(speed, C_GEO * _geostrophic_speed(z, lat))
    return Known(
        m_flow=m_flow,
        m_storm=TP_STORM * storm_sum,
        shift=TP_SHIFT * (1.0 - 0.3 * np.tanh(p_low)),
        mu0=mu0,
        mu0_calm=mu0_calm,
        s_inf=SIG_INF + SIG_INF_PER * mu0,
        s0=SIG_0 + SIG_0_PER * mu0,
    )


def storm_sum(storms: list[Storm], hours: np.ndarray, lat: np.ndarray, lon: np.ndarray) -> np.ndarray:
    """``Σ A0 · env · shape`` of the storms at the state times, ``(time, lat, lon)``: what is known."""
    out = np.zeros((len(hours), len(lat), len(lon)))
    for s in storms:
        idx = s.active(hours)
        if idx.size:
            out[idx] += s.amplitude * s.envelope_shape(hours[idx], lat, lon)
    return out


class Increments:
    """U's standardised increments between state times, ``(n, 3, lat, lon)``.

    ``u (time, 3, lat, lon)`` are U's unit fields in the :data:`BASIS` (row 0 the low), each an
    OU process with AR factors ``phi (time,)`` and innovations scaled by ``intensity (time, lat,
    lon)``. ``U(b) = Φ U(a) + e`` with ``e`` independent of ``U(a)`` and of each other field's:
    ``e / sqrt(V(b) - Φ² V(a))`` is standard normal, ``V`` the variance of ``U`` given the
    activity (known).
    """

    def __init__(self, u: np.ndarray, intensity: np.ndarray, phi: np.ndarray) -> None:
        self.u = u
        self.log_phi = np.cumsum(np.log(phi))  # phi[0] = 1
        var = np.empty(intensity.shape)
        var[0] = intensity[0] ** 2
        for k in range(1, len(phi)):
            var[k] = phi[k] ** 2 * var[k - 1] + (1 - phi[k] ** 2) * intensity[k - 1] ** 2
        self.var = var

    def __call__(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """Standardised ``e`` over ``(a, b]`` per row (float32); ``a = -1``: ``U(b)`` itself."""
        start = a < 0
        a = np.where(start, b, a)
        f = np.where(start, 0.0, np.exp(self.log_phi[b] - self.log_phi[a]))[:, None, None]
        inv_sd = (1.0 / np.sqrt(self.var[b] - f**2 * self.var[a])).astype(np.float32)[:, None]
        e = self.u[b]
        e -= f.astype(np.float32)[:, None] * self.u[a]
        e *= inv_sd
        return e


@dataclass
class PrecipWind:
    """The drawn tp and si10: truth ``(time, lat, lon)`` and the oracle's parameters ``(init,
    lead, lat, lon)``, float32, and what the members need (``known``, the valid times ``kv``)."""

    truth: dict[str, np.ndarray]
    oracle: dict[str, np.ndarray]
    known: Known
    kv: np.ndarray


def draw(seed: int, lat, lon, hours, ki, kv, leads, known: Known, incr: Increments, n_rot) -> PrecipWind:
    """Draw the truth and the oracle of tp and si10 (new noise: random stream 7).

    Reveals go lead by lead, longest first, every init at once (the valid times of one lead
    are distinct), then one at each valid time not revealed at lead 0, then the last draw.
    A reveal at state time ``r`` uses U's increments since the last reveal (or over the step
    before ``r``) and, for tp, the new noise ``ν(r)``; the last draw at ``v`` the analysis noise
    ``n_rot (time, 2, lat, lon)`` (rows 0, 1 of the :data:`BASIS`) and new noise ``λ(v)``.
    """
    nt, (ni, nl) = len(hours), kv.shape
    lead_h = hours_of(leads)
    noise = sample_fields(stream(seed, 7), GaussianFields(len(lat), len(lon), LEN_NOISE_PW), nt, 2)
    theta = (known.m_flow + known.m_storm) / KAPPA_INF  # the latent tp's scale per state time
    mu, sig = known.mu0.copy(), known.s_inf.copy()  # si10's latent
    h_last = np.full(nt, np.inf)  # hours to the valid time at the last reveal
    t_last = np.full(nt, -1)  # its state time
    oracle = {k: np.empty((ni, nl, len(lat), len(lon)), dtype=np.float32) for k in ("scale", "loc", "sd")}

    def reveal(v: np.ndarray, at: np.ndarray, h: float) -> None:
        e = incr(np.where(t_last[v] >= 0, t_last[v], at - 1), at)  # (n, 3, lat, lon)
        zeta = RHO_TP * e[:, 0] + np.sqrt(1 - RHO_TP**2) * noise[at, 0]
        for hp in np.unique(h_last[v]):  # tp: theta *= B, B ~ Beta(κ(h_prev), κ(h) - κ(h_prev))
            rows = h_last[v] == hp
            k0, k1 = float(tp_shape(hp)), float(tp_shape(h))
            theta[v[rows]] *= beta_quantile(k0, k1 - k0, zeta[rows])
        # si10: a provisional W* ~ TN(mu, sig²), then mu's step given W* (the Gaussian bridge).
        s0, s1 = sig[v], wind_std(h, known.s0[v], known.s_inf[v])
        w_star = truncnorm_quantile(mu[v], s0, WIND_MIX[0] * e[:, 0] + WIND_MIX[1] * e[:, 1])
        step = s0**2 - s1**2
        mu[v] += step / s0**2 * (w_star - mu[v]) + np.sqrt(step) * s1 / s0 * e[:, 2]
        sig[v], h_last[v], t_last[v] = s1, h, at

    for j in np.argsort(-lead_h, kind="stable"):
        reveal(kv[:, j], ki, float(lead_h[j]))
        oracle["scale"][:, j] = theta[kv[:, j]]
        oracle["loc"][:, j], oracle["sd"][:, j] = mu[kv[:, j]], sig[kv[:, j]]
    rest = np.flatnonzero(h_last != 0.0)
    if rest.size:
        reveal(rest, rest, 0.0)
    new = np.sqrt(1 - RHO_N**2) * noise[:, 1]
    x = theta * gamma_quantile(float(tp_shape(0.0)), RHO_N * n_rot[:, 0] + new)
    truth = {
        "tp": np.maximum(x - known.shift, 0.0).astype(np.float32),
        "si10": truncnorm_quantile(mu, sig, RHO_N * n_rot[:, 1] + new).astype(np.float32),
    }
    shape = tp_shape(lead_h)[:, None, None].astype(np.float32)
    params = {
        "tp_shape": np.ascontiguousarray(np.broadcast_to(shape, oracle["scale"].shape)),
        "tp_scale": oracle["scale"],
        "tp_shift": known.shift[kv].astype(np.float32),
        "si10_loc": oracle["loc"],
        "si10_scale": oracle["sd"],
    }
    return PrecipWind(truth=truth, oracle=params, known=known, kv=kv)


def member_parameters(
    pw: PrecipWind, lat: np.ndarray, leads: np.ndarray, keep: np.ndarray
) -> dict[str, np.ndarray]:
    """What the members are drawn from, ``(init, lead, lat, lon)`` float32: biased, storms damped.

    tp: the oracle's shape, a scale short of the storms the members miss (``1 - keep``) and
    off by a factor ``exp((-0.05 + 0.35 sin(3 lat)) · days)`` (too dry in some latitudes, too
    wet in others), a shift too low (drizzle: ``0.75 - 0.1/day`` of it, at least 0.3). si10:
    the oracle's scale, a location short of the storms' wind the members miss and too weak by
    ``0.15 + 0.25/day`` m s-1.
    """
    k, kv = pw.known, pw.kv
    days = hours_of(leads)[None, :, None, None] / DAY_HOURS
    phi = np.deg2rad(lat)[:, None]
    keep = keep[None, :, None, None]
    m_flow, m_storm = k.m_flow[kv], k.m_storm[kv]
    held = (m_flow + keep * m_storm) / (m_flow + m_storm)
    calm = (1 - keep) * (k.mu0[kv] - k.mu0_calm[kv])
    shift_factor = np.maximum(0.3, 1 - TP_SHIFT_BIAS - TP_SHIFT_BIAS_PER_DAY * days)
    log_bias = TP_LOG_BIAS_PER_DAY[0] + TP_LOG_BIAS_PER_DAY[1] * np.sin(3 * phi)
    weak = WIND_BIAS + WIND_BIAS_PER_DAY * days
    return {
        "tp_scale": (pw.oracle["tp_scale"] * held * np.exp(log_bias * days)).astype(np.float32),
        "tp_shift": (pw.oracle["tp_shift"] * shift_factor).astype(np.float32),
        "si10_loc": (pw.oracle["si10_loc"] - calm - weak).astype(np.float32),
        "si10_scale": pw.oracle["si10_scale"],
    }


def member_spread(params: dict[str, np.ndarray], factor: np.ndarray, leads: np.ndarray) -> np.ndarray:
    """The members' designed spread ``(init, lead, 2, lat, lon)`` float32 (tp, si10), for rounding.

    ``factor (init, lat, lon)`` is the members' under-dispersion (their ζ's std); tp's spread is
    that of its latent, ``factor · scale · sqrt(shape)``.
    """
    root = np.sqrt(tp_shape(hours_of(leads)))[None, :, None, None]
    f = factor[:, None]
    return np.stack([f * params["tp_scale"] * root, f * params["si10_scale"]], axis=2).astype(np.float32)


def surface_drawer(
    seed: int, params: dict, factor: np.ndarray, leads: np.ndarray, gf: GaussianFields, coher: np.ndarray
):
    """``surface_block(i0, i1, xi)``: tp and si10 members of inits ``i0:i1``.

    ``xi (init, member, lead, 3, lat, lon)`` are the z/t members' unit perturbations (an AR(1)
    across leads with factors ``coher (lead,)``). In the :data:`BASIS`, tp's ``η`` is the
    members' own low mixed with new noise of the same kind (``gf``, random stream 8 per init),
    si10's their own low and another direction, as in a reveal; a tp member is ``F_b⁻¹(Φ(factor
    · η))`` with ``F_b`` the biased csg0 of :func:`member_parameters`, a si10 member ``|loc_b +
    scale_b · factor · η|`` (a folded normal: never negative, the truncated normal where
    ``loc_b`` is a few ``scale_b`` above 0).
    """
    shapes = tp_shape(hours_of(leads))
    w = BASIS[:2].astype(np.float32)  # the low, and another direction
    mix_w = (np.float32(WIND_MIX[0]), np.float32(WIND_MIX[1]))
    rho, other = np.float32(RHO_TP), np.float32(np.sqrt(1 - RHO_TP**2))
    factor32 = factor.astype(np.float32)

    def surface_block(i0: int, i1: int, xi: np.ndarray) -> np.ndarray:
        """Members as float32 ``(2, init, lead, member, lat, lon)`` (tp, si10)."""
        n, nm, nl = i1 - i0, xi.shape[1], xi.shape[2]
        white = np.empty((n, *gf.white_shape(nm, nl)), dtype=np.float32)
        for r, i in enumerate(range(i0, i1)):
            stream(seed, 8, i).standard_normal(out=white[r], dtype=np.float32)
        nu = gf.filter(white)  # (init, M, lead, lat, lon)
        for j in range(1, nl):
            nu[:, :, j] = coher[j] * nu[:, :, j - 1] + np.sqrt(1 - coher[j] ** 2) * nu[:, :, j]
        rot = [sum(w[d, k] * xi[:, :, :, k] for k in range(3)) for d in range(2)]  # (init, M, lead, lat, lon)
        f = factor32[i0:i1, None]  # (init, 1, lat, lon)
        out = np.empty((2, n, nl, nm, *xi.shape[-2:]), dtype=np.float32)
        for j in range(nl):
            z_tp = f * (rho * rot[0][:, :, j] + other * nu[:, :, j])  # (init, M, lat, lon)
            tp = gamma_quantile(float(shapes[j]), z_tp)
            tp *= params["tp_scale"][i0:i1, None, j]
            tp -= params["tp_shift"][i0:i1, None, j]
            np.maximum(tp, 0.0, out=out[0, :, j])
            z_w = f * (mix_w[0] * rot[0][:, :, j] + mix_w[1] * rot[1][:, :, j])
            z_w *= params["si10_scale"][i0:i1, None, j]
            z_w += params["si10_loc"][i0:i1, None, j]
            np.abs(z_w, out=out[1, :, j])
        return out

    return surface_block
