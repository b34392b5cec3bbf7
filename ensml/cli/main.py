"""The ``ensml`` command: a thin dispatcher.

``ensml fit|validate|test|predict`` go to LightningCLI; the other verbs (``ensml data synth``,
``ensml evaluate``) are typed functions parsed by jsonargparse, so every verb takes
``--config file.yaml`` and dotted overrides the same way. User errors, a bad option included,
print as one line (``ensml: …``, see :mod:`ensml.cli.parse_errors`) with exit status 1.
"""

from __future__ import annotations

import sys
import traceback
from argparse import ArgumentError
from collections.abc import Sequence

from ensml import __version__
from ensml.cli.parse_errors import check_config_files, describe
from ensml.errors import EnsmlError
from ensml.logs import GLOBAL_FLAGS, take_flags, verbose
from ensml.provenance import set_command

LIGHTNING_VERBS = ("fit", "validate", "test", "predict")
OTHER_VERBS = ("data", "evaluate", "report", "postprocess", "plan-parallel", "benchmark")


def _components() -> dict:
    from ensml.data.archive import archive
    from ensml.data.synth.generate import synth
    from ensml.experiments.benchmark import benchmark
    from ensml.experiments.plan import plan_parallel_cli
    from ensml.postprocess import postprocess
    from ensml.report.assemble import report
    from ensml.verify.evaluate import evaluate

    return {
        "data": {"synth": synth, "archive": archive},
        "evaluate": evaluate,
        "report": report,
        "postprocess": postprocess,
        "plan-parallel": plan_parallel_cli,
        "benchmark": benchmark,
    }


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``ensml`` console script; returns the exit status."""
    args = list(sys.argv[1:] if argv is None else argv)
    set_command(args)
    if not args:
        print("ensml: give a command (ensml --help lists them)", file=sys.stderr)
        return 1
    if args in (["-h"], ["--help"]):
        print(overview())
        return 0
    if args == ["--version"]:
        print(f"ensml {__version__}")
        return 0
    try:
        args = take_flags(args)
        if args and not args[0].startswith("-") and args[0] not in LIGHTNING_VERBS + OTHER_VERBS:
            verbs = ", ".join(LIGHTNING_VERBS + OTHER_VERBS)
            raise EnsmlError(f"unknown command {args[0]!r}; the commands are {verbs} (ensml --help)")
        check_config_files(args)
        if args and args[0] in LIGHTNING_VERBS:
            from ensml.train.lightning_cli import run_lightning

            run_lightning(args)
        else:
            from jsonargparse import auto_cli

            auto_cli(_components(), args=args, as_positional=False, exit_on_error=False)
    except EnsmlError as exc:
        if verbose():
            traceback.print_exc()
        print(f"ensml: {exc}", file=sys.stderr)
        return exc.exit_code  # 1; 2 for a partial failure; 128 + signal when interrupted
    except KeyboardInterrupt:  # Ctrl-C where no command handles it: one line, not a traceback
        print("ensml: interrupted", file=sys.stderr)
        return 130
    except ArgumentError as exc:  # a bad option or config value, from jsonargparse
        verb = _verb(args)
        print(f"ensml: {verb + ': ' if verb else ''}{describe(str(exc), verb)}", file=sys.stderr)
        return 1
    return 0


LIGHTNING_SUMMARIES = {
    "fit": "Train a model (spread or post-processing) from a YAML config: --config configs/mixed.yaml.",
    "validate": "Score a checkpoint on the validation split (--ckpt_path).",
    "test": "Score a checkpoint on the test split (--ckpt_path).",
    "predict": "Write a checkpoint's predictions for the test split to netCDF (--ckpt_path).",
}


def overview() -> str:
    """``ensml --help``: every command with a one-line summary."""
    rows = list(LIGHTNING_SUMMARIES.items())
    for verb, target in _components().items():
        subs = target.items() if isinstance(target, dict) else [("", target)]
        rows += [(f"{verb} {sub}".strip(), _summary(fn)) for sub, fn in subs]
    width = max(len(verb) for verb, _ in rows)
    lines = [f"  {verb:<{width}}  {summary}" for verb, summary in rows]
    return "\n".join([
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
    ])  # fmt: skip


def _summary(fn: object) -> str:
    doc = (getattr(fn, "__doc__", None) or "").strip()
    return doc.splitlines()[0].replace("``", "") if doc else ""


def _verb(args: Sequence[str]) -> str:
    """The command named by ``args`` (``fit``, ``data synth``, …), or "" if none."""
    words = []
    for arg in args[:2]:
        if arg.startswith("-") or (words and words[0] != "data"):
            break
        words.append(arg)
    return " ".join(words)


if __name__ == "__main__":
    sys.exit(main())
