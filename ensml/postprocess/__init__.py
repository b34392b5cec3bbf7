"""Apply trained models to new forecasts at scale: ``ensml postprocess``.

Job planning (:mod:`.plan`), the per-unit worker (:mod:`.worker`), the manifest (:mod:`.manifest`),
ensemble copula coupling and Gaussian products (:mod:`.ecc`, :mod:`.products`), the options
(:mod:`.options`); the cluster it runs on is :mod:`ensml.cluster`'s. The names below are
imported on first use, so ``import ensml.postprocess.options`` (the command line's types) loads
no torch or xarray.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ensml.lazy import lazy_names

if TYPE_CHECKING:
    from ensml.cluster.options import JobQueue
    from ensml.postprocess.ecc import ecc_levels, ecc_members, exceedance, gaussian_quantiles
    from ensml.postprocess.options import Products
    from ensml.postprocess.run import postprocess

# name -> module, imported on first access (PEP 562)
_LAZY = {
    "JobQueue": "ensml.cluster.options",
    "Products": "ensml.postprocess.options",
    "ecc_levels": "ensml.postprocess.ecc",
    "ecc_members": "ensml.postprocess.ecc",
    "exceedance": "ensml.postprocess.ecc",
    "gaussian_quantiles": "ensml.postprocess.ecc",
    "postprocess": "ensml.postprocess.run",
}


__getattr__, __dir__ = lazy_names(globals(), _LAZY)

__all__ = [
    "JobQueue",
    "Products",
    "ecc_levels",
    "ecc_members",
    "exceedance",
    "gaussian_quantiles",
    "postprocess",
]
