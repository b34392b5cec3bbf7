"""Inputs of the before/after check of ``ensml evaluate`` and ``ensml report`` (``test_unchanged.py``).

Every kind of file ``evaluate`` scores, made from the tiny synthetic ensemble with a fixed seed
and the run metadata ``ensml predict`` / ``ensml postprocess`` write: Gaussian predictions (the
oracle plus noise, +24 and +48 h, the first two inits left out), calibrated members in two files
(a glob, as ``ensml postprocess`` writes one file per init) and a spread model's estimates.

Run as a script against another checkout to write the reference tables of its code::

    PYTHONPATH=/path/to/checkout python tests/verify/reference_inputs.py OUT_DIR

(``tests/verify/data/before/`` holds those of commit 1b59223, before the one frame builder.)
This file imports nothing from ``tests`` so that it runs against any checkout.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import xarray as xr

from ensml.predictions import RunMeta

VARIABLES = ("z", "t")
LEVELS = (500.0, 850.0)
LEADS = np.array([24, 48], "timedelta64[h]").astype("timedelta64[ns]")
CHECKPOINT = "ab" * 32  # the SHA-256 of a checkpoint that made the predictions and the members
#: A case study over the test period's southern storms (the key of the lead time is given).
CASE = {
    "name": "reference storm",
    "variable": "z",
    "level": 500,
    "region": {"lat": [-75, -35], "lon": [350, 80]},
    "window": ["2017-11-07", "2017-11-20"],
    "threshold": {"quantile": 0.1, "tail": "lower"},
}


def run_meta(task: str, **changes: object) -> dict[str, object]:
    """The run metadata attributes of a K = 5 run on the 10-member tiny ensemble."""
    meta = {
        "task": task,
        "k": 5,
        "members": tuple(range(5)),
        "ensemble_size": 10,
        "variables": VARIABLES,
        "levels": LEVELS,
        "leads": tuple(LEADS),
        "checkpoints": (CHECKPOINT,),
        **changes,
    }
    return RunMeta(**meta).to_attrs()  # type: ignore[arg-type]


def make_inputs(data: dict[str, Path], root: Path) -> dict[str, Path]:
    """Write predictions, members (two files) and spread predictions of ``data`` under ``root``."""
    root.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(11)
    with xr.open_dataset(data["oracle"]) as orc, xr.open_dataset(data["forecast"]) as fc:
        inits = orc["init_time"].values[2:]
        sub = orc[[f"{v}_{s}" for v in VARIABLES for s in ("mean", "std")]]
        sub = sub.sel(init_time=inits, lead_time=LEADS).load()
        ens = fc[list(VARIABLES)].sel(init_time=inits, lead_time=LEADS).load()
    for v in VARIABLES:
        noise = rng.standard_normal(sub[f"{v}_std"].shape)
        sub[f"{v}_mean"] = sub[f"{v}_mean"] + 0.4 * sub[f"{v}_std"] * noise
        sub[f"{v}_std"] = sub[f"{v}_std"] * 1.3
    paths = dict(data)
    paths["predictions"] = root / "predictions.nc"
    sub.assign_attrs(run_meta("MixedTask")).to_netcdf(paths["predictions"])
    # calibrated members: the raw members shifted towards the predictions' mean, one file per half
    members = ens.copy()
    for v in VARIABLES:
        members[v] = ens[v] + 0.5 * (sub[f"{v}_mean"] - ens[v].mean("member"))
    members = members.drop_vars("valid_time", errors="ignore").assign_attrs(run_meta("MixedTask"))
    half = members.sizes["init_time"] // 2
    for i, part in enumerate((slice(0, half), slice(half, None))):
        members.isel(init_time=part).to_netcdf(root / f"members_{i}.nc")
    paths["members"] = root / "members_*.nc"
    spread = xr.Dataset({f"{v}_std": ens[v].std("member") * 1.05 for v in VARIABLES})
    spread = spread.drop_vars("valid_time", errors="ignore").assign_attrs(run_meta("SpreadTask"))
    paths["spread_predictions"] = root / "spread.nc"
    spread.to_netcdf(paths["spread_predictions"])
    return paths


def _reference(out: Path) -> None:
    """Write the tables of this checkout's ``evaluate`` and ``report`` on the inputs under ``out``."""
    import inspect

    import yaml

    from ensml.data.synth.generate import synth
    from ensml.report.assemble import report
    from ensml.verify.evaluate import evaluate

    data = synth(
        out / "synth", n_lat=16, n_lon=32, start="2017-01-01", end="2017-12-31", every_days=3, seed=1
    )
    paths = make_inputs(data, out / "inputs")
    new = "lead" in inspect.signature(report).parameters  # the one lead-time type
    case = out / "case.yaml"
    case.write_text(yaml.safe_dump({**CASE, **({"lead": "48h"} if new else {"lead_hours": 48})}))
    files = {k: str(paths[k]) for k in ("predictions", "members", "spread_predictions", "oracle")}
    evaluate(
        str(data["forecast"]), str(data["analysis"]), **files, cases=str(case), out_dir=str(out / "eval")
    )
    report(
        str(data["forecast"]),
        str(data["analysis"]),
        predictions=files["predictions"],
        oracle=files["oracle"],
        spread_predictions=files["spread_predictions"],
        cases=str(case),
        n_storm_cases=1,
        out_dir=str(out / "report"),
    )


if __name__ == "__main__":
    _reference(Path(sys.argv[1]))
