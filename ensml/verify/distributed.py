"""``evaluate --cluster``: blocks of init times scored by dask workers, joined on the client.

The unit of work is one lead and one block of ``init_block`` consecutive init times of the frame.
A worker opens the frame itself from the same inputs (:class:`FrameSource`: the paths, made
absolute, and the options; opened once per worker process and kept), reads only its block's
fields at that lead, checks them as ``evaluate`` does, and returns the block's
:class:`~ensml.verify.blocks.VariableParts`: one number per source, init time and point (the CRPS
of every ensemble and distribution, the analysis, the spread estimates) and the Hersbach sums
per init time. The members never leave the worker, so a worker holds one block whatever the
length of the archive. The client joins each lead's blocks in init order
(:func:`~ensml.verify.blocks.join_parts`) and computes the rows from them as the single-process
run does (:func:`~ensml.verify.frame_scores.score_frame`): the tables are the same, to the last
bit.

At most a few blocks per worker are in flight, and a lead's parts are freed once its rows are
made, so the client holds about one lead's parts. The cluster is the one of ``postprocess``
(:mod:`ensml.cluster`): the supervisor looks at it about once a second and stops the run with
one line when it cannot go on; a signal stops it at the next result; nothing is written then.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any, Protocol

import dask
import numpy as np
import xarray as xr

from ensml.cluster.interrupt import critical, poll
from ensml.cluster.supervisor import Supervisor
from ensml.data.frame import LeadFrame
from ensml.errors import EnsmlError
from ensml.progress import Progress
from ensml.times import format_lead
from ensml.verify.blocks import VariableParts, join_parts, variable_parts
from ensml.verify.frame_scores import GridFrame, grid_frame, read_lead
from ensml.verify.options import Selection, Sources

#: Seconds to fetch a finished block's parts before looking at the cluster again.
GATHER_S = 5.0
#: Held while a block is read in this process (see :func:`score_block`).
_READING = threading.Lock()


@dataclass(frozen=True)
class FrameSource:
    """What a worker opens the frame from: ``evaluate``'s grid inputs (see
    :func:`~ensml.verify.frame_scores.grid_frame`), every path absolute (workers may run in
    another folder)."""

    forecast: str | tuple[str, ...]
    analysis: str | tuple[str, ...]
    sources: Sources
    selection: Selection
    reader: Any = None
    analysis_reader: Any = None

    @classmethod
    def of(
        cls,
        forecast: str | list[str],
        analysis: str | list[str],
        sources: Sources,
        selection: Selection,
        reader: Any = None,
        analysis_reader: Any = None,
    ) -> FrameSource:
        paths = Sources(*(_absolute(getattr(sources, f)) for f in sources.__dataclass_fields__))
        return cls(_absolute(forecast), _absolute(analysis), paths, selection, reader, analysis_reader)

    def open(self) -> GridFrame:
        """The frame, opened and checked (once per process: kept for the next blocks)."""
        key = repr(self)
        if key not in _FRAMES:
            _FRAMES.clear()  # one run's frame at a time
            _FRAMES[key] = grid_frame(
                _listed(self.forecast),
                _listed(self.analysis),
                self.sources,
                self.selection,
                reader=self.reader,
                analysis_reader=self.analysis_reader,
            )
        return _FRAMES[key]

    def hook(self, make: HookFactory) -> CollectedHook:
        """``make(frame)``, made once per process for this frame (a report's climatology is
        computed once per worker)."""
        key = f"{self!r} {make!r}"
        if key not in _HOOKS:
            _HOOKS.clear()
            _HOOKS[key] = make(self.open())
        return _HOOKS[key]


_FRAMES: dict[str, GridFrame] = {}


class CollectedHook(Protocol):
    """A :data:`~ensml.verify.frame_scores.LeadHook` that runs on the workers: what it collected
    is taken out there (:meth:`take`) and put into the client's own (:meth:`put`), lead by lead
    in order, so the client's holds what one process would have collected."""

    def __call__(self, lf: LeadFrame, var: str) -> None: ...

    def take(self) -> Any:
        """What was collected since the last take (a plain, picklable value), forgotten here."""
        ...

    def put(self, piece: Any) -> None:
        """Add what a worker took."""
        ...


