"""What the jsonargparse verbs share: parse the arguments into the library function and call it.

A verb's options are declared once, by the library function it runs (``"module:function"``):
its signature gives every option's type, range and default, its numpydoc docstring the help.
jsonargparse reads ``--config file.yaml`` and dotted overrides into it, checks each value against
its type (a range type such as ``PositiveInt`` included) and reports a bad one as an
:class:`~argparse.ArgumentError`, which :func:`ensml.cli.main.main` prints as one line. The library
is imported only when the verb runs: ``--help`` prints the stored text (:mod:`.help_store`).
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable, Sequence
from typing import Any

from ensml.cli.help_store import print_stored


def load(target: str) -> Callable[..., Any]:
    """The function named by ``"package.module:function"``."""
    module, name = target.split(":")
    return getattr(importlib.import_module(module), name)


def run_function(target: str | dict[str, str], args: Sequence[str]) -> Any:
    """Parse ``args`` (the verb's name first) into ``target`` (a function, or sub-commands), run it
    and return what it returns (None after ``--help``).

    A function whose own option is ``config`` (``plan-memory --config FIT.yaml``) gets no
    ``--config`` of option files: jsonargparse then parses the value as the option but drops it
    before the call, so such a function is called here with what was parsed.
    """
    if print_stored(args):
        return None
    from jsonargparse import auto_cli, capture_parser

    function = load(target) if isinstance(target, str) else {k: load(v) for k, v in target.items()}
    # No abbreviations: `--limit -3` must not quietly mean `--limit_train_batches -3`.
    options = dict(as_positional=False, exit_on_error=False, prog=f"ensml {args[0]}", allow_abbrev=False)
    if callable(function) and "config" in inspect.signature(function).parameters:
        parser = capture_parser(lambda: auto_cli(function, args=[], **options))
        instantiate = getattr(parser, "instantiate", None) or parser.instantiate_classes
        parsed = instantiate(parser.parse_args(list(args[1:])))
        names = inspect.signature(function).parameters
        return function(**{k: v for k, v in vars(parsed).items() if k in names})
    return auto_cli(function, args=list(args[1:]), **options)


def config_keys(args: Sequence[str]) -> set[str]:
    """The top-level keys of the first ``--config`` YAML mapping in ``args`` (none: an empty set,
    also for a file that cannot be read, which the verb's parser then reports)."""
    import yaml

    for i, arg in enumerate(args):
        name, eq, value = arg.partition("=")
        if name != "--config":
            continue
        value = value if eq else (args[i + 1] if i + 1 < len(args) else "")
        try:
            with open(value, encoding="utf-8") as f:
                config = yaml.safe_load(f)
        except (OSError, UnicodeDecodeError, yaml.YAMLError):
            return set()
        return {str(key) for key in config} if isinstance(config, dict) else set()
    return set()


def summary(fn: Callable[..., Any]) -> str:
    """The first line of ``fn``'s docstring (its one-line summary in ``ensml --help``)."""
    doc = (fn.__doc__ or "").strip()
    return doc.splitlines()[0].replace("``", "") if doc else ""


__all__ = ["config_keys", "load", "run_function", "summary"]
