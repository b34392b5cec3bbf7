"""What K members allow: per-point bounds of post-processing and spread estimation.

The generator knows, besides the oracle N(μ*, σ*²) of the analysis, what the members are drawn
from: centre c (μ* biased, storms damped) and spread s. A post-processing method that knew c,
μ* and σ* exactly, but saw the forecast only through the K-member mean m_K = c + ε (ε the mean
of K member perturbations, variance s²/K per point), could do no better at a point than

    N(m_K − c + μ*, σ*² + s²/K),

whose CRPS exceeds the oracle's by the factor sqrt(1 + s²/(K σ*²)) in expectation. Nothing that
works point by point (EMOS, or a network's per-point layer) can beat it; a network can only by
denoising m_K across points, where the members' perturbations are correlated over ~8° and the
predictable signal over 15–25°. ``ensml benchmark`` scores this bound beside the models, so a
table says how much of the raw → oracle gap K members leave to be closed at all.

Likewise for spread estimation: the M-member std shares the K members a model sees, and its
other M − K members are draws from N(c, s²) that no model sees. Knowing c and s, the best
estimate of the M-member std (in mean square) is its expectation over those draws, computed here
by Monte Carlo (:func:`spread_bound`); a network must in addition estimate s from noisy samples.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict

import numpy as np
import torch

from ensml.data.synth import model as synth_model
from ensml.data.synth.generate import SynthConfig, _validate
from ensml.errors import EnsmlError
from ensml.times import parse_leads

#: Names of the bounds' rows in the benchmark tables.
BOUND_NAME = "per-point bound from K members"
SPREAD_BOUND_NAME = "per-point bound of the M-member spread"


_CACHE: dict[str, tuple] = {}  # the last generator run (both bounds of a benchmark use it)


def _generated(synth_options: object) -> tuple[SynthConfig, np.ndarray, dict]:
    """The generator's arrays for the options the data were made with (deterministic)."""
    options = asdict(synth_options)  # type: ignore[call-overload]
    options.pop("oracle_members", None)  # a further file: the generator's arrays do not depend on it
    cfg = SynthConfig(**options)
    if repr(cfg) in _CACHE:
        return _CACHE[repr(cfg)]
    inits, leads = _validate(cfg)
    gen = synth_model.generate(
        n_lat=cfg.n_lat,
        n_lon=cfg.n_lon,
        levels=np.asarray(cfg.levels, dtype=float),
        inits=inits,
        leads=leads,
        members=cfg.members,
        storms_per_year=cfg.storms_per_year,
        seed=cfg.seed,
    )
    _CACHE.clear()
    _CACHE[repr(cfg)] = cfg, inits, gen
    return cfg, inits, gen


def _check(cfg: SynthConfig, variables: Sequence[str], levels: Sequence[float]) -> None:
    if any(v not in ("z", "t") for v in variables) or any(int(p) not in cfg.levels for p in levels):
        raise EnsmlError(
            f"the per-point bounds need synth variables z/t on synth levels, got {variables} {levels}"
        )


def _pick(cfg: SynthConfig, variables, levels, target_leads):
    """Index of (levels, leads, variables) into the generator's arrays."""
    cols = [list(parse_leads(cfg.leads)).index(lead) for lead in parse_leads(target_leads)]
    lev = [list(cfg.levels).index(int(p)) for p in levels]
    return cols, lev, [("z", "t").index(v) for v in variables]


def _at_samples(synth_options, init_times, index, variables, levels, target_leads) -> tuple:
    """The generator's arrays for the samples ``index`` of ``init_times`` at the target leads.

    Returns ``gen``, the (init, lead) selection, the level indices, and the members' centre and
    spread (N, T, V, D, H, W) there.
    """
    cfg, inits, gen = _generated(synth_options)
    _check(cfg, variables, levels)
    rows = np.searchsorted(inits, np.asarray(init_times)[index])
    cols, lev, v_idx = _pick(cfg, variables, levels, target_leads)
    sel = np.ix_(rows, cols)
    centre = gen["member_centre"][sel][:, :, v_idx][..., lev, :, :]
    spread = gen["member_spread"][sel][:, :, v_idx][..., lev, :, :]
    return gen, sel, lev, centre, spread


