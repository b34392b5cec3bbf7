"""Run a function on several torch.distributed processes that always terminate.

Used by the tests and the benchmark: each process initialises a process group (gloo by
default), runs ``fn(*args)`` and reports its result or traceback through a queue. When one
rank fails, the others are killed at once instead of waiting for a collective that never
completes; after ``timeout`` seconds every process is killed.
"""

from __future__ import annotations

import os
import queue
import socket
import time
import traceback
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def free_port() -> int:
    """A TCP port that is free now (for the process group's rendezvous)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(rank, world, port, backend, threads, fn, args, results) -> None:
    try:
        torch.set_num_threads(threads)
        if backend == "nccl":
            torch.cuda.set_device(rank % torch.cuda.device_count())
        dist.init_process_group(
            backend,
            init_method=f"tcp://127.0.0.1:{port}",
            rank=rank,
            world_size=world,
            timeout=timedelta(seconds=60),
        )
        out = fn(*args)
        results.put((rank, True, out))
    except BaseException:  # a rank's failure, as text, for the parent's DistributedError
        results.put((rank, False, traceback.format_exc()))
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


class DistributedError(RuntimeError):
    """A rank failed or the run timed out; the message holds the failing rank's traceback."""


def run_distributed(
    fn: Callable[..., Any],
    world_size: int,
    *args: Any,
    backend: str = "gloo",
    timeout: float = 120.0,
    threads: int = 1,
) -> list[Any]:
    """Run ``fn(*args)`` on ``world_size`` spawned ranks; return the per-rank results.

    ``fn`` must be importable (module level). Raises :class:`DistributedError` with the first
    failing rank's traceback, or after ``timeout`` seconds.
    """
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    port = free_port()
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    procs = [
        ctx.Process(target=_worker, args=(r, world_size, port, backend, threads, fn, args, results))
        for r in range(world_size)
    ]
    for p in procs:
        p.start()
    out: dict[int, Any] = {}
    error = None
    end = time.monotonic() + timeout
    try:
        while len(out) < world_size and error is None:
            left = end - time.monotonic()
            if left <= 0:
                error = f"timed out after {timeout:.0f} s; ranks {sorted(out)} finished"
                break
            try:
                rank, ok, value = results.get(timeout=min(left, 1.0))
            except queue.Empty:
                dead = [r for r, p in enumerate(procs) if p.exitcode not in (None, 0) and r not in out]
                if dead:
                    error = f"rank {dead[0]} died with exit code {procs[dead[0]].exitcode}"
                continue
            if ok:
                out[rank] = value
            else:
                error = f"rank {rank} failed:\n{value}"
    finally:
        for p in procs:
            p.join(timeout=5 if error is None else 0.1)
            if p.is_alive():
                p.kill()
                p.join(5)
    if error is not None:
        raise DistributedError(error)
    return [out[r] for r in range(world_size)]
