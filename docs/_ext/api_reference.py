"""Sphinx extension: housekeeping for the autosummary-generated API reference.

**Stale pages.** autosummary writes one page per documented name into ``api/`` (generated,
gitignored) and never removes one: after a name leaves an ``__all__``, its old page stays, fails
to import or sits in no toctree, and the build fails. On ``builder-inited``, after autosummary has
generated the pages (it runs at the default priority, 500), this removes every page in ``api/``
that no autosummary table, from ``api.rst`` down through the generated module pages, lists any
more.

**Which constants a module page lists.** autosummary finds a module's functions and classes, but
of its other names only those with a ``#:`` comment, and it takes any constant without a
``__module__`` (a string imported from :mod:`ensml.names`) for the module's own. Before the pages
are generated, this gives the module template, as ``ensml_data_names``, each module's constants:
the names in its ``__all__`` that are neither classes, functions nor modules, or, for a module
without ``__all__``, the public names it assigns at top level.

**Data without a docstring.** autodoc documents a module-level constant with the docstring of
its value, which for ``LAT = 3`` is the docstring of ``int``. Such a docstring says nothing about
the constant and is dropped; the page keeps the name and the value. A ``#:`` comment above a
constant is its docstring, and is kept.
"""

from __future__ import annotations

import ast
import importlib
import inspect
from pathlib import Path
from typing import Any

from sphinx.application import Sphinx
from sphinx.config import Config
from sphinx.ext.autosummary.generate import find_autosummary_in_files
from sphinx.util import logging

API = "api"
INDEX = "api.rst"

logger = logging.getLogger(__name__)


def listed_names(srcdir: Path) -> set[str]:
    """Every name an autosummary table lists, starting at ``api.rst`` and following its pages."""
    names: set[str] = set()
    todo = [srcdir / INDEX]
    while todo:
        new = {entry.name for entry in find_autosummary_in_files([str(p) for p in todo])} - names
        names |= new
        todo = [page for name in sorted(new) if (page := srcdir / API / f"{name}.rst").is_file()]
    return names


def data_names(module_name: str) -> list[str]:
    """The constants that ``module_name`` makes public (see the module docstring)."""
    module = importlib.import_module(module_name)
    names = getattr(module, "__all__", None)
    if names is None:
        names = []
        for node in ast.parse(inspect.getsource(module)).body:
            targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
            names += [t.id for t in targets if isinstance(t, ast.Name)]
    routine = (inspect.isclass, inspect.isroutine, inspect.ismodule)
    return [
        name
        for name in dict.fromkeys(names)  # once each, in order
        if not name.startswith("_") and not any(test(getattr(module, name)) for test in routine)
    ]


def set_data_names(app: Sphinx, config: Config) -> None:
    """Put ``ensml_data_names`` ({module: constants}) into the autosummary templates' context.

    On ``config-inited``, so that the value is part of the configuration a build compares with the
    previous one: set later, every build would see a changed configuration and start afresh.
    """
    modules = [entry.name for entry in find_autosummary_in_files([str(Path(app.srcdir) / INDEX)])]
    config.autosummary_context = {
        **config.autosummary_context,
        "ensml_data_names": {name: data_names(name) for name in modules},
    }


def remove_stale(app: Sphinx) -> None:
    folder = Path(app.srcdir) / API
    if not folder.is_dir():
        return
    keep = listed_names(Path(app.srcdir))
    for page in sorted(folder.glob("*.rst")):
        if page.stem not in keep:
            logger.info("api_reference: removing api/%s (no longer documented)", page.name)
            page.unlink(missing_ok=True)


def drop_type_docstring(app: Sphinx, what: str, name: str, obj: Any, options: Any, lines: list[str]) -> None:
    """Empty the docstring of a constant when it is its type's (before napoleon reads it)."""
    if what != "data" or isinstance(obj, type):
        return
    type_doc = [line.strip() for line in (type(obj).__doc__ or "").splitlines() if line.strip()]
    if type_doc and [line.strip() for line in lines if line.strip()] == type_doc:
        lines.clear()


def setup(app: Sphinx) -> dict:
    app.connect("config-inited", set_data_names)
    app.connect("builder-inited", remove_stale, priority=600)
    app.connect("autodoc-process-docstring", drop_type_docstring, priority=400)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
