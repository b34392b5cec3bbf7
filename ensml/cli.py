"""The ``ensml`` command: a thin dispatcher.

``ensml fit|validate|test|predict`` go to LightningCLI; the other verbs (``ensml data synth``,
``ensml evaluate``) are typed functions parsed by jsonargparse, so every verb takes
``--config file.yaml`` and dotted overrides the same way. User errors print as one line
(``ensml: …``) with exit status 1.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from ensml.errors import EnsmlError
from ensml.provenance import set_command

LIGHTNING_VERBS = ("fit", "validate", "test", "predict")


def _components() -> dict:
    from ensml.data.archive import archive
    from ensml.data.synth import synth
    from ensml.eval.evaluate import evaluate
    from ensml.eval.report import report
    from ensml.postprocess import postprocess
    from ensml.train.benchmark import benchmark
    from ensml.train.plan import plan_parallel_cli

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
    try:
        if args and args[0] in LIGHTNING_VERBS:
            from ensml.train.cli import run_lightning

            run_lightning(args)
        else:
            from jsonargparse import auto_cli

            auto_cli(_components(), args=args, as_positional=False)
    except EnsmlError as exc:
        print(f"ensml: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
