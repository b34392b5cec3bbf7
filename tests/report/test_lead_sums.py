"""The report's scores by lead as sums per init time: blocks of init times give the whole's.

``ensml report --cluster`` scores blocks of init times on its workers, each block's spread,
RMSE, SSR, rank counts and binned event sums kept per init time
(:mod:`ensml.report.lead_sums`), and the client adds them in init order. Here, without a
cluster: the report's scores of a lead put together from blocks of init times (as the client
puts the workers' together) are those of the whole lead, to the last bit, on the synthetic data
(pressure levels, a Gaussian oracle) and on the families' data (surface variables, a censored
shifted gamma and a truncated normal); and what the sums give is what the scores' own
functions give on the whole lead (``ensemble_mean_rmse``, ``spread_skill_ratio``,
``rank_histogram``, ``reliability``), and a monthly climatology what xarray's in-memory one gives.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import xarray as xr

from ensml.errors import EnsmlError
from ensml.names import INIT_TIME, MEMBER, TIME, raw_ensemble_name
from ensml.report.climate import monthly_climate
from ensml.report.lead_sums import lead_sums
from ensml.report.scores import ByLead, LeadScores
from ensml.scores.calibration import ensemble_mean_rmse, observation_ranks, rank_histogram, spread_skill_ratio
from ensml.scores.probability import reliability
from ensml.scores.reduce import reduce_score, weighted_sums
from ensml.verify.distributed import init_blocks
from ensml.verify.evaluate import score_grid
from ensml.verify.frame_scores import GridFrame, grid_frame, lead_ensembles, read_lead
from ensml.verify.options import Sources
from tests.verify.family_inputs import make_inputs

RAW = raw_ensemble_name(10)


def test_weighted_sums_by_hand() -> None:
    score = xr.DataArray([[1.0, np.nan, 3.0], [2.0, 4.0, 6.0]], dims=["init_time", "latitude"])
    w = xr.DataArray([0.5, 1.0, 2.0], dims=["latitude"])
    total, weight = weighted_sums(score, w, ["latitude"])
    np.testing.assert_array_equal(total.values, [0.5 * 1 + 2 * 3, 0.5 * 2 + 1 * 4 + 2 * 6])
    np.testing.assert_array_equal(weight.values, [2.5, 3.5])
    mean = reduce_score(score, preserve_dims=[INIT_TIME], weights=w)
    np.testing.assert_allclose((total / weight).values, mean.values, rtol=1e-15)


def test_weighted_sums_of_a_block_are_those_within_the_whole() -> None:
    rng = np.random.default_rng(3)
    dims = ["init_time", "level", "latitude", "longitude"]
    score = xr.DataArray(rng.standard_normal((13, 2, 37, 71)) * 1e3, dims=dims)
    score[2, 1, 5, 7] = np.nan
    w = xr.DataArray(rng.random(37), dims=["latitude"])
    total, weight = weighted_sums(score, w, ["latitude", "longitude"])
    for block in init_blocks(np.arange(13), 4):
        part, part_w = weighted_sums(score.isel(init_time=block), w, ["latitude", "longitude"])
        np.testing.assert_array_equal(part.values, total.values[block])
        np.testing.assert_array_equal(part_w.values, weight.values[block])


def test_weighted_sums_over_a_dim_the_score_lacks_is_one_line() -> None:
    score = xr.DataArray(np.ones((2, 3)), dims=["init_time", "latitude"])
    with pytest.raises(EnsmlError, match="report: no dimension 'longitude' to sum over"):
        weighted_sums(score, xr.DataArray(np.ones(3), dims=["latitude"]), ["longitude"], func="report")


def test_observation_ranks_are_what_the_rank_histogram_counts() -> None:
    rng = np.random.default_rng(5)
    fcst = xr.DataArray(rng.standard_normal((4, 9, 50)), dims=["init_time", MEMBER, "cell"])
    obs = xr.DataArray(rng.standard_normal((4, 50)), dims=["init_time", "cell"])
    obs[0, 0] = np.nan
    ranks = observation_ranks(fcst, obs, obs.copy(data=np.zeros(obs.shape)))
    expected = (fcst < obs).sum(MEMBER).where(obs.notnull(), -1)  # continuous: no ties
    np.testing.assert_array_equal(ranks.values, expected.values)
    hist = rank_histogram(fcst, obs)
    counts = [(ranks == r).sum().item() for r in range(10)]
    np.testing.assert_array_equal(hist.values, counts)


@pytest.fixture(scope="module")
def synth_grid(tiny_data: dict[str, Path]) -> GridFrame:
    """The tiny synthetic data (z and t at two levels) with the generator's Gaussian oracle, its
    first 6 init times (every block is read on its own, as a worker reads it)."""
    grid = grid_frame(
        str(tiny_data["forecast"]), str(tiny_data["analysis"]), Sources(oracle=str(tiny_data["oracle"]))
    )
    return replace(grid, frame=replace(grid.frame, inits=grid.frame.inits[:6]))


@pytest.fixture(scope="module")
def family_grid(tmp_path_factory: pytest.TempPathFactory) -> GridFrame:
    """Surface tp, si10 and t2m, predictions and oracle in their families (csg0, truncnormal, normal)."""
    paths = make_inputs(tmp_path_factory.mktemp("lead_sums") / "inputs")
    sources = Sources(predictions=str(paths["predictions"]), oracle=str(paths["oracle"]))
    return grid_frame(str(paths["forecast"]), str(paths["analysis"]), sources)


def _blocked(grid: GridFrame, size: int) -> LeadScores:
    """The report's scores collected as a cluster's client collects them: each block of ``size``
    init times scored apart by its own hook (a worker's), taken and put in order."""
    client, worker = LeadScores.of_grid(grid), LeadScores.on_worker(grid)
    for lead in grid.frame.leads:
        for inits in init_blocks(grid.frame.inits, size):
            lf = read_lead(replace(grid.frame, inits=inits), lead, False)
            for var in grid.frame.variables:
                worker(lf, var)
            client.put(worker.take())
    return client


def _assert_same(a: ByLead, b: ByLead) -> None:
    pd.testing.assert_frame_equal(a.table, b.table, check_exact=True)
    assert a.hists.keys() == b.hists.keys()
    for lead, by_field in a.hists.items():
        assert by_field.keys() == b.hists[lead].keys()
        for key, counts in by_field.items():
            xr.testing.assert_identical(counts, b.hists[lead][key])
    assert a.rel.keys() == b.rel.keys()
    for key, by_forecast in a.rel.items():
        assert by_forecast.keys() == b.rel[key].keys()
        for name, table in by_forecast.items():
            xr.testing.assert_identical(table, b.rel[key][name])


@pytest.mark.parametrize("data", ["synth", "families"])
@pytest.mark.parametrize("size", [1, 4])  # 6 inits (the families too): 4 + 2
def test_blocks_of_init_times_give_the_scores_of_the_whole_lead(synth_grid, family_grid, data, size) -> None:
    grid = synth_grid if data == "synth" else family_grid
    whole = LeadScores.of_grid(grid)
    scores = score_grid(grid, collect=whole)
    ours = whole.result(scores)
    assert len(ours.table) and ours.hists
    if data == "synth":
        assert ours.rel and {name for by in ours.rel.values() for name in by} == {RAW, "oracle (Gaussian)"}
    else:  # t2m gets the climatological event; tp and si10 evaluate's thresholds
        assert {var for _, var, _ in ours.rel} == {"t2m"}
    _assert_same(ours, _blocked(grid, size).result(scores))


def test_the_sums_give_what_the_scores_functions_give_on_the_whole_lead(synth_grid) -> None:
    grid, frame = synth_grid, synth_grid.frame
    lead, var = frame.leads[-1], "t"
    lf = read_lead(frame, lead, False)
    ensembles = lead_ensembles(frame, lf, var, grid.subset)
    scores = LeadScores.of_grid(grid)
    climate = scores._climate(var, lf)
    sums = lead_sums(frame, lf, var, ensembles, {}, climate)
    rows = pd.DataFrame(sums.rows(48)).set_index(["forecast", "level_hPa"])
    w, over = frame.weights, [INIT_TIME, "latitude", "longitude"]
    x, y = lf.forecast[var], lf.analysis[var]
    for name, ens in ensembles.items():
        kw = {"weights": w, "preserve_dims": ["level"]}
        rmse = ensemble_mean_rmse(ens, y, **kw)
        ssr = spread_skill_ratio(ens, y, finite_ensemble_correction=True, **kw)
        spread = np.sqrt(ens.var(MEMBER, ddof=1).weighted(w).mean(over))
        for lev in frame.levels:
            row = rows.loc[(name, float(lev))]
            for key, ref in (("rmse", rmse), ("ssr", ssr), ("spread", spread)):
                np.testing.assert_allclose(row[key], float(ref.sel(level=lev)), rtol=1e-12)
    m0, s0 = climate
    ystd = (y - m0) / s0
    for lev in frame.levels:
        ref = reliability(((x - m0) / s0).sel(level=lev), ystd.sel(level=lev), 1.0, weights=w)
        table = sums.reliability()[RAW][lev]
        xr.testing.assert_allclose(table.reset_coords(drop=True), ref.reset_coords(drop=True), rtol=1e-12)
        hist = rank_histogram(x.sel(level=lev), y.sel(level=lev), weights=w)
        tied = ((x == y).any(MEMBER).sel(level=lev) * w).sum().item()  # ties are drawn otherwise
        ours = sums.histograms()[(var, lev)]
        assert float(ours.sum()) == pytest.approx(float(hist.sum()), rel=1e-12)
        assert float(np.abs(ours - hist).sum()) <= 2 * tied + 1e-9


def test_the_monthly_climate_is_xarrays_in_memory_one() -> None:
    rng = np.random.default_rng(2)
    times = pd.date_range("2020-01-01", "2020-04-30", freq="D")
    an = xr.DataArray(
        rng.normal(280.0, 5.0, (times.size, 2, 3)).astype("float32"),
        dims=[TIME, "level", "latitude"],
        coords={TIME: times},
    )
    an[:, 0, 0] = 280.0  # no variation: std 0 is NaN
    mean, std = monthly_climate(an)
    clim = an.groupby(f"{TIME}.month")
    ref_std = clim.std(TIME)
    xr.testing.assert_allclose(mean, clim.mean(TIME), rtol=1e-6)
    xr.testing.assert_allclose(std, ref_std.where(ref_std > 0), rtol=1e-5)
    assert bool(std[:, 0, 0].isnull().all()) and not bool(std[:, 1:].isnull().any())
