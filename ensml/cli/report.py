"""``ensml report``: one self-contained verification report (Markdown and HTML with figures)."""

from __future__ import annotations

from ensml.cli.evaluate import print_scores
from ensml.cli.verb import run_function

#: The command this module runs: its options and help are the library function's.
COMMANDS = {"report": "ensml.report.assemble:report"}
SUMMARIES = {"report": "Write the verification report (report.md + figures/, and report.html)."}


def run(args: list[str]) -> None:
    """Run ``ensml report ARGS``; print the score table and where the report is."""
    written = run_function(COMMANDS["report"], args)
    if written is None:
        return
    print_scores(written.scores)
    markdown, html = written.pages
    print(f"ensml report: wrote {markdown} and {html}")
