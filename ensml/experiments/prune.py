"""``ensml prune``: a sparse copy of a task checkpoint, optionally retrained in steps.

The task of the checkpoint is rebuilt from its own hyper-parameters (as ``postprocess`` does),
its networks (``net``, and ``net_sigma`` of a two-stage task) are pruned with
:mod:`ensml.models.prune`, and the result is written as ``OUT_DIR/pruned.ckpt`` through the
output module: the source checkpoint with the pruned ``state_dict`` (same keys and shapes, zeros
in the weights), so ``predict``, ``validate``, ``test`` and ``postprocess`` take it unchanged.
What was done is recorded once, under the checkpoint's :data:`PRUNING_KEY` entry, and read back
with :func:`read_pruning`.

Retraining (``--retrain_epochs N``) runs Lightning's ``Trainer.fit`` on the task with the fit
config's data module and training options (accelerator, batch limits, clipping, precision),
without the fit's run folder: no logs, no checkpoints, no validation. Each of ``--steps K``
steps prunes to the next sparsity of :func:`~ensml.models.prune.prune_schedule` and retrains
for N epochs with the masks in place (pruned weights stay zero), then makes the zeros permanent.
The optimiser and loop state in the written checkpoint are the source's: ``fit --ckpt_path``
on it would continue the source's training and let the zeros grow back.
"""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any, Literal

import torch
from jsonargparse.typing import restricted_number_type
from torch import nn

from ensml import __version__
from ensml.data.outputs import OutputFolder
from ensml.errors import EnsmlError, signal_as_interrupted
from ensml.experiments.plan import Count
from ensml.models import prune as pruning
from ensml.predictions import file_sha256
from ensml.progress import note
from ensml.train.checkpoint_file import Checkpoint, RunData, read_checkpoint

COMMAND = "prune"
#: The file ``ensml prune`` writes in its out_dir.
OUTPUT = "pruned.ckpt"
#: The checkpoint entry (beside Lightning's) that records the pruning.
PRUNING_KEY = "ensml_pruning"
#: A pruning target: the fraction of weights (magnitude) or channels (channel) set to zero.
Sparsity = restricted_number_type("Sparsity", float, [(">=", 0.0), ("<", 1.0)])
#: Epochs of retraining after each step.
Epochs = restricted_number_type("RetrainEpochs", int, [(">=", 0), ("<=", 10_000)])
#: The fit config's trainer options that retraining keeps (the rest: one device, no outputs).
TRAINER_KEYS = (
    "accelerator",
    "precision",
    "limit_train_batches",
    "accumulate_grad_batches",
    "gradient_clip_val",
    "gradient_clip_algorithm",
    "deterministic",
)


def prune_cli(
    ckpt_path: str,
    out_dir: str,
    sparsity: Sparsity = 0.8,
    method: Literal["magnitude", "channel"] = "magnitude",
    config: str | None = None,
    retrain_epochs: Epochs = 0,
    steps: Count = 1,
    schedule: Literal["cubic", "geometric"] = "cubic",
) -> None:
    """Write a pruned copy of a task checkpoint that every other verb takes.

    Parameters
    ----------
    ckpt_path
        The checkpoint to prune (``runs/NAME/checkpoints/best.ckpt``); it is not changed.
    out_dir
        The folder of ``pruned.ckpt`` (a new or empty folder, or one ensml wrote).
    sparsity
        Target fraction in [0, 1): of all convolution weights (``magnitude``), or of each
        convolution's output channels (``channel``).
    method
        ``magnitude``: global unstructured L1 pruning of the weights. ``channel``: structured
        L2 pruning of output channels (never the output layer's); with ``norm_groups: 0`` such a
        network can be rebuilt physically smaller (``ensml.models.prune.slim_unet``).
    config
        The fit config (``configs/mixed.yaml``) whose data module and trainer options
        retraining uses; needed with retrain_epochs, and only then.
    retrain_epochs
        Epochs of retraining after each pruning step, masks fixed (0: prune only).
    steps
        Pruning steps towards ``sparsity``, each followed by retraining (needs retrain_epochs).
    schedule
        The sparsity after each step: ``cubic`` (Zhu & Gupta 2017) or ``geometric``.
    """
    if method not in pruning.MASKS:  # the CLI's type refuses it first; a Python call lands here
        raise EnsmlError(f"{COMMAND}: option --method: {method!r} is not one of {', '.join(pruning.MASKS)}")
    fit_config = _check_options(ckpt_path, sparsity, config, retrain_epochs, steps)
    try:
        checkpoint = read_checkpoint(ckpt_path)
    except EnsmlError as exc:
        raise EnsmlError(f"{COMMAND}: {exc}") from None
    OutputFolder.check(out_dir, COMMAND, names=[OUTPUT])
    data = trainer_options = None
    if retrain_epochs:
        data, trainer_options = _load_data(fit_config, checkpoint)
    task = checkpoint.build()
    nets = nn.ModuleDict({name: getattr(task, name) for name in ("net", "net_sigma") if hasattr(task, name)})
    targets = pruning.prune_schedule(sparsity, steps, schedule) if retrain_epochs else [float(sparsity)]
    for i, target in enumerate(targets):
        for net in nets.values():
            pruning.MASKS[method](net, target)
        if retrain_epochs:
            note(
                f"{COMMAND}: step {i + 1}/{len(targets)}: sparsity {target:.1%}, "
                f"retraining {retrain_epochs} epochs"
            )
            _retrain(task, data, trainer_options, retrain_epochs)
        pruning.make_permanent(nets)
    task.cpu()
    measured = pruning.sparsity(nets)
    record = {
        "method": method,
        "target_sparsity": float(sparsity),
        "sparsity": measured.overall,
        "nonzero_parameters": measured.nonzero,
        "parameters": measured.total,
        "networks": list(nets),
        "steps": len(targets),
        "schedule": schedule,
        "retrain_epochs": int(retrain_epochs),
        "source": str(ckpt_path),
        "source_sha256": file_sha256(ckpt_path),
        "ensml_version": __version__,
        "layers": measured.layers,
    }
    _write(checkpoint.saved, task, record, Path(out_dir))


