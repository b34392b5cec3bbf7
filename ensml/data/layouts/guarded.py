"""Data that cannot be decoded becomes one line naming the file and the variable, wherever it is read.

A file's metadata can be whole while a chunk of its data is not (a zarr chunk overwritten or cut
short): the failure then comes from the codec (blosc, zstd, zlib) at the moment the data is read,
which may be long after opening, in any verb, in a dask task or a data-loader worker. Checking
every chunk on open would read the whole input; instead the reader opens the file through
:class:`GuardedBackend`, an xarray backend that wraps every variable of the format's own
backend, so that any read of it, lazy or chunked, raises :class:`~ensml.errors.EnsmlError`
("forecast file x.zarr: variable 't' cannot be read (…)") instead of the codec's traceback.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import xarray as xr
from xarray.backends import BackendArray, BackendEntrypoint
from xarray.core import indexing

from ensml.errors import EnsmlError, exception_reason


class GuardedArray(BackendArray):
    """A variable of another backend, read through :meth:`__getitem__` with its failures named."""

    def __init__(self, variable: xr.Variable, path: str, name: str, what: str) -> None:
        self.variable, self.path, self.name, self.what = variable, path, name, what
        self.shape, self.dtype = variable.shape, variable.dtype

    def __getitem__(self, key: indexing.ExplicitIndexer) -> np.ndarray:
        return indexing.explicit_indexing_adapter(key, self.shape, indexing.IndexingSupport.OUTER, self._read)

    def _read(self, key: tuple) -> np.ndarray:
        try:
            return np.asarray(self.variable[key].values)
        except EnsmlError:
            raise
        except Exception as exc:  # a codec's error on a damaged chunk: RuntimeError, ValueError, …
            raise EnsmlError(
                f"{self.what} file {self.path}: variable {self.name!r} cannot be read "
                f"({exception_reason(exc)}); its data is damaged"
            ) from None


class GuardedBackend(BackendEntrypoint):
    """``engine=`` for :func:`xarray.open_dataset`: the dataset of backend ``inner_engine`` with
    every variable but the indexes (read on open) wrapped in a :class:`GuardedArray`."""

    description = "another backend's dataset, its read failures named (ensml)"

    def open_dataset(  # type: ignore[override]
        self,
        filename_or_obj: Any,
        *,
        drop_variables: Any = None,
        inner_engine: str = "zarr",
        what: str = "input",
    ) -> xr.Dataset:
        inner = xr.open_dataset(
            filename_or_obj, engine=inner_engine, drop_variables=drop_variables, cache=False
        )

        def guarded(name: str, var: xr.Variable) -> xr.Variable:
            if name in inner.indexes:
                return var
            data = indexing.LazilyIndexedArray(GuardedArray(var, str(filename_or_obj), name, what))
            return xr.Variable(var.dims, data, var.attrs, var.encoding)

        ds = xr.Dataset(
            {n: guarded(str(n), inner.variables[n]) for n in inner.data_vars},
            coords={n: guarded(str(n), inner.variables[n]) for n in inner.coords},
            attrs=inner.attrs,
        )
        ds.encoding = dict(inner.encoding)
        ds.set_close(inner.close)
        return ds


__all__ = ["GuardedArray", "GuardedBackend"]