#: Makes a worker's hook from the frame (e.g. ``ensml report``'s ``LeadScores.on_worker``).
HookFactory = Callable[[GridFrame], CollectedHook]
_HOOKS: dict[str, CollectedHook] = {}


def forget_frames() -> None:
    """Forget the frames and hooks this process opened (a worker's next block opens them again)."""
    _FRAMES.clear()
    _HOOKS.clear()


def _absolute(paths: str | list[str] | tuple[str, ...] | None) -> Any:
    if paths is None:
        return None
    if isinstance(paths, str):
        return os.path.abspath(paths)
    return tuple(os.path.abspath(p) for p in paths)


def _listed(paths: str | tuple[str, ...]) -> str | list[str]:
    return paths if isinstance(paths, str) else list(paths)


def score_block(
    source: FrameSource,
    lead: np.timedelta64,
    inits: np.ndarray,
    fair: bool,
    missing_forecast: bool,
    hook: HookFactory | None = None,
) -> tuple[dict[str, VariableParts], Any]:
    """On a worker: every variable's parts at ``lead`` on the init times ``inits``, and what
    ``hook`` (made once per worker) collected of them (None without one).

    The block is read in this task's own thread (dask's synchronous scheduler): otherwise the
    lazy reads would go back to the cluster as tasks of their own, on other workers and threads,
    where netCDF files that xarray's file cache closes under a concurrent read fail with
    ``NetCDF: HDF error`` (seen at 60 inits of 361 × 720).

    Once read, the block's files are closed (:func:`close_files`), so that a worker's memory does
    not grow with the files of the archive it has read. One block is read at a time in a process
    (HDF5 serialises a process's netCDF reads anyway), so no file is closed under another read.
    """
    with dask.config.set(scheduler="synchronous"):
        with _READING:
            grid = source.open()
            collect = source.hook(hook) if hook is not None else None  # made once: it may read too
            frame = replace(grid.frame, inits=inits)
            lf = read_lead(frame, lead, missing_forecast)
            close_files()
        parts = {}
        for var in frame.variables:
            parts[var] = variable_parts(frame, lf, var, grid.subset, fair, grid.families)
            if collect is not None:
                collect(lf, var)
        return parts, (collect.take() if collect is not None else None)


def close_files() -> None:
    """Close the files xarray keeps open in this process, but one; each reopens at its next read.

    netCDF keeps up to 64 MiB of decompressed chunks per variable of every open file (netCDF-C's
    default chunk cache): a worker that kept each file of a 60-init 361 × 720 archive open held
    8.5–9.4 GB. Shrinking xarray's file cache to one file closes the others; it is then restored.
    """
    with xr.set_options(file_cache_maxsize=1):
        pass


def init_blocks(inits: np.ndarray, size: int) -> list[np.ndarray]:
    """``inits`` in consecutive blocks of ``size`` (the last one shorter)."""
    return [inits[i : i + size] for i in range(0, len(inits), size)]


@dataclass
class _Unit:
    lead: int  # index in the frame's leads
    block: int  # index in the lead's blocks
    inits: np.ndarray


