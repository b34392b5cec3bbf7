"""What a command prints besides its results: ``--quiet``, ``--verbose`` and third-party loggers.

One switch for the whole process, set by ``ensml`` from its ``--quiet`` / ``--verbose`` flags
(:func:`configure`); library users get the defaults (progress shown, third-party chatter off).

* **default**: progress (a bar on a terminal, a line per stage otherwise), ensml's own notes and
  Lightning's (devices, model summary); the chatter of cfgrib, ecCodes' Python bindings and
  dask.distributed is held back at WARNING or above, and what ensml turns into its own
  one-line errors (cfgrib's skipped variables and corrupted messages) is not printed twice.
* **quiet**: no progress and no notes (Lightning's included); results, warnings and errors only.
* **verbose**: every logger at INFO, tracebacks included, for bug reports.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager

#: Loggers of the libraries ensml drives, held at WARNING unless ``--verbose``.
THIRD_PARTY = ("cfgrib", "gribapi", "eccodes", "distributed")
#: Lightning's own notes (devices found, model summary): shown, except under ``--quiet``.
LIGHTNING = ("lightning.pytorch", "lightning.fabric")

#: Taken by every command, before or after its name: ``{flag: (short form, help)}``.
GLOBAL_FLAGS = {
    "--quiet": ("-q", "no progress bars, progress lines or notes: results, warnings and errors only"),
    "--verbose": ("-v", "show the logs of cfgrib, ecCodes and dask.distributed, tracebacks included"),
}
_SPELLINGS = {spelling: flag for flag, (short, _) in GLOBAL_FLAGS.items() for spelling in (flag, short)}

_state = {"quiet": False, "verbose": False}


def take_flags(args: list[str]) -> list[str]:
    """:func:`configure` from the ``--quiet`` / ``--verbose`` in ``args``; return the other args."""
    flags = {_SPELLINGS[arg] for arg in args if arg in _SPELLINGS}
    configure(quiet="--quiet" in flags, verbose="--verbose" in flags)
    return [arg for arg in args if arg not in _SPELLINGS]


def configure(quiet: bool = False, verbose: bool = False) -> None:
    """Set the process-wide verbosity (``ensml --quiet`` / ``--verbose``) and the loggers with it."""
    if quiet and verbose:
        from ensml.errors import EnsmlError

        raise EnsmlError("--quiet and --verbose exclude each other: give one")
    _state.update(quiet=quiet, verbose=verbose)
    if verbose:
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s: %(message)s")
    apply_levels()


def apply_levels() -> None:
    """Set the third-party loggers' levels; again after importing Lightning, which sets its own."""
    quiet, verbose = _state["quiet"], _state["verbose"]
    level = logging.INFO if verbose else logging.ERROR if quiet else logging.WARNING
    for name in THIRD_PARTY:
        logging.getLogger(name).setLevel(level)
    for name in LIGHTNING:
        logging.getLogger(name).setLevel(logging.WARNING if quiet else logging.INFO)


def quiet() -> bool:
    """Whether progress and notes are off (``--quiet``)."""
    return _state["quiet"]


def verbose() -> bool:
    """Whether third-party logs and tracebacks are shown (``--verbose``)."""
    return _state["verbose"]


class _Collect(logging.Handler):
    def __init__(self, keep: Callable[[logging.LogRecord], bool]) -> None:
        super().__init__(logging.DEBUG)
        self.keep = keep
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        if self.keep(record):
            self.records.append(record)
        elif not verbose():  # not ensml's to report: on to the root's handlers, as without us
            logging.getLogger().handle(record)


@contextmanager
def collected(name: str, keep: Callable[[logging.LogRecord], bool]) -> Iterator[list[logging.LogRecord]]:
    """Collect the records of logger ``name`` that ``keep`` accepts instead of printing them.

    For libraries whose log records ensml turns into its own errors: the caller inspects the
    records and raises one line, so the library's traceback would only repeat it. Other records
    are handled as usual; under ``--verbose`` every record is, the collected ones included.
    """
    logger = logging.getLogger(name)
    handler = _Collect(keep)
    propagate = logger.propagate
    # A logging set-up made after the library was imported (``logging.config.dictConfig`` keeps
    # its default ``disable_existing_loggers``, as import-linter's does) disables its loggers,
    # whose records would then never reach us: e.g. a damaged GRIB read as fewer times, silently.
    family = [logger, *(lg for n, lg in _loggers() if n.startswith(f"{name}."))]
    disabled = {lg: lg.disabled for lg in family}
    logger.addHandler(handler)
    logger.propagate = verbose()
    for lg in family:
        lg.disabled = False
    try:
        yield handler.records
    finally:
        logger.removeHandler(handler)
        logger.propagate = propagate
        for lg, was in disabled.items():
            lg.disabled = was


def _loggers() -> list[tuple[str, logging.Logger]]:
    """The loggers created so far, by name (placeholders left out)."""
    known = dict(logging.Logger.manager.loggerDict)
    return [(n, lg) for n, lg in known.items() if isinstance(lg, logging.Logger)]


__all__ = [
    "GLOBAL_FLAGS",
    "LIGHTNING",
    "THIRD_PARTY",
    "apply_levels",
    "collected",
    "configure",
    "quiet",
    "take_flags",
    "verbose",
]
