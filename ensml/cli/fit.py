"""``ensml fit|validate|test|predict``: LightningCLI over ensml's tasks and data module.

The options are the task's (``--model``), the data module's (``--data``) and Lightning's
trainer's (``--trainer``); see :mod:`ensml.train.lightning_cli`. A *station config* (a YAML
with ``observations`` and no ``model``, ``data`` or ``trainer`` section) makes ``ensml fit``
fit a station model instead (:func:`ensml.train.station_fit.fit_stations`, whose signature
declares its options).
"""

from __future__ import annotations

#: What ``ensml fit`` runs for a station config.
STATION_FIT = "ensml.train.station_fit:fit_stations"
#: The Lightning verbs and their one-line summaries (their options come from LightningCLI: no
#: function of ensml's declares them, so :data:`COMMANDS` is empty).
COMMANDS: dict = {}
SUMMARIES = {
    "fit": "Train a model (spread or post-processing) from a YAML config: --config configs/mixed.yaml "
    "(a station config, configs/stations.yaml, fits a station model); --sbatch configs/slurm_fit.sh "
    "submits it as a SLURM job.",
    "validate": "Score a checkpoint on the validation split (--ckpt_path).",
    "test": "Score a checkpoint on the test split (--ckpt_path).",
    "predict": "Write a checkpoint's predictions for the test split to netCDF (--ckpt_path).",
}


def run(args: list[str]) -> None:
    """Run ``ensml VERB ARGS`` (``VERB`` one of :data:`SUMMARIES`) through LightningCLI.

    Lightning's own options (``--seed_everything``, ``--trainer.*``) are declared by Lightning;
    the values it refuses become one line here. A plain ``ensml VERB --help`` prints the stored
    text (:mod:`ensml.cli.help_store`) without building the parser.
    """
    from ensml.cli.help_store import print_stored

    if print_stored(args):
        return
    if args and args[0] == "fit" and is_station_config(args[1:]):
        from ensml.cli.verb import run_function

        fitted = run_function(STATION_FIT, args)
        if fitted is not None:
            print(f"fit: {fitted.model.describe()}; wrote {fitted.out_dir}")
        return
    if args and args[0] == "fit" and any(a.partition("=")[0] == "--sbatch" for a in args):
        from ensml.train.slurm_submit import submit_fit

        print(submit_fit(args[1:]))
        return
    from lightning.fabric.utilities.exceptions import MisconfigurationException

    from ensml.errors import EnsmlError
    from ensml.seeds import out_of_range
    from ensml.train.lightning_cli import run_lightning
    from ensml.train.preemption import Preempted
    from ensml.train.slurm import SlurmJob, SlurmTasksMismatch

    try:
        run_lightning(args)
    except SystemExit:  # --help printed Lightning's options: the submission's follow
        if args[:1] == ["fit"] and any(a in ("-h", "--help") for a in args):
            from ensml.train.slurm_submit import HELP

            print(HELP, end="")
        raise
    except (SlurmTasksMismatch, Preempted) as exc:  # every SLURM task stops alike: rank 0 says why
        job = SlurmJob.current()
        if job is not None and job.rank > 0:
            raise SystemExit(exc.exit_code) from None
        raise
    except MisconfigurationException as exc:  # a trainer option this machine cannot honour
        raise EnsmlError(trainer_problem(exc)) from None
    except ValueError as exc:
        if "is not in bounds, numpy accepts" not in str(exc):  # seed_everything's own check
            raise
        raise EnsmlError(out_of_range("option --seed_everything", str(exc).split()[0])) from None


def is_station_config(args: list[str]) -> bool:
    """Whether ``args`` give a station config: a ``--config`` YAML mapping with ``observations``
    and none of LightningCLI's sections (an unreadable file is LightningCLI's to report)."""
    from ensml.cli.verb import config_keys

    keys = config_keys(args)
    return "observations" in keys and not {"model", "data", "trainer"} & keys


def trainer_problem(exc: Exception) -> str:
    """One line for a Lightning ``MisconfigurationException`` raised while building the trainer."""
    text = " ".join(str(exc).split())
    if "No supported gpu backend found" in text or "GPUAccelerator can not run on your system" in text:
        return "no GPU on this machine; use --trainer.accelerator cpu"
    if "MPSAccelerator" in text or "TPUAccelerator" in text or "XLAAccelerator" in text:
        return f"this machine cannot run the requested accelerator ({text}); use --trainer.accelerator cpu"
    return f"trainer: {text}"
