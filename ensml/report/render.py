"""Render report blocks as Markdown (with ``figures/*.png``) and as one self-contained HTML file.

A block is ``("h1" | "h2" | "h3" | "p", text)``, ``("md", markdown text with pipe tables)`` or a
:class:`Figure`. The HTML embeds every PNG (base64), so ``report.html`` can be mailed alone.
"""

from __future__ import annotations

import base64
import html
import re
from dataclasses import dataclass

CSS = """body{font-family:system-ui,sans-serif;max-width:1400px;margin:2em auto;padding:0 1em;color:#222}
table{border-collapse:collapse;font-size:13px;margin:.5em 0 1.5em}th,td{border:1px solid #ccc;padding:3px 8px}
th{background:#f0f0f0}td{text-align:right}td:first-child{text-align:left}img{max-width:100%}
figcaption{font-size:13px;color:#555;margin-bottom:2em}code{background:#f4f4f4;padding:0 3px}"""


@dataclass
class Figure:
    """A PNG figure of the report, saved as ``figures/<name>``."""

    name: str
    png: bytes
    caption: str


def _inline(text: str) -> str:
    s = html.escape(text)
    s = re.sub(r"`([^`]+)`", r"<code>\1</code>", s)
    return re.sub(r"\*([^*\s][^*]*)\*", r"<em>\1</em>", s)


def _md_to_html(md: str) -> str:
    out, rows = [], []

    def flush() -> None:
        if rows:
            cells = [[c.strip() for c in r.strip().strip("|").split("|")] for r in rows]
            head, body = cells[0], [r for r in cells[1:] if not set("".join(r)) <= set("-: ")]
            out.append("<table><tr>" + "".join(f"<th>{_inline(c)}</th>" for c in head) + "</tr>")
            out.extend(["<tr>" + "".join(f"<td>{_inline(c)}</td>" for c in r) + "</tr>" for r in body])
            out.append("</table>")
            rows.clear()

    for line in md.splitlines():
        if line.strip().startswith("|"):
            rows.append(line)
            continue
        flush()
        if line.strip():
            out.append(f"<p>{_inline(line.strip())}</p>")
    flush()
    return "\n".join(out)


def render(blocks: list, title: str) -> dict[str, str | bytes]:
    """The report's files by name: ``report.md``, ``figures/*.png`` and ``report.html``."""
    files: dict[str, str | bytes] = {}
    md, body = [], []
    for block in blocks:
        if isinstance(block, Figure):
            files[f"figures/{block.name}"] = block.png
            md.append(f"![{block.caption}](figures/{block.name})\n\n*{block.caption}*\n")
            data = base64.b64encode(block.png).decode("ascii")
            body.append(
                f'<figure><img src="data:image/png;base64,{data}" alt="{html.escape(block.name)}">'
                f"<figcaption>{_inline(block.caption)}</figcaption></figure>"
            )
            continue
        kind, text = block
        if kind in ("h1", "h2", "h3"):
            md.append(f"{'#' * int(kind[1])} {text}\n")
            body.append(f"<{kind}>{html.escape(text)}</{kind}>")
        elif kind == "p":
            md.append(f"{text}\n")
            body.append(f"<p>{_inline(text)}</p>")
        else:
            md.append(f"{text}\n")
            body.append(_md_to_html(text))
    files["report.md"] = "\n".join(md)
    page = (
        f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
        f"<style>{CSS}</style></head><body>\n" + "\n".join(body) + "\n</body></html>\n"
    )
    files["report.html"] = page
    return files


__all__ = ["Figure", "render"]
