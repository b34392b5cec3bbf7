"""``ensml benchmark`` with precipitation and wind speed: models in their families end to end
(configs/benchmark/precip_wind_smoke.yaml), the same Gaussian numbers of the pressure-level
variables as a benchmark without tp and si10, and the pieces by hand."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
import xarray as xr
from scipy import stats

from ensml.cli.main import main
from ensml.errors import EnsmlError
from ensml.experiments import benchmark_emos
from ensml.experiments.benchmark_calibration import FamilyForecast
from ensml.experiments.benchmark_events import (
    MIN_CASES,
    QUANTILE_LEVELS,
    deviations,
    negative_share,
    verdicts,
)
from ensml.experiments.benchmark_predictions import family_label, from_fields, model_label
from ensml.experiments.options import EmosSpec
from ensml.scores.distributions import family_for
from tests.conftest import CONFIGS

PRECIP_SMOKE = str(CONFIGS / "benchmark" / "precip_wind_smoke.yaml")
RIGHT_FAMILY = "csg0+truncnormal"
RIGHT = [
    f"local EMOS ({RIGHT_FAMILY})",
    f"U-Net ({RIGHT_FAMILY})",
    "BQN U-Net (bqn)",
    f"oracle ({RIGHT_FAMILY})",
]
RAW_GAUSSIAN = "raw ensemble (10 members, Gaussian of mean/std)"
GAUSSIAN = ["local EMOS (Gaussian)", "Gaussian U-Net (Gaussian)", RAW_GAUSSIAN]


@pytest.fixture(scope="module")
def precip_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The smoke config run once (its dataset generated into a temporary data_dir)."""
    root = tmp_path_factory.mktemp("precip_wind")
    args = ["benchmark", "--config", PRECIP_SMOKE, f"--data_dir={root / 'data'}", f"--out_dir={root / 'out'}"]
    assert main(args) == 0
    return root


@pytest.mark.slow  # a whole benchmark (module fixture)
def test_rows_columns_and_families(precip_run: Path) -> None:
    out = precip_run / "out"
    table = pd.read_csv(out / "benchmark.csv")
    crps = table[table["crps"].notna()]
    models = list(dict.fromkeys(crps["model"]))
    raw = ["raw ensemble (10 members)", "raw subset (5 members)", RAW_GAUSSIAN]
    raw.append("raw subset (5 members, Gaussian of mean/std)")
    emos = [
        f"local EMOS ({RIGHT_FAMILY})",
        "local EMOS (Gaussian)",
        "per-point bound from K members (Gaussian)",
    ]
    networks = [f"U-Net ({RIGHT_FAMILY})", "BQN U-Net (bqn)", "Gaussian U-Net (Gaussian)"]
    assert models == [*raw, *emos, *networks, f"oracle ({RIGHT_FAMILY})"]
    fields = {"z": 2, "tp": 1, "si10": 1}  # z at 500 and 850 hPa; surface variables once (level NaN)
    for var, n in fields.items():
        rows = crps[crps["variable"] == var]
        assert len(rows) == (len(models) - (var != "z")) * n, var  # the bound knows z only
        assert rows["level_hPa"].isna().all() == (var != "z")
    new = {"neg_quantile_share", "reliability_dev"}
    assert new | {"train_s", "skill_vs_local_emos", "gap_closed"} <= set(table)

    def at(model: str, var: str) -> pd.DataFrame:
        return crps[(crps["model"] == model) & (crps["variable"] == var)]

    # each row is scored in its model's family for that variable
    assert set(at("U-Net (csg0+truncnormal)", "tp")["estimator"]) == {"csg0 closed form"}
    assert set(at("U-Net (csg0+truncnormal)", "si10")["estimator"]) == {"truncnormal closed form"}
    assert set(at("oracle (csg0+truncnormal)", "tp")["estimator"]) == {"csg0 closed form"}
    assert set(at("BQN U-Net (bqn)", "tp")["estimator"]) == {"bqn quantile quadrature"}
    assert set(at("Gaussian U-Net (Gaussian)", "tp")["estimator"]) == {"Gaussian closed form"}
    for model in RIGHT:
        assert set(at(model, "z")["estimator"]) == {"Gaussian closed form"}, model
    # right families never put a quantile below 0; the Gaussians of precipitation do
    for model in RIGHT:
        for var in ("tp", "si10"):
            assert (at(model, var)["neg_quantile_share"] == 0).all(), (model, var)
    for model in GAUSSIAN:
        assert (at(model, "tp")["neg_quantile_share"] > 0).all(), model
    assert crps.loc[crps["variable"] == "z", "neg_quantile_share"].isna().all()
    bounded = crps[crps["variable"] != "z"]
    assert bounded[["neg_quantile_share", "flatness"]].notna().all().all()
    assert bounded.loc[bounded["model"] != "raw ensemble (10 members)", "skill_low"].notna().all()
    assert bounded["neg_quantile_share"].between(0, 1).all()
    # no spread/skill ratio of a non-Gaussian family (no closed-form variance)
    assert at("U-Net (csg0+truncnormal)", "tp")["spread_skill_ratio"].isna().all()
    assert at("Gaussian U-Net (Gaussian)", "tp")["spread_skill_ratio"].notna().all()
    oracle = crps[crps["model"] == "oracle (csg0+truncnormal)"]
    assert (oracle["gap_closed"] == 1).all() and (oracle["skill_low"] > 0).all()
    reference = crps[crps["model"] == "local EMOS (csg0+truncnormal)"]
    assert (reference["skill_vs_local_emos"] == 0).all()  # the right-family local EMOS is the reference
    trained = crps[crps["model"].isin(["U-Net (csg0+truncnormal)", "local EMOS (Gaussian)"])]
    assert (trained["train_s"] > 0).all() and (trained["params"] > 0).all()

    rel = pd.read_csv(out / "benchmark_reliability.csv")
    thresholds = {v: sorted(set(rel.loc[rel["variable"] == v, "threshold"])) for v in ("tp", "si10")}
    assert thresholds == {"tp": [0.1, 1.0, 5.0, 10.0, 25.0], "si10": [10.0, 15.0, 20.0]}
    points = 16 * 32 * len(set(table["lead_h"]))  # every case of the test split falls in one bin
    cases = rel.groupby(["model", "variable", "threshold"])["count"].sum()
    assert (cases % points == 0).all() and len(set(cases)) == 1
    summary = pd.read_csv(out / "benchmark_summary.csv").set_index("model")
    assert summary.loc["U-Net (csg0+truncnormal)", "neg_quantile_share"] == 0
    assert summary.loc["local EMOS (Gaussian)", "neg_quantile_share"] > 0
    text = (out / "benchmark.md").read_text()
    targets = text.split("## Targets\n\n")[1].split("\n\n")[0].splitlines()
    assert len(targets) == 3 and all(line.startswith(("- MET: ", "- NOT MET: ")) for line in targets)
    assert "tp > 10 kg m-2" in targets[2] and "## Reliability at 48 h" in text


