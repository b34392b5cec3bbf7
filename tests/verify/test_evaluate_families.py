"""``evaluate`` scores each predictive distribution with its family, and bounded variables at thresholds.

On the tiny dataset of :mod:`tests.verify.family_inputs` (precipitation as a censored shifted
gamma, wind speed as a truncated normal, 2 m temperature as a normal): the CRPS rows equal the
families' CRPS computed here by hand (area-weighted means over the grid of the means over init
times), the normal rows keep their Gaussian labels and numbers, the Brier rows equal P(Y > t)
scored by hand, the reliability counts add up, and only the bounded variables get the new files.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import xarray as xr

from ensml.data.weights import area_weights
from ensml.errors import EnsmlError
from ensml.predictions import parse_distribution
from ensml.scores.distributions import get_family
from ensml.scores.gaussian import crps_gaussian
from ensml.verify.evaluate import evaluate
from ensml.verify.families import family_params, label, oracle_families
from ensml.verify.thresholds import PRECIPITATION, thresholds_for
from tests.verify.family_inputs import FAMILIES, VARIABLES, make_inputs


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> dict:
    root = tmp_path_factory.mktemp("families")
    paths = make_inputs(root / "inputs")
    out = root / "eval"
    scores = evaluate(
        str(paths["forecast"]),
        str(paths["analysis"]),
        predictions=str(paths["predictions"]),
        oracle=str(paths["oracle"]),
        out_dir=str(out),
    )
    return {"paths": paths, "scores": scores, "out": out}


def _pooled(field: np.ndarray, weights: np.ndarray) -> float:
    """The mean over init times, then the area-weighted mean (as the tables take them)."""
    per_point = field.mean(axis=0)
    w = np.broadcast_to(weights, per_point.shape)
    return float((per_point * w).sum() / w.sum())


def _inputs(paths: dict[str, Path], source: str) -> tuple[xr.Dataset, xr.Dataset, np.ndarray]:
    """The source's fields at +24 h, the analysis at their valid times, the area weights."""
    ds = xr.open_dataset(paths[source]).isel(lead_time=0).load()
    an = xr.open_dataset(paths["analysis"]).load()
    y = an.sel(time=ds["init_time"].values + np.timedelta64(24, "h"))
    weights = area_weights(xr.open_dataset(paths["forecast"]), note=False).values[:, None]
    return ds, y, weights


@pytest.mark.slow
@pytest.mark.parametrize("source", ["predictions", "oracle"])
def test_each_family_is_scored_with_its_crps(run: dict, source: str) -> None:
    ds, y, weights = _inputs(run["paths"], source)
    table = run["scores"].table
    prefix = "post-processed" if source == "predictions" else "oracle"
    for var, name in zip(VARIABLES, FAMILIES):
        family = get_family(name)
        params = {p: ds[f"{var}_{p}"].values for p in family.params}
        expected = _pooled(np.asarray(family.crps(params, y[var].values), dtype=np.float64), weights)
        row = table[(table["variable"] == var) & (table["forecast"] == label(prefix, family))]
        assert len(row) == 1, table[["variable", "forecast"]]
        np.testing.assert_allclose(row["crps"].item(), expected, rtol=1e-6)
        # not the Gaussian of <var>_mean and <var>_std, which the files also hold
        if name != "normal":
            gauss = _pooled(
                crps_gaussian(ds[f"{var}_mean"].values, ds[f"{var}_std"].values, y[var].values), weights
            )
            assert abs(row["crps"].item() - gauss) > 1e-3 * gauss


def test_labels_say_the_family_except_for_the_normal(run: dict) -> None:
    table = run["scores"].table
    rows = dict(zip(zip(table["variable"], table["forecast"]), table["estimator"]))
    assert rows["tp", "post-processed (csg0)"] == "csg0 closed form"
    assert rows["si10", "oracle (truncnormal)"] == "truncnormal closed form"
    assert rows["t2m", "post-processed (Gaussian)"] == "Gaussian closed form"
    assert rows["t2m", "oracle (Gaussian)"] == "Gaussian closed form"
    t2m = table[table["variable"] == "t2m"]
    assert set(t2m["forecast"]) == {
        "raw ensemble (10 members)",
        "raw subset (5 members)",
        "post-processed (Gaussian)",
        "oracle (Gaussian)",
    }
    # the gap closed refers to the oracle of the variable's own family
    assert (table[table["forecast"].str.startswith("oracle")]["gap_closed"] == 1).all()


