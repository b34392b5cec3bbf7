"""The options and the run of ``evaluate --cluster`` and ``report --cluster``.

:func:`cluster_spec` turns a verb's cluster options into the shared
:class:`~ensml.cluster.spec.ClusterSpec` (checked before any work), :func:`check_blocks`
refuses what blocks of init times cannot score, and :func:`on_cluster` runs the scoring with the
cluster started or joined, supervised and closed (:mod:`ensml.cluster`), the blocks scored by
:class:`~ensml.verify.distributed.ClusterBlocks`.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import xarray as xr

from ensml.cluster.connection import Connection
from ensml.cluster.interrupt import interrupted, stopping_on_signals
from ensml.cluster.options import ClusterKind, JobQueue
from ensml.cluster.spec import ClusterSpec
from ensml.data.outputs import STATE_DIR
from ensml.errors import EnsmlError
from ensml.names import TIME
from ensml.progress import note
from ensml.verify.distributed import ClusterBlocks, CollectedHook, FrameSource, HookFactory
from ensml.verify.frame_scores import GridFrame
from ensml.verify.thresholds import bounded_variables

#: Init times per block (``init_block``): a worker holds one block at one lead, all members.
INIT_BLOCK = 4
T = TypeVar("T")


@dataclass(frozen=True)
class EvaluateCluster:
    """The cluster of an ``evaluate`` or ``report`` run and its blocks' size (:func:`cluster_spec`)."""

    spec: ClusterSpec
    init_block: int = INIT_BLOCK


def cluster_spec(
    command: str,
    cluster: ClusterKind = "none",
    workers: int | None = None,
    scheduler_file: str | None = None,
    scheduler_address: str | None = None,
    jobqueue: JobQueue | None = None,
    out_dir: str | None = None,
    init_block: int = INIT_BLOCK,
) -> EvaluateCluster | None:
    """The cluster asked for by ``command``'s options, checked (None: in this process).

    A scheduler to join (``scheduler_file``, ``scheduler_address``) is a cluster without
    ``cluster: local`` being said. The jobs' batch logs go to ``<out_dir>/.ensml/logs`` (or
    ``jobqueue.log_directory``), not to the folder ensml was started in.

    Raises
    ------
    EnsmlError
        One line, before anything is done: ``workers`` without a cluster, ``init_block`` below
        1, and whatever :meth:`~ensml.cluster.spec.ClusterSpec.check` refuses (a scheduler
        file that does not exist, sbatch/qsub not on PATH, impossible job settings).
    """
    joins = bool(scheduler_file or scheduler_address)
    kind = "local" if cluster == "none" and joins else cluster
    if init_block < 1:
        raise EnsmlError(f"{command}: init_block must be at least 1, got {init_block}")
    if kind == "none":
        if workers is not None:
            raise EnsmlError(
                f"{command}: workers {workers} is for a cluster; with cluster: none the scoring runs in "
                "this process (set cluster: local)"
            )
        return None
    logs = os.path.join(os.path.abspath(out_dir), STATE_DIR, "logs") if out_dir else None
    spec = ClusterSpec(
        kind=kind,
        workers=workers,
        scheduler_file=scheduler_file,
        scheduler_address=scheduler_address,
        jobqueue=jobqueue or JobQueue(),
        log_dir=logs,
        command=command,
        recorded=False,
    )
    spec.check(submit=True)
    return EvaluateCluster(spec, init_block)


def check_options(
    command: str, *, stations: bool = False, multivariate: bool = False, thresholds: object = None
) -> None:
    """Refuse, on a cluster, the options whose scores need more than blocks of init times:
    station observations, ``multivariate`` (whole fields of every init time) and ``thresholds``
    (event scores need each lead's fields at once)."""
    if stations:
        raise EnsmlError(
            f"{command}: cluster scores gridded forecasts against an analysis; station observations "
            "are scored in this process (cluster: none)"
        )
    if multivariate:
        raise EnsmlError(
            f"{command}: multivariate scores whole fields of every init time at once; score them "
            "in this process (cluster: none)"
        )
    if thresholds:
        raise EnsmlError(
            f"{command}: thresholds: event scores need each lead's fields at once; score them in "
            "this process (cluster: none)"
        )


def check_blocks(
    grid: GridFrame, thresholds: dict[str, list[float]] | None, command: str = "evaluate"
) -> None:
    """Refuse what blocks of init times cannot score: the event scores (Brier, reliability,
    SEEPS, FSS) of the bounded variables, which need each lead's fields at once."""
    bounded = bounded_variables(grid.frame, grid.families, thresholds)
    if bounded:
        raise EnsmlError(
            f"{command}: {', '.join(bounded)} get event scores (a family bounded below or thresholds), "
            "which need each lead's fields at once: score them in this process (cluster: none), or "
            "leave them out (variables)"
        )


def analysis_chunks_note(analysis: xr.Dataset, variables, init_block: int, command: str) -> str | None:
    """A line for an analysis that stores more times in a chunk than a block of ``init_block``
    init times reads (None if it does not): a worker closes a block's files, so every block
    decompresses those chunks whole again, and the work grows with the square of the archive
    (``docs/guide/cluster.md``)."""
    for var in variables:
        per_chunk = analysis[var].encoding.get("preferred_chunks", {}).get(TIME, 1)
        if per_chunk > init_block:
            return (
                f"{command}: the analysis stores {var} {per_chunk} times to a chunk, and every block of "
                f"{init_block} init times decompresses such chunks whole; stored one time to a chunk it "
                "reads faster on a cluster"
            )
    return None


def on_cluster(
    cluster: EvaluateCluster,
    grid: GridFrame,
    source: FrameSource,
    score: Callable[[ClusterBlocks], T],
    fair: bool = False,
    missing_forecast: bool = False,
    hook: HookFactory | None = None,
    receive: CollectedHook | None = None,
) -> T:
    """``score(blocks)`` with ``grid``'s blocks of init times scored on ``cluster``: started or
    joined, supervised, closed (its jobs cancelled) however the run ends; a signal stops it
    with :class:`~ensml.errors.Interrupted` (nothing written).

    ``hook``: makes the workers' hook of each block's fields, whose collections are put into
    ``receive`` block by block, in order (the report's, whose sums per init time make a block's
    scores part of its lead's: :mod:`ensml.report.lead_sums`)."""
    from ensml.cluster.workers import ScoringPlugin  # distributed: only for a run on a cluster

    spec, size = cluster.spec, cluster.init_block
    hint = analysis_chunks_note(grid.frame.analysis, grid.frame.variables, size, spec.command)
    if hint:
        note(hint)
    with stopping_on_signals(spec.command):  # a signal stops the run at a safe point
        conn, blocks = Connection(spec, ScoringPlugin()), None
        try:
            with conn:
                blocks = ClusterBlocks(
                    conn.client, conn.supervisor, source, grid, size, fair, missing_forecast, hook, receive
                )
                out = score(blocks)
                where = conn.where()
        except KeyboardInterrupt:  # the connection cancelled the jobs
            done, total = (blocks.done, blocks.total) if blocks else (0, 0)
            raise interrupted(f" after {done} of {total} blocks{conn.jobs_note()}; nothing written") from None
    note(f"{spec.command}: scored {blocks.total} blocks of init times on {where}")
    return out


__all__ = [
    "INIT_BLOCK",
    "EvaluateCluster",
    "analysis_chunks_note",
    "check_blocks",
    "check_options",
    "cluster_spec",
    "on_cluster",
]
