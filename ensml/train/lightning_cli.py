"""LightningCLI entry for ``ensml fit|validate|test|predict``."""

from __future__ import annotations

import logging
import signal
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import lightning as L
import yaml
from lightning.pytorch.cli import LightningCLI
from lightning.pytorch.utilities.rank_zero import rank_zero_only

from ensml.data.datamodule import EnsembleDataModule
from ensml.errors import EnsmlError, signal_as_interrupted
from ensml.logs import apply_levels, quiet
from ensml.names import family_names
from ensml.progress import note
from ensml.train import decentralised  # noqa: F401  (registers eager_solo, eager_majority, wagma)
from ensml.train.checkpoint_file import RUNNING_KEYS, Checkpoint, RunData, read_checkpoint
from ensml.train.checkpoints import FlushLogs, KeepLoggedMetrics, last_every_epoch, use_atomic_checkpoints
from ensml.train.hparams import SAMPLING_KEYS
from ensml.train.options import check_trainer_options  # [cli: option ranges]
from ensml.train.preemption import Preempted, Preemption, checkpoint_folder, requeued_checkpoint
from ensml.train.progress import LogProgress, use_lightning_bar
from ensml.train.run_folder import RunFolder, SaveConfigToRunFolder
from ensml.train.slurm import SlurmJob, check_tasks, cluster_plugins
from ensml.train.tasks import DATA_KEYS, EnsembleTask

#: ``--ckpt_path`` values that Lightning resolves itself (no file named).
CKPT_ALIASES = ("last", "best", "hpc", "registry")


def _check_outputs(trainer: L.Trainer, run: RunFolder) -> None:
    """Raise unless the run may write its folder (logs, config, checkpoints); create nothing."""
    run.check(trainer)


def _grid_shape(data: EnsembleDataModule) -> tuple[int, int]:
    return data.grid_shape


