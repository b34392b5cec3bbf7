"""``ensml fit|validate|test|predict``: LightningCLI over ensml's tasks and data module.

The options are the task's (``--model``), the data module's (``--data``) and Lightning's
trainer's (``--trainer``); see :mod:`ensml.train.lightning_cli`.
"""

from __future__ import annotations

#: The Lightning verbs and their one-line summaries (their options come from LightningCLI: no
#: function of ensml's declares them, so :data:`COMMANDS` is empty).
COMMANDS: dict = {}
SUMMARIES = {
    "fit": "Train a model (spread or post-processing) from a YAML config: --config configs/mixed.yaml.",
    "validate": "Score a checkpoint on the validation split (--ckpt_path).",
    "test": "Score a checkpoint on the test split (--ckpt_path).",
    "predict": "Write a checkpoint's predictions for the test split to netCDF (--ckpt_path).",
}


def run(args: list[str]) -> None:
    """Run ``ensml VERB ARGS`` (``VERB`` one of :data:`SUMMARIES`) through LightningCLI."""
    from ensml.train.lightning_cli import run_lightning

    run_lightning(args)
