"""``evaluate`` and ``report`` give the numbers they gave before the one frame builder.

``data/before/`` holds the tables that commit 1b59223 (before ``ensml.data.frame``, RunMeta read
back and the one lead-time type) wrote for the inputs of :mod:`tests.verify.reference_inputs`
on the tiny dataset: Gaussian predictions, calibrated members in two files, spread predictions,
the oracle and a case study, through ``evaluate`` and ``report``. The same calls now must
write the same CSV values, to a relative 1e-13 (a few units in the last place: numpy's
vectorised ``exp``/``erf`` differ in the last bit between CPUs with and without AVX-512; the
Gaussian CRPS of one row did on an AMD EPYC), and the same Markdown tables, the report page
included (its figures are not compared). Columns added since (the skill intervals and tests of
issue 29, ``n_scored``) are left out of the comparison; :mod:`tests.verify.test_significance`
checks them. The report's table by lead time has lost its +0 h rows since: the report scores once,
in ``evaluate``'s pass, so its charts by lead cover the leads ``evaluate`` scores (no 0 h without a
run), and every other row and number of the page is as before.
"""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import pytest
import yaml

from ensml.report.assemble import report
from ensml.report.page import SKILL_TESTS
from ensml.verify.evaluate import evaluate
from tests.verify.reference_inputs import CASE, make_inputs

pytestmark = pytest.mark.slow  # the demo's evaluate and report end to end

BEFORE = Path(__file__).parent / "data" / "before"
#: Columns added after the reference tables were written (CSV names, then Markdown names).
ADDED = ["skill_low", "skill_high", "dm_stat", "dm_p", "block_length", "n_scored"]
ADDED_MD = ["skill_95%", "dm_stat", "dm_p", "block_length", "n_scored"]


def without_added(text: str) -> str:
    """``text`` with the :data:`ADDED_MD` columns cut from every Markdown table in it."""
    out, keep = [], None
    for line in text.splitlines(keepends=True):
        if not line.startswith("|"):
            out.append(line)
            keep = None
            continue
        cells = line.rstrip("\n").strip("|").split("|")
        if keep is None:  # a header row
            keep = [i for i, c in enumerate(cells) if c.strip() not in ADDED_MD]
        out.append("|" + "|".join(cells[i] for i in keep) + "|\n")
    return "".join(out)


@pytest.fixture(scope="module")
def outputs(tiny_data: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("unchanged")
    paths = make_inputs(tiny_data, root / "inputs")
    case = root / "case.yaml"
    case.write_text(yaml.safe_dump({**CASE, "lead": "48h"}))
    files = {k: str(paths[k]) for k in ("predictions", "members", "spread_predictions", "oracle")}
    fc, an = str(tiny_data["forecast"]), str(tiny_data["analysis"])
    evaluate(fc, an, **files, cases=str(case), out_dir=str(root / "eval"))
    report(
        fc,
        an,
        predictions=files["predictions"],
        oracle=files["oracle"],
        cases=str(case),
        spread_predictions=files["spread_predictions"],
        n_storm_cases=1,
        out_dir=str(root / "report"),
    )
    return {"eval": root / "eval", "report": root / "report", "synth": tiny_data["forecast"].parent}


@pytest.mark.parametrize("name", ["scores.csv", "spread.csv", "cases/cases.csv"])
def test_evaluate_tables_are_unchanged(outputs, name: str) -> None:
    before = pd.read_csv(BEFORE / Path(name).name)
    now = pd.read_csv(outputs["eval"] / name)
    now = now.drop(columns=[c for c in ADDED if c in now and c not in before])
    pd.testing.assert_frame_equal(now, before, rtol=1e-13, atol=0)


@pytest.mark.parametrize("name", ["scores.md", "spread.md"])
def test_evaluate_markdown_is_unchanged(outputs, name: str) -> None:
    assert without_added((outputs["eval"] / name).read_text()) == (BEFORE / name).read_text()


def without_lead_0(text: str) -> str:
    """``text`` without the +0 h rows of the report's table by lead time (``| t | 850 | 0 | …``),
    a lead the report no longer scores: evaluate does not, without a run that holds it."""
    lines = text.splitlines(keepends=True)
    kept = [line for line in lines if not re.match(r"\| \w+ \| [\d.]* \| 0 \| ", line)]
    assert len(lines) - len(kept) == 12  # z and t at 500 and 850 hPa: raw ensemble, subset, oracle
    return "".join(kept)


def test_report_page_is_unchanged(outputs) -> None:
    page = (outputs["report"] / "report.md").read_text().replace(str(outputs["synth"]), "<synth>")
    page = page.replace(" " + SKILL_TESTS, "")  # the skill chart's caption on its bands, added since
    assert without_added(page) == without_lead_0((BEFORE / "report.md").read_text())
    assert "## Rank histograms at +48 h" in page  # the last lead scored: the default of --lead
