"""ensml: machine learning on weather ensembles.

Spread estimation and post-processing with 3D U-Nets, spatial-parallel training and
probabilistic verification (CRPS family, calibration, extreme events).
"""

import importlib.util

from ensml.errors import EnsmlError

# pyproj (cartopy's maps) must load its PROJ library before eccodes does: the eccodes wheel's
# eckitlib loads its own libproj and libsqlite3 globally, after which pyproj cannot open its
# database and the process aborts at exit ("double free"). xarray imports eccodes whenever it
# guesses a file's engine, so load pyproj first, here.
if importlib.util.find_spec("pyproj") is not None:
    import pyproj  # noqa: F401

__all__ = ["EnsmlError", "__version__"]
__version__ = "0.1.0"
