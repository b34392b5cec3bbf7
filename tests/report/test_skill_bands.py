"""The report's skill chart: evaluate's 95 % skill intervals as bands, DM-significant leads filled."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from matplotlib.collections import LineCollection, PolyCollection
from matplotlib.colors import to_rgba

from ensml.report import plots
from ensml.report.assemble import report
from ensml.report.page import SKILL_TESTS

RAW, SUBSET, PP = "raw ensemble (10 members)", "raw subset (4 members)", "post-processed (Gaussian)"
PANELS = [("z", 500.0), ("t2m", np.nan)]  # a surface variable has level NaN


def by_lead(leads=(24, 48, 72), tests: bool = True) -> pd.DataFrame:
    """Hand-made by-lead rows with evaluate's interval and DM columns (``tests``)."""
    rows = []
    for i, (var, lev) in enumerate(PANELS):
        for lead in leads:
            for j, name in enumerate([RAW, SUBSET, PP]):
                skill = 0.0 if name == RAW else 0.01 * (j + i) - 0.001 * lead
                row = {
                    "variable": var,
                    "level_hPa": lev,
                    "lead_h": lead,
                    "forecast": name,
                    "crps": 1.0,
                    "skill_vs_raw_ensemble": skill,
                }
                if tests:
                    raw = name == RAW
                    row["skill_low"] = np.nan if raw else skill - 0.02 - 0.001 * j
                    row["skill_high"] = np.nan if raw else skill + 0.03 + 0.001 * lead
                    row["dm_p"] = np.nan if raw else (0.01 if lead == 48 else 0.3)
                rows.append(row)
    return pd.DataFrame(rows)


@pytest.fixture
def figures(monkeypatch) -> list:
    """The matplotlib figures the charts draw (instead of their PNG bytes)."""
    drawn: list = []
    monkeypatch.setattr(plots, "_png", lambda fig: drawn.append(fig) or b"png")
    return drawn


def bands(ax) -> list[PolyCollection]:
    return [c for c in ax.collections if isinstance(c, PolyCollection)]


def band_of(ax, name: str) -> PolyCollection:
    colour = to_rgba(plots._colour(name), 0.18)
    (band,) = [b for b in bands(ax) if np.allclose(b.get_facecolor()[0], colour)]
    return band


def test_one_band_per_forecast_and_panel_at_its_interval(figures) -> None:
    df = by_lead()
    assert plots.skill_by_lead(df) == b"png"
    (fig,) = figures
    axes = fig.axes
    assert len(axes) == len(PANELS)
    for ax, (var, _) in zip(axes, PANELS):
        assert len(bands(ax)) == 2  # raw subset and post-processed; none for the raw ensemble
        for name in (SUBSET, PP):
            rows = df[(df["variable"] == var) & (df["forecast"] == name)].sort_values("lead_h")
            xy = band_of(ax, name).get_paths()[0].vertices
            x = rows["lead_h"].to_numpy(float)
            expected = {(a, b) for a, b in zip(x, rows["skill_low"])} | {
                (a, b) for a, b in zip(x, rows["skill_high"])
            }
            assert {(float(a), float(b)) for a, b in np.round(xy, 12)} == {
                (a, round(b, 12)) for a, b in expected
            }
            # markers: open on the curve, filled where DM p < 0.05 (+48 h only)
            lines = [ln for ln in ax.get_lines() if ln.get_color() == plots._colour(name)]
            curve = next(ln for ln in lines if ln.get_label() == name)
            assert curve.get_markerfacecolor() == "white"
            filled = [ln for ln in lines if ln is not curve]
            assert [list(ln.get_xdata()) for ln in filled] == [[48]]
    assert not [c for c in axes[0].collections if isinstance(c, LineCollection)]  # no error bars


