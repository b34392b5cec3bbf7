"""Completeness of a zarr store (v2 or v3): every chunk of every floating-point array is there.

Zarr reads a chunk that is not in the store as the array's fill value, silently: a store copied
in part (an interrupted ``gsutil cp``, a lost object) looks whole. ensml lists the chunk keys
each array should have (from its metadata: shape, chunk shape, key separator) against what is
on disk before opening, without reading any data. Stores that ensml writes hold every chunk,
also those equal to the fill value (``write_empty_chunks``). Integer and boolean arrays are not
checked: writers legitimately omit their all-fill chunks (a mask of zeros), whereas a missing
floating-point chunk reads as NaN, which ensml would refuse later with a vaguer message.
"""

from __future__ import annotations

import itertools
import json
import math
import warnings
from pathlib import Path

import xarray as xr

from ensml.data.layouts.netcdf import open_with_xarray
from ensml.data.layouts.options import ReaderOptions
from ensml.errors import EnsmlError, exception_reason


def _arrays(store: Path) -> list[tuple[Path, dict, int]]:
    """(folder, metadata, zarr version) of every array in the store."""
    out = []
    for meta in sorted(store.rglob(".zarray")):
        out.append((meta.parent, json.loads(meta.read_text()), 2))
    for meta in sorted(store.rglob("zarr.json")):
        doc = json.loads(meta.read_text())
        if doc.get("node_type") == "array":
            out.append((meta.parent, doc, 3))
    return out


def _layout(meta: dict, version: int) -> tuple[list[int], list[int], str, str, bool]:
    """(shape, chunk shape, key prefix, separator, floating point) of an array's metadata.

    For a sharded v3 array the chunk grid is the grid of shards, which are the stored objects.
    """
    if version == 2:
        floating = str(meta.get("dtype", "")).lstrip("<>|=")[:1] in ("f", "c")
        return meta["shape"], meta["chunks"], "", meta.get("dimension_separator") or ".", floating
    grid = meta.get("chunk_grid", {}).get("configuration", {})
    encoding = meta.get("chunk_key_encoding", {"name": "default"})
    sep = encoding.get("configuration", {}).get("separator", "/" if encoding["name"] == "default" else ".")
    prefix = "c" + sep if encoding["name"] == "default" else ""
    floating = str(meta.get("data_type", "")).startswith(("float", "complex"))
    return meta["shape"], grid.get("chunk_shape", meta["shape"]), prefix, sep, floating


def check_chunks(store: str | Path) -> None:
    """Raise if a floating-point array of the zarr ``store`` lacks a chunk.

    Raises
    ------
    EnsmlError
        One line naming the store, the variable, the first missing chunk key and how many are
        missing.
    """
    store = Path(store)
    try:
        arrays = [(folder, *_layout(meta, version)) for folder, meta, version in _arrays(store)]
    except (ValueError, KeyError, TypeError, AttributeError) as exc:  # JSON or Unicode errors too
        raise EnsmlError(f"zarr store {store} has damaged metadata ({exception_reason(exc)})") from None
    for folder, shape, chunks, prefix, sep, floating in arrays:
        if not floating or not shape or 0 in shape:
            continue
        counts = [math.ceil(n / c) for n, c in zip(shape, chunks, strict=True)]
        present = {str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file()}
        if sep != "/":
            present = {p.replace("/", sep) for p in present}
        missing = [
            prefix + sep.join(map(str, idx))
            for idx in itertools.product(*(range(n) for n in counts))
            if prefix + sep.join(map(str, idx)) not in present
        ]
        if missing:
            name = folder.relative_to(store).as_posix() or "(root array)"
            total = math.prod(counts)
            raise EnsmlError(
                f"zarr store {store}: variable {name!r} is missing {len(missing)} of its {total} "
                f"chunks, e.g. {missing[0]!r} (a missing chunk would read as fill values; the "
                "store is incomplete, copy it again)"
            )


def read(path: Path, what: str, chunks: dict | str | None, options: ReaderOptions) -> xr.Dataset:
    """A zarr store (v2 or v3), lazily, after checking that no chunk is missing."""
    check_chunks(path)  # a missing chunk would read silently as fill values
    with warnings.catch_warnings():  # zarr v2 stores without consolidated metadata are fine
        warnings.filterwarnings("ignore", message="Failed to open Zarr store with consolidated")
        return open_with_xarray(path, what, chunks, "zarr")
