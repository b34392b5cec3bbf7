"""Completeness of a zarr store (v2 or v3): every array has its metadata, and every chunk of every
floating-point array is there.

An array whose ``.zarray``/``zarr.json`` is lost is left out by zarr without a word (or read
through the consolidated metadata, unchecked); ensml compares the store's folders and consolidated
metadata with the arrays' own metadata files first.

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


def _kind(folder: Path) -> str | None:
    """'array', 'group' or None (no zarr metadata) for a folder of a store, v2 or v3."""
    if (folder / ".zarray").is_file():
        return "array"
    if (folder / ".zgroup").is_file():
        return "group"
    if (folder / "zarr.json").is_file():
        return (
            "array" if json.loads((folder / "zarr.json").read_text()).get("node_type") == "array" else "group"
        )
    return None


def _lost(store: Path) -> list[tuple[str, str]]:
    """(variable, missing metadata file) of every array the store holds data or a consolidated
    entry for, but no metadata of its own: zarr skips such an array without a word."""
    meta = ".zarray" if (store / ".zgroup").is_file() or (store / ".zmetadata").is_file() else "zarr.json"
    lost, groups = [], [store]
    while groups:
        group = groups.pop()
        for child in sorted(c for c in group.iterdir() if c.is_dir() and not c.name.startswith(".")):
            kind = _kind(child)
            if kind == "group":
                groups.append(child)
            elif kind is None and any(f.is_file() for f in child.rglob("*")):
                name = child.relative_to(store).as_posix()
                lost.append((name, f"{name}/{meta}"))
    consolidated = store / ".zmetadata"
    if consolidated.is_file():  # v2: keys such as "t/.zarray"
        listed = [
            k.removesuffix("/.zarray")
            for k in json.loads(consolidated.read_text())["metadata"]
            if k.endswith("/.zarray")
        ]
        lost += [(name, f"{name}/.zarray") for name in listed if not (store / name / ".zarray").is_file()]
    elif (store / "zarr.json").is_file():  # v3: the root's consolidated_metadata
        doc = json.loads((store / "zarr.json").read_text()).get("consolidated_metadata") or {}
        listed = [k for k, v in (doc.get("metadata") or {}).items() if v.get("node_type") == "array"]
        lost += [(name, f"{name}/zarr.json") for name in listed if not (store / name / "zarr.json").is_file()]
    return sorted(set(lost))


def check_metadata(store: str | Path) -> None:
    """Raise if an array of the zarr ``store`` has lost its metadata (a folder of chunks, or an
    entry of the consolidated metadata, without its ``.zarray``/``zarr.json``).

    Without its metadata zarr leaves the variable out (or, through consolidated metadata, reads
    it while no other check sees it): a variable silently missing from the scores.

    Raises
    ------
    EnsmlError
        One line naming the store, the variable and the missing file.
    """
    store = Path(store)
    try:
        lost = _lost(store)
    except (ValueError, KeyError, TypeError, AttributeError) as exc:  # JSON or Unicode errors too
        raise EnsmlError(f"zarr store {store} has damaged metadata ({exception_reason(exc)})") from None
    if lost:
        name, file = lost[0]
        more = f" (and {len(lost) - 1} more)" if len(lost) > 1 else ""
        raise EnsmlError(
            f"zarr store {store}: variable {name!r} has lost its metadata ({file} is missing){more}; "
            "zarr would leave it out without a word: the store is damaged, copy it again"
        )


def read(path: Path, what: str, chunks: dict | str | None, options: ReaderOptions) -> xr.Dataset:
    """A zarr store (v2 or v3), lazily, after checking that no chunk is missing."""
    check_metadata(path)  # an array without metadata would be left out silently
    check_chunks(path)  # a missing chunk would read silently as fill values
    with warnings.catch_warnings():  # zarr v2 stores without consolidated metadata are fine
        warnings.filterwarnings("ignore", message="Failed to open Zarr store with consolidated")
        return open_with_xarray(path, what, chunks, "zarr")
