"""ensml: machine learning on weather ensembles.

Spread estimation and post-processing with 3D U-Nets, spatial-parallel training and
probabilistic verification (CRPS family, calibration, extreme events).
"""

from ensml.errors import EnsmlError

__all__ = ["EnsmlError", "__version__"]
__version__ = "0.1.0"
