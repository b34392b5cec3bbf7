"""``ensml fit``'s run folder, written through the output module (:mod:`ensml.data.outputs`).

The run folder is the logger's folder (``runs/<name>``, ``trainer.log_dir``): it holds
``config.yaml``, the CSV logger's ``hparams.yaml`` and ``metrics.csv``, and the checkpoint
folder (``checkpoints/``). Everything a fit writes must lie inside it, so that one ledger says
what is the run's: a checkpoint or log folder elsewhere is refused before the work.

- :meth:`RunFolder.check` (before the work, every rank): the folder is new, empty or ensml's, and
  none of those names is a user's file.
- :meth:`RunFolder.open` (global rank 0, before training): lock the folder for the run and
  reserve the names, so that whatever Lightning writes there, at any moment of a kill, is the
  run's; a resumed fit reserves the same names again.
- :meth:`RunFolder.write`: ensml's own writes (checkpoints, the ``metrics.csv`` rewrite of a
  resume, ``config.yaml``) go through the run's staging: whole or not at all, and a full disk is
  one line naming the file. The staging is picklable, so spawned ranks write through it too.
- :meth:`RunFolder.close` (the process that opened it): adopt what Lightning wrote itself
  (``metrics.csv``, ``hparams.yaml``, the checkpoints) and release the folder.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import lightning as L
from lightning.pytorch.cli import SaveConfigCallback
from lightning.pytorch.loggers import CSVLogger
from lightning.pytorch.utilities.rank_zero import rank_zero_only

from ensml.data.outputs import OutputFolder, Staging
from ensml.errors import EnsmlError

COMMAND = "fit"
CONFIG = "config.yaml"
CSV_FILES = ("hparams.yaml", "metrics.csv")


class RunFolder:
    """The run folder of one ``ensml fit``: checked, opened on global rank 0, written, adopted."""

    def __init__(
        self, root: str | os.PathLike[str] | None = None, names: dict[str, str] | None = None
    ) -> None:
        self.root = None if root is None else Path(root)  # set by check() from the trainer
        self.names = dict(names or {})  # name -> kind ("file" or "dir"), relative to root
        self.staging: Staging | None = None  # set by open; pickled with the callbacks
        self._folder: OutputFolder | None = None
        self._opener: int | None = None  # the process that opened the folder

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_folder"] = None  # the lock and the ledger stay with the process that opened them
        return state

    @staticmethod
    def layout(trainer: L.Trainer) -> tuple[Path, dict[str, str]]:
        """The run folder and the outputs Lightning and ensml write into it (name -> kind).

        Raises
        ------
        EnsmlError
            A log or checkpoint folder outside the run folder, or a logger other than the CSV
            logger writing into the run folder itself (its files cannot be named beforehand).
        """
        run = Path(trainer.log_dir or trainer.default_root_dir)
        names = {CONFIG: "file"}
        for logger in trainer.loggers:
            log_dir = getattr(logger, "log_dir", None) or logger.save_dir
            if not log_dir:
                continue
            if isinstance(logger, CSVLogger):
                names.update({_inside(run, Path(log_dir) / f, "log file"): "file" for f in CSV_FILES})
            else:
                names[_inside(run, Path(log_dir), f"{type(logger).__name__} folder", folder=True)] = "dir"
        for dirpath in checkpoint_dirs(trainer):
            names[_inside(run, dirpath, "checkpoint folder", folder=True)] = "dir"
        return run, names

    def check(self, trainer: L.Trainer) -> None:
        """Raise unless the run may write its folder (nothing is created); remember the layout."""
        root = Path(trainer.default_root_dir)
        if root.exists() and not root.is_dir():  # Lightning would fail on it later, with a traceback
            raise EnsmlError(f"{COMMAND}: default_root_dir {root} is a file, not a folder")
        self.root, self.names = self.layout(trainer)
        OutputFolder.check(self.root, COMMAND, names=self.names)

    def open(self) -> None:
        """On global rank 0: open, lock and create the run folder and reserve every output.

        Other ranks (re-executed by a DDP launcher) only checked it: rank 0 holds it.
        """
        if rank_zero_only.rank != 0 or self.root is None:
            return
        folder = OutputFolder.open(self.root, COMMAND, names=self.names)
        try:
            for kind in ("file", "dir"):
                folder.reserve([n for n, k in self.names.items() if k == kind], kind=kind)
            self.staging = folder.staging(self.names)
        except BaseException:
            folder.close()
            raise
        self._folder, self._opener = folder, os.getpid()

    def close(self, failed: bool = False) -> None:
        """Adopt what Lightning wrote into the reserved names, and release the folder.

        Only in the process that opened it (spawned ranks hold a copy without the folder). After
        this, a change to an adopted file (by hand) makes it the user's: a later fit refuses it.
        ``failed``: the run stopped with an error, which an error of the adoption (a full disk)
        must not hide; the names stay reserved, so the files are still the run's.
        """
        folder, self._folder = self._folder, None
        if folder is None or self._opener != os.getpid():
            return
        try:
            folder.adopt(self.names)
        except EnsmlError:
            if not failed:
                raise
        finally:
            folder.close(failed=failed)

    def name(self, path: str | os.PathLike[str]) -> str:
        """The name of ``path`` (a file Lightning asks for) relative to the run folder."""
        if self.staging is None:
            raise EnsmlError(f"{COMMAND}: cannot write {path}: the run folder is not open in this process")
        here = os.path.join(os.path.realpath(os.path.dirname(os.path.abspath(path))), os.path.basename(path))
        return os.path.relpath(here, self.staging.root)

    @contextmanager
    def write(self, path: str | os.PathLike[str]) -> Iterator[Path]:
        """Yield a temporary path for ``path`` (inside the run folder, reserved); put it in place
        when the block ends. A failed write leaves the previous file whole: one line naming it."""
        name = self.name(path)
        assert self.staging is not None  # checked by name()
        with self.staging.write(name) as tmp:
            yield tmp

    def write_text(self, name: str, text: str) -> None:
        """Write ``text`` as the file ``name`` of the run folder, whole or not at all."""
        if self.staging is None:
            raise EnsmlError(f"{COMMAND}: cannot write {name}: the run folder is not open in this process")
        self.staging.write_text(name, text)


def checkpoint_dirs(trainer: L.Trainer) -> list[Path]:
    """The folders of the trainer's checkpoint callbacks (Lightning's default: the run's ``checkpoints``)."""
    run = Path(trainer.log_dir or trainer.default_root_dir)
    dirs = [Path(getattr(cb, "dirpath", None) or run / "checkpoints") for cb in trainer.checkpoint_callbacks]
    return list(dict.fromkeys(dirs))


