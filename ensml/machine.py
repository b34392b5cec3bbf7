"""What this machine can run: its CPU cores, and how many processes or threads per core are worth it.

One fact for every check of a count the user sets (DataLoader workers, prefetch readers, local
ranks, local dask workers × threads): beyond :data:`PER_CORE` per core a run only thrashes, or
hangs starting them, so it is refused in one line instead.
"""

from __future__ import annotations

import os

#: Processes (or threads) per CPU core beyond which a run on CPU would only thrash.
PER_CORE = 4


def cpu_cores() -> int:
    """The CPU cores this process may run on (its affinity where the OS says, else all)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


__all__ = ["PER_CORE", "cpu_cores"]