def test_one_lead_gets_error_bars_and_gaps_split_the_band(figures) -> None:
    plots.skill_by_lead(by_lead(leads=(48,)))
    df = by_lead(leads=(24, 48, 72, 96))
    df.loc[df["lead_h"] == 72, ["skill_low", "skill_high"]] = np.nan  # a lead evaluate did not score
    plots.skill_by_lead(df)
    one, gap = figures
    for ax, (var, _) in zip(one.axes, PANELS):
        assert not bands(ax)
        errorbars = [c for c in ax.collections if isinstance(c, LineCollection)]
        assert len(errorbars) == 2
        low, high = errorbars[0].get_segments()[0][:, 1]
        rows = by_lead(leads=(48,))
        row = rows[(rows["forecast"] == SUBSET) & (rows["variable"] == var)].iloc[0]
        assert (low, high) == pytest.approx((row["skill_low"], row["skill_high"]))
    for ax in gap.axes:  # 24-48 h a band, 96 h an error bar
        assert len(bands(ax)) == 2
        assert sorted(set(band_of(ax, PP).get_paths()[0].vertices[:, 0])) == [24, 48]
        assert len([c for c in ax.collections if isinstance(c, LineCollection)]) == 2


def test_table_without_intervals_plots_without_bands(figures) -> None:
    """An older evaluate's table (no skill_low/skill_high/dm_p): the curves only, markers filled."""
    assert plots.skill_by_lead(by_lead(tests=False)) == b"png"
    assert (
        plots.skill_by_lead(by_lead(tests=False), pd.DataFrame(columns=["variable", "level_hPa"])) == b"png"
    )
    for fig in figures:
        for ax in fig.axes:
            assert not ax.collections
            for ln in ax.get_lines():
                if ln.get_label() in (RAW, SUBSET, PP):
                    assert ln.get_markerfacecolor() == ln.get_color()


def test_merge_keeps_the_rows_and_matches_surface_levels() -> None:
    left = by_lead(tests=False)
    tests = by_lead(leads=(24, 48))[lambda d: d["forecast"] != SUBSET].iloc[::-1]  # other order, fewer rows
    merged = plots.with_skill_tests(left, tests)
    assert merged.drop(columns=["skill_low", "skill_high", "dm_p"]).equals(left)
    have = merged["skill_low"].notna()
    expect = (merged["forecast"] == PP) & merged["lead_h"].isin([24, 48])
    assert have.equals(expect) and (merged.loc[expect, "variable"] == "t2m").any()


@pytest.mark.slow
def test_report_draws_evaluates_intervals(tiny_data: dict[str, Path], tmp_path, monkeypatch) -> None:
    """The report hands evaluate's table to the chart, its forecast names those of the by-lead
    rows, and the caption says what the bands and filled markers are."""
    calls = []
    draw = plots.skill_by_lead
    monkeypatch.setattr(
        plots, "skill_by_lead", lambda df, tests=None: calls.append((df, tests)) or draw(df, tests)
    )
    out = tmp_path / "report"
    fc, an = str(tiny_data["forecast"]), str(tiny_data["analysis"])
    done = report(fc, an, oracle=str(tiny_data["oracle"]), variables="z", levels=500, out_dir=str(out))
    ((df, tests),) = calls
    assert tests is done.scores.table
    merged = plots.with_skill_tests(df, tests)
    scored = merged[
        merged["lead_h"].isin(tests["lead_h"]) & ~merged["forecast"].str.startswith("raw ensemble")
    ]
    assert len(scored) and scored[["skill_low", "skill_high", "dm_p"]].notna().all().all()  # names match
    assert (scored["skill_low"] <= scored["skill_vs_raw_ensemble"] + 1e-9).all()
    assert (scored["skill_vs_raw_ensemble"] <= scored["skill_high"] + 1e-9).all()
    md = (out / "report.md").read_text()
    assert SKILL_TESTS in md and "95 % moving-block bootstrap interval" in md
    assert "Diebold-Mariano p < 0.05" in md
