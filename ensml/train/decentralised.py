"""Decentralised data-parallel training: eager-SGD and WAGMA-SGD as Lightning strategies.

Both replace DDP's synchronous gradient allreduce by a *partial collective*
(:mod:`ensml.train.partial`) that starts when a quorum of ranks is ready, so a slow rank (a
straggler) no longer holds the others back:

- ``trainer.strategy: eager_solo`` / ``eager_majority`` (:class:`EagerStrategy`, eager-SGD, Li
  et al. PPoPP 2020): gradients are averaged over the contributions that reached the round
  (fresh ones, and stale ones a late rank finished after the previous round started); every rank
  applies the same average, so the replicas stay identical. ``solo``: the first rank to finish
  starts the round; ``majority``: half the ranks (or ``quorum``).
- ``trainer.strategy: wagma`` (:class:`WagmaStrategy`, WAGMA-SGD, Li et al. TPDS 2020): each
  rank takes a local optimiser step, then averages its *model* within a group of
  ``group_size`` ranks; the groups rotate every step (a butterfly over the digits of the rank in
  base ``group_size``) so updates spread through the world, and every ``period`` steps all ranks
  average synchronously. The group average starts when ``group_quorum`` members are ready
  (1: wait-avoiding, the paper's). A member whose step ended after its group's average started
  keeps its own update on top of the average, so no computed update is lost.

A rank that finds its round already started when a batch begins skips that batch (no forward or
backward: its work would arrive late) and applies the round's result; the batches a slow rank
skips are the samples it does not see. Every rank still runs the same number of rounds, which
is what keeps the collectives matched. Validation and checkpoints see the same model on every
rank (WAGMA averages all ranks first). ``quorum`` = world (eager) or ``group_size = group_quorum
= world`` (WAGMA, with a linear optimiser such as SGD) reproduce DDP; the tests check both.

Lightning broadcasts rank 0's SIGTERM flag before every training batch, and a broadcast waits
for every rank: it would tie all ranks to the slowest at every batch. These strategies let it run
every ``sigterm_every`` batches only (:func:`ensml.compat.thin_sigterm_broadcast`).
"""

from __future__ import annotations

import math
import os
from datetime import timedelta
from typing import Any, Literal

import torch
import torch.distributed as dist
from lightning.pytorch.strategies import DDPStrategy, StrategyRegistry
from lightning.pytorch.trainer.states import TrainerFn, TrainerStatus
from torch.nn.utils import parameters_to_vector, vector_to_parameters

from ensml.compat import thin_sigterm_broadcast
from ensml.errors import EnsmlError
from ensml.progress import note
from ensml.train.partial import LatestSlot, PartialCollective, RoundResult, SharedStore, Slot


def flat_grads(params: list[torch.nn.Parameter]) -> torch.Tensor:
    """The parameters' gradients as one vector (zeros where a parameter has none)."""
    return torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1) for p in params])


def set_grads(params: list[torch.nn.Parameter], flat: torch.Tensor) -> None:
    """Write ``flat`` (as made by :func:`flat_grads`) back as the parameters' gradients."""
    i = 0
    for p in params:
        g = flat[i : i + p.numel()].view_as(p)
        p.grad = g.clone() if p.grad is None else p.grad.copy_(g)
        i += p.numel()


