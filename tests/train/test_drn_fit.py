"""fit_drn recovers known station-dependent truths, and refuses bad inputs in one line.

Observations are drawn per station ``s`` with a known predictive distribution (a station
offset ``a_s`` and spread ``σ_s``, a shared slope on the feature ``m``); the fitted network,
scored on fresh draws with scoringrules' closed forms (not ensml's CRPS), must score within a
few percent of the truth, and the same network without the station embedding clearly worse.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
import scoringrules as sr
import torch
from scipy import stats

from ensml.errors import EnsmlError
from ensml.train.drn import drn_distribution, fit_drn

pytestmark = pytest.mark.timeout(300)

N_STATIONS = 8
LAT = np.linspace(40.0, 60.0, N_STATIONS)
LON = np.linspace(-5.0, 25.0, N_STATIONS)
#: Small and quick (the test data are 2000 rows): full-size batches, a higher rate.
QUICK = {"batch_size": 512, "lr": 1e-2}


@pytest.fixture(autouse=True)
def _one_thread() -> Iterator[None]:
    """A tiny network gains nothing from intra-op threads, and loses much on shared cores."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _truth(rng: np.random.Generator) -> dict[str, np.ndarray]:
    return {"a": rng.uniform(-3.0, 3.0, N_STATIONS), "sigma": rng.uniform(0.5, 2.0, N_STATIONS)}


def _rows(rng: np.random.Generator, per_station: int) -> tuple[np.ndarray, np.ndarray]:
    station = np.repeat(np.arange(N_STATIONS), per_station)
    m = rng.normal(0.0, 2.0, station.size)
    return m[:, None].astype(np.float32), station


def _normal_data(truth, rng, per_station):
    x, s = _rows(rng, per_station)
    mu, sigma = truth["a"][s] + 1.5 * x[:, 0], truth["sigma"][s]
    return x, s, (mu + sigma * rng.normal(size=s.size)).astype(np.float32), (mu, sigma)


def _fit(x, s, y, **kwargs):
    return fit_drn(x, s, y, n_stations=N_STATIONS, station_lat=LAT, station_lon=LON, **kwargs)


@pytest.mark.slow  # two fits of a few seconds
def test_normal_drn_recovers_station_truth_and_the_embedding_matters() -> None:
    truth = _truth(np.random.default_rng(0))
    x, s, y, _ = _normal_data(truth, np.random.default_rng(1), 400)
    xt, st, yt, (mu, sigma) = _normal_data(truth, np.random.default_rng(2), 500)
    crps_true = sr.crps_normal(yt, mu, sigma).mean()
    scores = {}
    for dim in (2, 0):
        p = drn_distribution(_fit(x, s, y, embedding_dim=dim, **QUICK), "normal", xt, st)
        scores[dim] = sr.crps_normal(yt, p["mean"].numpy(), p["std"].numpy()).mean()
    assert scores[2] <= 1.03 * crps_true, (scores, crps_true)
    assert scores[0] >= 1.4 * crps_true, (scores, crps_true)  # station offsets span 6 units


@pytest.mark.slow  # one fit of a few seconds
def test_truncated_normal_drn_recovers_a_truncated_truth() -> None:
    """Wind-like data: N(a_s + 0.8 m, σ_s²) truncated at 0, drawn with scipy."""
    rng = np.random.default_rng(3)
    truth = {"a": rng.uniform(0.0, 4.0, N_STATIONS), "sigma": rng.uniform(0.5, 2.0, N_STATIONS)}

    def data(rng, per_station):
        x, s = _rows(rng, per_station)
        x = np.abs(x)  # an ensemble mean wind speed ≥ 0
        loc, scale = truth["a"][s] + 0.8 * x[:, 0], truth["sigma"][s]
        y = stats.truncnorm.rvs(-loc / scale, np.inf, loc=loc, scale=scale, random_state=rng)
        return x, s, y.astype(np.float32), (loc, scale)

    x, s, y, _ = data(rng, 250)
    xt, st, yt, (loc, scale) = data(np.random.default_rng(4), 500)
    p = drn_distribution(_fit(x, s, y, family="truncnormal", **QUICK), "truncnormal", xt, st)
    fitted = sr.crps_tnormal(yt, p["loc"].numpy(), p["scale"].numpy(), lower=0.0).mean()
    crps_true = sr.crps_tnormal(yt, loc, scale, lower=0.0).mean()
    assert fitted <= 1.03 * crps_true, (fitted, crps_true)


