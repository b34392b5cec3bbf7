"""Apply trained models to new forecasts at scale: ``ensml postprocess``.

Job planning (:mod:`.plan`), the per-unit worker (:mod:`.worker`), the manifest and lock
(:mod:`.manifest`), ensemble copula coupling and Gaussian products (:mod:`.ecc`,
:mod:`.products`), outputs (:mod:`.outputs`) and the cluster factory (:mod:`.cluster`).
"""

from ensml.postprocess.ecc import ecc_levels, ecc_members, exceedance, gaussian_quantiles
from ensml.postprocess.options import JobQueue, Products
from ensml.postprocess.run import postprocess

__all__ = [
    "JobQueue",
    "Products",
    "ecc_levels",
    "ecc_members",
    "exceedance",
    "gaussian_quantiles",
    "postprocess",
]
