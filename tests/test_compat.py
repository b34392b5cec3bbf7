"""The private Lightning and torch names of :mod:`ensml.compat` still exist and still mean the same.

If an upgrade renames one, this fails here, instead of a user's run failing or, worse, an
override silently no longer being called.
"""

from __future__ import annotations

import ast
import importlib
import time
from pathlib import Path

import lightning as L
import pytest
import torch

import ensml
from ensml import compat

#: Names with a leading underscore that their library documents as public: ``os._exit`` (the
#: Python docs: "Exit the process with status n, without calling cleanup handlers").
PUBLIC_DESPITE_UNDERSCORE = {"os._exit"}


def test_distributed_sampler_setting_is_read_and_written() -> None:
    trainer = L.Trainer(use_distributed_sampler=False, logger=False, enable_checkpointing=False)
    assert compat.uses_distributed_sampler(trainer) is False
    compat.set_distributed_sampler(trainer, True)
    assert compat.uses_distributed_sampler(trainer) is True


def test_train_iterator_can_be_restarted() -> None:
    trainer = L.Trainer(logger=False, enable_checkpointing=False)
    assert hasattr(trainer.fit_loop, "_data_fetcher")  # set when fitting starts; the name must exist


def test_batch_metrics_can_be_logged_from_a_batch_end_hook() -> None:
    trainer = L.Trainer(logger=False, enable_checkpointing=False)
    connector = trainer._logger_connector  # the loop's own calls after on_train_batch_end
    assert callable(connector.on_batch_end) and callable(connector.update_train_step_metrics)


def test_sigterm_broadcast_runs_on_every_nth_batch_only(monkeypatch: pytest.MonkeyPatch) -> None:
    trainer = L.Trainer(logger=False, enable_checkpointing=False)
    loop_type = type(trainer.fit_loop.epoch_loop)
    assert callable(loop_type._broadcast_sigterm_tensor)  # Lightning's name, called before each batch
    calls = []
    monkeypatch.setattr(loop_type, "_broadcast_sigterm_tensor", lambda loop: calls.append(loop))
    compat.thin_sigterm_broadcast(trainer, 3)
    for _ in range(7):
        trainer.fit_loop.epoch_loop._broadcast_sigterm_tensor()
    assert calls == [trainer.fit_loop.epoch_loop] * 3  # batches 0, 3 and 6


def test_dispatch_mode_sees_every_operator() -> None:
    import torch

    calls = []

    class Seen(compat.dispatch_mode()):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            calls.append(str(func))
            return func(*args, **(kwargs or {}))

    with Seen():
        torch.ones(3).add(1)
    assert any("add" in c for c in calls)


def test_view_base_is_the_viewed_tensor() -> None:
    a = torch.zeros(4, 3)
    assert compat.view_base(a[1:]) is a
    assert compat.view_base(a) is a


@pytest.mark.parametrize(("module", "cls", "method"), compat.OVERRIDDEN_HOOKS)
def test_overridden_hooks_exist(module: str, cls: str, method: str) -> None:
    assert callable(getattr(getattr(importlib.import_module(module), cls), method))


def _own_private_names(trees: dict[Path, ast.Module]) -> set[str]:
    """Private names that ensml itself defines (methods, ``x._name = ...``, class attributes)."""
    own = set()
    for tree in trees.values():
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                own.add(node.name)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                own.add(node.attr)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                own.add(node.id)
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                own.add(node.target.id)
    return {name for name in own if name.startswith("_")}


@pytest.mark.slow
def test_no_private_name_of_another_library_outside_compat() -> None:
    """``x._name`` that ensml does not define itself appears in ensml/compat.py only."""
    root = Path(ensml.__file__).parent
    trees = {path: ast.parse(path.read_text()) for path in sorted(root.rglob("*.py"))}
    own = _own_private_names(trees)
    found = []
    for path, tree in trees.items():
        if path.name == "compat.py" and path.parent == root:
            continue
        for node in ast.walk(tree):
            private = isinstance(node, ast.Attribute) and node.attr.startswith("_")
            if not private or node.attr.startswith("__") or node.attr in own:
                continue
            owner = node.value
            if isinstance(owner, ast.Name) and owner.id in ("self", "cls"):
                continue
            if isinstance(owner, ast.Call) and getattr(owner.func, "id", None) == "super":
                continue
            if ast.unparse(node) in PUBLIC_DESPITE_UNDERSCORE:
                continue
            found.append(f"{path.relative_to(root.parent)}:{node.lineno} {ast.unparse(node)}")
    assert not found, found


def _sleep(seconds: float) -> float:
    time.sleep(seconds)
    return seconds


def test_pool_workers_are_terminated_with_their_tasks_in_flight() -> None:
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    from ensml.compat import terminate_workers

    pool = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"))
    busy = pool.submit(_sleep, 60.0)
    while not busy.running():
        time.sleep(0.05)
    start = time.perf_counter()
    pool.shutdown(wait=False, cancel_futures=True)
    terminate_workers(pool)
    pool.shutdown(wait=True)  # what the interpreter's exit does: no longer waits for the task
    assert time.perf_counter() - start < 20
