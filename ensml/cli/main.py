"""The ``ensml`` command: dispatch a verb to its thin module, turn every failure into one line.

Each verb lives in a module of :mod:`ensml.cli` that imports nothing heavy when it is loaded:
its function's signature is the verb's options, its docstring the help text, and the library
it calls is imported inside the function (the IMPROVER pattern). So ``ensml --help`` and
``ensml VERB --help`` answer without loading torch, xarray or dask. ``fit``, ``validate``,
``test`` and ``predict`` go to LightningCLI (:mod:`ensml.cli.fit`).

Exit codes are those of :data:`ensml.errors.EXIT_CODES`: a user error prints ``ensml: <what is
wrong, in which file>`` and exits 1 (2 when part of the work failed); Ctrl-C and SIGTERM exit
130 and 143 after the command has cleaned up; a full disk or a read-only file system is one line
naming the path. A Python traceback is printed only for a bug (or with ``--verbose``).

The console script is :func:`console`: :func:`main`, then the process ends. After a signal it ends
at once (:func:`leave_at_once`), not through the interpreter's shutdown.
"""

from __future__ import annotations

import errno
import gc
import importlib
import logging
import multiprocessing
import os
import signal
import sys
import traceback
from argparse import ArgumentError
from collections.abc import Sequence
from types import ModuleType

from ensml import __version__
from ensml.cli.parse_errors import check_config_files, describe
from ensml.errors import OS_REASONS, EnsmlError, interrupted_line, signal_as_interrupted
from ensml.logs import GLOBAL_FLAGS, take_flags, verbose
from ensml.provenance import set_command

#: Each verb and the module of :mod:`ensml.cli` that runs it, in the order ``ensml --help`` lists them.
VERBS: dict[str, str] = {
    "fit": "fit",
    "validate": "fit",
    "test": "fit",
    "predict": "fit",
    "data": "data",
    "evaluate": "evaluate",
    "report": "report",
    "postprocess": "postprocess",
    "plan-parallel": "plan",
    "plan-memory": "plan",
    "prune": "prune",
    "benchmark": "benchmark",
}
#: The OSErrors that reach the top as one line (their text is :data:`ensml.errors.OS_REASONS`'s;
#: other errno values are bugs).
DISK_ERRORS = {code: OS_REASONS[code] for code in (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EFBIG)}


def verb_module(verb: str) -> ModuleType:
    """The module of ``verb`` (light: its library is imported when the verb runs)."""
    if verb not in VERBS:
        raise EnsmlError(f"unknown command {verb!r}; the commands are {', '.join(VERBS)} (ensml --help)")
    return importlib.import_module(f"ensml.cli.{VERBS[verb]}")


def commands() -> list[tuple[str, str]]:
    """Every command as ``(words, one-line summary)``: ``("fit", …)``, ``("data synth", …)``."""
    out: list[tuple[str, str]] = []
    for module in dict.fromkeys(VERBS.values()):
        out += list(importlib.import_module(f"ensml.cli.{module}").SUMMARIES.items())
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``ensml`` console script; returns the exit status."""
    args = list(sys.argv[1:] if argv is None else argv)
    set_command(args)
    if not args:
        print("ensml: give a command (ensml --help lists them)", file=sys.stderr)
        return 1
    if args in (["-h"], ["--help"]):
        return _print(overview())
    if args == ["--version"]:
        return _print(f"ensml {__version__}")
    try:
        # SIGTERM (a batch system's kill, scancel) unwinds like Ctrl-C: cleanup runs, exit 143.
        with signal_as_interrupted(signal.SIGTERM):
            args = take_flags(args)
            if not args:
                raise EnsmlError("give a command (ensml --help lists them)")
            module = verb_module(args[0])
            check_config_files(args)
            module.run(args)
    except EnsmlError as exc:
        return _fail(str(exc), exc.exit_code)
    except ArgumentError as exc:  # a bad option or config value, from jsonargparse
        verb = _verb(args)
        return _fail(f"{verb + ': ' if verb else ''}{describe(str(exc), verb)}", 1)
    except KeyboardInterrupt:
        return _fail(interrupted_line(signal.SIGINT), 130)
    except BrokenPipeError:  # the reader of our output went away (ensml … | head)
        sys.stdout = open(os.devnull, "w")
        return 141
    except OSError as exc:
        if exc.errno not in DISK_ERRORS:
            raise
        where = exc.filename or "a file"
        return _fail(f"cannot write {where}: {DISK_ERRORS[exc.errno]}", 1)
    return 0


def console() -> None:
    """The ``ensml`` console script (and ``python -m ensml.cli.main``): run :func:`main` and exit
    with its status; after a signal, through :func:`leave_at_once`."""
    status = main()
    if status > 128:
        leave_at_once(status)
    sys.exit(status)


def leave_at_once(status: int) -> None:
    """End the process with ``status`` now that a signal's run has cleaned up and said its line.

    The verb's own cleanup has run by then (its output folder, staging, clusters and readers are
    closed on the way out). What is left is the interpreter's shutdown: it waits for every thread
    still at work (a dask task of the stopped computation, resumed after the signal) and then
    runs the finalisers of whatever the stopped computation left behind, at a point where
    background threads can no longer run. A stopped run has nothing to wait for there, and a
    finaliser that waits for such a thread would keep the terminal forever. So the garbage is
    collected now (its finalisers run while threads still can), child processes still running
    are stopped, logs and output are flushed, and the process exits without that shutdown.
    """
    gc.collect()
    children = multiprocessing.active_children()
    for child in children:
        child.terminate()
    for child in children:
        child.join(timeout=5)
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed or broken stream: nothing more can be said
            pass
    os._exit(status)


def _fail(message: str, status: int) -> int:
    if verbose():
        traceback.print_exc()
    # The line is the last word: reads still in flight on zarr's event loop when the error
    # stopped the run (a damaged chunk among several read at once) would otherwise add "Task
    # was destroyed but it is pending!" lines at exit.
    logging.getLogger("asyncio").setLevel(logging.CRITICAL)
    print(f"ensml: {message}", file=sys.stderr)
    return status


def _print(text: str) -> int:
    try:
        print(text)
    except BrokenPipeError:
        sys.stdout = open(os.devnull, "w")
        return 141
    return 0


def overview() -> str:
    """``ensml --help``: every command with a one-line summary."""
    rows = commands()
    width = max(len(words) for words, _ in rows)
    lines = [f"  {words:<{width}}  {summary}" for words, summary in rows]
    return "\n".join(
        [
            f"ensml {__version__}: machine learning on weather ensembles.",
            "",
            "usage: ensml COMMAND [--config FILE.yaml] [--option value ...]",
            "",
            "commands:",
            *lines,
            "",
            "options of every command (before or after its name):",
            *[f"  {short}, {flag:<{width - 4}}  {text}" for flag, (short, text) in GLOBAL_FLAGS.items()],
            "",
            "ensml COMMAND --help lists a command's options; ensml --version prints the version.",
        ]
    )


def _verb(args: Sequence[str]) -> str:
    """The command named by ``args`` (``fit``, ``data synth``, …), or "" if none."""
    words = []
    for arg in args[:2]:
        if arg.startswith("-") or (words and words[0] != "data"):
            break
        words.append(arg)
    return " ".join(words)


if __name__ == "__main__":
    console()