def _inside(run: Path, path: Path, what: str, folder: bool = False) -> str:
    """``path`` as a name relative to the run folder ``run``, or raise: fit writes only there."""
    rel = os.path.relpath(os.path.abspath(path), os.path.abspath(run))
    if rel == "." and folder:
        raise EnsmlError(
            f"{COMMAND}: the {what} is the run folder {run} itself; ensml cannot name the files it "
            "writes there beforehand (use Lightning's CSVLogger, or give it a folder inside the run folder)"
        )
    if rel == ".." or rel.startswith(f"..{os.sep}"):
        raise EnsmlError(
            f"{COMMAND}: the {what} {path} is outside the run folder {run}; "
            f"put it inside, e.g. {run / 'checkpoints'}: a run keeps its files in one folder"
        )
    return rel


class SaveConfigToRunFolder(SaveConfigCallback):
    """LightningCLI's ``config.yaml``, written through the run folder (whole or not at all).

    Lightning writes it in place: a full disk left a 0-byte ``config.yaml`` and a long traceback.
    Set :attr:`run` before training starts.
    """

    def __init__(
        self,
        parser: Any,
        config: Any,
        config_filename: str = CONFIG,
        overwrite: bool = False,
        multifile: bool = False,
        save_to_log_dir: bool = True,
    ) -> None:
        super().__init__(parser, config, config_filename, overwrite, multifile, save_to_log_dir=False)
        self.run: RunFolder | None = None

    def save_config(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if self.run is None:
            raise EnsmlError(f"fit: cannot write {self.config_filename}: no run folder was given")
        self.run.write_text(self.config_filename, self.parser.dump(self.config, skip_none=False))