@pytest.mark.slow  # a whole benchmark (module fixture)
def test_pressure_level_rows_as_without_precipitation(precip_run: Path) -> None:
    """The z rows of the raw ensembles, the oracle and the right-family local EMOS (Gaussian for
    z, fitted on z alone) are those of a benchmark of z alone on the same data."""
    out = precip_run / "z-only"
    args = ["benchmark", "--config", PRECIP_SMOKE, f"--data_dir={precip_run / 'data'}", f"--out_dir={out}"]
    args += ["--variables=[z]", "--emos=[local]", "--models=[]", "--bound=false"]
    assert main(args) == 0
    both = pd.read_csv(precip_run / "out" / "benchmark.csv")
    alone = pd.read_csv(out / "benchmark.csv")
    pairs = {
        "raw ensemble (10 members)": "raw ensemble (10 members)",
        "raw subset (5 members)": "raw subset (5 members)",
        "raw ensemble (10 members, Gaussian of mean/std)": "raw ensemble (10 members, Gaussian of mean/std)",
        "local EMOS (csg0+truncnormal)": "local EMOS (Gaussian)",
        "oracle (csg0+truncnormal)": "oracle (Gaussian)",
    }
    columns = ["crps", "skill_vs_raw_ensemble", "skill_low", "skill_high", "gap_closed", "crps_events"]
    columns += ["skill_vs_local_emos", "spread_skill_ratio", "flatness", "flatness_low"]
    keys = ["lead_h", "level_hPa"]
    for name, other in pairs.items():
        a = both[(both["model"] == name) & (both["variable"] == "z")].sort_values(keys)
        b = alone[(alone["model"] == other) & (alone["variable"] == "z")].sort_values(keys)
        assert len(a) == len(b) == 2  # 500 and 850 hPa
        got, want = (x[columns].to_numpy(float) for x in (a, b))
        np.testing.assert_allclose(got, want, rtol=1e-12, err_msg=name)
        assert set(a["estimator"]) == set(b["estimator"])


