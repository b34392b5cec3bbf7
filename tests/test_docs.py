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
    pages += ["notebooks/physics_testbed", "notebooks/precipitation_wind"]
    missing = [p for p in pages if not (site / f"{p}.html").is_file()]
    assert not missing


def test_guides_cover_every_readme_section(site: Path) -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    sections = [
        line[3:]
        for line in re.sub(r"```.*?```", "", readme, flags=re.S).splitlines()
        if line.startswith("## ")
    ]
    included = {}
    for page in (DOCS / "guide").glob("*.md"):
        for marker in re.findall(r'^:start-after: "## (.+)"$', page.read_text(encoding="utf-8"), re.M):
            included[marker] = page.stem
    assert sections and [s for s in sections if s not in included] == []
    # the section's text is on its page: the first prose line after its heading
    for section, stem in included.items():
        body = readme.split(f"## {section}\n", 1)[1]
        first = next(line for line in body.splitlines() if re.match(r"[A-Za-z]", line))
        assert _words(first)[:40] in _words(_text(site / f"guide/{stem}.html")), section


def test_readme_links_point_at_the_guide_pages(site: Path) -> None:
    page = (site / "guide/quickstart.html").read_text(encoding="utf-8")
    assert 'href="postprocess.html"' in page  # README: [Post-process a forecast archive](#post-process-…)
    assert "<h2>Manual route" in page  # README's ### subsections are the page's second level


@pytest.mark.parametrize(
    "name", ["explore_ensemble", "postprocess", "train_and_compare", "physics_testbed", "precipitation_wind"]
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