def subset_bound(
    synth_options: object,
    init_times: np.ndarray,
    index: np.ndarray,
    mean_k: torch.Tensor,
    variables: Sequence[str],
    levels: Sequence[float],
    target_leads: Sequence[np.timedelta64],
    k: int,
) -> dict[str, np.ndarray]:
    """The bound's Gaussian at the target leads, in the layout of the benchmark's predictions.

    Parameters
    ----------
    synth_options
        The :class:`~ensml.experiments.benchmark.SynthOptions` the data were made with; the
        generator is run again with them (deterministic) to recover centre, spread and oracle.
    init_times
        The split's init times; ``index`` (N,) selects the N samples of ``mean_k``.
    mean_k
        (N, T·V, D, H, W) K-member means at the target leads (fields lead-major), as the data
        module read them.
    variables, levels, target_leads, k
        What ``mean_k`` holds.

    Returns
    -------
    dict
        ``index`` (N,), ``mean`` and ``std`` (N, T·V, D, H, W) float32, fields lead-major.
    """
    samples = _at_samples(synth_options, init_times, index, variables, levels, target_leads)
    gen, sel, lev, centre, spread = samples
    mu_star = np.stack([gen["mean"][v][sel][..., lev, :, :] for v in variables], axis=2)
    sd_star = np.stack([gen["std"][v][sel][..., lev, :, :] for v in variables], axis=2)
    m_k = mean_k.numpy().reshape(centre.shape)
    mean = m_k - centre + mu_star
    std = np.sqrt(sd_star**2 + spread.astype(np.float64) ** 2 / k)
    n = centre.shape[0]
    return {
        "index": np.asarray(index),
        "mean": mean.reshape(n, -1, *mean.shape[3:]).astype(np.float32),
        "std": std.reshape(n, -1, *std.shape[3:]).astype(np.float32),
    }


def spread_bound(
    synth_options: object,
    init_times: np.ndarray,
    index: np.ndarray,
    members_k: np.ndarray,
    variables: Sequence[str],
    levels: Sequence[float],
    target_leads: Sequence[np.timedelta64],
    members: int,
    draws: int = 32,
    seed: int = 0,
) -> dict[str, np.ndarray]:
    """The best estimate of the M-member std (ddof 0) given K members and the generator's c, s.

    ``members_k`` is (N, T·V, K, D, H, W): the K members each sample shows, fields lead-major. The
    M − K unseen members are drawn ``draws`` times from N(c, s²) (seeded) and the M-member std
    averaged. Returns ``index`` and ``std`` (N, T·V, D, H, W) float32.
    """
    _, _, _, centre, spread = _at_samples(synth_options, init_times, index, variables, levels, target_leads)
    spread = spread.astype(np.float64)
    n, k = centre.shape[0], members_k.shape[2]
    shown = np.asarray(members_k, dtype=np.float64).reshape(n, *centre.shape[1:3], k, *centre.shape[3:])
    rng = np.random.default_rng(seed)
    est = np.zeros(centre.shape)
    for _ in range(draws):
        unseen = centre[:, :, :, None] + spread[:, :, :, None] * rng.standard_normal(
            (n, *centre.shape[1:3], members - k, *centre.shape[3:])
        )
        est += np.concatenate([shown, unseen], axis=3).std(axis=3) / draws
    return {"index": np.asarray(index), "std": est.reshape(n, -1, *est.shape[3:]).astype(np.float32)}


__all__ = ["BOUND_NAME", "SPREAD_BOUND_NAME", "spread_bound", "subset_bound"]