def test_emos_variants_labels_and_reference() -> None:
    variables = ["z", "t", "tp", "si10"]
    found = benchmark_emos.variants(
        ["global", EmosSpec("local", {"tp": "normal", "si10": "normal"}), {"mode": "local"}], variables
    )
    labels = [v.label for v in found]
    assert labels == [
        "global EMOS (csg0+truncnormal)",
        "local EMOS (Gaussian)",
        "local EMOS (csg0+truncnormal)",
    ]
    assert benchmark_emos.reference(found, variables).label == "local EMOS (csg0+truncnormal)"
    assert benchmark_emos.reference(found[:2], variables).label == "local EMOS (Gaussian)"
    assert benchmark_emos.variants(["local"], ["z", "t"])[0].label == "local EMOS (Gaussian)"  # as always
    groups = benchmark_emos.groups(found[0], 2, [False, False, True, True])
    got = [(g.family.name, g.fields, g.surface) for g in groups]
    assert got == [("normal", [0, 1, 4, 5], False), ("csg0", [2, 6], True), ("truncnormal", [3, 7], True)]
    gauss = benchmark_emos.groups(found[1], 2, [False, False, True, True])
    assert len(gauss) == 1 and gauss[0].fields == slice(None)  # one fit of every field, as before
    with pytest.raises(EnsmlError, match=r"emos\[0\].distribution: EMOS fits parametric families"):
        benchmark_emos.variants([{"mode": "local", "distribution": {"tp": "bqn"}}], variables)
    with pytest.raises(EnsmlError, match=r"emos\[0\].distribution names q"):
        benchmark_emos.variants([EmosSpec("local", {"q": "csg0"})], variables)
    assert family_label(["normal", "csg0", "normal", "csg0"]) == "csg0"
    assert model_label("U-Net", ["normal", "bqn"]) == "U-Net (bqn)"


def test_emos_predictions_broadcast_global_parameters() -> None:
    """A global csg0 EMOS has one shift per field and level: the prediction has it at every point."""
    rng = np.random.default_rng(0)
    n, t, v, d, h, w = 12, 2, 2, 2, 3, 4
    mean = torch.tensor(rng.gamma(2.0, 1.0, (n, t * v, d, h, w)), dtype=torch.float32)
    data = {"mean": mean, "std": mean * 0.3 + 0.1, "obs": torch.clamp(mean + torch.randn_like(mean), min=0)}
    data["index"] = torch.arange(n)
    variant = benchmark_emos.variants(["global"], ["z", "tp"])[0]
    fitted = benchmark_emos.fit(variant, data, torch.ones(h), t, [False, True])
    pred = benchmark_emos.predict(fitted, data, ["z", "tp"], t)
    assert list(pred["families"]) == ["z", "tp"] and pred["families"]["tp"].name == "csg0"
    for key in ("z_mean", "z_std", "tp_shape", "tp_scale", "tp_shift"):
        assert pred[key].shape == (n, t, d, h, w), key
    np.testing.assert_array_equal(pred["tp_shift"][:, :, 0], pred["tp_shift"][:, :, 1])  # surface: one field
    same = from_fields(data["index"].numpy(), {"std": data["std"].numpy()}, ["z", "tp"])
    np.testing.assert_array_equal(same["tp_std"][:, 1], data["std"][:, 3].numpy())  # lead 1, variable 1


