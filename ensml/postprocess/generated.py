"""Generated members as a predictive distribution: the products of a generative run.

A generative checkpoint (:class:`ensml.train.generative.GenerativeTask`) gives no parameters but
N members. :class:`GeneratedMembers` is the empirical distribution of those members with the
methods :class:`ensml.postprocess.predictive.Predictive` has, so that every product is made of them
the same way: the mean and std of the members, quantiles with the plotting positions (i − ½)/N
(``hazen``: the members are the quantiles at ECC's centred levels), exceedance as the fraction of
members above the threshold, P(0) as the fraction at the variable's lower bound (precipitation,
wind speed), and the members themselves, which keep the spatial structure the network drew
instead of borrowing the raw ensemble's rank order as ECC does.

A run draws :func:`members_to_draw` members per init: ``products.members``, or as many as the
raw members read when that is null (as ECC does) or 0 (no member is then written, the other
products are still made of them). The noise of an init is seeded by the checkpoint's
``sample_seed`` and the init time (:func:`init_index`), so that the same forecast gives the same
members on any worker, in any order.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from ensml.errors import EnsmlError
from ensml.postprocess.ecc import ecc_quantile_members
from ensml.postprocess.options import Products
from ensml.predictions import RunMeta
from ensml.scores.distributions import natural_lower

#: The task whose checkpoints give members rather than parameters.
GENERATIVE = "GenerativeTask"
#: Plotting positions of the members' quantiles: (i − ½)/N, the levels of ECC's ``centred`` spacing.
QUANTILE_METHOD = "hazen"


def members_to_draw(products: Products, m: int) -> int:
    """Members drawn per init: ``products.members``, or the ``m`` raw members where it is null or 0."""
    return int(products.members) if products.members else int(m)


def init_index(init: np.datetime64) -> int:
    """The number that seeds an init's random draws (generated members' noise, ECC's ties): its
    minutes since 1970, made non-negative."""
    return int(np.datetime64(init, "m").astype(np.int64)) % (1 << 63)


@dataclass(frozen=True)
class GeneratedMembers:
    """One variable's generated members at one init, ``members`` (L, N, D, H, W), as a distribution."""

    var: str
    members: np.ndarray
    lower: float | None
    names: dict[str, str]

    @property
    def family(self) -> None:
        return None  # no parametric family: the products are the members'

    @classmethod
    def of(
        cls, meta: RunMeta, var: str, params: Mapping[str, np.ndarray], raw_shape: tuple, init: np.datetime64
    ) -> GeneratedMembers:
        """``var``'s members in ``params["members"]``, checked against the raw members' shape
        ``raw_shape`` (L, M, D, H, W) but for their number."""
        where = f"the generated members of {var} at init {str(init)[:16]}"
        if "members" not in params:
            raise EnsmlError(f"{where} are missing (found: {', '.join(params) or 'none'})")
        members = np.asarray(params["members"], dtype=np.float32)
        if members.ndim != 5 or (members.shape[0], *members.shape[2:]) != (raw_shape[0], *raw_shape[2:]):
            raise EnsmlError(f"{where} have shape {members.shape}, the raw members give {raw_shape}")
        if not np.isfinite(members).all():
            raise EnsmlError(f"{where} hold NaN or infinite values")
        n = members.shape[1]
        names = {
            "centre": f"mean of the {n} generated members",
            "width": f"std of the {n} generated members",
            "dist": f"the {n} generated members",
        }
        return cls(var, members, natural_lower(var), names)

    def at_level(self, j: int) -> GeneratedMembers:
        """The members at the ``j``-th level only: (L, N, H, W)."""
        return GeneratedMembers(self.var, self.members[:, :, j], self.lower, self.names)

    def mean(self) -> np.ndarray:
        """The members' mean (L, D, H, W), float32."""
        return self.members.mean(axis=1, dtype=np.float64).astype(np.float32)

    def std(self) -> np.ndarray:
        """The members' std (ddof 1; 0 for one member) (L, D, H, W), float32."""
        if self.members.shape[1] < 2:
            return np.zeros_like(self.members[:, 0])
        return self.members.std(axis=1, ddof=1, dtype=np.float64).astype(np.float32)

    def quantiles(self, levels: np.ndarray, axis: int) -> np.ndarray:
        """The members' quantiles at ``levels`` (plotting positions (i − ½)/N), stacked along ``axis``."""
        q = np.quantile(self.members, np.asarray(levels), axis=1, method=QUANTILE_METHOD)
        return np.moveaxis(q, 0, axis).astype(np.float32)

    def exceedance(self, thresholds: np.ndarray, axis: int) -> np.ndarray:
        """The fraction of members above each of ``thresholds``, stacked along ``axis``."""
        p = [(self.members > float(t)).mean(axis=1) for t in np.asarray(thresholds)]
        return np.stack(p, axis=axis).astype(np.float32)

    def probability_of_zero(self) -> np.ndarray | None:
        """The fraction of members at the variable's lower bound, where it has one; else None."""
        if self.lower is None:
            return None
        return (self.members <= self.lower).mean(axis=1).astype(np.float32)

    def member_fields(self, n: int) -> np.ndarray:
        """The first ``n`` members (L, n, D, H, W)."""
        if n > self.members.shape[1]:
            raise EnsmlError(f"{n} members asked of {self.var}, {self.members.shape[1]} were drawn")
        return self.members[:, :n]

    def in_raw_order(self, raw: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
        """The first ``n`` members' values at every point, in the rank order of ``raw`` (L, M, D,
        H, W): ECC-Q of the members' own margins, whose quantiles at the centred levels
        (i − ½)/n they are (L, n, D, H, W); ``rng`` breaks ties among the raw members."""
        quantiles = np.sort(self.member_fields(n), axis=1)
        return ecc_quantile_members(quantiles, raw, n, "centred", axis=1, rng=rng)


def placeholder_members(meta: RunMeta, shape: tuple[int, ...], n: int) -> list[dict[str, np.ndarray]]:
    """Members of every variable of ``shape`` (L, D, H, W), ``n`` of them: what a product dataset
    made only for its structure (a zarr store's template) is made of."""
    members = np.zeros((shape[0], n, *shape[1:]), np.float32)
    return [{"members": members} for _ in meta.variables]


__all__ = [
    "GENERATIVE",
    "QUANTILE_METHOD",
    "GeneratedMembers",
    "init_index",
    "members_to_draw",
    "placeholder_members",
]