def test_only_bounded_variables_get_the_threshold_files(run: dict) -> None:
    names = {p.name for p in run["out"].iterdir()}
    for var in ("tp", "si10"):
        assert {f"scores_{var}.csv", f"scores_{var}.md", f"reliability_{var}.csv", f"pit_{var}.csv"} <= names
    assert not any("t2m" in name for name in names)
    pngs = sorted(n for n in names if n.startswith("reliability_tp_gt"))
    assert pngs == sorted(f"reliability_tp_gt{t:g}.png" for t in PRECIPITATION.events)
    assert (run["out"] / pngs[0]).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_brier_rows_are_the_family_exceedance_scored_by_hand(run: dict) -> None:
    ds, y, weights = _inputs(run["paths"], "predictions")
    family = get_family("csg0")
    params = {p: ds[f"tp_{p}"].values for p in family.params}
    table = pd.read_csv(run["out"] / "scores_tp.csv")
    brier = table[(table["score"] == "brier") & (table["forecast"] == "post-processed (csg0)")]
    assert list(brier["threshold"]) == list(PRECIPITATION.events)
    for t, value in zip(brier["threshold"], brier["value"]):
        prob = 1.0 - family.cdf(params, t)
        expected = _pooled((prob - (y["tp"].values > t)) ** 2, weights)
        np.testing.assert_allclose(value, expected, rtol=1e-9)
    # the raw ensemble: the fraction of members above t
    fc = xr.open_dataset(run["paths"]["forecast"])["tp"].isel(lead_time=0).values
    raw = table[(table["score"] == "brier") & (table["forecast"] == "raw ensemble (10 members)")]
    for t, value in zip(raw["threshold"], raw["value"]):
        expected = _pooled(((fc > t).mean(axis=1) - (y["tp"].values > t)) ** 2, weights)
        np.testing.assert_allclose(value, expected, rtol=1e-9)


def test_the_tables_hold_every_score(run: dict) -> None:
    tp = pd.read_csv(run["out"] / "scores_tp.csv")
    assert set(tp["score"]) == {"crps", "brier", "twcrps", "pit_flatness", "seeps", "fss"}
    assert sorted(tp[tp["score"] == "twcrps"]["threshold"].unique()) == list(PRECIPITATION.tail)
    si10 = pd.read_csv(run["out"] / "scores_si10.csv")
    assert set(si10["score"]) == {"crps", "brier", "twcrps", "pit_flatness"}  # no SEEPS, FSS for wind
    crps = run["scores"].table.set_index(["variable", "forecast"])["crps"]
    for _, row in tp[tp["score"] == "crps"].iterrows():
        assert row["value"] == crps["tp", row["forecast"]]
    flat = tp[tp["score"] == "pit_flatness"]
    assert flat["value"].between(0, 2).all() and flat["n_scored"].eq(6 * 48).all()


def test_reliability_counts_every_point_once(run: dict) -> None:
    rel = pd.read_csv(run["out"] / "reliability_tp.csv")
    counts = rel.groupby(["forecast", "threshold"])["count"].sum()
    assert (counts == 6 * 48).all()
    assert set(rel["forecast"]) == {
        "raw ensemble (10 members)",
        "raw subset (5 members)",
        "post-processed (csg0)",
        "oracle (csg0)",
    }


def test_oracle_attribute_and_params() -> None:
    assert parse_distribution("z:normal tp:csg0 si10:bqn:12") == {
        "z": "normal",
        "tp": "csg0",
        "si10": "bqn:12",
    }
    assert {v: f.name for v, f in oracle_families({}, ["z", "tp"], "x").items()} == {
        "z": "normal",
        "tp": "normal",
    }
    with pytest.raises(EnsmlError, match="names no family for si10"):
        oracle_families({"ensml_distribution": "tp:csg0"}, ["tp", "si10"], "oracle o.nc")
    with pytest.raises(
        EnsmlError, match=r"oracle o.nc: ensml_distribution 'tp=csg0' is not a list of variable:family"
    ):
        oracle_families({"ensml_distribution": "tp=csg0"}, ["tp"], "oracle o.nc")
    ds = xr.Dataset({"tp_shape": ("x", [1.0]), "tp_scale": ("x", [1.0])})
    with pytest.raises(EnsmlError, match="has no tp_shift for the csg0 family of tp"):
        family_params(ds, "tp", get_family("csg0"), "predictions p.nc")


def test_thresholds_follow_the_units() -> None:
    mm = thresholds_for("tp", {"units": "kg m-2"})
    assert mm.events == PRECIPITATION.events and mm.dry == 0.2
    metres = thresholds_for("tp", {"units": "m"})
    np.testing.assert_allclose(metres.events, np.array(PRECIPITATION.events) / 1000)
    np.testing.assert_allclose(metres.dry, 0.2e-3)
    assert thresholds_for("t2m", {"units": "K"}) is None
    given = thresholds_for("t2m", {"units": "K"}, {"t2m": [300, 290]})
    assert given.events == given.tail == (290.0, 300.0)
    with pytest.raises(EnsmlError, match="give them in 'furlongs'"):
        thresholds_for("tp", {"units": "furlongs"})