@pytest.mark.slow  # one fit of a few seconds
def test_quantile_head_recovers_a_wind_truth_clipped_at_zero() -> None:
    """The distribution-free head (``bqn``) on wind-like data, N(a_s + 0.8 m, σ_s²) truncated at
    0: its quantile function, clipped at 0 for si10, scored by scoringrules' quantile CRPS on 99
    levels, comes within a few percent of the truth's closed form; its coefficients never
    decrease."""
    from ensml.scores.distributions import family_for

    rng = np.random.default_rng(13)
    truth = {"a": rng.uniform(0.0, 4.0, N_STATIONS), "sigma": rng.uniform(0.5, 2.0, N_STATIONS)}

    def data(rng, per_station):
        x, s = _rows(rng, per_station)
        x = np.abs(x)
        loc, scale = truth["a"][s] + 0.8 * x[:, 0], truth["sigma"][s]
        y = stats.truncnorm.rvs(-loc / scale, np.inf, loc=loc, scale=scale, random_state=rng)
        return x, s, y.astype(np.float32), (loc, scale)

    x, s, y, _ = data(rng, 250)
    xt, st, yt, (loc, scale) = data(np.random.default_rng(14), 500)
    family = family_for("si10", "bqn")
    p = drn_distribution(_fit(x, s, y, family=family, **QUICK), family, xt, st)
    alpha = np.stack([p[k].numpy() for k in family.params], axis=-1)
    assert (np.diff(alpha, axis=-1) >= 0).all()
    levels = (np.arange(99) + 0.5) / 99
    quantiles = family.ppf({k: p[k].numpy()[:, None] for k in family.params}, levels[None, :])
    assert quantiles.min() >= 0.0  # clipped at si10's bound
    fitted = sr.crps_quantile(yt, quantiles, levels).mean()
    crps_true = sr.crps_tnormal(yt, loc, scale, lower=0.0).mean()
    assert fitted <= 1.05 * crps_true, (fitted, crps_true)


@pytest.mark.slow  # one fit of a few seconds
def test_csg0_drn_recovers_a_censored_shifted_gamma_truth() -> None:
    """Rain-like data: max(0, X − 0.5), X ~ Gamma with a station mean and spread, many zeros."""
    rng = np.random.default_rng(5)
    truth = {"a": rng.uniform(0.5, 3.0, N_STATIONS), "cv": rng.uniform(0.6, 1.5, N_STATIONS)}

    def data(rng, per_station):
        x, s = _rows(rng, per_station)
        x = np.abs(x)
        mean = truth["a"][s] * (1.0 + 0.5 * x[:, 0])
        shape, scale = 1.0 / truth["cv"][s] ** 2, mean * truth["cv"][s] ** 2
        y = np.maximum(rng.gamma(shape, scale) - 0.5, 0.0)
        return x, s, y.astype(np.float32), (shape, scale)

    x, s, y, _ = data(rng, 250)
    xt, st, yt, (shape, scale) = data(np.random.default_rng(6), 500)
    assert 0.1 < (y == 0).mean() < 0.6
    p = drn_distribution(_fit(x, s, y, family="csg0", **QUICK), "csg0", xt, st)
    p = {k: v.double().numpy() for k, v in p.items()}
    fitted = sr.crps_csg0(yt, p["shape"], scale=p["scale"], shift=p["shift"]).mean()
    crps_true = sr.crps_csg0(yt, shape, scale=scale, shift=0.5).mean()
    assert fitted <= 1.04 * crps_true, (fitted, crps_true)


def _small(seed: int = 0, n: int = 200):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 2)).astype(np.float32)
    s = rng.integers(0, N_STATIONS, n)
    y = (x[:, 0] + s * 0.5 + rng.normal(size=n)).astype(np.float32)
    return x, s, y


FEW = {"epochs": 5, "batch_size": 64, "hidden": 16}


def _same(a, b) -> bool:
    return all(torch.equal(a.state_dict()[k], b.state_dict()[k]) for k in a.state_dict())


def test_a_seed_makes_the_fit_deterministic_and_leaves_the_global_generator() -> None:
    x, s, y = _small()
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    a = _fit(x, s, y, seed=7, **FEW)
    assert torch.equal(torch.rand(3), expected)  # the caller's generator is left as it was
    b = _fit(x, s, y, seed=7, **FEW)
    c = _fit(x, s, y, seed=8, **FEW)
    assert _same(a, b)
    assert not _same(a, c)
    assert not any(p.requires_grad for p in a.parameters()) and not a.training


def test_nan_rows_are_dropped_and_counted(capsys: pytest.CaptureFixture[str]) -> None:
    x, s, y = _small()
    clean = _fit(x, s, y, **FEW)
    capsys.readouterr()
    xn = np.concatenate([x, [[np.nan, 0.0], [1.0, 2.0], [0.0, 0.0]]]).astype(np.float32)
    yn = np.concatenate([y, [1.0, np.nan, np.nan]]).astype(np.float32)
    sn = np.concatenate([s, [0, 1, 2]])
    dirty = _fit(xn, sn, yn, **FEW)
    assert "fit_drn: dropped 3 of 203 rows with a NaN feature or observation" in capsys.readouterr().err
    assert _same(clean, dirty)  # the same rows left, the same split and fit


