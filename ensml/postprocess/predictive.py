"""One variable's parametric predictive distribution at one init, as the products are made of it.

:class:`Predictive` holds a variable's family parameters (L, D, H, W) by target lead, checked
against its family, and gives what :mod:`ensml.postprocess.products` writes: the mean, quantiles,
exceedance probabilities, P(0) and ECC-Q members in the raw members' rank order. The normal's
products keep the closed forms of :mod:`ensml.postprocess.ecc`, bit-identical to those made before
families existed; for every other family, ties among the raw members are broken at random, seeded
by the init time and the variable (:func:`ecc_rng`). Its counterpart for generated members is
:class:`ensml.postprocess.generated.GeneratedMembers`.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ensml.errors import EnsmlError
from ensml.postprocess.ecc import ecc_members, ecc_quantile_members, exceedance, gaussian_quantiles
from ensml.postprocess.generated import init_index
from ensml.predictions import RunMeta

if TYPE_CHECKING:
    from ensml.scores.distributions import Family

#: Seed of the random tie-breaking of ECC members, with the init time and the variable.
ECC_SEED = 20130601
#: The normal's parameters (its products keep these names: ``v_mean``, ``v_std``).
NORMAL_PARAMS = ("mean", "std")


def family_name(meta: RunMeta, var: str) -> str:
    """The predictive family of ``var`` in ``meta``'s products (a spread model's is the normal)."""
    return "normal" if meta.is_spread else meta.family_of(var)


def _family(var: str, name: str) -> Family:
    from ensml.scores.distributions import family_for

    return family_for(var, name)


@dataclass(frozen=True)
class Predictive:
    """One variable's predictive distribution at one init: parameter fields (L, D, H, W) and names.

    ``family`` is None for the normal: its products keep the closed forms of
    :mod:`ensml.postprocess.ecc`, bit-identical to those made before families existed.
    """

    var: str
    params: dict[str, np.ndarray]
    family: Family | None
    names: dict[str, str]  # centre (v_mean), width (v_std, the normal), dist (in long names)

    @classmethod
    def of(
        cls, meta: RunMeta, var: str, params: Mapping[str, np.ndarray], raw_shape: tuple, init: np.datetime64
    ) -> Predictive:
        """``var``'s distribution in the run ``meta``; ``raw_shape`` (L, M, D, H, W) its raw members'."""
        name = family_name(meta, var)
        family = None if name == "normal" else _family(var, name)
        expected = NORMAL_PARAMS if family is None else family.params
        where = f"the predictions of {var} at init {str(init)[:16]} ({name})"
        missing = [k for k in expected if k not in params]
        if missing:
            raise EnsmlError(f"{where} have no {', '.join(missing)} (found: {', '.join(params) or 'none'})")
        shape = (raw_shape[0], *raw_shape[2:])
        arrays = {k: np.asarray(params[k]) for k in expected}
        wrong = {k: v.shape for k, v in arrays.items() if v.shape != shape}
        if wrong:
            raise EnsmlError(f"{where}: parameters of shape {wrong}, the raw members give {shape}")
        if family is not None:
            family.check_params(arrays, where)
        return cls(var, arrays, family, _names(meta, family, raw_shape[1]))

    def at_level(self, j: int) -> Predictive:
        """The distribution at the ``j``-th level only: parameters (L, H, W)."""
        return Predictive(self.var, {k: v[:, j] for k, v in self.params.items()}, self.family, self.names)

    def mean(self) -> np.ndarray:
        """The predictive mean, float32 (≥ the family's bound)."""
        if self.family is None:
            return self.params["mean"]
        mean = self.family.mean(self.params)
        if self.family.lower is not None:
            mean = np.maximum(mean, self.family.lower)  # no rounding below the bound
        return mean.astype(np.float32)

    def quantiles(self, levels: np.ndarray, axis: int) -> np.ndarray:
        """Quantiles at ``levels``, stacked along ``axis``, float32."""
        if self.family is None:
            return gaussian_quantiles(self.params["mean"], self.params["std"], levels, axis=axis)
        return self.family.quantiles(self.params, levels, axis=axis).astype(np.float32)

    def exceedance(self, thresholds: np.ndarray, axis: int) -> np.ndarray:
        """P(Y > t) for each of ``thresholds`` (1-D), stacked along ``axis``, float32."""
        if self.family is None:
            return exceedance(self.params["mean"], self.params["std"], thresholds, axis=axis)
        p = [self.family.exceedance(self.params, float(t)) for t in thresholds]
        return np.stack(p, axis=axis).astype(np.float32)

    def probability_of_zero(self) -> np.ndarray | None:
        """P(Y = 0) where the family has a point mass at 0, float32; else None."""
        if self.family is None or not self.family.point_mass:
            return None
        return self.family.cdf(self.params, np.float64(self.family.lower)).astype(np.float32)

    def members(self, raw: np.ndarray, n: int, spacing: str, init: np.datetime64) -> np.ndarray:
        """ECC-Q members (L, N, D, H, W) in the rank order of ``raw`` (L, M, D, H, W)."""
        if self.family is None:
            return ecc_members(self.params["mean"], self.params["std"], raw, n, spacing, axis=1)
        family, params = self.family, self.params

        def quantiles(levels: np.ndarray) -> np.ndarray:
            return family.quantiles(params, levels, axis=1).astype(np.float32)

        return ecc_quantile_members(quantiles, raw, n, spacing, axis=1, rng=ecc_rng(init, self.var))


def ecc_rng(init: np.datetime64, var: str) -> np.random.Generator:
    """The generator that breaks ties of ``var``'s raw members at ``init`` (:data:`ECC_SEED`)."""
    return np.random.default_rng([ECC_SEED, init_index(init), zlib.crc32(var.encode())])


def _names(meta: RunMeta, family: Family | None, m: int) -> dict[str, str]:
    """What the centre, the width and the distribution are called in the long names."""
    if family is not None:
        desc = family.description.split(":")[0]
        return {
            "centre": f"predictive mean (calibrated {desc})",
            "width": "",
            "dist": f"the calibrated {desc} ({family.name})",
        }
    if meta.is_spread:
        return {
            "centre": f"mean of the first {meta.k} members",
            "width": f"estimated {m}-member spread (std)",
            "dist": f"N(mean of {meta.k} members, estimated spread²)",
        }
    return {
        "centre": "predictive mean (calibrated Gaussian)",
        "width": "predictive std (calibrated Gaussian)",
        "dist": "the calibrated Gaussian",
    }


__all__ = ["ECC_SEED", "NORMAL_PARAMS", "Predictive", "ecc_rng", "family_name"]
