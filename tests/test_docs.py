"""The documentation site builds with warnings as errors and documents the whole public API.

One build per session (it executes both notebooks, about a minute), into a temporary folder, as
``make docs`` runs it: ``python -m sphinx -W --keep-going -b html docs OUT``.
"""

from __future__ import annotations

import html
import importlib
import inspect
import posixpath
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # the docs build executes every notebook (minutes)

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
# Packages whose __all__ is the public API: every name must have its own documented entry.
PACKAGES = (
    "ensml.data",
    "ensml.data.outputs",
    "ensml.models",
    "ensml.models.spatial",
    "ensml.scores",
    "ensml.postprocess",
)
# Modules without an __all__ (and the verbs' functions): a sample of what they document.
ALSO_DOCUMENTED = [
    ("py:module", "ensml.names"),
    ("py:data", "ensml.names.LEAD_TIME"),
    ("py:exception", "ensml.errors.EnsmlError"),
    ("py:class", "ensml.train.tasks.MixedTask"),
    ("py:class", "ensml.train.tasks.SpreadTask"),
    ("py:function", "ensml.data.synth.synth"),
    ("py:function", "ensml.data.archive.archive"),
]
# What each kind of object is registered as in the inventory.
ROLES = {"function": "py:function", "class": "py:class", "exception": "py:exception", "data": "py:data"}


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("docs") / "html"
    command = [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-b", "html", "docs", str(out)]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        pytest.fail(f"sphinx-build exited with {done.returncode}:\n{(done.stdout + done.stderr)[-6000:]}")
    return out


def _text(page: Path) -> str:
    """The visible text of an HTML page, whitespace collapsed."""
    body = re.sub(r"<(script|style)\b.*?</\1>", " ", page.read_text(encoding="utf-8"), flags=re.S)
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", body)).split())


def _words(text: str) -> str:
    """``text`` without Markdown punctuation, whitespace collapsed."""
    return " ".join(re.sub(r"[`*\[\]()#]", " ", text).split())


def _kind(obj: object) -> str:
    if inspect.isclass(obj):
        return "exception" if issubclass(obj, BaseException) else "class"
    return "function" if callable(obj) else "data"


def test_pages_exist(site: Path) -> None:
    guides = sorted(p.stem for p in (DOCS / "guide").glob("*.md"))
    assert len(guides) >= 12
    pages = ["index", "cli", "api", *(f"guide/{g}" for g in guides)]
    pages += ["notebooks/explore_ensemble", "notebooks/postprocess", "notebooks/train_and_compare"]
    pages += ["notebooks/physics_testbed", "notebooks/precipitation_wind", "notebooks/stations"]
    missing = [p for p in pages if not (site / f"{p}.html").is_file()]
    assert not missing


def _first_lines(text: str) -> list[tuple[str, str]]:
    """(heading, first prose line under it) for the page title and each ``##`` section of a guide."""
    found, heading = [], None
    for line in re.sub(r"^```.*?^```", "", text, flags=re.S | re.M).splitlines():
        if re.match(r"#{1,2} ", line):
            heading = line
        elif heading and re.match(r"[A-Za-z]", line) and "{" not in line:
            found.append((heading, line))
            heading = None
    return found


def test_every_guide_is_on_the_site(site: Path) -> None:
    """The guides own the manual: each page title's and each section's first prose line is on its
    page, and the README's opening and the demo's tables are on the pages that include them."""
    for guide in sorted((DOCS / "guide").glob("*.md")):
        text = _text(site / f"guide/{guide.stem}.html")
        page = _words(text.translate(str.maketrans("‘’“”", "''\"\"")))  # Sphinx's smart quotes
        lines = _first_lines(guide.read_text(encoding="utf-8"))
        assert lines, guide.name
        for heading, line in lines:
            line = re.sub(r"\]\([^)]*\)", "]", line)  # a link's text is shown, not its target
            assert _words(line)[:40] in page, (guide.name, heading)
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    opening = next(line for line in readme.splitlines() if re.match(r"[A-Za-z]", line))
    assert _words(opening) in _words(_text(site / "index.html"))
    quickstart = (site / "guide/quickstart.html").read_text(encoding="utf-8")
    assert "<strong>post-processed from 5 members</strong>" in quickstart
    assert "spread model from 5 members: RMSE, corr" in _text(site / "guide/quickstart.html")


def test_guides_link_each_other(site: Path) -> None:
    page = (site / "guide/quickstart.html").read_text(encoding="utf-8")
    assert 'href="postprocess.html"' in page  # [Post-process a forecast archive](postprocess.md)
    assert "<h2>Manual route" in page  # a guide's ## sections are the page's second level
    models = (site / "guide/models.html").read_text(encoding="utf-8")
    assert 'href="memory.html"' in models  # [Training beyond memory](memory.md)
    data = (site / "guide/data.html").read_text(encoding="utf-8")
    assert 'href="evaluation.html#verifying-against-stations"' in data  # a section of another page


@pytest.mark.parametrize(
    "name",
    [
        "explore_ensemble",
        "postprocess",
        "train_and_compare",
        "physics_testbed",
        "precipitation_wind",
        "stations",
    ],
)
def test_notebooks_are_rendered_with_outputs(site: Path, name: str) -> None:
    page = (site / f"notebooks/{name}.html").read_text(encoding="utf-8")
    assert "cell_output" in page
    images = re.findall(r'<img[^>]+src="([^"]+\.png)"', page)
    assert images and all((site / "notebooks" / src).is_file() for src in images)


def test_cli_reference_lists_every_command(site: Path) -> None:
    from ensml.cli.main import commands as ensml_commands

    commands = [words.split() for words, _ in ensml_commands()]
    named = {" ".join(words) for words in commands}
    assert {
        "fit",
        "validate",
        "test",
        "predict",
        "data synth",
        "data archive",
        "evaluate",
        "report",
        "postprocess",
        "plan-parallel",
        "plan-memory",
        "benchmark",
    } <= named
    page = (site / "cli.html").read_text(encoding="utf-8")
    headings = {
        " ".join(html.unescape(re.sub(r"<[^>]+>", "", h)).replace("¶", "").split())
        for h in re.findall(r"<h2>(.*?)</h2>", page, re.S)
    }
    assert {f"ensml {c}" for c in named} | {"ensml"} == headings
    text = _text(site / "cli.html")
    for words in commands:  # each command's own usage line and options
        assert re.search(r"usage: ensml .*" + re.escape(words[-1]) + r" (--\w+ [A-Z_]+ )*\[", text), words
    assert "--trainer.max_epochs" in text and "--out_dir" in text


def test_api_documents_every_public_name(site: Path) -> None:
    from sphinx.util.inventory import InventoryFile

    with (site / "objects.inv").open("rb") as f:
        inventory = InventoryFile.load(f, "", posixpath.join)
    missing, undocumented = [], []
    for package in PACKAGES:
        module = importlib.import_module(package)
        assert module.__all__, package
        for name in module.__all__:
            full, role = f"{package}.{name}", ROLES[_kind(getattr(module, name))]
            entry = inventory.get(role, {}).get(full)
            if entry is None:
                missing.append(f"{role} {full}")
                continue
            uri = entry.uri if hasattr(entry, "uri") else entry[2]  # Sphinx < 8.2: a tuple
            page, _, anchor = uri.partition("#")
            source = (site / page).read_text(encoding="utf-8")
            if f'id="{anchor}"' not in source:
                undocumented.append(full)
    assert not missing, missing
    assert not undocumented, undocumented
    for role, name in ALSO_DOCUMENTED:
        assert name in inventory.get(role, {}), (role, name)


def test_api_page_shows_the_docstring(site: Path) -> None:
    from ensml.data import open_forecast

    summary = open_forecast.__doc__.strip().splitlines()[0]
    assert summary in _text(site / "api/ensml.data.open_forecast.html")


def test_the_site_loads_nothing_from_the_network(site: Path) -> None:
    """Scripts, stylesheets and images come with the site, MathJax included: formulas render
    without network (Sphinx's default MathJax comes from a CDN)."""
    remote = re.compile(r'<(?:script|link|img)\b[^>]*\b(?:src|href)="(?:https?:)?//[^"]*"')
    found = [
        f"{p.relative_to(site)}: {m}" for p in site.rglob("*.html") for m in remote.findall(p.read_text())
    ]
    assert not found, found[:5]
    assert (site / "_static" / "mathjax" / "tex-chtml.js").is_file()
    with_math = [p for p in site.rglob("*.html") if 'class="math' in p.read_text()]
    assert with_math and all("_static/mathjax/tex-chtml.js" in p.read_text() for p in with_math)
    assert 'href="_static/ensml.css' in (site / "index.html").read_text()  # long lines wrap
