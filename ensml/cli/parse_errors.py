"""Command-line errors as one line: what option or file is wrong, and what was expected.

jsonargparse reports a bad option as a usage block and a multi-line, nested message (exit
status 2). The parsers run with ``exit_on_error=False`` and :func:`describe` turns their
message into one sentence; :func:`check_config_files` reads every ``--config`` file first, so a
missing file or a YAML syntax error names the file and the line.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

import yaml

from ensml.errors import EnsmlError

_KEY = re.compile(r'^Parser key "([^"]+)":\s*(.*)$')
_CLASS_PROBLEM = re.compile(r"^- Problem with given class_path '([^']+)':$")
_RANGE = re.compile(r"^(?:- )?Not of type \w+: (.*?)\s*does not conform to restriction (.*)$")
_NOT_NUMBER = re.compile(
    r"^(?:- )?Not of type \w+: "
    r"(?:invalid literal for (int)\(\) with base 10|could not convert string to (float)): (.*)$"
)
_EXPECTED = re.compile(r"^(?:- )?Expected a (.+?)(?:\. Got value: (.*))?$")


def check_config_files(args: Sequence[str]) -> None:
    """Raise :class:`EnsmlError` for a ``--config`` file that is missing or not valid YAML."""
    for i, arg in enumerate(args):
        if arg == "--config" and i + 1 < len(args):
            _check_yaml(args[i + 1])
        elif arg.startswith("--config="):
            _check_yaml(arg.split("=", 1)[1])


class _UniqueKeyLoader(yaml.SafeLoader):
    """A safe loader that refuses a key repeated in one mapping (PyYAML keeps the last silently)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        seen: set[object] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                mark = key_node.start_mark
                raise yaml.constructor.ConstructorError(
                    None, None, f"key {key!r} is repeated (ensml would keep only the last)", mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def _check_yaml(name: str) -> None:
    path = Path(name)
    if not path.is_file():
        raise EnsmlError(f"config file {name} does not exist")
    try:
        content = yaml.load(path.read_text(), Loader=_UniqueKeyLoader)
    except UnicodeDecodeError:
        raise EnsmlError(f"config file {name} is not a text (YAML) file") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise EnsmlError(f"config file {name} is not valid YAML: {problem}{where}") from None
    if content is None:
        raise EnsmlError(f"config file {name} is empty (it should map options to values)")
    if not isinstance(content, dict):
        kind = type(content).__name__
        raise EnsmlError(f"config file {name} holds a {kind}, not a mapping of options to values")


def _type_name(text: str) -> str:
    """``<class 'int'>`` → ``int``; ``typing.Literal['a', 'b']`` → ``one of 'a', 'b'``."""
    text = re.sub(r"<class '(?:[\w.]+\.)?(\w+)'>", r"\1", text)
    text = re.sub(r"typing\.Literal\[(.*)\]", r"one of \1", text)
    return text.replace("NoneType", "null")


def _option(key: str) -> str:
    return "config file" if key == "config" else f"option --{key}"


def _describe_key(key: str, lines: list[str]) -> str:
    """One sentence for the body ``lines`` of ``Parser key "key":``."""
    text = [line.strip() for line in lines if line.strip()]
    for i, line in enumerate(text):
        problem = _CLASS_PROBLEM.match(line)
        if problem is None:
            continue
        cls, reason = problem.group(1), text[i + 1] if i + 1 < len(text) else "cannot be used"
        inner = _KEY.match(reason)
        if inner:  # a bad init argument of the class: recurse with its full key and own lines
            rest = text[i + 2 :]
            end = next(
                (j for j, line in enumerate(rest) if line.startswith(("- ", "Given value"))), len(rest)
            )
            return _describe_key(f"{key}.init_args.{inner.group(1)}", [inner.group(2), *rest[:end]])
        unknown = re.match(r"^Option '([^']+)' is not accepted$", reason)
        if unknown:
            return f"option --{key}.init_args.{unknown.group(1)} is not an argument of {cls}"
        return f"{_option(key)}: {cls} cannot be used ({reason.rstrip('.')})"
    given = next((line.split(":", 1)[1].strip() for line in text if line.startswith("Given value:")), None)
    for line in text:
        bound = _RANGE.match(line)
        if bound:
            limits = re.sub(r"v\s*([<>!=]=?)\s*", r"\1 ", bound.group(2))  # v>=1 and v<=9 → >= 1 and <= 9
            return f"{_option(key)}: {bound.group(1) or given} is out of range (must be {limits})"
        literal = _NOT_NUMBER.match(line)
        if literal:
            number = "an integer" if literal.group(1) else "a number"
            return f"{_option(key)}: expected {number}, got {literal.group(3).strip()}"
        path = re.match(r"^(?:- )?Expected a dot import path string: (.*)$", line)
        if path:
            example = "a dotted path such as ensml.train.tasks.MixedTask"
            return f"{_option(key)}: {path.group(1)!r} is not a class (expected {example})"
        if line.startswith("File does not exist:"):
            name = line.split(":", 1)[1].strip().strip("'")
            return f"{_option(key)}: file {name} does not exist"
    expected = [m for m in (_EXPECTED.match(line) for line in text) if m]
    if expected:
        types = [_type_name(m.group(1)) for m in expected]
        got = expected[0].group(2) if expected[0].group(2) is not None else given
        alternatives = " or ".join(dict.fromkeys(types))
        return f"{_option(key)}: expected {alternatives}" + (f", got {got!r}" if got is not None else "")
    return f"{_option(key)}: " + " ".join(text)


def describe(message: str, verb: str = "") -> str:
    """One line for a jsonargparse error ``message`` raised while parsing ``ensml VERB …``."""
    lines = message.splitlines() or [""]
    first = lines[0].strip()
    help_hint = f"ensml {verb} --help" if verb else "ensml --help"
    key = _KEY.match(first)
    if key:
        return _describe_key(key.group(1), [key.group(2), *lines[1:]])
    if first.startswith("unrecognized arguments:"):
        words = first.split(":", 1)[1].split()
        words = words[1:] if words and words[0] == verb else words
        return f"unknown option {' '.join(words)} ({help_hint} lists the options)"
    choice = re.match(r"^argument subcommand: invalid choice: '([^']*)' \(choose from (.*)\)$", first)
    if choice:
        return f"unknown command {choice.group(1)!r}; the commands are {choice.group(2).replace(chr(39), '')}"
    sub = re.match(r'^expected "(?:[\w.-]+\.)?subcommand" to be one of \{(.*)\}', first)
    if sub:
        return f"needs a command: {sub.group(1).replace(',', ' or ')}"
    required = re.match(r"^the following arguments are required: (.*)$", first)
    if required:
        keys = [k.strip().split(".", 1)[-1] for k in required.group(1).split(",")]
        return f"missing required option(s) {', '.join('--' + k for k in keys)} ({help_hint})"
    value = re.match(r"^argument (--[\w.-]+)(?:/[^:]*)?: expected one argument$", first)
    if value:
        return f"option {value.group(1)} needs a value"
    if first.startswith("Problems parsing config"):
        return "a config is not valid YAML: " + " ".join(line.strip() for line in lines[1:] if line.strip())
    return " ".join(line.strip() for line in lines if line.strip())


__all__ = ["check_config_files", "describe"]