def test_negative_share_by_hand() -> None:
    """The share of quantiles below 0: a Gaussian's from its quantiles, a family's from its cdf,
    equal to counting its quantiles; an ensemble's empirical quantiles."""
    rng = np.random.default_rng(1)
    coords = {"init_time": np.arange(5), "latitude": [10.0, -10.0], "longitude": [0.0, 90.0, 180.0]}
    dims = list(coords)
    shape = (5, 2, 3)
    weights = xr.DataArray([1.0, 1.0], dims="latitude", coords={"latitude": coords["latitude"]})

    def da(x: np.ndarray) -> xr.DataArray:
        return xr.DataArray(x, dims=dims, coords=coords)

    mu, sigma = rng.normal(0.5, 1.0, shape), rng.uniform(0.2, 2.0, shape)
    z = stats.norm.ppf(QUANTILE_LEVELS)
    want = (mu[..., None] + sigma[..., None] * z < 0).mean()
    assert negative_share((da(mu), da(sigma)), weights, [])[None] == pytest.approx(want)
    for var, name in (("tp", "bqn"), ("si10", "truncnormal"), ("z", "bqn")):
        family = family_for(var, name)
        if name == "bqn":
            steps = rng.uniform(0.0, 1.0, (*shape, len(family.params)))
            params = {p: np.cumsum(steps, -1)[..., i] - 1.5 for i, p in enumerate(family.params)}
        else:
            params = {"loc": mu, "scale": sigma}
        ds = xr.Dataset({f"{var}_{p}": da(v) for p, v in params.items()})
        q = family.quantiles(params, QUANTILE_LEVELS, axis=-1)
        got = negative_share(FamilyForecast(ds, var, family), weights, [])[None]
        assert got == pytest.approx((q < 0).mean()), (var, name)
        assert (got == 0) == (family.lower is not None)
    members = xr.DataArray(rng.normal(0.3, 1.0, (*shape, 7)), dims=[*dims, "member"], coords=coords)
    q = np.quantile(members.values, QUANTILE_LEVELS, axis=-1)
    assert negative_share(members, weights, [])[None] == pytest.approx((q < 0).mean())


def test_deviations_and_verdicts() -> None:
    rows = []
    for model, off in (("net (csg0)", 0.01), ("local EMOS (csg0)", 0.2)):
        for b in range(10):
            p = (b + 0.5) / 10
            head = {"model": model, "variable": "tp", "level_hPa": np.nan, "lead_h": 48, "threshold": 10.0}
            cases = MIN_CASES if b < 5 else MIN_CASES - 1
            bin_ = {"bin": b, "forecast_probability": p, "observed_frequency": p + off * b, "count": cases}
            rows.append({**head, "units": "kg m-2", **bin_})
    rel = pd.DataFrame(rows)
    dev = deviations(rel).set_index("model")["deviation"]
    assert dev["net (csg0)"] == pytest.approx(0.04) and dev["local EMOS (csg0)"] == pytest.approx(0.8)
    table = pd.DataFrame(
        {
            "model": ["net (csg0)", "net (csg0)"],
            "variable": ["tp", "si10"],
            "level_hPa": [np.nan, np.nan],
            "lead_h": [48, 48],
            "crps": [1.0, 1.0],
            "skill_vs_local_emos": [0.05, 0.02],
            "emos_skill_low": [0.01, 0.005],
            "gap_closed": [0.9, 0.85],
        }
    )
    lines = verdicts(table, pd.DataFrame(), rel, "net (csg0)", "local EMOS (csg0)")
    assert lines[0].startswith("NOT MET: net (csg0) beats local EMOS (csg0)") and "si10 +2.0%" in lines[0]
    assert lines[1].startswith("MET: net (csg0) closes >= 80%")
    assert lines[2].startswith("MET: ") and "max deviation 0.040 over 500 cases" in lines[2]


@pytest.mark.slow  # a whole benchmark (module fixture)
def test_precip_wind_config_builds_every_model(precip_run: Path) -> None:
    """configs/benchmark/precip_wind.yaml parses (EMOS entries with families), and each of its
    networks builds on precipitation data in the family it names (no training)."""
    from jsonargparse import ArgumentParser

    from ensml.data.datamodule import EnsembleDataModule
    from ensml.experiments.benchmark import _build, benchmark, label
    from ensml.experiments.options import ModelSpec
    from tests.conftest import TINY_PERIODS

    parser = ArgumentParser(exit_on_error=False)
    parser.add_function_arguments(benchmark)
    cfg = parser.parse_path(str(CONFIGS / "benchmark" / "precip_wind.yaml"))
    assert cfg.synth.precip_wind and cfg.variables == ["z", "t", "tp", "si10"]
    found = benchmark_emos.variants(cfg.emos, cfg.variables)
    labels = [v.label for v in found]
    assert labels == [
        f"{mode} EMOS ({fam})" for fam in (RIGHT_FAMILY, "Gaussian") for mode in ("global", "local")
    ]
    data = precip_run / "data"
    periods = {key: list(period) for key, period in TINY_PERIODS.items()}
    files = (str(data / "forecast.nc"), str(data / "analysis.nc"))
    leads = {"input_leads": cfg.input_leads, "target_leads": cfg.target_leads, "k": cfg.k}
    dm = EnsembleDataModule(
        *files, variables=cfg.variables, levels=cfg.levels, batch_size=2, **leads, **periods
    )
    dm.setup("fit")
    specs = [ModelSpec(**vars(m)) if not isinstance(m, ModelSpec) else m for m in cfg.models]
    labels = [label(spec, _build(spec, dm, cfg.seed)) for spec in specs]
    assert labels == ["U-Net (csg0+truncnormal)", "BQN U-Net (bqn)", "Gaussian U-Net (Gaussian)"]


