"""The verification report (``ensml report``): scores, charts, maps and cases in one document.

:mod:`.assemble` computes and lays out the report, :mod:`.scores` its scores by lead time,
:mod:`.plots` its charts and :mod:`.render` writes Markdown and HTML.
"""
