"""Data: open and validate ensembles, the synthetic ensemble, samples for training, outputs.

Readers open netCDF, GRIB and zarr files (recognised by content) lazily and rename what other
sources call the dimensions to the names of :mod:`ensml.names`; :class:`EnsembleDataModule`
splits init dates into train / validation / test and serves batches of float32 tensors; every
output is written through an output folder of :mod:`ensml.data.outputs` (ownership ledger,
lock, staging, whole or not at all).

The torch-based names (:class:`EnsembleDataModule`, :class:`EnsembleSamples`,
:class:`EpochSampler`) are imported on first use, so ``import ensml.data`` does not import torch
or Lightning. The synthetic ensemble and the archive writer are the modules
:mod:`ensml.data.synth.generate` (:func:`ensml.data.synth.generate.synth`, ``ensml data synth``) and
:mod:`ensml.data.archive` (:func:`ensml.data.archive.archive`, ``ensml data archive``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ensml.data.layouts.formats import detect_format
from ensml.data.layouts.grib import open_grib
from ensml.data.normalise import normalise
from ensml.data.open import load_dataset, open_analysis, open_dataset, open_forecast
from ensml.data.splits import split_init_times
from ensml.data.static import location_channels, read_static
from ensml.data.stats import compute_stats
from ensml.lazy import lazy_names

if TYPE_CHECKING:
    from ensml.data.datamodule import EnsembleDataModule
    from ensml.data.samples import EnsembleSamples
    from ensml.data.sampling import EpochSampler

# name -> module, imported on first access (PEP 562): these need torch (and Lightning).
_LAZY = {
    "EnsembleDataModule": "ensml.data.datamodule",
    "EnsembleSamples": "ensml.data.samples",
    "EpochSampler": "ensml.data.sampling",
}


__getattr__, __dir__ = lazy_names(globals(), _LAZY)

__all__ = [
    "EnsembleDataModule",
    "EnsembleSamples",
    "EpochSampler",
    "compute_stats",
    "detect_format",
    "load_dataset",
    "location_channels",
    "normalise",
    "open_analysis",
    "open_dataset",
    "open_forecast",
    "open_grib",
    "read_static",
    "split_init_times",
]