def test_diverged_emos_fit_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """A fit whose coefficients are not finite stops the benchmark with one line naming it."""
    from ensml.models.emos import EMOS

    def diverged(mean: torch.Tensor, *args: object, **kwargs: object) -> EMOS:
        model = EMOS(mean.shape[1], mean.shape[2], n_extra=1)
        with torch.no_grad():
            model.a.fill_(float("nan"))
        return model

    monkeypatch.setattr(benchmark_emos, "fit_emos", diverged)
    data = {key: torch.ones(4, 2, 1, 2, 3) for key in ("mean", "std", "obs")}
    variant = benchmark_emos.variants(["local"], ["tp"])[0]
    with pytest.raises(EnsmlError, match=r"local EMOS \(csg0\) of tp \(csg0\) diverged: .* a are not finite"):
        benchmark_emos.fit(variant, data, torch.ones(2), 2, [True])


@pytest.mark.slow
def test_physics_wind_speed_without_oracle(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The physics testbed's si10 (no oracle): right-family EMOS and network, the event columns,
    and no gap closed (a stand-in generator: the synthetic data's z and si10, physics attributes)."""
    import sys
    import types
    from dataclasses import asdict

    from ensml.data.synth.generate import synth
    from ensml.experiments.options import PhysicsOptions

    options = PhysicsOptions(levels=[500, 850], leads=[0, 24, 48], members=6, start="2000-01-01", inits=44)

    def stand_in(out_dir: Path, *, overwrite: bool = False, **opts: object) -> dict[str, Path]:
        out, end = Path(out_dir), np.datetime64("2000-01-01") + 43 * np.timedelta64(1, "D")
        grid = {"n_lat": 8, "n_lon": 16, "levels": opts["levels"], "leads": opts["leads"]}
        dates = {"start": "2000-01-01", "end": str(end), "every_days": 1}
        made = synth(str(out) + "-synth", **grid, **dates, members=opts["members"], precip_wind=True)
        out.mkdir(parents=True, exist_ok=True)
        paths = {}
        for name in ("forecast", "analysis"):
            with xr.open_dataset(made[name]) as ds:
                ds = ds[["z", "si10"]].load()
            ds.attrs = {f"physics_{k}": v for k, v in opts.items()} | {
                "physics_leads": ds.attrs["synth_leads"]
            }
            paths[name] = out / f"{name}.nc"
            ds.to_netcdf(paths[name])
        return paths

    module = types.ModuleType("ensml.data.physics.generate")
    module.physics = stand_in  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "ensml.data.physics.generate", module)
    model = '[{"name": "tiny", "task": "mixed", "width": 4, "depth": 2, "max_epochs": 1}]'
    out = tmp_path / "out"
    args = ["benchmark", f"--data_dir={tmp_path / 'physics'}", f"--out_dir={out}", "--bound=false", "--k=3"]
    args += ["--input_leads=[0, 24, 48]", "--target_leads=[48]", "--variables=[z, si10]", "--levels=[500]"]
    args += ["--batch_size=4", "--limit_train_batches=1", "--emos=[local]", f"--models={model}"]
    args += [f"--physics.{key}={value}" for key, value in asdict(options).items()]
    args += ["--train_period=[2000-01-01, 2000-01-22]", "--val_period=[2000-01-23, 2000-01-29]"]
    assert main([*args, "--test_period=[2000-01-30, 2000-02-13]"]) == 0

    table = pd.read_csv(out / "benchmark.csv")
    assert "gap_closed" not in table and not table["model"].str.contains("oracle").any()
    wind = table[(table["variable"] == "si10") & table["crps"].notna()].set_index("model")
    for name in ("local EMOS (truncnormal)", "tiny (truncnormal)"):
        assert wind.loc[name, "estimator"] == "truncnormal closed form"
        assert wind.loc[name, "neg_quantile_share"] == 0
    assert wind.loc["local EMOS (truncnormal)", "skill_vs_local_emos"] == 0
    assert set(pd.read_csv(out / "benchmark_reliability.csv")["threshold"]) == {10.0, 15.0, 20.0}
    text = (out / "benchmark.md").read_text()
    assert "- Not assessed: the raw -> oracle gap (no oracle)." in text
