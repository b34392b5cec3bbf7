"""What every dask worker of a run sets up, whatever the verb: glibc's memory thresholds, peak memory.

:class:`ScoringPlugin` is the worker plugin of ``evaluate`` and ``report`` (``postprocess``'s own,
which also loads the checkpoints, calls :func:`restore_malloc_thresholds` too).
"""

from __future__ import annotations

import ctypes
import os
import sys
from typing import Any

from distributed import WorkerPlugin


def restore_malloc_thresholds() -> bool:
    """Undo the nanny's ``MALLOC_TRIM_THRESHOLD_`` for this worker (glibc only).

    distributed's nanny sets that variable so workers hand memory back to the OS. glibc then stops
    adapting its mmap threshold, and every tensor above 128 KiB is mmap'ed and unmapped anew;
    that made each unit 1.7x slower here. Memory per worker stays bounded without it, because a
    unit holds one init at a time (``benchmarks/postprocess.py`` measures the peak).
    """
    if "MALLOC_TRIM_THRESHOLD_" not in os.environ:
        return False
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:  # not glibc
        return False
    # The ceilings glibc's own adaptive thresholds reach on 64-bit: blocks up to 32 MiB are reused
    # from the heap, and up to 64 MiB of freed heap is kept rather than handed back each time.
    m_trim_threshold, m_mmap_threshold = -1, -3  # <malloc.h>
    return bool(libc.mallopt(m_mmap_threshold, 32 << 20) and libc.mallopt(m_trim_threshold, 64 << 20))


def peak_rss_mb() -> float:
    """This process's peak resident memory in MB.

    Linux's ``VmHWM`` belongs to the process's own address space; ``ru_maxrss`` (the fallback
    elsewhere) survives fork and exec, so a spawned worker would report its parent's peak.
    """
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    import resource

    scale = 1 if sys.platform != "darwin" else 1024  # bytes on macOS, KiB elsewhere
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / scale / 1024


class ScoringPlugin(WorkerPlugin):
    """Undo the nanny's malloc setting when a worker joins (:func:`restore_malloc_thresholds`):
    scoring allocates and frees arrays of many MB per block."""

    name = "ensml-scoring"

    def setup(self, worker: Any) -> None:
        restore_malloc_thresholds()


__all__ = ["ScoringPlugin", "peak_rss_mb", "restore_malloc_thresholds"]
