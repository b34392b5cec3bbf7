"""Sphinx configuration of the ensml documentation site.

Build it with ``make docs`` (warnings are errors): the user guide is ``guide/*.md`` (the home page
and the Quickstart include the README's opening and the demo's tables), the notebooks
are executed at build time (myst-nb) and rendered with their outputs, the command-line reference is
generated from ensml's parsers (``_ext/cli_reference.py``) and the API reference from the
docstrings (autosummary + napoleon, numpy style). Nothing is downloaded: no intersphinx.
"""

from __future__ import annotations

import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
ROOT = DOCS.parent
sys.path[:0] = [str(DOCS / "_ext"), str(ROOT)]  # the local extensions; this tree's ensml

import ensml  # noqa: E402

project = "ensml"
author = "the ensml developers"
copyright = "the ensml developers"
release = version = ensml.__version__

extensions = [
    "myst_nb",  # Markdown pages (it brings myst-parser) and notebooks, executed at build time
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.napoleon",
    "sphinx.ext.viewcode",
    "api_reference",
    "cli_reference",
    # MathJax from the package's own copy, served from _static/mathjax: formulas render offline
    # (Sphinx's default loads it from a CDN, so a site read without network shows raw LaTeX).
    "sphinx-mathjax-offline",
]

templates_path = ["_templates"]
exclude_patterns = ["_build", "_templates", "_ext", "**/.ipynb_checkpoints", "Thumbs.db", ".DS_Store"]

# -- MyST ------------------------------------------------------------------------------------------
# Anchors for headings down to level 3, so the guides' links to each other's sections
# (``evaluation.md#verifying-against-stations``) resolve.
myst_heading_anchors = 3

# -- Notebooks (myst-nb) -----------------------------------------------------------------------------
# The notebooks are stored without outputs; every build runs them (offline, with their parameters
# cell as is) and renders what they print and draw. A failing cell fails the build, and
# tests/test_docs.py is the test suite's one run of them. docs/notebooks is a link to the folder
# ../notebooks (a link to the folder, not to each file): a kernel started in docs/notebooks runs in
# notebooks/ itself, as under Jupyter, where postprocess.ipynb finds the repository's configs/ from
# its own folder.
nb_execution_mode = "force"
nb_execution_raise_on_error = True
nb_execution_show_tb = True
nb_execution_timeout = 600  # seconds per cell; the slowest (training a small model) takes ~20 s
nb_merge_streams = True

# -- API reference -------------------------------------------------------------------------------
autosummary_generate = True
autosummary_ignore_module_all = False  # a package documents exactly the names in its __all__
autodoc_member_order = "bysource"
autodoc_typehints = "signature"
napoleon_google_docstring = False
napoleon_numpy_docstring = True
napoleon_use_rtype = False
# Document what ensml says about its methods; an override without a docstring would otherwise show
# the docstring of the Lightning or torch method it overrides (with roles only their docs define).
autodoc_inherit_docstrings = False

# -- HTML ------------------------------------------------------------------------------------------
html_theme = "furo"
html_title = f"ensml {release}"
html_static_path = ["_static"]
html_css_files = ["ensml.css"]  # long command lines wrap instead of overflowing
