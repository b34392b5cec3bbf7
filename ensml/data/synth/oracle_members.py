"""Oracle members: whole fields drawn from the truth's exact joint conditional distribution.

``oracle.nc`` holds the oracle's per-point Gaussian ``N(mu*, sigma*²)`` of the analysis (see
:mod:`ensml.data.synth.generate`). Multivariate scores (the energy and variogram scores, rank
histograms of area means) need more: the joint distribution across points, levels, variables
and leads. A forecast from ``init`` knows ``P``, ``act``, the storm tracks and ``A0``, and ``U``
and ``B`` up to ``init``; given that, the truth at its valid times is::

    truth(valid) = mu*(valid) + s · [ E(valid) + S_NOISE · act(valid) · n(valid) ] + Σ profile · env · ΔB

with every term on the right after ``mu*`` independent of what is known:

* ``E = U - Φ U(init)``, U's continuation, is the OU process of :func:`.model._ou` restarted
  from 0 at ``init`` and stepped through the same state times with the same factors ``phi``
  and the known activity (innovations ``sqrt(1 - phi_k²) · S_U · act_{k-1} · xi_k``, ``xi_k``
  three unit fields of correlation length ``LEN_U``);
* ``n``, the analysis noise, three unit fields of correlation length ``LEN_NOISE``, new at every
  valid time, scaled by ``S_NOISE · act``;
* ``ΔB = B(valid) - B(max(init, genesis))`` (``B(init)`` is known when the storm is alive at
  init, else ``B`` starts at 0 at genesis), the Brownian motion of each storm's intensity: at the
  storm's valid times after ``max(init, genesis)`` its independent increments have variance
  ``STORM_Q_PER_H`` times the hours between them.

U's and n's fields pass through the vertical structure (z and t coherent) and the anomaly scale
``s`` as in the generator, the storms through their profile and envelope. So the members are
exact draws of the truth's joint distribution given what the oracle knows, across the grid,
levels, variables and the leads of one init (one path per member), and the truth is
exchangeable with them; their per-point mean and std are ``oracle.nc``'s ``mean``/``std``.
Exact in distribution, not in arithmetic: the fields are new draws from random stream 9 (one
per init), computed in float32 as the truth is, added to the oracle mean in float64 and stored
as float32 rounded to at most 1/32 of ``sigma*`` (:mod:`.build`; a variance error below 1e-4
relative). The members of different inits are drawn independently, each from its own init's
conditional distribution.

Only z and t (and ``t2m``, t at 1000 hPa): tp and si10 of ``precip_wind`` are left out (see the
notes of :func:`oracle_member_drawer`).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ensml.data.synth.fields import GaussianFields, storm_profile, stream
from ensml.data.synth.model import LEN_NOISE, LEN_U, S_NOISE, S_U, STORM_Q_PER_H

#: The random stream of the oracle members (one per init: ``stream(seed, 9, init)``); streams 0–8
#: are the generator's (:mod:`.model`), so the other files do not change.
ORACLE_STREAM = 9


def oracle_member_drawer(seed: int, members: int, state: dict) -> Callable[[int, int], np.ndarray]:
    """``oracle_block(i0, i1)``: ``members`` oracle members of inits ``i0:i1``.

    Parameters
    ----------
    seed
        The generator's seed.
    members
        Members per init, at least 1.
    state
        The ``oracle_state`` of :func:`.model.generate`: the state grid ``hours (time,)``, ``ki
        (init,)`` and ``kv (init, lead)``, the activity ``act (time, lat, lon)``, U's AR factors
        ``phi (time,)``, the vertical structure ``vs``, the anomaly scale ``scale (v, k, lat, 1)``,
        ``levels`` (hPa), ``lat``, ``lon``, the storms and the oracle ``mean`` ``(init, lead, v,
        k, lat, lon)`` (float64, storms' known part included).

    Returns
    -------
    Callable[[int, int], np.ndarray]
        ``oracle_block(i0, i1)``: float32 ``(v, init, lead, member, k, lat, lon)``, v = (z, t).
        Init ``i``'s members come from random stream ``(seed, 9, i)`` alone: blocks can be drawn
        in any order and any size, with the same result.

    Notes
    -----
    Per init the stream gives, in this order: for each state step from init to the last valid
    time, ``(member, 3)`` white-noise fields of U's innovations; ``(lead, member, 3)`` of the
    analysis noise; for each storm alive at one of the init's valid times (in the order they
    were drawn), ``(alive leads, member)`` standard normals of its intensity increments.

    tp and si10 are not drawn. Their oracle at (init, lead) is exact given a chain of reveals
    (:mod:`.precip_wind`): one at each init that verifies the same valid time. A joint draw would
    continue that chain per member from this init's reveal: the reveals of the later inits of
    the same valid time (U's standardised increments since the previous reveal, from the ``E``
    drawn here, and new noise shared by every valid time revealed at that state time), the one
    at the valid time, and the last draw (which mixes in the analysis noise ``n``, the one drawn
    here). Every piece is reproducible, so exact joint (z, t, tp, si10) members are possible, but
    they need the chain's state (theta, mu, sigma and the known fields of :mod:`.precip_wind`),
    which :func:`.model.generate` does not keep, and a second copy of
    :func:`.precip_wind.draw`'s reveal step (or that step split out to serve both).
    """
    if members < 1:
        raise ValueError(f"oracle members must be at least 1, got {members}")
    hours, ki, kv = state["hours"], state["ki"], state["kv"]
    act, phi, vs, mean = state["act"], state["phi"], state["vs"], state["mean"]
    lat, lon, storms = state["lat"], state["lon"], state["storms"]
    scale = state["scale"].astype(np.float32)  # (v, k, lat, 1)
    nl, n_lat, n_lon = kv.shape[1], len(lat), len(lon)
    gf_u = GaussianFields(n_lat, n_lon, LEN_U)
    gf_n = GaussianFields(n_lat, n_lon, LEN_NOISE)
    prof = storm_profile(state["levels"])[:, :, None, None]  # (v, k, 1, 1)
    s_noise = S_NOISE.astype(np.float32)  # (v, 1, 1, 1)
    genesis = np.array([s.genesis_hours for s in storms])
    death = np.array([s.genesis_hours + s.lifetime_hours for s in storms])

    def error_path(rng: np.random.Generator, i: int) -> np.ndarray:
        """``E = U - Φ U(init)`` at the init's valid times, ``(lead, member, 3, lat, lon)`` float32."""
        e = np.zeros((members, 3, n_lat, n_lon), dtype=np.float32)
        out = np.empty((nl, *e.shape), dtype=np.float32)
        k = ki[i]
        for j in range(nl):
            while k < kv[i, j]:  # one OU step of _ou, from state time k to k + 1
                k += 1
                xi = gf_u.sample(rng, members, 3, dtype=np.float32)
                xi *= (np.sqrt(1 - phi[k] ** 2) * S_U * act[k - 1]).astype(np.float32)
                e *= np.float32(phi[k])
                e += xi
            out[j] = e
        return out

    def storm_terms(rng: np.random.Generator, i: int, x: np.ndarray) -> None:
        """Add each storm's unknown part ``profile · env · ΔB`` to ``x (lead, member, v, k, lat,
        lon)``, in place."""
        h_init, h_valid = hours[ki[i]], hours[kv[i]]
        for n in np.flatnonzero((genesis <= h_valid[-1]) & (death >= h_valid[0])):
            s = storms[n]
            js = s.active(h_valid)  # the leads at which it is alive (as _storm_oracle finds them)
            if js.size == 0:
                continue
            since = np.diff(h_valid[js], prepend=max(h_init, s.genesis_hours))
            steps = np.sqrt(STORM_Q_PER_H * since)[:, None] * rng.standard_normal((js.size, members))
            db = np.cumsum(steps, axis=0)  # (alive leads, member)
            es = s.envelope_shape(h_valid[js], lat, lon)  # (alive leads, lat, lon)
            x[js] += db[:, :, None, None, None, None] * (prof * es[:, None, None])[:, None]

    def one_init(i: int) -> np.ndarray:
        """Init ``i``'s members, ``(lead, member, v, k, lat, lon)`` float64."""
        rng = stream(seed, ORACLE_STREAM, i)
        pert = vs.combine(error_path(rng, i))  # (lead, member, v, k, lat, lon)
        noise = vs.combine(gf_n.sample(rng, nl, members, 3, dtype=np.float32))
        noise *= s_noise * act[kv[i]][:, None, None, None].astype(np.float32)
        pert += noise
        pert *= scale
        x = mean[i][:, None] + pert
        storm_terms(rng, i, x)
        return x

    def oracle_block(i0: int, i1: int) -> np.ndarray:
        """Oracle members of inits ``i0:i1`` as float32 ``(v, init, lead, member, k, lat, lon)``."""
        out = np.empty((2, i1 - i0, nl, members, *mean.shape[3:]), dtype=np.float32)
        for n, i in enumerate(range(i0, i1)):
            out[:, n] = one_init(i).transpose(2, 0, 1, 3, 4, 5)
        return out

    return oracle_block
