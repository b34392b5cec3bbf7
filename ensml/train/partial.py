"""Partial collectives: a sum over a process group that starts when a quorum of members is ready.

The wait-avoiding collective of eager-SGD and WAGMA-SGD (Li et al. 2020), on ``torch.distributed``:

- Rounds ``r = 0, 1, …`` are numbered by training iteration. A rank that has finished its work
  for round ``r`` *deposits* its contribution in its :class:`Slot` and adds itself to the round's
  count in a key-value store (``torch.distributed.TCPStore``); the rank whose arrival makes the
  count reach ``quorum`` *activates* the round (quorum 1: the first to arrive, eager-SGD's
  "solo"; half the group: "majority"; the whole group: a synchronous allreduce).
- A background thread per rank waits for each activation and then takes part in the group's
  ``all_reduce`` at once, whatever its own training step is doing: it sends what its slot holds
  at that moment, *fresh* (deposited for this round), *stale* (deposited for an earlier round
  and not yet sent) or nothing. So the fast members never wait for a slow one; a slow member's
  work reaches the next round instead of being lost.
- Every member receives the same result for a round, with the number of fresh and stale
  contributions in it, so replicas that apply each round's result once, in order, stay equal.

The collectives run on process groups of their own (one per group of members, made by the
caller with ``dist.new_group``), so they never interleave with the training loop's collectives
on the default group.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist

from ensml.errors import EnsmlError

STOP = b"stop"


@dataclass(frozen=True)
class RoundResult:
    """What every member of a round's group receives."""

    total: torch.Tensor  # the sum of the members' contributions
    fresh: int  # members whose contribution was deposited for this round
    stale: int  # members who sent work deposited for an earlier round
    mine_fresh: bool  # whether this rank's own contribution was fresh
    tally: float = 0.0  # the sum of the members' ``tally()`` when the round ran


