"""Reader processes: a sample's reads in parallel whatever the file format (HDMLP-style staging).

A cold epoch at full resolution is decompression: a 361 × 720 sample is some 40 compressed
chunks, about 0.25 s of zlib in netCDF's HDF5, and HDF5 is not thread-safe, so reader *threads*
reading through netCDF-C take turns on one lock (xarray's) and a second thread adds nothing.
Two kinds of file decompress in threads all the same, and ``auto`` keeps them on threads: a
netCDF-4 file or zarr v3 store whose variables are read chunk by chunk
(:mod:`ensml.data.direct_read`: decompressed outside the GIL) and any zarr store (zarr
decompresses a read's chunks in its own threads). For the others (several netCDF files,
netCDF-3, GRIB, renamed variables) :class:`Readers` stages samples in reader *processes*
(after HDMLP, Dryden et al., IPDPS'21): each process opens the files once and reads whole
samples (:meth:`SampleReader.staged <ensml.data.sample_read.SampleReader.staged>`,
chunk-aligned: one chunk per member field), reduces the K members to their mean and spread, and
sends the arrays back raw through a pipe.
The arrays are the same bits a read in this process gives.

This process is one of the readers (no start-up, no transfer); the others are processes. A
reader process starts in one to two seconds (it imports xarray and the readers, not torch);
until one is ready, reads run in this process, so staging never makes the first samples wait.
In ``auto`` mode the processes start only for samples of more than :data:`LARGE_SAMPLE_BYTES`
(a 361 × 720 sample of z and t at 2 levels, 5 of 10 members at 3 leads, reads 92 MB and takes
0.2–0.3 s from netCDF; a 32 × 64 one 0.7 MB and a few ms, where a process's start and the
transfer would not pay) whose reads cannot decompress in threads
(:meth:`SampleReader.threads_decompress <ensml.data.sample_read.SampleReader.threads_decompress>`).
A reader process that cannot start or exits is replaced by reads in this process, with one
warning. Reader processes exit when their requests pipe closes: at :meth:`Readers.close` or when
this process ends, however it ends.
"""

from __future__ import annotations

import os
import pickle
import select
import signal
import subprocess
import sys
import threading
import warnings
from pathlib import Path
from typing import Any, BinaryIO, Literal

import numpy as np

from ensml.data.sample_read import Blocks, SampleReader
from ensml.errors import EnsmlError, exception_reason

PrefetchReaders = Literal["auto", "processes", "threads"]
READER_MODES: tuple[str, ...] = ("auto", "processes", "threads")
#: Decompressed bytes a sample's read must exceed for ``auto`` to start reader processes.
LARGE_SAMPLE_BYTES = 16 * 2**20
_HEADER = 8  # bytes of a message's length


class ReaderGone(Exception):
    """A reader process exited or its pipe broke (the read is then made in this process)."""


def can_start_processes() -> bool:
    """Reader processes need POSIX pipes handed to a child (``pass_fds``)."""
    return os.name == "posix"


# -- the wire: length-prefixed pickles for messages, raw bytes for arrays ---------------------------
def _write_all(out: BinaryIO, data: memoryview) -> None:
    while data.nbytes:
        n = out.write(data)
        data = data[n:]


def _read_into(inp: BinaryIO, view: memoryview) -> None:
    while view.nbytes:
        n = inp.readinto(view)
        if not n:
            raise EOFError("pipe closed")
        view = view[n:]


def _send(out: BinaryIO, obj: Any) -> None:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    _write_all(out, memoryview(len(data).to_bytes(_HEADER, "little") + data))


def _recv(inp: BinaryIO) -> Any:
    size = bytearray(_HEADER)
    _read_into(inp, memoryview(size))
    data = bytearray(int.from_bytes(size, "little"))
    _read_into(inp, memoryview(data))
    return pickle.loads(data)


def _portable(exc: BaseException) -> BaseException:
    """``exc`` if it survives pickling, else an :class:`EnsmlError` saying what it was."""
    try:
        pickle.loads(pickle.dumps(exc))
        return exc
    except Exception:
        return EnsmlError(f"a reader process failed ({exception_reason(exc)})")


