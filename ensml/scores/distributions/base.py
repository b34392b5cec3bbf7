"""The predictive family's interface: what every family gives, and how inputs reach it.

:class:`Family` holds a name, its parameters' names and its support, and turns a dict of
parameter fields (numpy arrays, torch tensors or DataArrays of one shape, in the variable's
units) into a CRPS, a log score, a cdf, quantiles, samples and a PIT. Each family implements its
torch CRPS (and log score), ``ppf``, ``cdf`` and ``from_moments``; the dispatch between numpy,
torch and xarray, the NaN policy and the range checks are here, once. The families are
:mod:`ensml.scores.distributions.families`.
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
from ensml.scores.reduce import infinite_error


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