class ClusterBlocks:
    """Each lead's joined parts, its blocks scored on the cluster of ``client``
    (a :class:`~ensml.verify.frame_scores.BlockParts`)."""

    def __init__(
        self,
        client: Any,
        supervisor: Supervisor | None,
        source: FrameSource,
        grid: GridFrame,
        init_block: int,
        fair: bool = False,
        missing_forecast: bool = False,
        hook: HookFactory | None = None,
        receive: CollectedHook | None = None,
    ) -> None:
        self.client, self.supervisor = client, supervisor or Supervisor(client)
        self.source, self.fair, self.missing_forecast = source, fair, missing_forecast
        self.hook, self.receive = hook, receive
        self.leads = grid.frame.leads
        self.blocks = init_blocks(grid.frame.inits, init_block)
        self.done = 0

    @property
    def total(self) -> int:
        return len(self.leads) * len(self.blocks)

    def parts(self) -> Iterator[dict[str, VariableParts]]:
        """``{variable: parts}`` of each lead, in order (see the module doc)."""
        from distributed import wait

        units = iter(_Unit(i, j, b) for i in range(len(self.leads)) for j, b in enumerate(self.blocks))
        owner: dict[Any, _Unit] = {}  # future → its unit
        held: dict[int, dict[int, dict[str, VariableParts]]] = {}  # lead → block → parts
        progress = Progress("evaluate", self.total, "blocks")
        supervisor, nb = self.supervisor, len(self.blocks)

        def top_up() -> None:
            # a few blocks per worker in flight; the parts held for later leads stay bounded too
            cap = max(4, 2 * supervisor.workers)  # workers may join later (batch jobs)
            waiting = sum(len(b) for b in held.values())
            while len(owner) < cap and waiting + len(owner) < nb + cap:
                unit = next(units, None)
                if unit is None:
                    return
                lead = self.leads[unit.lead]
                args = (self.source, lead, unit.inits, self.fair, self.missing_forecast, self.hook)
                owner[self.client.submit(score_block, *args, pure=False)] = unit

        try:
            with critical():  # signals stop the loop at poll(), never inside a call to the scheduler
                supervisor.watch(0, self.total)
                top_up()
                for lead in range(len(self.leads)):
                    while len(held.get(lead, {})) < nb:
                        poll()
                        supervisor.watch(self.done, self.total)
                        try:
                            finished = wait(list(owner), timeout=0.5, return_when="FIRST_COMPLETED").done
                        except TimeoutError:
                            continue
                        for future in finished:
                            parts = self._result(future, owner[future])
                            if parts is not None:
                                unit = owner.pop(future)
                                held.setdefault(unit.lead, {})[unit.block] = parts
                                self.done += 1
                                progress.advance(
                                    f"+{format_lead(self.leads[unit.lead])}, inits {unit.block + 1}/{nb}"
                                )
                        top_up()
                    blocks = [held[lead][j] for j in range(nb)]
                    del held[lead]
                    if self.receive is not None:
                        for _, piece in blocks:
                            self.receive.put(piece)
                    yield {var: join_parts([parts[var] for parts, _ in blocks]) for var in blocks[0][0]}
                    top_up()
        finally:
            progress.close()
            for future in owner:
                future.cancel()

    def _result(self, future: Any, unit: _Unit) -> tuple[dict[str, VariableParts], Any] | None:
        """A block's parts; None when they cannot be fetched within :data:`GATHER_S` (its worker
        died after scoring it: distributed scores it again)."""
        try:
            parts = future.result(timeout=GATHER_S)
        except TimeoutError:
            return None
        except EnsmlError:  # the inputs' own one line (a NaN, an unreadable file): as in one process
            raise
        except Exception as exc:
            from distributed import KilledWorker

            if not isinstance(exc, KilledWorker):
                raise
            first, last = (str(np.datetime_as_string(t, unit="h")) for t in unit.inits[[0, -1]])
            raise EnsmlError(
                f"evaluate: dask workers died while scoring the init times {first} to {last} at "
                f"+{format_lead(self.leads[unit.lead])} (out of memory? a smaller --init_block holds less); "
                "nothing written"
            ) from None
        future.release()
        return parts


__all__ = [
    "ClusterBlocks",
    "CollectedHook",
    "FrameSource",
    "HookFactory",
    "forget_frames",
    "init_blocks",
    "score_block",
]
