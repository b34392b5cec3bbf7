"""Operating-system errors as one line that names the final path, not the temporary.

A full disk must read ``evaluate: cannot write out/scores.nc: no space left on device``, not a
traceback through HDF5 naming ``.ensml/staging/…/scores.nc``. Libraries that hide the errno
(netCDF4 raises ``RuntimeError('NetCDF: HDF error')`` on a full disk) are diagnosed after the
fact by :func:`diagnose`.
"""

from __future__ import annotations

import errno
import os
import resource
from pathlib import Path

from ensml.errors import OS_REASONS, EnsmlError

#: What the user reads for the errors a write can meet; others use the system's text.
REASONS = OS_REASONS

# Bytes a probe writes to find the errno a library hid: enough to meet a full disk's last
# blocks, small enough to cost nothing.
_PROBE_BYTES = 1 << 16


def reason(err: BaseException) -> str:
    """The short text of ``err``: :data:`REASONS` for known errnos, else its own first line."""
    code = getattr(err, "errno", None)
    if code in REASONS:
        return REASONS[code]
    text = getattr(err, "strerror", None) or str(err).strip() or type(err).__name__
    return text.splitlines()[0][:1].lower() + text.splitlines()[0][1:]


def write_error(command: str, path: str | os.PathLike[str], err: BaseException) -> EnsmlError:
    """``<command>: cannot write <path>: <reason>`` for ``err`` met while writing ``path``."""
    return EnsmlError(f"{command}: cannot write {path}: {reason(err)}")


def diagnose(where: str | os.PathLike[str], written: str | os.PathLike[str] | None = None) -> int | None:
    """The errno behind a write that failed without one, or None when nothing explains it.

    Parameters
    ----------
    where
        An existing folder on the file system that was written (the run's staging folder).
    written
        The temporary the failed write produced, if any: a file at least as large as the
        process's ``RLIMIT_FSIZE`` (bytes) means ``EFBIG``.

    Returns
    -------
    int or None
        ``EROFS`` for a read-only mount, ``EFBIG`` for the size limit, or the errno of a small
        probe write into ``where`` (``ENOSPC``, ``EDQUOT``, …); None when the probe succeeds.
    """
    try:
        if os.statvfs(where).f_flag & os.ST_RDONLY:
            return errno.EROFS
    except OSError as err:
        return err.errno
    limit = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
    if written is not None and limit != resource.RLIM_INFINITY:
        try:
            if _size(Path(written)) >= limit:
                return errno.EFBIG
        except OSError:
            pass
    probe = Path(where) / f".probe-{os.getpid()}"
    try:
        with open(probe, "wb") as f:
            f.write(b"\0" * _PROBE_BYTES)
            f.flush()
            os.fsync(f.fileno())
    except OSError as err:
        return err.errno
    finally:
        probe.unlink(missing_ok=True)
    return None


def _size(path: Path) -> int:
    """Largest file size (bytes) at ``path``: a file, or the largest file in a folder."""
    if not path.is_dir():
        return path.stat().st_size
    sizes = [(Path(d) / f).stat().st_size for d, _, files in os.walk(path) for f in files]
    return max(sizes, default=0)


__all__ = ["REASONS", "diagnose", "reason", "write_error"]