def _check_options(ckpt_path: str, target: float, config: str | None, epochs: int, steps: int) -> Path | None:
    """Every check of the options that needs no file opened; returns the fit config to retrain with."""
    if not 0.0 <= float(target) < 1.0:  # the CLI's type refuses it first; a Python call lands here
        raise EnsmlError(f"{COMMAND}: option --sparsity: {target} is out of range (must be >= 0 and < 1)")
    if not Path(ckpt_path).is_file():
        raise EnsmlError(f"{COMMAND}: checkpoint {ckpt_path} does not exist")
    if int(steps) > 1 and not epochs:
        raise EnsmlError(f"{COMMAND}: --steps {steps} needs --retrain_epochs > 0 (without it, one step)")
    if not epochs:
        if config is not None:
            raise EnsmlError(f"{COMMAND}: --config is read for retraining only; give --retrain_epochs too")
        return None
    if config is None:
        raise EnsmlError(
            f"{COMMAND}: --retrain_epochs {epochs} needs --config FIT.yaml (the data to train on)"
        )
    if not Path(config).is_file():
        raise EnsmlError(f"{COMMAND}: config file {config} does not exist")
    return Path(config)


def _load_data(config: Path, checkpoint: Checkpoint):
    """The fit config's data module, checked against the checkpoint, and the trainer options
    retraining keeps (nothing written)."""
    from ensml.train.lightning_cli import load_fit_config

    cli = load_fit_config(str(config))
    data = cli.datamodule
    checkpoint.check_data(RunData.of(data, f"the data of {config}"))
    trainer = cli.config.trainer
    return data, {k: trainer[k] for k in TRAINER_KEYS if trainer.get(k) is not None}


def _retrain(task, data, options: dict[str, Any], epochs: int) -> None:
    """``epochs`` of Lightning's fit on ``task``: one device, no logger, checkpoints or validation."""
    import lightning as L

    from ensml.train.progress import LogProgress, use_lightning_bar

    bar = use_lightning_bar()
    trainer = L.Trainer(
        max_epochs=epochs,
        devices=1,
        logger=False,
        enable_checkpointing=False,
        enable_model_summary=False,
        limit_val_batches=0,
        num_sanity_val_steps=0,
        enable_progress_bar=bar,
        callbacks=[] if bar else [LogProgress()],
        **options,
    )
    with signal_as_interrupted(signal.SIGINT):  # not Lightning's "Detected KeyboardInterrupt", exit 1
        trainer.fit(task, datamodule=data)


def _write(saved: dict[str, Any], task, record: dict[str, Any], out_dir: Path) -> None:
    """``saved`` with the task's pruned weights and ``record``, as ``out_dir/pruned.ckpt``."""
    state = {k: v.detach().cpu() for k, v in task.state_dict().items()}
    old = saved["state_dict"]
    if state.keys() != old.keys() or any(state[k].shape != old[k].shape for k in old):
        raise RuntimeError("pruning changed the checkpoint's keys or shapes")  # a bug, not a user error
    checkpoint = {**saved, "state_dict": state, PRUNING_KEY: record}
    with OutputFolder.open(out_dir, COMMAND, names=[OUTPUT]) as folder, folder.write(OUTPUT) as tmp:
        torch.save(checkpoint, tmp)
    r = record
    print(
        f"{COMMAND}: wrote {out_dir / OUTPUT}: {r['method']} pruning, sparsity {r['sparsity']:.1%} "
        f"(target {r['target_sparsity']:.1%}), {r['nonzero_parameters']:,} of {r['parameters']:,} "
        "network parameters non-zero"
    )


def read_pruning(path: str | Path) -> dict[str, Any] | None:
    """The pruning record of a checkpoint written by ``ensml prune`` (None for another checkpoint)."""
    saved = torch.load(path, map_location="cpu", weights_only=True)
    return saved.get(PRUNING_KEY) if isinstance(saved, dict) else None


__all__ = ["COMMAND", "OUTPUT", "PRUNING_KEY", "Sparsity", "prune_cli", "read_pruning"]
