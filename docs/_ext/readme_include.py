"""Sphinx extension: the README's sections as user-guide pages, without copying them.

Each page under ``guide/`` gives its own title and pulls one README section in with MyST's
``{include}`` directive, between that section's ``## …`` heading line (``start-after``) and the
next one (``end-before``). When the README is read for an include (``include-read``), this hook
rewrites it, in prose only (never inside fenced code blocks or inline code):

* headings of level 3 and deeper move up one level, so a section's subsections sit directly under
  the page's own title; the ``#`` and ``##`` lines, which the includes cut on, are left alone;
* a link to a README heading, ``[text](#slug)``, points at the guide page that includes that
  heading (the page itself for a section's own heading); a slug that no heading has is left as
  it is, so MyST reports it;
* a link to a file of the repository, ``[text](configs/x.yaml)``, which the site does not hold,
  becomes plain text naming the file: ``text (`configs/x.yaml`)``, or just ``text`` when the text
  already is the path. Web links are left alone, and so are images (the includes'
  ``:relative-images:`` option finds them from the README's folder).

Which page holds which section is read from the pages' own ``start-after`` options.
"""

from __future__ import annotations

import re
from pathlib import Path

from myst_parser.mdit_to_docutils.base import default_slugify
from sphinx.application import Sphinx

README = "README.md"
GUIDE = "guide"

_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_HEADING = re.compile(r"^(#{1,6}) +(.+?) *#* *$")
_START_AFTER = re.compile(r"""^:start-after: *["']?(## .+?)["']? *$""", re.M)
# An inline code span (kept as is) or a link that is not an image: [text](target "title").
_CODE_OR_LINK = re.compile(
    r"(?P<code>`+)(?s:.*?)(?P=code)|(?<!!)\[(?P<text>[^\]]*)\]\((?P<target>[^)\s]+)(?P<title>\s+\"[^\"]*\")?\)"
)
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")


def _blocks(text: str) -> list[tuple[bool, str]]:
    """``text`` cut into (is_code, chunk): fenced code blocks apart from the prose around them."""
    blocks: list[tuple[bool, list[str]]] = []
    fence = None
    for line in text.splitlines(keepends=True):
        match = _FENCE.match(line)
        if fence is None and match:
            fence = match.group(1)
            blocks.append((True, [line]))
        elif fence is not None:
            blocks[-1][1].append(line)
            if match and match.group(1)[0] == fence[0] and len(match.group(1)) >= len(fence):
                fence = None
        elif blocks and not blocks[-1][0]:
            blocks[-1][1].append(line)
        else:
            blocks.append((False, [line]))
    return [(code, "".join(lines)) for code, lines in blocks]


def _headings(text: str) -> list[tuple[int, str]]:
    """(level, title) of every heading outside code blocks, in order."""
    found = []
    for code, chunk in _blocks(text):
        if not code:
            for line in chunk.splitlines():
                match = _HEADING.match(line)
                if match:
                    found.append((len(match.group(1)), match.group(2)))
    return found


def guide_pages(srcdir: Path) -> dict[str, str]:
    """``{README section title: docname}`` from the ``start-after`` options of the guide pages."""
    pages = {}
    for page in sorted((srcdir / GUIDE).glob("*.md")):
        for marker in _START_AFTER.findall(page.read_text(encoding="utf-8")):
            pages[marker[3:].strip()] = f"{GUIDE}/{page.stem}"
    return pages


def anchor_targets(readme: str, pages: dict[str, str]) -> dict[str, str]:
    """``{slug: link}`` for every README heading in a section that a guide page includes."""
    targets: dict[str, str] = {}
    docname = None
    for level, title in _headings(readme):
        slug = default_slugify(title)
        if level <= 2:
            docname = pages.get(title)
            if docname:
                targets[slug] = f"/{docname}.md"
        elif docname:
            targets.setdefault(slug, f"/{docname}.md#{slug}")
    return targets


def rewrite(readme: str, targets: dict[str, str]) -> str:
    """The README as the guide pages include it (see the module docstring)."""

    def link(match: re.Match[str]) -> str:
        if match.group("code"):
            return match.group(0)
        text, target = match.group("text"), match.group("target")
        if target.startswith("#"):
            new = targets.get(target[1:])
            return f"[{text}]({new}{match.group('title') or ''})" if new else match.group(0)
        if _SCHEME.match(target) or target.startswith("/"):
            return match.group(0)
        path = target.split("#", 1)[0]
        return text if text.strip("`") == path else f"{text} (`{path}`)"

    out = []
    for code, chunk in _blocks(readme):
        if not code:
            chunk = re.sub(r"^#(#{2,5}) ", r"\1 ", chunk, flags=re.M)
            chunk = _CODE_OR_LINK.sub(link, chunk)
        out.append(chunk)
    return "".join(out)


def on_include_read(app: Sphinx, relative_path: Path, parent_docname: str, content: list[str]) -> None:
    path = (Path(app.srcdir) / relative_path).resolve()
    if path != (Path(app.srcdir).parent / README).resolve():
        return
    targets = anchor_targets(content[0], guide_pages(Path(app.srcdir)))
    content[0] = rewrite(content[0], targets)


def setup(app: Sphinx) -> dict:
    app.connect("include-read", on_include_read)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
