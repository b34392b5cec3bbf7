"""Out-of-core activations: saved tensors moved to host memory or a scratch file, and back.

:class:`Offloader` is a pair of :func:`torch.autograd.graph.saved_tensors_hooks`. While a
swapped U-Net level runs its forward (:func:`ensml.models.memory.run_segment`), every tensor
autograd saves there is handed to the offloader instead of being kept:

- **from an accelerator** (``host``): copied on a side CUDA stream into pinned host memory,
  without waiting for the copy;
- **on the CPU** (``disk``): written by a background thread to one scratch file with positioned
  writes. The file is unlinked as soon as it is opened, so it takes disk space only while the
  process lives and nothing is left behind by a kill. (A memory-mapped file would count in the
  process's resident memory once touched, which is what swapping is meant to avoid.)

Backward unpacks the saved tensors in the reverse order of the forward; each unpack starts
reading the next ``prefetch`` tensors back (the known order), so that the read overlaps the
backward of the layer in between. Parameters and tensors under ``min_bytes`` stay where they
are. The scratch space is reused from the start once every tensor of a step has been freed.
"""

from __future__ import annotations

import os
import tempfile
import time
import weakref
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import torch
from torch import nn

from ensml.compat import view_base
from ensml.errors import EnsmlError

#: Saved tensors smaller than this stay in memory (bias shapes, statistics, indices of small maps).
MIN_BYTES = 64 * 1024
#: Alignment of the tensors in the scratch file.
ALIGN = 4096
#: Writes queued at most (each holds its tensor in memory until written).
MAX_PENDING = 2


class Swapped:
    """A saved tensor that lives out of core: where it went, and how to rebuild it."""

    def __init__(self, index: int, t: torch.Tensor, channels_last: bool) -> None:
        # ``t`` is what is stored (contiguous; channels-last tensors as (B, D, H, W, C)).
        self.index, self.channels_last = index, channels_last
        self.shape, self.dtype, self.device = tuple(t.shape), t.dtype, t.device
        self.nbytes = t.numel() * t.element_size()
        self.offset = 0
        self.stored: Future | None = None  # disk: the write
        self.host: torch.Tensor | None = None  # host: the pinned copy
        self.event: Any = None  # host: the copy's CUDA event
        self.back: Future | torch.Tensor | None = None  # the prefetched tensor (or its read)