class EnsmlCLI(LightningCLI):
    """LightningCLI whose model hyperparameters follow the data config, checked before any output."""

    def add_arguments_to_parser(self, parser) -> None:
        for key in DATA_KEYS:
            parser.link_arguments(f"data.{key}", f"model.init_args.{key}")
        # The per-point layer's size: the grid, known once the data module has opened its files.
        parser.link_arguments(
            "data", "model.init_args.grid_shape", compute_fn=_grid_shape, apply_on="instantiate"
        )

    def instantiate_classes(self) -> None:
        try:
            super().instantiate_classes()
        except ValueError as exc:  # a link's compute function (the grid) hit a bad input file
            if isinstance(exc.__cause__, EnsmlError):
                raise exc.__cause__ from None
            raise

    def instantiate_trainer(self, **kwargs):
        # Only `fit` keeps logs and its config: a `predict` or `test` with the same YAML must not
        # overwrite the training run's metrics.csv and config.yaml.
        if self.subcommand != "fit":
            self.save_config_callback = None
        else:  # config.yaml, checkpoints and the metrics rewrite go through the run folder
            self.run_folder = RunFolder()
            self.save_config_callback = SaveConfigToRunFolder
        if not use_lightning_bar():  # a log, a pipe or --quiet: lines (or nothing), not a bar
            kwargs["enable_progress_bar"] = False
        # [cli: option ranges] trainer options this machine cannot honour: one line, not a hang.
        config = self.config_init[self.subcommand] if self.subcommand else self.config_init
        check_trainer_options(config.get("trainer", {}))
        # Under srun: the ranks are SLURM's tasks (checked), in Lightning's SLURM environment
        # without its own requeue handler (ensml.train.preemption stops at a batch boundary).
        check_tasks(config.get("trainer", {}))
        kwargs["plugins"] = cluster_plugins(config.get("trainer", {}).get("plugins"))
        if quiet():  # [cli: -q] results, warnings and errors only: no model summary
            kwargs["enable_model_summary"] = False
        trainer = super().instantiate_trainer(**kwargs)
        if not use_lightning_bar():
            trainer.callbacks.append(LogProgress())
        if self.subcommand != "fit":
            trainer.loggers = []
            return trainer
        last_every_epoch(trainer)
        use_atomic_checkpoints(trainer, self.run_folder)
        trainer.callbacks.append(FlushLogs())
        self._use_preemption(trainer)
        if self.config[self.subcommand].get("ckpt_path"):
            trainer.callbacks.insert(0, KeepLoggedMetrics(self.run_folder))
        for cb in trainer.callbacks:
            if isinstance(cb, SaveConfigToRunFolder):
                cb.run = self.run_folder
        return trainer

    def before_fit(self) -> None:
        _check_outputs(self.trainer, self.run_folder)
        self._check_inputs()
        self.run_folder.open()  # global rank 0: lock the run folder, reserve what the run writes
        try:
            for cb in self.trainer.callbacks:
                if isinstance(cb, KeepLoggedMetrics):
                    cb.keep(self.trainer)
        except BaseException:  # release the run folder on any way out (Ctrl-C too), then re-raise
            self.run_folder.close(failed=True)
            raise

    def fit(self, **kwargs: Any) -> None:
        """``trainer.fit``; then adopt what Lightning wrote into the run folder and release it."""
        try:
            self.trainer.fit(**kwargs)
        except Preempted as stop:  # a checkpoint to resume from: the folder is whole, adopt it
            self.run_folder.close()
            raise self._requeue(stop) from None
        except BaseException:  # release the run folder on any way out (Ctrl-C too), then re-raise
            self.run_folder.close(failed=True)
            raise
        self.run_folder.close()

    def _use_preemption(self, trainer: L.Trainer) -> None:
        """Under SLURM: stop at a checkpoint on SIGUSR1, and resume a requeued job from its own;
        anywhere: resume a preemption checkpoint exactly."""
        job = SlurmJob.current()
        if checkpoint_folder(trainer) is None:
            return
        every = getattr(trainer.strategy, "sigterm_every", 1)  # decentralised: not every batch
        trainer.callbacks.append(Preemption(job, every=every))  # outside SLURM: exact resumes only
        path = requeued_checkpoint(trainer, job)
        if path is None or self.config[self.subcommand].get("ckpt_path"):
            return
        # As --ckpt_path PATH: read and checked (this ensml's model, the config's options; the data
        # once opened), the logged rows kept; the model is the config's, which the check compares.
        self.checkpoint = read_checkpoint(path, task_class=type(self.model))
        self.checkpoint.check_options(dict(self.model.hparams))
        self.config[self.subcommand]["ckpt_path"] = self.config_init[self.subcommand]["ckpt_path"] = str(path)
        if job is not None and job.rank == 0:
            note(f"fit: SLURM job {job.id} requeued ({job.restarts}×): resuming from {path}")

    def _requeue(self, stop: Preempted) -> Preempted:
        """Requeue the job (rank 0); the line that ends this part of it."""
        job = SlurmJob.current()
        if job is None:
            return stop
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # the requeue ends the job's steps: exit on our own
        if rank_zero_only.rank != 0:
            return stop
        refused = job.requeue()
        if refused is None:
            return Preempted(
                f"{stop}; requeued: the job resumes from it when SLURM starts it again", stop.path
            )
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        return Preempted(
            f"{stop}; SLURM did not requeue the job ({refused}): submit it again with "
            f"--ckpt_path {stop.path} to go on",
            stop.path,
        )

    def parse_arguments(self, parser, args) -> None:
        # The command line is kept: which model options the user gave (not their defaults) is
        # known only from it (see model_options_given).
        self.args = list(sys.argv[1:] if args is None else args) if not isinstance(args, dict) else []
        self.checkpoint: Checkpoint | None = None
        super().parse_arguments(parser, args)

    def _parse_ckpt_path(self) -> None:
        # LightningCLI replaces the configured model by the checkpoint's hyperparameters while
        # parsing. The checkpoint is read and checked first (ensml.train.checkpoint_file: a file
        # of this ensml, matching its own model), so that nothing of it is a traceback later;
        # its data is checked once the data module has opened its files (_check_inputs).
        sub = self.config.get("subcommand") if self.config is not None else None
        path = self.config[sub].get("ckpt_path") if sub else None
        if not path or path in CKPT_ALIASES:
            return super()._parse_ckpt_path()
        model = self.config[sub].get("model")
        init_args = model.get("init_args") if model is not None else None
        self.checkpoint = read_checkpoint(path, task_class=model.get("class_path") if model else None)
        given = {k: init_args[k] for k in model_options_given(self.args) if init_args and k in init_args}
        # A checkpoint of another task or network, or another family, is an error, not a silent switch.
        requested = self._model_identity()
        requested_families = self._families()
        try:
            super()._parse_ckpt_path()
        except Exception as exc:  # Lightning's load of a damaged file raises what torch.load raises
            reason = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
            raise EnsmlError(
                f"checkpoint {path} cannot be read, truncated or not a checkpoint "
                f"({type(exc).__name__}{': ' + reason if reason else ''})"
            ) from None
        saved = self._model_identity()
        if requested and saved and requested != saved:
            raise EnsmlError(
                f"checkpoint {path} holds a {saved} model, the config asks for a {requested} model"
            )
        # The checkpoint's hyperparameters replace the config's: a family asked for that differs
        # from the one the checkpoint was trained in would be silently ignored, so refuse it.
        saved_families = self._families(explicit=False)
        if requested_families is not None and requested_families != saved_families:
            raise EnsmlError(
                f"checkpoint {path} was trained with distribution {_mapping(saved_families)}, the config "
                f"asks for {_mapping(requested_families)}: a checkpoint is applied in the family it was "
                "trained in"
            )
        # So is any other model option given that differs (a resumed fit would train the
        # checkpoint's width); how the network runs (memory, speed) and how many members a
        # generative task draws with what seed are the config's to choose.
        self.checkpoint.check_options(given)
        merged = self.config[sub]["model"].get("init_args")
        for key in (*RUNNING_KEYS, *SAMPLING_KEYS):
            if key in given and merged is not None:
                merged[key] = given[key]

    def _families(self, explicit: bool = True) -> dict[str, str] | None:
        """The family of each variable of the parsed config's model; None where the config names
        no ``distribution`` and ``explicit`` (the defaults then apply)."""
        sub = self.config.get("subcommand") if self.config is not None else None
        model = self.config[sub].get("model") if sub else None
        init_args = (model.get("init_args") or model.get("dict_kwargs") or {}) if model is not None else {}
        distribution = init_args.get("distribution") if hasattr(init_args, "get") else None
        if model is None or (explicit and not distribution):
            return None
        variables = [
            str(v) for v in (init_args.get("variables") or self.config[sub]["data"].get("variables") or ())
        ]
        return dict(zip(variables, family_names(variables, dict(distribution or {}))))

    def _model_identity(self) -> str | None:
        """``"<Task> '<arch>'"`` of the model in the parsed config (None before parsing)."""
        sub = self.config.get("subcommand") if self.config is not None else None
        model = self.config[sub].get("model") if sub else None
        if model is None or not model.get("class_path"):
            return None
        init_args = model.get("init_args") or {}
        arch = init_args.get("arch", "unet3d") if hasattr(init_args, "get") else "unet3d"
        return f"{str(model['class_path']).rsplit('.', 1)[-1]} {arch!r}"

    def _check_inputs(self) -> None:
        # Open and validate the data now, so a bad input fails before logs or checkpoints exist.
        _ = self.datamodule.spec
        check_data = getattr(self.model, "check_data", None)
        if check_data is not None and self.subcommand == "fit":  # e.g. a family bounded at 0, negative data
            check_data(self.datamodule)
        check_device = getattr(self.model, "check_device", None)
        if check_device is not None:  # options the device cannot honour (offload: host on a CPU)
            check_device(self.trainer.strategy.root_device)
        check = getattr(self.trainer.strategy, "check_inputs", None)
        if check is not None:  # e.g. a spatial split that does not fit the grid: fail before launch
            check(self.datamodule, self.model)
        check_trainer = getattr(self.trainer.strategy, "check_trainer", None)
        if check_trainer is not None:  # e.g. gradient accumulation under eager-SGD or WAGMA
            check_trainer(self.trainer)
        if self.checkpoint is not None:  # read and checked while parsing; now against the data
            self.checkpoint.check_data(RunData.of(self.datamodule))

    before_validate = before_test = before_predict = _check_inputs