def test_a_station_without_rows_takes_the_nearest_trained_embedding(capsys) -> None:
    x, s, y = _small()
    keep = s != 3
    model = _fit(x[keep], s[keep], y[keep], **FEW)
    assert "1 station(s) without training rows take the nearest embedding" in capsys.readouterr().err
    assert not model.trained[3] and model.trained[np.arange(N_STATIONS) != 3].all()
    # stations 2 and 4 flank station 3; 4 is nearer: a degree of longitude is shorter further north
    torch.testing.assert_close(model.embedding.weight[3], model.embedding.weight[4])
    zero = _fit(x[keep], s[keep], y[keep], untrained="zero", **FEW)
    torch.testing.assert_close(zero.embedding.weight[3], torch.zeros(2))


X, S, Y = _small()
BAD = [
    ({"features": X[:, 0]}, r"features must be a float \(N, F\) array, got shape \(200,\)"),
    (
        {"station": S[:-1]},
        r"station \(N,\) and obs \(N,\) of one N, got shapes \(200, 2\), \(199,\), \(200,\)",
    ),
    ({"obs": Y[:, None]}, r"got shapes \(200, 2\), \(200,\), \(200, 1\)"),
    (
        {"station": np.where(S == 0, N_STATIONS, S)},
        rf"station index out of range 0..{N_STATIONS - 1} in \d+ row",
    ),
    ({"station": np.where(S == 0, -1, S)}, r"station index out of range 0..7 in \d+ row\(s\) \(first: -1\)"),
    ({"station": S.astype(float)}, "station must hold integer station indices, got dtype torch.float64"),
    ({"family": "gauss"}, "unknown distribution 'gauss' \\(known: normal, truncnormal"),
    (
        {"family": "truncnormal"},
        r"fit_drn observations: \d+ value\(s\) below 0 .* outside the support of the truncnormal",
    ),
    (
        {"features": X[:9], "station": S[:9], "obs": Y[:9]},
        "needs at least 10 rows with finite features and observation, got 9 \\(of 9\\)",
    ),
    ({"obs": np.where(np.arange(200) < 195, np.nan, Y)}, "needs at least 10 rows .* got 5 \\(of 200\\)"),
    ({"features": np.where(X > 2, np.inf, X)}, r"fit_drn features hold \d+ infinite value\(s\)"),
    ({"n_stations": 0}, "n_stations must be an integer >= 1, got 0"),
    ({"station_lat": LAT[:-1], "station_lon": LON[:-1]}, "must have n_stations = 8 values, got 7"),
    ({"station_lat": LAT + 60}, r"fit_drn station positions must be finite with lat in \[-90, 90\]"),
    ({"val_fraction": 1.0}, "val_fraction must lie strictly between 0 and 1, got 1.0"),
    ({"lr": 0.0}, "lr must be a finite number > 0, got 0.0"),
    ({"epochs": 0}, "fit_drn epochs must be an integer >= 1, got 0"),
    ({"embedding_dim": -1}, "fit_drn embedding_dim must be an integer >= 0, got -1"),
    ({"untrained": "mean"}, "untrained must be one of nearest, zero, got 'mean'"),
    ({"seed": -1}, "fit_drn seed: -1 is out of range"),
]


@pytest.mark.parametrize(("change", "message"), BAD)
def test_bad_inputs_are_refused_in_one_line(change: dict, message: str) -> None:
    args = {"features": X, "station": S, "obs": Y, **change}
    kwargs = {k: v for k, v in args.items() if k not in ("features", "station", "obs")}
    kwargs = {"n_stations": N_STATIONS, "station_lat": LAT, "station_lon": LON, **FEW, **kwargs}
    with pytest.raises(EnsmlError, match=message) as err:
        fit_drn(args["features"], args["station"], args["obs"], **kwargs)
    assert "\n" not in str(err.value)


def test_drn_distribution_refuses_unknown_stations_and_a_mismatched_family() -> None:
    model = _fit(X, S, Y, **FEW)
    with pytest.raises(EnsmlError, match=r"station index out of range 0..7 in 1 row\(s\) \(first: 8\)"):
        drn_distribution(model, "normal", X[:2], np.array([0, 8]))
    with pytest.raises(EnsmlError, match="the csg0 family needs 3 outputs per sample, the model gives 2"):
        drn_distribution(model, "csg0", X, S)
    with pytest.raises(EnsmlError, match="features has 1 columns, the model takes 2"):
        drn_distribution(model, "normal", X[:, :1], S)
    grown = model.with_new_stations([50.0], [10.0])
    p = drn_distribution(grown, "normal", X[:1], np.array([N_STATIONS]))
    assert p["std"].shape == (1,) and bool(p["std"][0] > 0)
