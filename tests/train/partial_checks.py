"""Rank functions for ``test_partial.py`` (importable, so spawned ranks can run them).

Each scripts when ranks arrive, with gaps (1.5 s) far longer than a store round trip or a gloo
allreduce, so which contributions reach which round is certain.
"""

from __future__ import annotations

import time

import torch
import torch.distributed as dist

from ensml.train.partial import LatestSlot, PartialCollective, SharedStore, Slot

GAP = 1.5


def _engine(quorum: int, slot=None, like=None) -> PartialCollective:
    store = SharedStore("127.0.0.1", 60)
    world = dist.get_world_size()
    group = dist.new_group(list(range(world)))
    like = torch.zeros(3) if like is None else like
    return PartialCollective(store, "t", lambda r: (0, group, world), quorum, slot or Slot(), like, 60)


def _finish(eng: PartialCollective, rounds: int) -> None:
    eng.close(rounds)
    dist.barrier()  # rank 0 serves the store: it must outlive every rank's last use


def _summary(res) -> tuple[list[float], int, int, bool]:
    return res.total.tolist(), res.fresh, res.stale, res.mine_fresh


def synchronous() -> list[tuple]:
    """quorum = world: every round is every rank's fresh work, as an allreduce."""
    rank, world = dist.get_rank(), dist.get_world_size()
    eng = _engine(world)
    out = []
    for r in range(3):
        time.sleep(0.2 * rank)  # however late a rank is, the round waits for it
        eng.arrive(r, torch.full((3,), float(rank + 10 * r)))
        out.append(_summary(eng.result(r)))
    _finish(eng, 3)
    return out


def solo_with_straggler() -> dict:
    """quorum 1, rank 1 late by GAP at round 0: round 0 is rank 0's alone, round 1 gets rank 1's
    round-0 work as a stale contribution, and rank 1 sees round 0 started before it arrived."""
    rank = dist.get_rank()
    eng = _engine(1)
    late = None
    if rank == 0:
        eng.arrive(0, torch.tensor([1.0, 0.0, 0.0]))
        r0 = eng.result(0)
        time.sleep(2 * GAP)  # rank 1 has deposited its late round-0 work by now
        eng.arrive(1, torch.tensor([0.0, 2.0, 0.0]))
    else:
        time.sleep(GAP)
        late = eng.activated(0)
        eng.arrive(0, torch.tensor([0.0, 0.0, 4.0]))  # too late for round 0
        r0 = eng.result(0)
    r1 = eng.result(1)  # rank 1 does not arrive at round 1 (it would skip that batch)
    _finish(eng, 2)
    return {"late": late, "r0": _summary(r0), "r1": _summary(r1)}


def majority_of_four() -> tuple:
    """quorum 2 of 4: ranks 0 and 1 start the round; 2 and 3 (late by GAP) miss it."""
    rank = dist.get_rank()
    eng = _engine(2)
    if rank >= 2:
        time.sleep(GAP)
    else:
        eng.arrive(0, torch.tensor([1.0, 0.0, 0.0]) * (rank + 1))
    res = _summary(eng.result(0))
    _finish(eng, 1)
    return res


def latest_model() -> tuple:
    """A LatestSlot (WAGMA's): a late member sends the model it had, counted stale."""
    rank = dist.get_rank()
    model = torch.full((2,), float(rank))  # the models the ranks start from: 0 and 1
    eng = _engine(1, LatestSlot(model), model)
    if rank == 0:
        eng.arrive(0, torch.tensor([5.0, 5.0]))
    res = _summary(eng.result(0))
    _finish(eng, 1)
    return res