VERBS = ("fit", "validate", "test", "predict")


class _NoTips(logging.Filter):
    """Drop Lightning's advertising tips (they point to cloud services ensml does not use)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("💡")


def _mapping(families: dict[str, str]) -> str:
    return "{" + ", ".join(f"{v}: {f}" for v, f in families.items()) + "}"


def model_options_given(args: Sequence[str]) -> set[str]:
    """The model options (``init_args`` names) that ``args`` give in a config file or as an option.

    jsonargparse's parsed config holds the defaults too; only the options a user gave can
    disagree with a checkpoint. Read from ``--config FILE``, ``--model FILE|YAML`` and
    ``--model[.init_args].NAME``.
    """
    given: set[str] = set()
    args = list(args)
    for i, arg in enumerate(args):
        if not arg.startswith("--"):
            continue
        name, eq, value = arg.partition("=")
        if not eq:
            value = args[i + 1] if i + 1 < len(args) else ""
        if name == "--config":
            config, base = _load_yaml(value, Path.cwd())
            if isinstance(config, dict):
                given |= _init_arg_names(config.get("model"), base)
        elif name == "--model":
            given |= _init_arg_names(value, Path.cwd())
        elif name.startswith("--model."):
            rest = name.removeprefix("--model.").removeprefix("init_args.")
            if rest == "init_args":
                loaded, _ = _load_yaml(value, Path.cwd())
                given |= set(loaded) if isinstance(loaded, dict) else set()
            elif rest not in ("class_path", "dict_kwargs"):
                given.add(rest.split(".")[0])
    return given


def _load_yaml(value: Any, base: Path) -> tuple[Any, Path]:
    """``value`` read as a YAML file (relative to ``base``) or as YAML text; its folder."""
    if not isinstance(value, str):
        return value, base
    path = base / value
    try:
        if path.is_file():
            return yaml.safe_load(path.read_text()), path.parent
        return yaml.safe_load(value), base
    except (OSError, yaml.YAMLError):  # the parser has reported what it could not read
        return None, base


def _init_arg_names(model: Any, base: Path) -> set[str]:
    model, base = _load_yaml(model, base)
    if not isinstance(model, dict):
        return set()
    if "class_path" not in model and "init_args" not in model:
        return {str(k) for k in model}
    sections = (model.get("init_args") or {}, model.get("dict_kwargs") or {})
    return {str(k) for section in sections if isinstance(section, dict) for k in section}


def quiet_lightning() -> None:
    """Lightning's loggers at ensml's verbosity, without its tips and non-actionable warnings."""
    apply_levels()  # importing Lightning set its loggers to INFO: --quiet / --verbose decide
    logging.getLogger("lightning.pytorch.utilities.rank_zero").addFilter(_NoTips())
    # Raised by Lightning itself, not actionable for ensml users (ensml's checkpoints hold weights
    # and hyperparameters; a predict or test run needs no checkpoint callback state). "Experiment
    # logs directory ... will be deleted": the run folder is ensml's (its ledger, checked before
    # the run) and already holds ``.ensml`` on a fresh fit; a resume keeps its logged rows
    # (checkpoints.KeepLoggedMetrics). "The `srun` command is available": on a SLURM login node
    # Lightning hints to prefix the process with srun; ensml's cluster runs are launched by ensml
    # (its job scripts), a run on the login node is meant to be one.
    for message in (
        "LightningCLI's args parameter",
        r"`isinstance\(treespec, LeafSpec\)`",
        "Be aware that when using `ckpt_path`, callbacks used to create the checkpoint",
        "Experiment logs directory",
        "The `srun` command is available on your system but is not used",
    ):
        warnings.filterwarnings("ignore", message=message)


def load_fit_config(config: str, overrides: list[str] = ()) -> EnsmlCLI:  # type: ignore[assignment]
    """A fit config parsed and its task and data module built (``.model``, ``.datamodule``,
    ``.config``, ``.parser``); nothing is run and nothing is written."""
    quiet_lightning()
    return EnsmlCLI(
        EnsembleTask,
        EnsembleDataModule,
        subclass_mode_model=True,
        seed_everything_default=0,
        run=False,
        parser_kwargs={"exit_on_error": False},
        args=["--config", str(config), *overrides],
    )


def run_lightning(args: list[str]) -> None:
    """Run a Lightning verb (``fit``, ``validate``, ``test``, ``predict``) with ``args``."""
    quiet_lightning()
    # Ctrl-C: ensml's Interrupted (exit 130, one ensml: line, the run folder closed) instead of
    # KeyboardInterrupt, which Lightning turns into sys.exit(1).
    with signal_as_interrupted(signal.SIGINT):
        EnsmlCLI(
            EnsembleTask,
            EnsembleDataModule,
            subclass_mode_model=True,
            seed_everything_default=0,
            save_config_kwargs={"overwrite": True},
            # Bad options raise (ensml.cli.main prints them as one line) instead of printing usage.
            parser_kwargs={"exit_on_error": False, **{verb: {"exit_on_error": False} for verb in VERBS}},
            args=args,
        )