class Slot:
    """What a rank holds for the next round: by default a sum of deposits, taken once.

    :meth:`take` returns the payload to send for round ``r`` and this rank's (fresh, stale)
    counts. Subclasses change what is sent (WAGMA sends its latest model every round).
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self._sum: torch.Tensor | None = None
        self._rounds: list[int] = []

    def deposit(self, r: int, payload: torch.Tensor) -> None:
        with self.lock:
            self._sum = payload.clone() if self._sum is None else self._sum + payload
            self._rounds.append(r)

    def take(self, r: int, like: torch.Tensor) -> tuple[torch.Tensor, int, int]:
        with self.lock:
            payload = torch.zeros_like(like) if self._sum is None else self._sum
            fresh = sum(1 for d in self._rounds if d == r)
            stale = len(self._rounds) - fresh
            self._sum, self._rounds = None, []
        return payload, fresh, stale


class LatestSlot(Slot):
    """Sends the latest deposit every round (a model): stale when it was made for an earlier one."""

    def __init__(self, initial: torch.Tensor) -> None:
        super().__init__()
        self._latest, self._round = initial.clone(), -1

    def deposit(self, r: int, payload: torch.Tensor) -> None:
        with self.lock:
            self._latest, self._round = payload.clone(), r

    def take(self, r: int, like: torch.Tensor) -> tuple[torch.Tensor, int, int]:
        with self.lock:
            fresh = int(self._round == r)
            return self._latest, fresh, 1 - fresh


#: ``group_of(r)`` → (group id, process group, number of members) of this rank at round ``r``.
GroupOf = Callable[[int], tuple[int, object, int]]


class PartialCollective:
    """Rounds of partial sums over (possibly rotating) groups, served by a background thread.

    Parameters
    ----------
    store
        The store all ranks share (the training side uses its main client, the background
        thread a client of its own).
    prefix
        Namespace of this collective's keys in the store.
    group_of
        This rank's group at each round (see :data:`GroupOf`).
    quorum
        Members that must arrive to activate a round (capped at the group's size).
    slot
        What this rank sends; ``like`` is a tensor of the payload's shape and dtype.
    timeout_s
        Longest wait for an activation or a result before the run fails in one line.
    tally
        A number each member adds to every round (e.g. the batches it has computed), summed.
    """

    def __init__(
        self,
        store: SharedStore,
        prefix: str,
        group_of: GroupOf,
        quorum: int,
        slot: Slot,
        like: torch.Tensor,
        timeout_s: float = 1800.0,
        tally: Callable[[], float] = lambda: 0.0,
    ) -> None:
        self.tally = tally
        self.store, self.prefix, self.group_of = store.main, prefix, group_of
        self._thread_store = store.connect()
        self.quorum, self.slot, self.like = quorum, slot, like.detach()
        self.timeout = timedelta(seconds=timeout_s)
        self.results: dict[int, RoundResult] = {}
        self.error: BaseException | None = None
        self.closed_at: int | None = None
        self._done = threading.Condition()
        self._thread = threading.Thread(target=self._serve, name=f"ensml-{prefix}", daemon=True)
        self._thread.start()

    def _key(self, what: str, r: int) -> str:
        return f"{self.prefix}/{what}/{r}/{self.group_of(r)[0]}"

    # -- the training side --------------------------------------------------------------------
    def activated(self, r: int) -> bool:
        """Whether round ``r`` of this rank's group has started (its work would come too late)."""
        return self.store.check([self._key("go", r)])

    def arrive(self, r: int, payload: torch.Tensor) -> None:
        """Deposit this rank's work for round ``r`` and count it towards the quorum."""
        self.slot.deposit(r, payload.detach())
        members = self.group_of(r)[2]
        if self.store.add(self._key("n", r), 1) == min(self.quorum, members):
            self.store.set(self._key("go", r), b"go")

    def result(self, r: int) -> RoundResult:
        """Block until round ``r`` is done; its result (the same on every member)."""
        with self._done:
            ok = self._done.wait_for(
                lambda: r in self.results or self.error is not None, self.timeout.total_seconds()
            )
            if self.error is not None:
                raise EnsmlError(f"partial collective {self.prefix} failed: {self.error}") from self.error
            if not ok:
                raise EnsmlError(
                    f"partial collective {self.prefix}: round {r} did not finish within "
                    f"{self.timeout.total_seconds():.0f} s (is a rank dead?)"
                )
            return self.results.pop(r)

    def close(self, rounds: int) -> None:
        """Stop the thread after ``rounds`` rounds (every rank must have run the same number)."""
        if self.closed_at is None:
            self.closed_at = rounds
            self.store.set(self._key("go", rounds), STOP)
        self._thread.join(timeout=self.timeout.total_seconds())

    # -- the background thread ----------------------------------------------------------------
    def _serve(self) -> None:
        r = 0
        try:
            while True:
                key = self._key("go", r)
                self._thread_store.wait([key], self.timeout)
                if self._thread_store.get(key) == STOP:
                    return
                self._reduce(r)
                r += 1
        except BaseException as exc:  # reported to the training side by result()
            with self._done:
                if self.closed_at is None:
                    self.error = exc
                self._done.notify_all()

    def _reduce(self, r: int) -> None:
        _, group, _ = self.group_of(r)
        payload, fresh, stale = self.slot.take(r, self.like)
        counts = torch.tensor([fresh, stale, self.tally()], dtype=payload.dtype, device=payload.device)
        buf = torch.cat([payload.reshape(-1), counts])
        dist.all_reduce(buf, group=group)
        n = payload.numel()
        fresh_n, stale_n, tally = (round(x) for x in buf[n:].tolist())
        result = RoundResult(buf[:n].reshape(payload.shape), fresh_n, stale_n, bool(fresh), tally)
        with self._done:
            self.results[r] = result
            self._done.notify_all()


class SharedStore:
    """A ``TCPStore`` served by global rank 0 on a free port, reachable from every rank.

    Create on every rank, with the default process group initialised (the port is broadcast).
    A store client serves one blocking call at a time, so each thread that waits on the store
    needs its own client: :meth:`connect`.
    """

    def __init__(self, host: str, timeout_s: float) -> None:
        self.host, self.timeout = host, timedelta(seconds=timeout_s)
        port = [0]
        self.main: dist.Store | None = None
        if dist.get_rank() == 0:
            self.main = dist.TCPStore(
                host, 0, dist.get_world_size(), True, timeout=self.timeout, wait_for_workers=False
            )
            port = [self.main.port]
        dist.broadcast_object_list(port, src=0)
        self.port = port[0]
        self.main = self.main or self.connect()

    def connect(self) -> dist.Store:
        """A new client of the store."""
        return dist.TCPStore(self.host, self.port, is_master=False, timeout=self.timeout)
