"""The predictive families: a name, named parameters, and what a forecast of that family can say.

A :class:`Family` turns a dict of parameter fields (numpy arrays, torch tensors or DataArrays of
one shape, in the variable's units) into a CRPS, a log score, a cdf, quantiles, samples and a
PIT. The parametric families map the two or three outputs of a network or an EMOS —
a location ``mu``, a spread ``sigma`` (both in the variable's units) and, for the censored
shifted gamma, an unconstrained ``extra`` — onto their parameters (:meth:`Family.from_moments`),
so that a model is the same whatever the family and only the last step differs.

Families (the name is what a config and a file say):

==============  =========================  ===================================================
name            parameters                 distribution
==============  =========================  ===================================================
normal          mean, std                  N(mean, std²) (z, t: today's Gaussian)
truncnormal     loc, scale                 N(loc, scale²) truncated to [0, ∞) (wind speed)
trunclogistic   loc, scale                 logistic(loc, scale) truncated to [0, ∞)
cnormal         loc, scale                 N(loc, scale²) censored at 0 (mass Φ(−loc/scale))
clogistic       loc, scale                 logistic(loc, scale) censored at 0
csg0            shape, scale, shift        max(0, X − shift), X ~ Gamma(shape, scale)
                                           (precipitation; Scheuerer & Hamill 2015)
bqn             alpha0 … alpha<d>          Bernstein quantile function of degree d (Bremnes
                                           2020), monotone, clipped at 0 for a variable ≥ 0
==============  =========================  ===================================================
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import xarray as xr

from ensml.errors import EnsmlError
from ensml.names import bqn_degree, family_params
from ensml.scores.distributions import closed
from ensml.scores.reduce import infinite_error

#: A logistic of standard deviation σ has scale σ·√3/π.
LOGISTIC_SCALE = math.sqrt(3.0) / math.pi
#: softplus⁻¹(0.1): a model's zero output gives a censored shifted gamma a shift of 0.1 units.
SHIFT_OFFSET = math.log(math.expm1(0.1))
#: How sharply the censored shifted gamma's link makes its mean positive (see ``CSG0.from_moments``).
MEAN_SHARPNESS = 10.0


def _is_torch(x: Any) -> bool:
    return isinstance(x, torch.Tensor)


def _is_lazy(x: Any) -> bool:
    """A dask-backed DataArray: its values are checked chunk by chunk when computed."""
    return isinstance(x, xr.DataArray) and x.chunks is not None


def _softplus_np(x: np.ndarray) -> np.ndarray:
    return np.logaddexp(0.0, x)


@dataclass(frozen=True)
class Family:
    """A predictive family (see the module's table); instances come from :func:`get_family`."""

    name: str
    params: tuple[str, ...]
    lower: float | None = None
    point_mass: bool = False
    description: str = ""

    # -- what a score needs ----------------------------------------------------------------------
    def crps(self, params: Mapping[str, Any], y: Any) -> Any:
        """CRPS of the forecast ``params`` for the observation ``y``, elementwise, in y's units.

        Torch tensors in give a differentiable tensor (float64 inside, the inputs' dtype out);
        numpy arrays give numpy (float32 when every input is float32). NaN in any input gives
        NaN; an observation below the support adds its distance to it.
        """
        return self._apply(self._crps_torch, params, y)

    def log_score(self, params: Mapping[str, Any], y: Any) -> Any:
        """Negative log density (log probability of the point mass at the bound), in nats."""
        return self._apply(self._log_score_torch, params, y)

    def _crps_torch(self, p: dict[str, torch.Tensor], y: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def _log_score_torch(self, p: dict[str, torch.Tensor], y: torch.Tensor) -> torch.Tensor:
        raise EnsmlError(f"the log score of the {self.name} family is not defined; use the CRPS")

    def _apply(self, fn: Callable, params: Mapping[str, Any], y: Any) -> Any:
        self.check_params(params, "the forecast")
        values = [params[k] for k in self.params] + [y]
        if any(isinstance(v, xr.DataArray) for v in values):
            return _apply_xr(self, fn, params, y)
        as_torch = any(_is_torch(v) for v in values)
        if as_torch:
            ref = next(v for v in values if _is_torch(v))
            dtype = ref.dtype if ref.is_floating_point() else torch.get_default_dtype()
            t = [torch.as_tensor(v, device=ref.device).to(torch.float64) for v in values]
        else:
            arrays = [np.asarray(v) for v in values]
            dtype = np.result_type(*arrays, np.float32)
            n_inf = int(np.count_nonzero(np.isinf(arrays[-1])))
            if n_inf:  # parameters are refused by check_params; torch tensors are not synced for it
                raise infinite_error(f"{self.name} score", "the observation", n_inf)
            t = [torch.from_numpy(np.asarray(a, dtype=np.float64)) for a in arrays]
        t = list(torch.broadcast_tensors(*t))
        missing = torch.zeros_like(t[0], dtype=torch.bool)
        for v in t:
            missing |= torch.isnan(v)
        clean = [torch.where(missing, torch.ones_like(v), v) for v in t]
        out = fn(dict(zip(self.params, clean[:-1])), clean[-1])
        out = torch.where(missing, torch.full_like(out, math.nan), out)
        if as_torch:
            return out.to(dtype)
        return out.numpy().astype(dtype, copy=False)

    # -- what a product needs (numpy) ------------------------------------------------------------
    def ppf(self, params: Mapping[str, np.ndarray], u: np.ndarray) -> np.ndarray:
        """The quantile at level(s) ``u`` (broadcast with the parameters), numpy float64."""
        raise NotImplementedError

    def cdf(self, params: Mapping[str, np.ndarray], x: np.ndarray) -> np.ndarray:
        """P(Y ≤ x), numpy float64 (0 below the support)."""
        raise NotImplementedError

    def quantiles(self, params: Mapping[str, Any], levels: Any, axis: int = 0) -> np.ndarray:
        """Quantiles at ``levels`` (0 < τ < 1), stacked along a new ``axis``."""
        levels = np.asarray(levels, dtype=np.float64)
        p = {k: np.asarray(params[k], dtype=np.float64) for k in self.params}
        shape = np.broadcast_shapes(*(v.shape for v in p.values()))
        tau = levels.reshape((-1,) + (1,) * len(shape))
        out = self.ppf({k: v[None] for k, v in p.items()}, tau)
        out = np.broadcast_to(out, (levels.size, *shape))
        return np.moveaxis(out, 0, axis)

    def sample(
        self, params: Mapping[str, Any], n: int, rng: np.random.Generator, axis: int = 0
    ) -> np.ndarray:
        """``n`` independent draws at every point (inverse-cdf sampling), along a new ``axis``."""
        p = {k: np.asarray(params[k], dtype=np.float64) for k in self.params}
        shape = np.broadcast_shapes(*(v.shape for v in p.values()))
        u = rng.uniform(size=(n, *shape))
        return np.moveaxis(self.ppf({k: v[None] for k, v in p.items()}, u), 0, axis)

    def exceedance(self, params: Mapping[str, Any], threshold: float) -> np.ndarray:
        """P(Y > threshold)."""
        p = {k: np.asarray(params[k], dtype=np.float64) for k in self.params}
        return 1.0 - self.cdf(p, np.float64(threshold))

    def pit(self, params: Mapping[str, Any], y: Any, rng: np.random.Generator | None = None) -> np.ndarray:
        """The PIT F(y); at a point mass, randomised uniformly over [F(y⁻), F(y)] (given ``rng``).

        A randomised PIT is uniform for a calibrated forecast even where P(Y = 0) > 0
        (Czado, Gneiting & Held 2009); without ``rng`` it is the upper end F(y).
        """
        p = {k: np.asarray(params[k], dtype=np.float64) for k in self.params}
        y = np.asarray(y, dtype=np.float64)
        upper = self.cdf(p, y)
        if not self.point_mass or rng is None:
            return upper
        at_bound = y <= (self.lower if self.lower is not None else -np.inf)
        u = rng.uniform(size=np.broadcast(upper, y).shape)
        return np.where(at_bound, u * upper, upper)

    def mean(self, params: Mapping[str, Any], n_levels: int = 199) -> np.ndarray:
        """The predictive mean (by quadrature of the quantile function where no closed form is used)."""
        levels = (np.arange(n_levels) + 0.5) / n_levels
        return self.quantiles(params, levels, axis=0).mean(axis=0)

    # -- checks ------------------------------------------------------------------------------------
    def check_params(self, params: Mapping[str, Any], source: str) -> None:
        """One line naming the parameter when one is missing or outside its range.

        Torch tensors are not checked (that would sync a device; a link keeps them in range);
        dask-backed DataArrays are checked chunk by chunk when a score of them is computed,
        not here (that would compute them twice).
        """
        missing = [k for k in self.params if k not in params]
        if missing:
            raise EnsmlError(f"{source} has no {', '.join(missing)} for the {self.name} family")
        for k, rule in self.ranges.items():
            v = params[k]
            if isinstance(v, torch.Tensor) or _is_lazy(v):
                continue
            arr = np.asarray(v.data if isinstance(v, xr.DataArray) else v)
            if arr.dtype.kind not in "fiub":
                raise EnsmlError(
                    f"{source}: {self.name} parameter {k} must be numeric, got dtype {arr.dtype}"
                )
            bad = ~rule(arr) & ~np.isnan(arr)
            if np.any(bad):
                raise EnsmlError(
                    f"{source}: {self.name} parameter {k} out of range at {int(bad.sum())} point(s) "
                    f"(needs {self.range_text[k]}, found {float(arr[bad].flat[0]):.6g})"
                )

    @property
    def ranges(self) -> dict[str, Callable[[np.ndarray], np.ndarray]]:
        return {}

    @property
    def range_text(self) -> dict[str, str]:
        return {}

    def check_obs(self, y: Any, source: str) -> None:
        """Refuse observations outside the support (negative rain into a family bounded at 0)."""
        if self.lower is None:
            return
        arr = np.asarray(y.data if isinstance(y, xr.DataArray) else y)
        bad = arr < self.lower
        if np.any(bad):
            raise EnsmlError(
                f"{source}: {int(bad.sum())} value(s) below {self.lower:g} (min {float(arr[bad].min()):.6g}) "
                f"lie outside the support of the {self.name} family; "
                "choose a family without a bound, e.g. normal"
            )

    # -- files -------------------------------------------------------------------------------------
    def param_attrs(self, var: str, attrs: Mapping[str, str]) -> dict[str, dict[str, str]]:
        """CF attributes of each parameter's variable ``{var}_{param}`` in a file."""
        long = attrs.get("long_name", var)
        units = attrs.get("units", "1")
        out = {}
        for k in self.params:
            text, unit = self.param_meaning(k)
            out[k] = {
                "long_name": f"{text} of the {self.name} predictive distribution of {long}",
                "units": units if unit else "1",
                "ensml_family": self.name,
            }
        return out

    def param_meaning(self, param: str) -> tuple[str, bool]:
        """What ``param`` is, and whether it has the variable's units."""
        return param, True

    # -- models ------------------------------------------------------------------------------------
    @property
    def n_raw(self) -> int:
        """Outputs a model gives per variable: location and spread (+ an unconstrained extra)."""
        return 2

    def from_moments(self, mu: Any, sigma: Any, extra: Any = None, unit: Any = 1.0) -> dict[str, Any]:
        """The family's parameters from a model's location ``mu`` and spread ``sigma`` (> 0)."""
        raise NotImplementedError


def _apply_xr(family: Family, fn: Callable, params: Mapping[str, Any], y: Any) -> xr.DataArray:
    names = list(family.params)
    args = [params[k] for k in names] + [y]
    for name, a in zip([*names, "the observation"], args):
        # an unnamed array would get its own dimension (dim_0) and broadcast as an outer product
        if not isinstance(a, xr.DataArray) and np.ndim(a) > 0:
            raise EnsmlError(
                f"{family.name} score: {name} is an array of shape {np.shape(a)} beside DataArray "
                "inputs; give it as a DataArray with named dimensions (or a scalar)"
            )
    das = [a if isinstance(a, xr.DataArray) else xr.DataArray(np.asarray(a)) for a in args]

    def kernel(*arrays: np.ndarray) -> np.ndarray:
        return family._apply(fn, dict(zip(names, arrays[:-1])), arrays[-1])

    return xr.apply_ufunc(
        kernel,
        *das,
        dask="parallelized",
        output_dtypes=[np.result_type(*(d.dtype for d in das), np.float32)],
        keep_attrs=False,
    )


# --------------------------------------------------------------------------------------------------
# The normal and the families bounded at 0 with a location and a scale


@dataclass(frozen=True)
class LocationScale(Family):
    """Normal or logistic, unbounded, truncated to [0, ∞) or censored at 0."""

    kernel: str = "normal"  # or "logistic"
    bound: str = "none"  # "none", "truncated" or "censored"

    @property
    def _loc(self) -> str:
        return self.params[0]

    @property
    def _scale(self) -> str:
        return self.params[1]

    @property
    def ranges(self) -> dict[str, Callable]:
        return {self._loc: np.isfinite, self._scale: lambda s: np.isfinite(s) & (s >= 0)}

    @property
    def range_text(self) -> dict[str, str]:
        return {self._loc: "a finite value", self._scale: "a finite value >= 0"}

    def param_meaning(self, param: str) -> tuple[str, bool]:
        if self.name == "normal":
            return ("mean" if param == "mean" else "standard deviation"), True
        parent = f"{'censored' if self.bound == 'censored' else 'truncated'} {self.kernel}'s parent"
        return (f"location ({parent})" if param == "loc" else f"scale ({parent})"), True

    def _crps_torch(self, p: dict, y: torch.Tensor) -> torch.Tensor:
        mu, s = p[self._loc], p[self._scale]
        if self.bound == "none":
            if self.kernel == "normal":
                from ensml.scores.gaussian import crps_gaussian

                return crps_gaussian(mu, s, y, check=False)
            return closed.crps_logistic(mu, s, y)
        fn = {
            ("normal", "truncated"): closed.crps_tnormal,
            ("normal", "censored"): closed.crps_cnormal,
            ("logistic", "truncated"): closed.crps_tlogistic,
            ("logistic", "censored"): closed.crps_clogistic,
        }[self.kernel, self.bound]
        return fn(mu, s, y)

    def _log_score_torch(self, p: dict, y: torch.Tensor) -> torch.Tensor:
        mu, s = p[self._loc], p[self._scale]
        z = (y - mu) / s
        if self.kernel == "normal":
            log_pdf = -0.5 * z * z - 0.5 * math.log(2 * math.pi) - torch.log(s)
            log_cdf_l = torch.special.log_ndtr(-mu / s)  # log P(X ≤ 0)
            log_sf_l = torch.special.log_ndtr(mu / s)  # log P(X ≥ 0)
        else:
            sp = closed._softplus
            log_pdf = -z - 2.0 * sp(-z) - torch.log(s)
            log_cdf_l, log_sf_l = -sp(mu / s), -sp(-mu / s)
        if self.bound == "none":
            return -log_pdf
        below = torch.full_like(y, math.inf)
        if self.bound == "truncated" and self.kernel == "normal":
            # for lo = −μ/σ > 0, (z² − lo²)/2 − log Φ(−lo) cancels (eps·lo² nats); with u = y/σ
            # and the Mills ratio R: u(u + 2 lo)/2 + log R(lo) + log σ + log √(2π) − log √(2π)
            lo = -mu / s
            upper = lo > 0
            lo_m = torch.where(upper, lo, torch.ones_like(lo))
            u = torch.clamp_min(y, 0.0) / s
            far = 0.5 * u * (u + 2.0 * lo_m) + torch.log(closed._mills(lo_m)) + torch.log(s)
            return torch.where(y < 0, below, torch.where(upper, far, -(log_pdf - log_sf_l)))
        if self.bound == "truncated":
            return torch.where(y < 0, below, -(log_pdf - log_sf_l))
        return torch.where(y < 0, below, torch.where(y == 0, -log_cdf_l, -log_pdf))

    def _std_ppf(self, u: np.ndarray) -> np.ndarray:
        from scipy import special

        return special.ndtri(u) if self.kernel == "normal" else special.logit(u)

    def _std_cdf(self, z: np.ndarray) -> np.ndarray:
        from scipy import special

        return special.ndtr(z) if self.kernel == "normal" else special.expit(z)

    def _log_tail_ratio(self, lo: np.ndarray, u: np.ndarray) -> np.ndarray:
        """``log P(X > lo + u)/P(X > lo)`` of the standard parent (u ≥ 0), exact for lo ≫ 0.

        The tails themselves underflow from lo ≈ 38 (normal) or 745 (logistic), and their
        logs, of size lo²/2 or lo, cancel; in Mills ratios R (normal) or with softplus(x) =
        x + log1p(e^−x) (logistic) the difference ``u`` enters exactly.
        """
        from scipy import special

        z = lo + u
        upper = lo > 0
        lo_m, z_m = np.where(upper, lo, 1.0), np.where(upper, z, 1.0 + u)
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            if self.kernel == "normal":
                # R(x) = √(π/2) erfcx(x/√2) and φ(z)/φ(lo) = exp(−u(z + lo)/2)
                far = -0.5 * u * (z_m + lo_m) + np.log(special.erfcx(z_m / math.sqrt(2.0)))
                far -= np.log(special.erfcx(lo_m / math.sqrt(2.0)))
                near = special.log_ndtr(-z) - special.log_ndtr(-lo)
            else:  # log P(X > x) = −softplus(x)
                far = -u - np.log1p(np.exp(-z_m)) + np.log1p(np.exp(-lo_m))
                near = _softplus_np(lo) - _softplus_np(z)
        return np.where(upper, far, near)

    def _trunc_ppf_std(self, lo: np.ndarray, u: np.ndarray) -> np.ndarray:
        """The truncated standard parent's quantile minus ``lo`` (the quantile in units of σ
        above 0): solves ``P(X > lo + t)/P(X > lo) = 1 − u`` in logs, exact for lo ≫ 0."""
        from scipy import special

        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            log_v = np.log1p(-u)
            if self.kernel == "normal":
                t = -special.ndtri_exp(log_v + special.log_ndtr(-lo)) - lo
                # ndtri_exp is good to ~1e-12·lo here; one Newton step on the exact log tail
                # ratio (slope −1/R(lo + t), R the Mills ratio) makes t exact to rounding
                step = np.isfinite(t) & (lo > 0)
                z_m = np.where(step, lo + t, 1.0)
                mills = math.sqrt(math.pi / 2.0) * special.erfcx(z_m / math.sqrt(2.0))
                newton = t + (self._log_tail_ratio(np.where(step, lo, 1.0), z_m - lo) - log_v) * mills
                return np.where(step, newton, t)
            # −softplus(lo + t) = log_v − softplus(lo); for lo > 0 with b = −log_v + log1p(e^−lo),
            # t = b + log1p(−e^−(lo + b)), which holds no difference of large numbers
            lo_m = np.where(lo > 0, lo, 1.0)
            b = -log_v + np.log1p(np.exp(-lo_m))
            far = b + np.log1p(-np.exp(-(lo_m + b)))
            w = _softplus_np(lo) - log_v
            near = w + np.log(-np.expm1(-w)) - lo  # softplus⁻¹(w) − lo
        return np.where(lo > 0, far, near)

    def ppf(self, params: Mapping[str, np.ndarray], u: np.ndarray) -> np.ndarray:
        mu, s = np.asarray(params[self._loc], np.float64), np.asarray(params[self._scale], np.float64)
        u = np.asarray(u, np.float64)
        if self.bound == "truncated":
            s1 = np.where(s > 0, s, 1.0)
            x = s * np.maximum(self._trunc_ppf_std(-mu / s1, u), 0.0)
            x = np.where(s > 0, x, np.maximum(mu, 0.0))
        else:
            x = mu + s * self._std_ppf(u)
            if self.bound == "censored":
                x = np.maximum(x, 0.0)
        return np.where(np.isnan(mu) | np.isnan(s), np.nan, x)

    def cdf(self, params: Mapping[str, np.ndarray], x: np.ndarray) -> np.ndarray:
        mu, s = np.asarray(params[self._loc], np.float64), np.asarray(params[self._scale], np.float64)
        x = np.asarray(x, np.float64)
        s1 = np.where(s > 0, s, 1.0)
        with np.errstate(divide="ignore", invalid="ignore"):
            z = np.where(s > 0, (x - mu) / s1, np.where(x >= mu, np.inf, -np.inf))
        if self.bound == "truncated":
            # 1 − P(X > x)/P(X > 0), from the ratio of the tails so that μ ≪ 0 stays exact
            f = -np.expm1(self._log_tail_ratio(-mu / s1, np.maximum(x, 0.0) / s1))
            f = np.where(s > 0, f, (x >= np.maximum(mu, 0.0)).astype(float))
            f = np.clip(f, 0.0, 1.0) + 0.0  # not −0.0 at x = 0
        else:
            f = self._std_cdf(z)
        if self.bound != "none":
            f = np.where(x < 0, 0.0, f)
        return np.where(np.isnan(mu) | np.isnan(s) | np.isnan(x), np.nan, f)

    def mean(self, params: Mapping[str, Any], n_levels: int = 199) -> np.ndarray:
        """The predictive mean in closed form, with ``α = loc/scale``: the location unbounded;
        censored, ``E[max(X, 0)]`` = ``loc Φ(α) + scale φ(α)`` (normal), ``scale softplus(α)``
        (logistic); truncated, that divided by ``P(X > 0)``: ``loc + scale φ(α)/Φ(α)`` (normal),
        ``scale softplus(α)/F(α)`` (logistic), through logarithms so that ``α ≪ 0`` stays exact."""
        from scipy import special

        mu = np.asarray(params[self._loc], np.float64)
        s = np.asarray(params[self._scale], np.float64)
        if self.bound == "none":
            return mu + 0.0 * s
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            a = np.where(s > 0, mu / np.where(s > 0, s, 1.0), 0.0)
            if self.kernel == "normal":
                log_pdf = -0.5 * a * a - 0.5 * np.log(2.0 * np.pi)
                if self.bound == "censored":
                    value = mu * special.ndtr(a) + s * np.exp(log_pdf)
                else:
                    value = mu + s * np.exp(log_pdf - special.log_ndtr(a))
            else:
                softplus = np.logaddexp(0.0, a)
                if self.bound == "censored":
                    value = s * softplus
                else:  # softplus(α)/F(α) → 1 as α → −∞ (both ≈ e^α)
                    ratio = np.exp(np.log(np.where(a > -30, softplus, 1.0)) - special.log_expit(a))
                    value = s * np.where(a > -30, ratio, 1.0)
        out = np.where(s > 0, value, np.maximum(mu, 0.0))
        return np.where(np.isnan(mu) | np.isnan(s), np.nan, out)

    def from_moments(self, mu: Any, sigma: Any, extra: Any = None, unit: Any = 1.0) -> dict[str, Any]:
        scale = sigma * LOGISTIC_SCALE if self.kernel == "logistic" else sigma
        return {self._loc: mu, self._scale: scale}


# --------------------------------------------------------------------------------------------------
# Censored shifted gamma


@dataclass(frozen=True)
class CSG0(Family):
    """``Y = max(0, X − shift)``, ``X ~ Gamma(shape, scale)`` (Scheuerer & Hamill 2015)."""

    @property
    def n_raw(self) -> int:
        return 3

    @property
    def ranges(self) -> dict[str, Callable]:
        return {
            "shape": lambda v: np.isfinite(v) & (v > 0),
            "scale": lambda v: np.isfinite(v) & (v > 0),
            "shift": lambda v: np.isfinite(v) & (v >= 0),
        }

    @property
    def range_text(self) -> dict[str, str]:
        return {"shape": "a finite value > 0", "scale": "a finite value > 0", "shift": "a finite value >= 0"}

    def param_meaning(self, param: str) -> tuple[str, bool]:
        return {
            "shape": ("gamma shape", False),
            "scale": ("gamma scale", True),
            "shift": ("shift of the gamma to the left before censoring at 0", True),
        }[param]

    def _crps_torch(self, p: dict, y: torch.Tensor) -> torch.Tensor:
        return closed.crps_csg0(p["shape"], p["scale"], p["shift"], y)

    def _log_score_torch(self, p: dict, y: torch.Tensor) -> torch.Tensor:
        k, theta, d = p["shape"], p["scale"], p["shift"]
        x = torch.clamp_min(y, 0.0) + d
        log_pdf = (k - 1) * torch.log(x) - x / theta - torch.lgamma(k) - k * torch.log(theta)
        p0 = closed.gamma_cdf(d, k, theta)
        below = torch.full_like(y, math.inf)
        return torch.where(y < 0, below, torch.where(y == 0, -torch.log(p0), -log_pdf))

    def ppf(self, params: Mapping[str, np.ndarray], u: np.ndarray) -> np.ndarray:
        from scipy import special

        k, theta, d = (np.asarray(params[n], np.float64) for n in ("shape", "scale", "shift"))
        return np.maximum(theta * special.gammaincinv(k, np.asarray(u, np.float64)) - d, 0.0)

    def cdf(self, params: Mapping[str, np.ndarray], x: np.ndarray) -> np.ndarray:
        from scipy import special

        k, theta, d = (np.asarray(params[n], np.float64) for n in ("shape", "scale", "shift"))
        x = np.asarray(x, np.float64)
        return np.where(x < 0, 0.0, special.gammainc(k, np.maximum(x + d, 0.0) / theta))

    def mean(self, params: Mapping[str, Any], n_levels: int = 199) -> np.ndarray:
        """E[max(0, X − δ)] = kθ(1 − F_k+1(δ)) − δ(1 − F_k(δ)), in closed form."""
        from scipy import special

        k, theta, d = (np.asarray(params[n], np.float64) for n in ("shape", "scale", "shift"))
        return k * theta * (1 - special.gammainc(k + 1, d / theta)) - d * (1 - special.gammainc(k, d / theta))

    def from_moments(self, mu: Any, sigma: Any, extra: Any = None, unit: Any = 1.0) -> dict[str, Any]:
        """``mu`` and ``sigma`` are the mean and standard deviation of X, ``mu`` made > 0 by a
        sharp softplus, ``m = (unit/k) softplus(k mu/unit)`` with ``k = MEAN_SHARPNESS``: ``m ≈ mu``
        once ``mu`` is a tenth of ``unit`` or more, and a fourteenth of ``unit`` at ``mu = 0``, below
        the shift ``unit·softplus(extra + SHIFT_OFFSET)`` (a tenth of ``unit`` at ``extra = 0``).
        So a model's first guess from an all-dry subset (mean and spread 0) is dry: P(Y = 0) ≈ 1."""
        k = MEAN_SHARPNESS
        if _is_torch(mu):
            softplus = torch.nn.functional.softplus
            m = unit / k * softplus(k * mu / unit)
            shift = unit * softplus(extra + SHIFT_OFFSET) if extra is not None else torch.zeros_like(mu)
        else:
            m = unit / k * _softplus_np(k * np.asarray(mu) / unit)
            shift = (
                unit * _softplus_np(np.asarray(extra) + SHIFT_OFFSET)
                if extra is not None
                else np.zeros_like(m)
            )
        return {"shape": (m / sigma) ** 2, "scale": sigma**2 / m, "shift": shift}


# --------------------------------------------------------------------------------------------------
# Registry


@dataclass(frozen=True)
class _Spec:
    make: Callable[[], Family]
    summary: str


def _location_scale(name: str, kernel: str, bound: str, summary: str) -> _Spec:
    params = family_params(name)
    lower = None if bound == "none" else 0.0

    def make() -> Family:
        return LocationScale(name, params, lower, bound == "censored", summary, kernel=kernel, bound=bound)

    return _Spec(make, summary)


FAMILIES: dict[str, _Spec] = {
    "normal": _location_scale("normal", "normal", "none", "N(mean, std²): geopotential, temperature"),
    "truncnormal": _location_scale(
        "truncnormal", "normal", "truncated", "normal truncated to [0, ∞): wind speed"
    ),
    "trunclogistic": _location_scale(
        "trunclogistic", "logistic", "truncated", "logistic truncated to [0, ∞): wind speed, heavier tails"
    ),
    "cnormal": _location_scale("cnormal", "normal", "censored", "normal censored at 0: a point mass at 0"),
    "clogistic": _location_scale("clogistic", "logistic", "censored", "logistic censored at 0"),
    "csg0": _Spec(
        lambda: CSG0("csg0", family_params("csg0"), 0.0, True, "censored shifted gamma: precipitation"),
        "censored shifted gamma: precipitation",
    ),
}

_cache: dict[tuple[str, float | None], Family] = {}


def get_family(spec: str | Family, lower: float | None = None) -> Family:
    """The family named ``spec`` (``normal``, ``csg0``, ``bqn`` or ``bqn:12`` for degree 12, …).

    ``lower`` is the variable's physical lower bound, used by the distribution-free ``bqn``
    (its quantiles are clipped there); the parametric families carry their own support.
    """
    if isinstance(spec, Family):
        return spec
    name = str(spec).strip()
    key = (name, lower if name.startswith("bqn") else None)
    if key in _cache:
        return _cache[key]
    if name.startswith("bqn"):
        from ensml.scores.distributions.bqn import BQN

        family: Family = BQN.of_degree(bqn_degree(name), lower)
    elif name in FAMILIES:
        family = FAMILIES[name].make()
    else:
        raise EnsmlError(f"unknown distribution {name!r} (known: {', '.join(known_families())})")
    _cache[key] = family
    return family


def known_families() -> list[str]:
    """The family names a config may give."""
    return [*FAMILIES, "bqn"]


__all__ = ["CSG0", "FAMILIES", "LOGISTIC_SCALE", "Family", "LocationScale", "get_family", "known_families"]