def serve(requests: int, results: int) -> None:
    """A reader process's loop: a pickled :class:`SampleReader`, then sample indices until EOF.

    Answers ``("ready", None)`` once the files are open (or ``("error", exc)``), then per index
    ``("ok", [(key, dtype, shape), ...])`` followed by each array's raw bytes, or
    ``("error", exc)``: the same error a read in the parent would raise.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    inp, out = open(requests, "rb", buffering=0), open(results, "wb", buffering=0)
    try:
        _serve(inp, out)
    except (EOFError, BrokenPipeError):  # the parent closed the pipes or ended: nothing to say
        pass


def _serve(inp: BinaryIO, out: BinaryIO) -> None:
    try:
        reader: SampleReader = _recv(inp)
        reader.open()
    except (EOFError, BrokenPipeError):
        raise
    except Exception as exc:
        _send(out, ("error", _portable(exc)))
        return
    _send(out, ("ready", None))
    while (index := _recv(inp)) is not None:
        try:
            arrays = {key: np.ascontiguousarray(a) for key, a in reader.staged(index).items()}
        except Exception as exc:
            _send(out, ("error", _portable(exc)))
            continue
        _send(out, ("ok", [(key, a.dtype.str, a.shape) for key, a in arrays.items()]))
        for a in arrays.values():
            if a.nbytes:
                _write_all(out, memoryview(a).cast("B"))


class ReaderProcess:
    """One reader process of a :class:`SampleReader` (started at once, ready about a second later)."""

    def __init__(self, reader: SampleReader) -> None:
        req_r, req_w = os.pipe()
        res_r, res_w = os.pipe()
        root = str(Path(__file__).resolve().parents[2])  # the ensml this process imported
        path = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH", "")) if p)
        code = f"from ensml.data.staging import serve; serve({req_r}, {res_w})"
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-c", code],
                pass_fds=(req_r, res_w),
                stdin=subprocess.DEVNULL,
                env={**os.environ, "PYTHONPATH": path},
            )
        finally:
            os.close(req_r)
            os.close(res_w)
        self._out = open(req_w, "wb", buffering=0)
        self._in = open(res_r, "rb", buffering=0)
        self.ready = False
        _send(self._out, reader)

    def poll(self) -> bool | None:
        """True once ready, None while starting; raises :class:`ReaderGone` if it failed to start."""
        if self.ready:
            return True
        if not select.select([self._in], [], [], 0)[0]:
            return None
        try:
            status, payload = _recv(self._in)
        except (EOFError, OSError) as exc:
            raise ReaderGone(f"exited with code {self.process.poll()}") from exc
        if status != "ready":
            raise ReaderGone(exception_reason(payload))
        self.ready = True
        return True

    def read(self, index: int) -> dict[str, np.ndarray]:
        """The staged arrays of sample ``index``; a read error is raised as the reader raised it."""
        try:
            _send(self._out, int(index))
            status, payload = _recv(self._in)
            if status == "error":
                raise payload
            out = {}
            for key, dtype, shape in payload:
                out[key] = np.empty(shape, dtype)
                if out[key].nbytes:
                    _read_into(self._in, memoryview(out[key]).cast("B"))
            return out
        except (EOFError, OSError) as exc:
            raise ReaderGone(f"exited with code {self.process.poll()}") from exc

    def close(self, timeout: float = 5.0) -> None:
        """Close the requests pipe (the process then exits) and wait for it; kill it if it hangs."""
        for f in (self._out, self._in):
            try:
                f.close()
            except OSError:
                pass
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


class Readers:
    """``read(index) -> staged arrays`` in this process or in reader processes.

    Called from several threads at once (a :class:`~ensml.data.prefetch.Prefetcher`'s); each call
    takes an idle ready process, or reads here while none has started yet (or in ``threads``
    mode), or waits for a busy one.

    Parameters
    ----------
    reader
        The split's reader; reads in this process go through it.
    processes
        Readers, this process included: ``processes - 1`` reader processes are started (in
        ``auto`` and ``processes`` modes).
    mode
        ``processes``: start them now; ``auto``: now if a sample reads more than
        :data:`LARGE_SAMPLE_BYTES` (this opens the files) and its reads cannot decompress in
        threads (not zarr, not netCDF-4 read chunk by chunk), else never; ``threads``: never
        (every read in this process).
    """

    def __init__(self, reader: SampleReader, processes: int, mode: PrefetchReaders = "auto") -> None:
        if mode not in READER_MODES:
            raise EnsmlError(f"prefetch_readers must be one of {', '.join(READER_MODES)}, got {mode!r}")
        self._reader = reader
        self._count = int(processes)
        self._mode = mode if can_start_processes() and processes > 1 else "threads"
        self._cv = threading.Condition()
        self._starting: list[ReaderProcess] = []
        self._idle: list[ReaderProcess] = []
        self._all: list[ReaderProcess] = []
        self._busy = 0
        self._here_busy = False  # a read under way in this process
        self._started = self._closed = self._warned = False
        if self._mode == "auto" and (
            reader.sample_bytes() <= LARGE_SAMPLE_BYTES or reader.threads_decompress()
        ):
            self._mode = "threads"
        if self._mode != "threads":
            self._start()

    @property
    def processes(self) -> int:
        """Reader processes started and not gone."""
        with self._cv:
            return len(self._starting) + len(self._idle) + self._busy

    def _start(self) -> None:
        with self._cv:
            if self._started or self._closed:
                return
            self._started = True
            try:
                for _ in range(self._count - 1):  # this process is the other reader
                    proc = ReaderProcess(self._reader)
                    self._all.append(proc)
                    self._starting.append(proc)
            except OSError as exc:  # no more processes or pipes: read here
                self._warn(f"reader processes could not start ({exception_reason(exc)})")

    def _warn(self, why: str) -> None:
        if not self._warned:
            self._warned = True
            warnings.warn(f"ensml: {why}; reading in this process", RuntimeWarning, stacklevel=3)

    def _take(self) -> ReaderProcess | Literal["slot", "here"]:
        """A reader process (now marked busy), or where to read here: ``slot`` (this process's
        reader slot, now taken) or ``here`` (beside it).

        Here first, when no read is under way here (this process is one of the readers, and
        reads without start-up or transfer); else an idle ready process; else here too while
        processes are starting (or there are none); else wait for a busy one.
        """
        with self._cv:
            while True:
                for proc in list(self._starting):
                    try:
                        ready = proc.poll()
                    except ReaderGone as exc:
                        self._starting.remove(proc)
                        self._warn(f"a reader process did not start ({exc})")
                        continue
                    if ready:
                        self._starting.remove(proc)
                        self._idle.append(proc)
                if not self._here_busy:
                    self._here_busy = True
                    return "slot"
                if self._idle:
                    self._busy += 1
                    return self._idle.pop()
                if self._starting or not self._busy or self._closed:
                    return "here"
                self._cv.wait()

    def _give(self, proc: ReaderProcess, gone: bool = False) -> None:
        with self._cv:
            self._busy -= 1
            if not gone:
                self._idle.append(proc)
            self._cv.notify_all()

    def __call__(self, index: int) -> Blocks:
        proc = self._take()
        if proc == "here":
            return self._here(index)
        if proc == "slot":
            try:
                return self._here(index)
            finally:
                with self._cv:
                    self._here_busy = False
                    self._cv.notify_all()
        try:
            blocks = proc.read(index)
        except ReaderGone as exc:
            self._give(proc, gone=True)
            self._warn(f"a reader process {exc}")
            return self._here(index)
        except BaseException:
            self._give(proc)
            raise
        self._give(proc)
        return blocks

    def _here(self, index: int) -> Blocks:
        return self._reader.staged(index)

    def close(self) -> None:
        """Stop the reader processes (call when no read is under way)."""
        with self._cv:
            self._closed = True
            procs, self._all, self._starting, self._idle = self._all, [], [], []
            self._cv.notify_all()
        for proc in procs:
            proc.close()


__all__ = ["LARGE_SAMPLE_BYTES", "READER_MODES", "PrefetchReaders", "ReaderProcess", "Readers", "serve"]