def butterfly_groups(world: int, size: int) -> list[list[list[int]]]:
    """Per phase, the groups of ``size`` ranks that differ only in one base-``size`` digit."""
    phases = round(math.log(world, size)) if size > 1 else 0
    out = []
    for p in range(phases):
        stride = size**p
        groups: dict[tuple[int, int], list[int]] = {}
        for r in range(world):
            groups.setdefault((r // (stride * size), r % stride), []).append(r)
        out.append(sorted(groups.values()))
    return out or [[[r] for r in range(world)]]


class PartialStrategy(DDPStrategy):
    """What eager-SGD and WAGMA share: the collective, skipping late batches, statistics."""

    def __init__(
        self,
        timeout_s: float = 1800.0,
        sigterm_every: int = 50,
        process_group_backend: str | None = None,
        start_method: Literal["popen", "spawn", "fork", "forkserver"] = "popen",
        **kwargs: Any,
    ) -> None:
        super().__init__(
            process_group_backend=process_group_backend,
            timeout=timedelta(seconds=max(timeout_s, 1e-3)),  # checked in check_trainer
            start_method=start_method,
            **kwargs,
        )
        self.timeout_s = float(timeout_s)
        self.sigterm_every = sigterm_every
        self.engine: PartialCollective | None = None
        self.round = 0
        self.skipping = False
        # rounds taken part in; fresh and stale contributions in them; batches this rank skipped
        # and computed; batches all ranks computed (as of the last round or average that summed it)
        self.stats = {"rounds": 0, "fresh": 0, "stale": 0, "skipped": 0, "computed": 0, "computed_all": 0}

    # -- checks before launch -------------------------------------------------------------------
    @property
    def world(self) -> int:
        return self.num_nodes * self.num_processes

    def _configure_launcher(self) -> None:
        self.check_options()
        self.check_world(self.world)
        super()._configure_launcher()

    def check_world(self, world: int) -> None:
        """Raise :class:`EnsmlError` if the options do not fit ``world`` ranks."""

    def check_options(self) -> None:
        """Raise :class:`EnsmlError` for a timeout or SIGTERM interval that is not positive."""
        if self.timeout_s <= 0:
            raise EnsmlError(
                f"trainer.strategy {self.strategy_name}: timeout_s must be positive, got {self.timeout_s}"
            )
        if not isinstance(self.sigterm_every, int) or self.sigterm_every < 1:
            raise EnsmlError(
                f"trainer.strategy {self.strategy_name}: sigterm_every must be a positive number of "
                f"batches, got {self.sigterm_every!r}"
            )

    def check_trainer(self, trainer: Any) -> None:
        """Refuse trainer options the partial collectives cannot honour, before launch."""
        self.check_options()
        if trainer.accumulate_grad_batches != 1:
            raise EnsmlError(
                f"trainer.strategy {self.strategy_name}: a round is one optimiser step per batch; "
                f"set trainer.accumulate_grad_batches: 1 (got {trainer.accumulate_grad_batches})"
            )
        self.check_world(self.world)

    # -- set-up ---------------------------------------------------------------------------------
    def configure_ddp(self) -> None:
        """No DDP wrapper: the partial collective replaces its gradient allreduce."""

    def setup(self, trainer: Any) -> None:
        super().setup(trainer)
        if trainer.state.fn != TrainerFn.FITTING or self.engine is not None:
            return
        self.check_trainer(trainer)
        thin_sigterm_broadcast(trainer, self.sigterm_every)  # a broadcast per batch waits for the slowest
        for p in self.lightning_module.parameters():  # every rank starts from rank 0's model
            dist.broadcast(p.data, src=0)
        host = os.environ.get("MASTER_ADDR", "127.0.0.1")
        self.engine = self.build(SharedStore(host, self.timeout_s))

    def build(self, store: SharedStore) -> PartialCollective:
        raise NotImplementedError

    @property
    def params(self) -> list[torch.nn.Parameter]:
        return [p for p in self.lightning_module.parameters() if p.requires_grad]

    # -- each batch -----------------------------------------------------------------------------
    def training_step(self, *args: Any, **kwargs: Any) -> Any:
        self.skipping = self.engine is not None and self.engine.activated(self.round)
        if self.skipping:  # this round started without us: our work would arrive late
            self.stats["skipped"] += 1
            # Lightning refuses a None step in distributed runs: a constant loss has no gradients.
            return torch.zeros((), device=self.root_device, requires_grad=True)
        self.stats["computed"] += 1
        return super().training_step(*args, **kwargs)

    def account(self, res: RoundResult) -> None:
        self.stats["rounds"] += 1
        self.stats["fresh"] += res.fresh
        self.stats["stale"] += res.stale
        if res.tally:
            self.stats["computed_all"] = res.tally

    def teardown(self) -> None:
        if self.engine is not None:
            self.engine.close(self.round)
            self.engine = None
            s = self.stats
            note(
                f"{self.strategy_name}: rank {self.global_rank}: {s['rounds']} rounds, "
                f"{s['skipped']} batches skipped (late), {s['fresh']} fresh and {s['stale']} stale"
            )
            trainer = self.lightning_module.trainer if self.lightning_module is not None else None
            failed = trainer is not None and trainer.state.status == TrainerStatus.INTERRUPTED
            if dist.is_initialized() and not failed:
                dist.barrier()  # rank 0 serves the store: keep it until every rank has closed
        super().teardown()


class EagerStrategy(PartialStrategy):
    """eager-SGD: gradients averaged by a partial allreduce (``solo``, ``majority`` or a quorum).

    Parameters
    ----------
    quorum
        Ranks that must have finished their step before the allreduce starts: ``"solo"`` (1),
        ``"majority"`` (half the ranks, rounded up) or a number (the world size is DDP).
    timeout_s, process_group_backend, start_method
        As for :class:`~lightning.pytorch.strategies.DDPStrategy`; ``timeout_s`` also bounds the
        wait for a round.
    sigterm_every
        Batches between Lightning's broadcasts of rank 0's SIGTERM flag (a broadcast waits for the
        slowest rank; Lightning's own default is every batch).
    """

    strategy_name = "eager"

    def __init__(self, quorum: int | Literal["solo", "majority"] = "solo", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.quorum = quorum

    def quorum_of(self, world: int) -> int:
        return {"solo": 1, "majority": math.ceil(world / 2)}.get(self.quorum, self.quorum)  # type: ignore[arg-type]

    def check_world(self, world: int) -> None:
        if not (self.quorum in ("solo", "majority") or (isinstance(self.quorum, int) and self.quorum >= 1)):
            raise EnsmlError(
                f"eager quorum must be 'solo', 'majority' or a positive number, got {self.quorum!r}"
            )
        if self.quorum_of(world) > world:
            raise EnsmlError(f"eager quorum {self.quorum} is more than the {world} ranks")

    def build(self, store: SharedStore) -> PartialCollective:
        group = dist.new_group(list(range(self.world)))
        like = torch.zeros(sum(p.numel() for p in self.params), device=self.root_device)
        return PartialCollective(
            store,
            "eager",
            lambda r: (0, group, self.world),
            self.quorum_of(self.world),
            Slot(),
            like,
            self.timeout_s,
            tally=lambda: float(self.stats["computed"]),
        )

    def optimizer_step(self, optimizer: Any, closure: Any, model: Any = None, **kwargs: Any) -> Any:
        r, params = self.round, self.params

        def averaged() -> Any:
            out = closure()
            if not self.skipping:
                self.engine.arrive(r, flat_grads(params))
            res = self.engine.result(r)
            set_grads(params, res.total / max(res.fresh + res.stale, 1))
            self.account(res)
            return out

        if self.engine is None:
            return super().optimizer_step(optimizer, closure, model, **kwargs)
        try:
            return super().optimizer_step(optimizer, averaged, model, **kwargs)
        finally:
            self.round += 1


class WagmaStrategy(PartialStrategy):
    """WAGMA-SGD: local steps, wait-avoiding model averaging in rotating groups.

    Parameters
    ----------
    group_size
        Ranks per averaging group; the world size must be a power of it (2 → pairs).
    period
        Every ``period`` steps all ranks average their models synchronously (0: never, apart
        from before validation and checkpoints).
    group_quorum
        Group members that must be ready to start the group's average: 1 is wait-avoiding (the
        research's), ``group_size`` waits for the whole group.
    timeout_s, sigterm_every, process_group_backend, start_method
        As for :class:`EagerStrategy`.
    """

    strategy_name = "wagma"

    def __init__(self, group_size: int = 2, period: int = 10, group_quorum: int = 1, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.group_size, self.period, self.group_quorum = group_size, period, group_quorum
        self._global: Any = None

    def check_world(self, world: int) -> None:
        if self.group_size < 1 or self.period < 0 or not 1 <= self.group_quorum <= self.group_size:
            raise EnsmlError(
                f"wagma needs group_size >= 1, period >= 0 and 1 <= group_quorum <= group_size, got "
                f"group_size={self.group_size}, period={self.period}, group_quorum={self.group_quorum}"
            )
        s = self.group_size
        phases = round(math.log(world, s)) if s > 1 else 0
        if s > world or (s > 1 and s**phases != world):
            raise EnsmlError(
                f"wagma group_size {s} must divide the {world} ranks as a power of it (e.g. 2 for 4 or 8)"
            )

    def build(self, store: SharedStore) -> PartialCollective:
        rank, mine = self.global_rank, []
        for phase, groups in enumerate(butterfly_groups(self.world, self.group_size)):
            for i, members in enumerate(groups):
                group = dist.new_group(members)  # every rank creates every group, in order
                if rank in members:
                    mine.append((phase * len(groups) + i, group, len(members)))
        self._global = dist.new_group(list(range(self.world)))
        model = parameters_to_vector(self.params).detach()
        return PartialCollective(
            store,
            "wagma",
            lambda r: mine[r % len(mine)],
            self.group_quorum,
            LatestSlot(model),
            model,
            self.timeout_s,
        )

    def optimizer_step(self, optimizer: Any, closure: Any, model: Any = None, **kwargs: Any) -> Any:
        if self.engine is None:
            return super().optimizer_step(optimizer, closure, model, **kwargs)
        r, params = self.round, self.params
        start = parameters_to_vector(params).detach().clone()
        try:
            out = super().optimizer_step(optimizer, closure, model, **kwargs)  # the local step
            with torch.no_grad():
                now = parameters_to_vector(params).detach()
                if not self.skipping:
                    self.engine.arrive(r, now)
                res = self.engine.result(r)
                new = res.total / (res.fresh + res.stale)
                if not self.skipping and not res.mine_fresh:  # late: keep our update on top
                    new = new + (now - start)
                vector_to_parameters(new, params)
            self.account(res)
            if self.period and (r + 1) % self.period == 0:
                self.average_all()
            return out
        finally:
            self.round += 1

    def average_all(self) -> None:
        """Average every rank's model (synchronous, on a group of its own)."""
        if self._global is None:
            return
        with torch.no_grad():
            flat = parameters_to_vector(self.params).detach()
            flat = torch.cat([flat, flat.new_tensor([self.stats["computed"]])])
            dist.all_reduce(flat, group=self._global)
            vector_to_parameters(flat[:-1] / self.world, self.params)
            self.stats["computed_all"] = round(flat[-1].item())

    def on_validation_start(self) -> None:
        self.average_all()  # validate (and checkpoint) the consensus model
        super().on_validation_start()

    def lightning_module_state_dict(self) -> dict[str, Any]:
        self.average_all()  # every rank builds the checkpoint: the saved model is the average
        return super().lightning_module_state_dict()

    def on_train_end(self) -> None:
        self.average_all()
        super().on_train_end()


def register() -> None:
    """Register ``eager_solo``, ``eager_majority`` and ``wagma`` as ``trainer.strategy`` names."""
    entries = (
        ("eager_solo", EagerStrategy, {"quorum": "solo"}, "eager-SGD, solo partial allreduce"),
        ("eager_majority", EagerStrategy, {"quorum": "majority"}, "eager-SGD, majority partial allreduce"),
        ("wagma", WagmaStrategy, {}, "WAGMA-SGD, wait-avoiding group model averaging"),
    )
    for name, cls, init, description in entries:
        if name not in StrategyRegistry:
            StrategyRegistry.register(name, cls, description=description, **init)


register()