class Offloader:
    """Saved-tensor hooks that swap activations to ``host`` memory or to ``disk``.

    Parameters
    ----------
    target
        ``host`` (from CUDA tensors; CPU tensors stay) or ``disk``.
    scratch_dir
        Folder of the scratch file (default: the system's temporary folder).
    prefetch
        Tensors read back ahead of the one backward asks for.
    min_bytes
        Smaller saved tensors are kept in memory.
    """

    def __init__(
        self, target: str, scratch_dir: str | None = None, prefetch: int = 2, min_bytes: int = MIN_BYTES
    ) -> None:
        if target not in ("host", "disk"):
            raise EnsmlError(f"offload target must be host or disk, got {target!r}")
        self.target, self.scratch_dir, self.prefetch, self.min_bytes = (
            target,
            scratch_dir,
            prefetch,
            min_bytes,
        )
        self.swapped_bytes = 0  # since the last reset_stats()
        self.wait_s = 0.0  # time backward waited for tensors to come back
        self._reset_state()

    def _reset_state(self) -> None:
        self._fd: int | None = None
        self._pool: ThreadPoolExecutor | None = None
        self._stream: Any = None
        self._order: list[weakref.ref] = []
        self._pending: deque[Future] = deque()
        self._offset = 0
        self._live = 0

    def __getstate__(self) -> dict[str, Any]:  # copies and other processes open their own file
        state = {k: v for k, v in self.__dict__.items() if not k.startswith("_")}
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._reset_state()

    def __del__(self) -> None:
        self.close(wait=False)

    def close(self, wait: bool = True) -> None:
        """Release the scratch file and the I/O thread (after the writes already queued)."""
        pool, fd = getattr(self, "_pool", None), getattr(self, "_fd", None)
        self._fd = self._pool = None
        if pool is not None:
            try:
                pool.submit(os.close, fd)  # the one I/O thread closes it after the queued writes
            except RuntimeError:  # the interpreter is exiting: nothing waits for those writes
                os.close(fd)
            pool.shutdown(wait=wait)

    def reset_stats(self) -> None:
        """Zero :attr:`swapped_bytes` and :attr:`wait_s`."""
        self.swapped_bytes, self.wait_s = 0, 0.0

    def saving(self) -> torch.autograd.graph.saved_tensors_hooks:
        """The context in which saved tensors are swapped."""
        return torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack)

    # -- pack ---------------------------------------------------------------------------------
    def _pack(self, t: torch.Tensor) -> Any:
        if isinstance(view_base(t), nn.Parameter) or t.numel() * t.element_size() < self.min_bytes:
            return t
        if self.target == "host" and t.device.type == "cpu":
            return t
        channels_last = (
            t.dim() == 5 and not t.is_contiguous() and t.is_contiguous(memory_format=torch.channels_last_3d)
        )
        # A channels-last tensor permuted to (B, D, H, W, C) is contiguous as it is: no copy.
        src = (t.detach().permute(0, 2, 3, 4, 1) if channels_last else t.detach()).contiguous()
        item = Swapped(len(self._order), src, channels_last)
        if self.target == "disk":
            self._to_disk(item, src)
        else:
            self._to_host(item, src)
        self._order.append(weakref.ref(item))
        self._live += 1
        weakref.finalize(item, self._released)
        self.swapped_bytes += item.nbytes
        return item

    def _to_disk(self, item: Swapped, src: torch.Tensor) -> None:
        pool = self._io()
        item.offset = self._offset
        self._offset += -(-item.nbytes // ALIGN) * ALIGN
        item.stored = pool.submit(self._write, src, item.offset)
        # Each queued write holds its tensor: past MAX_PENDING, wait for the oldest, so that a
        # forward faster than the disk cannot pile up what swapping was meant to free.
        self._pending.append(item.stored)
        while len(self._pending) > MAX_PENDING:
            self._result(self._pending.popleft())

    def _to_host(self, item: Swapped, src: torch.Tensor) -> None:
        if self._stream is None:
            self._stream = torch.cuda.Stream(src.device)
        current = torch.cuda.current_stream(src.device)
        self._stream.wait_stream(current)
        with torch.cuda.stream(self._stream):
            item.host = torch.empty(src.shape, dtype=src.dtype, pin_memory=True)
            item.host.copy_(src, non_blocking=True)
            item.event = torch.cuda.Event()
            item.event.record(self._stream)
        src.record_stream(self._stream)

    def _released(self) -> None:
        self._live -= 1
        if self._live == 0:  # the step's tensors are all gone: reuse the scratch space
            self._order.clear()
            self._offset = 0

    # -- unpack -------------------------------------------------------------------------------
    def _unpack(self, item: Any) -> torch.Tensor:
        if not isinstance(item, Swapped):
            return item
        t0 = time.perf_counter()
        t = self._fetch(item)
        self.wait_s += time.perf_counter() - t0
        self._prefetch_before(item.index)
        return t.permute(0, 4, 1, 2, 3) if item.channels_last else t

    def _fetch(self, item: Swapped) -> torch.Tensor:
        if item.back is None:
            self._start_back(item)
        back, item.back = item.back, None
        if isinstance(back, Future):
            return self._result(back)
        torch.cuda.current_stream(back.device).wait_event(item.event)
        back.record_stream(torch.cuda.current_stream(back.device))
        return back

    def _prefetch_before(self, index: int) -> None:
        started = 0
        for ref in reversed(self._order[:index]):
            if started >= self.prefetch:
                break
            item = ref()
            if item is not None and item.back is None:
                self._start_back(item)
                started += 1

    def _start_back(self, item: Swapped) -> None:
        if self.target == "disk":
            item.back = self._io().submit(self._read, item)
            return
        with torch.cuda.stream(self._stream):
            self._stream.wait_event(item.event)
            back = torch.empty(item.shape, dtype=item.dtype, device=item.device)
            back.copy_(item.host, non_blocking=True)
            item.event = torch.cuda.Event()
            item.event.record(self._stream)
        item.back = back

    # -- the scratch file ---------------------------------------------------------------------
    def _io(self) -> ThreadPoolExecutor:
        if self._pool is None:
            folder = self.scratch_dir or tempfile.gettempdir()
            try:
                fd, path = tempfile.mkstemp(prefix=".ensml-swap-", dir=folder)
            except OSError as e:
                raise EnsmlError(f"cannot create the swap file in {folder}: {e.strerror or e}") from None
            # Safe: mkstemp made this name just now, for this run only. Gone from the folder at once,
            # the space lives as long as the descriptor (nothing is left behind by a kill).
            os.unlink(path)
            self._fd = fd
            self._pool = ThreadPoolExecutor(1, thread_name_prefix="ensml-swap")
        return self._pool

    def _write(self, src: torch.Tensor, offset: int) -> None:
        view = memoryview(src.reshape(-1).view(torch.uint8).numpy())
        done = 0
        while done < len(view):
            done += os.pwrite(self._fd, view[done:], offset + done)

    def _read(self, item: Swapped) -> torch.Tensor:
        self._result(item.stored)
        out = torch.empty(item.nbytes, dtype=torch.uint8)
        buf, done = memoryview(out.numpy()), 0
        while done < item.nbytes:
            n = os.preadv(self._fd, [buf[done:]], item.offset + done)
            if n == 0:
                raise OSError(5, "short read from the swap file")
            done += n
        return out.view(item.dtype).view(item.shape)

    def _result(self, future: Future) -> Any:
        try:
            return future.result()
        except OSError as e:
            folder = self.scratch_dir or tempfile.gettempdir()
            raise EnsmlError(f"swapping activations to {folder}: {e.strerror or e}") from None


__all__ = ["ALIGN", "MAX_PENDING", "MIN_BYTES", "Offloader", "Swapped"]
