"""Reading one training sample from the files: what every reader, thread or process, runs.

Nothing here imports torch, so that a reader process (:mod:`ensml.data.staging`) starts in about
a second. :class:`SampleReader` opens the files on first use in the process that reads (HDF5
handles are never shared across a fork) and reads one init time per sample without dask
threads; :meth:`SampleReader.staged` is what a sample's cache entry holds.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import dask
import numpy as np
import xarray as xr

from ensml.data.direct_netcdf import NetcdfChunks
from ensml.data.direct_read import DirectChunks, index_slice
from ensml.data.direct_zarr import ZarrChunks
from ensml.data.layouts.formats import detect_format
from ensml.data.layouts.options import ReaderOptions, as_reader
from ensml.data.open import expand_paths, open_analysis, open_forecast
from ensml.data.subset import Subset
from ensml.data.surface import read_levels
from ensml.errors import EnsmlError, exception_reason
from ensml.names import INIT_TIME, LATITUDE, LEAD_TIME, LEVEL, LONGITUDE, MEMBER, TIME
from ensml.times import parse_leads

MemberSampling = Literal["first", "random"]
Blocks = Mapping[str, np.ndarray]
# Axis order of one sample's forecast block (after the variable axis) and analysis block.
FORECAST_SAMPLE_DIMS = (LEAD_TIME, MEMBER, LEVEL, LATITUDE, LONGITUDE)
ANALYSIS_SAMPLE_DIMS = (LEVEL, LATITUDE, LONGITUDE)
FORECAST_TARGET_DIMS = FORECAST_SAMPLE_DIMS  # the spread target's read: the target leads


@dataclass(frozen=True)
class SampleSpec:
    """What one sample holds. V variables, L input leads, T target leads, D levels, K of M members.

    Lead times are ``timedelta64[ns]`` (:func:`ensml.times.parse_leads` makes them from hours or
    durations); the target leads are among the input leads.
    """

    variables: tuple[str, ...]
    levels: tuple[float, ...]
    input_leads: tuple[np.timedelta64, ...]
    target_leads: tuple[np.timedelta64, ...]  # hours or durations are parsed on creation
    k: int
    members: int

    def __post_init__(self) -> None:  # leads given as hours or durations become timedelta64
        object.__setattr__(self, "input_leads", tuple(parse_leads(self.input_leads)))
        object.__setattr__(self, "target_leads", tuple(parse_leads(self.target_leads)))

    @property
    def target_lead(self) -> np.timedelta64:
        """The last (furthest) target lead."""
        return self.target_leads[-1]

    @property
    def target_indices(self) -> list[int]:
        """Positions of the target leads among the input leads."""
        return [self.input_leads.index(lead) for lead in self.target_leads]

    @property
    def target_index(self) -> int:
        """Position of the last target lead among the input leads."""
        return self.target_indices[-1]


class SampleReader:
    """The arrays of the samples of one split, read from the files by init time.

    Picklable without its open files: a reader process (or a DataLoader worker) gets a copy and
    opens the files itself on its first read. Reads are thread-safe.

    Parameters
    ----------
    forecast, analysis
        The files, as the data module was given them (``analysis`` may be None).
    init_times
        The init time of each sample.
    spec
        What a sample holds.
    member_sampling
        ``"first"``: only members 0 … K-1 are read at the input leads; ``"random"``: every member.
    slab
        ``(latitude, longitude)`` index slices: only this part of the grid is read.
    targets
        Read the targets (the other members at the target leads, the analysis there).
    reader, analysis_reader
        How to read the forecast and analysis files.
    """

    def __init__(
        self,
        forecast: str | Path | Sequence[str | Path],
        analysis: str | Path | Sequence[str | Path] | None,
        init_times: np.ndarray,
        spec: SampleSpec,
        member_sampling: MemberSampling = "first",
        slab: tuple[slice, slice] | None = None,
        targets: bool = True,
        reader: ReaderOptions | dict | None = None,
        analysis_reader: ReaderOptions | dict | None = None,
    ) -> None:
        self.forecast_paths = forecast
        self.analysis_paths = analysis
        self.init_times = np.asarray(init_times, dtype="datetime64[ns]")
        self.spec = spec
        self.member_sampling = member_sampling
        self.slab = slab
        self.targets = targets
        self.readers = (reader, analysis_reader)
        self._lock = threading.Lock()
        self._fc: xr.Dataset | None = None
        self._an: xr.Dataset | None = None
        self._direct: tuple[DirectChunks | None, DirectChunks | None] = (None, None)

    def __getstate__(self) -> dict:
        # Never ship open file handles to another process.
        return {**self.__dict__, "_fc": None, "_an": None, "_lock": None, "_direct": (None, None)}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state, _lock=threading.Lock())

    def open(self) -> None:
        """Open the files (once; later calls return at once)."""
        with self._lock:
            if self._fc is not None:
                return
            spec = self.spec
            fc = open_forecast(self.forecast_paths, spec.variables, reader=self.readers[0])
            fc = select(fc, {LEVEL: list(spec.levels), LEAD_TIME: list(spec.input_leads)})
            an = None
            if self.analysis_paths is not None:
                an = open_analysis(self.analysis_paths, spec.variables, reader=self.readers[1])
                an = select(an, {LEVEL: list(spec.levels)})
            if self.slab is not None:
                # Lazy indexing: each read then fetches only this hyperslab from the file.
                box = {LATITUDE: self.slab[0], LONGITUDE: self.slab[1]}
                fc = fc.isel(box)
                an = None if an is None else an.isel(box)
            self._direct = (
                self._direct_chunks(self.forecast_paths, "forecast", self.readers[0], fc),
                None
                if an is None
                else self._direct_chunks(self.analysis_paths, "analysis", self.readers[1], an),
            )
            self._an, self._fc = an, fc

    def _direct_chunks(self, paths, what: str, reader, ds: xr.Dataset) -> DirectChunks | None:
        """The variables of one netCDF-4 file or zarr store, opened without renames, that read
        chunk by chunk (:mod:`ensml.data.direct_read`); None for anything else."""
        files = expand_paths(paths, what)
        if len(files) != 1 or as_reader(reader).rename:
            return None
        kind = {"hdf5": NetcdfChunks, "zarr": ZarrChunks}.get(detect_format(files[0]))
        return None if kind is None else kind.of(files[0], ds, self.spec.variables)

    def sample_bytes(self) -> int:
        """Bytes of decompressed data one read of a sample holds (opens the files)."""
        self.open()
        spec, fc = self.spec, self._fc
        field = len(spec.levels) * fc.sizes[LATITUDE] * fc.sizes[LONGITUDE] * 4  # float32
        members = spec.k * len(spec.input_leads)
        if self.member_sampling != "first":
            members = spec.members * len(spec.input_leads)
        elif self.targets:
            members += (spec.members - spec.k) * len(spec.target_leads)
        if self._an is not None:
            members += 1 + (len(spec.target_leads) if self.targets else 0)  # analysis fields
        return len(spec.variables) * members * field

    def threads_decompress(self) -> bool:
        """Whether reads decompress in parallel threads: zarr's do, and those of a forecast and
        analysis read chunk by chunk (:mod:`ensml.data.direct_read`; opens them)."""
        if detect_format(expand_paths(self.forecast_paths, "forecast")[0]) == "zarr":
            return True
        self.open()
        sources = [(self._fc, self._direct[0]), (self._an, self._direct[1])]
        return all(
            ds is None or (direct is not None and set(self.spec.variables) <= set(direct.variables))
            for ds, direct in sources
        )

    def read(self, index: int) -> dict[str, np.ndarray]:
        """The arrays of sample ``index``, read from disk.

        With ``member_sampling="first"`` only what the sample uses is read: members 0 … K-1 at
        the input leads (``fc_k``), and, for the spread target, the other members at the target
        lead alone, reduced at once to ``std_m``. A random subset changes with the epoch, so
        then every member is read (``fc``).
        """
        self.open()
        init, variables, spec = self.init_times[index], self.spec.variables, self.spec
        at, what = {INIT_TIME: init}, f"forecast {self.forecast_paths}"
        if self.member_sampling == "first":
            first_k = {MEMBER: Subset.first(spec.k).positions}
            direct = self._direct[0]
            fc_k = read_block(self._fc, at, FORECAST_SAMPLE_DIMS, variables, what, first_k, direct)
            blocks = {"fc_k": fc_k}
            if self.targets:
                leads = index_slice(spec.target_indices)
                others = {LEAD_TIME: leads, MEMBER: slice(spec.k, None)}
                rest = read_block(self._fc, at, FORECAST_TARGET_DIMS, variables, what, others, direct)
                fields = member_fields(fc_k[:, leads]) + member_fields(rest)
                blocks["std_m"] = by_field(member_moments(fields)[1])
        else:
            blocks = {
                "fc": read_block(self._fc, at, FORECAST_SAMPLE_DIMS, variables, what, None, self._direct[0])
            }
        if self._an is not None:
            what = f"analysis {self.analysis_paths}"
            direct = self._direct[1]
            blocks["analysis_init"] = read_block(
                self._an, {TIME: init}, ANALYSIS_SAMPLE_DIMS, variables, what, None, direct
            )
            if self.targets:
                obs = [
                    read_block(
                        self._an, {TIME: init + lead}, ANALYSIS_SAMPLE_DIMS, variables, what, None, direct
                    )
                    for lead in spec.target_leads
                ]
                blocks["obs"] = np.concatenate(obs)  # (T·V, D, H, W), lead-major
        return blocks

    def staged(self, index: int) -> dict[str, np.ndarray]:
        """What sample ``index``'s cache entry holds: :meth:`read`, with the members reduced.

        With ``member_sampling="first"`` the subset never changes, so ``fc_k`` becomes the
        model's inputs ``mean_k`` and ``std_k`` here, in the reader (a reader process sends and
        the cache keeps 2 fields per variable, lead and level instead of K); the numbers are
        :func:`subset_moments`'s, whoever calls it. A random subset keeps every member (``fc``).
        """
        blocks = self.read(index)
        if "fc_k" in blocks:
            blocks.update(subset_moments(blocks.pop("fc_k"), np.arange(self.spec.k), self.spec.k))
        return blocks


def by_field(x: np.ndarray) -> np.ndarray:
    """(V, T, D, H, W) → (T·V, D, H, W), lead-major: the fields of the outputs."""
    return np.ascontiguousarray(x.swapaxes(0, 1)).reshape(-1, *x.shape[2:])


def select(ds: xr.Dataset, labels: dict[str, Sequence]) -> xr.Dataset:
    """``ds.sel(labels)``, lazily, with evenly spaced positions as slices.

    Every later read of the result then indexes the file with slices: array indexers cost 3x
    more a read in zarr v2 and netCDF, and 20-40x more in a sharded zarr v3 store.
    """
    return ds.isel(
        {dim: index_slice([ds.indexes[dim].get_loc(v) for v in values]) for dim, values in labels.items()}
    )


def read_block(
    ds: xr.Dataset,
    indexer: dict,
    dims: Sequence[str],
    variables: Sequence[str],
    what: str,
    positions: dict | None = None,
    direct: DirectChunks | None = None,
) -> np.ndarray:
    """Read ``variables`` at ``indexer`` as one float32 array (V, *dims), refusing NaN/inf.

    ``indexer`` selects by label (a time), ``positions`` by position (``{member: slice(0, 5)}``);
    only the selected hyperslab is read from the file: chunk by chunk for the variables
    ``direct`` reads (the same values), through xarray without dask threads for the others
    (safe in DataLoader and dask workers). The error names ``what`` (the file), the variables
    and the selected time.
    """
    try:
        # Positions, then xarray Variables (not DataArray.sel per variable: its label lookups
        # cost more than reading a 32 x 64 sample).
        at = {dim: ds.indexes[dim].get_loc(value) for dim, value in indexer.items()}
        at.update(positions or {})
        with dask.config.set(scheduler="synchronous"):
            n_levels = ds.sizes.get(LEVEL, 1)
            arr = np.stack([_read(ds, v, at, dims, n_levels, direct) for v in variables])
    except Exception as exc:  # corrupt data behind readable metadata, a missing time
        when = str(next(iter(indexer.values())))[:16]
        reason = exception_reason(exc)
        raise EnsmlError(f"{what} cannot be read at {when} ({reason})") from None
    arr = arr.astype(np.float32, copy=False)
    if not np.isfinite(arr).all():
        bad = [v for v, a in zip(variables, arr) if not np.isfinite(a).all()]
        when = str(next(iter(indexer.values())))[:16]
        raise EnsmlError(f"{what} has NaN or infinite values in {', '.join(bad)} at {when}")
    return arr


def _read(
    ds: xr.Dataset, var: str, at: dict, dims: Sequence[str], n_levels: int, direct: DirectChunks | None
) -> np.ndarray:
    """``var`` at positions ``at`` as an array of ``dims``: chunk by chunk where ``direct`` reads
    it and it can (else through xarray); a surface variable repeated along the level axis."""
    da = ds.variables[var]
    if direct is None or var not in direct.variables:
        return _values(da.isel(at), dims, n_levels)
    flat = [d for d in dims if d != LEVEL or LEVEL in da.dims]
    arr = direct.read(var, at, flat)
    if arr is None:  # a chunk never written or the fill value: xarray's NaN says so
        return _values(da.isel(at), dims, n_levels)
    return arr if len(flat) == len(dims) else read_levels(arr, n_levels, list(dims).index(LEVEL))


def _values(da: xr.Variable, dims: Sequence[str], n_levels: int) -> np.ndarray:
    """``da`` read as an array of ``dims``; a surface variable repeated along the level axis."""
    if LEVEL in da.dims or LEVEL not in dims:
        return da.transpose(*dims).values
    flat = [d for d in dims if d != LEVEL]
    return read_levels(da.transpose(*flat).values, n_levels, list(dims).index(LEVEL))


def subset_moments(fc: np.ndarray, members: np.ndarray, k: int) -> dict[str, np.ndarray]:
    """Mean and std (ddof 1) of the member subset: the model inputs ``mean_k``, ``std_k``.

    ``fc`` is (V, L, M, D, H, W) float32; the results are (V, L, D, H, W). ``ensml predict`` and
    ``ensml postprocess`` both build their inputs here, so they feed the network the same bits.
    """
    fields = member_fields(fc, np.asarray(members))
    mean, std = member_moments(fields, ddof=1 if k > 1 else 0)  # one member: no spread
    return {"mean_k": mean, "std_k": std if k > 1 else np.zeros_like(mean)}


def member_fields(fc: np.ndarray, members: Sequence[int] | None = None) -> list[np.ndarray]:
    """The members (axis 2 of ``fc``: V, L, M, ...) as views, in the order of ``members`` (all
    by default): what :func:`member_moments` takes, with no copy of a subset."""
    return [fc[:, :, m] for m in (range(fc.shape[2]) if members is None else members)]


def member_moments(fields: Sequence[np.ndarray], ddof: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Mean and standard deviation of the members ``fields`` (arrays of one shape and dtype).

    The same bits as ``np.stack(fields, axis=2)`` reduced by ``mean(axis=2)`` and
    ``std(axis=2, ddof=ddof)`` (numpy sums along an outer axis one member after another, then
    divides; the squared deviations the same way), with neither the stacked copy nor numpy's
    temporaries of every member: one pass a member, in three buffers the size of one member (what
    that saves a cold sample: the loader section of docs/guide/data.md).
    """
    total = np.add(fields[0], 0)  # a copy; from +0 as numpy's sum starts (-0.0 + 0 is 0.0)
    for field in fields[1:]:
        np.add(total, field, out=total)
    mean = np.divide(total, len(fields), out=total)
    var, dev = np.subtract(fields[0], mean), np.empty_like(mean)
    np.multiply(var, var, out=var)
    for field in fields[1:]:
        np.subtract(field, mean, out=dev)
        np.add(var, np.multiply(dev, dev, out=dev), out=var)
    np.divide(var, len(fields) - ddof, out=var)
    return mean, np.sqrt(var, out=var)


__all__ = [
    "ANALYSIS_SAMPLE_DIMS",
    "FORECAST_SAMPLE_DIMS",
    "FORECAST_TARGET_DIMS",
    "Blocks",
    "MemberSampling",
    "SampleReader",
    "SampleSpec",
    "by_field",
    "index_slice",
    "member_fields",
    "member_moments",
    "read_block",
    "select",
    "subset_moments",
]
