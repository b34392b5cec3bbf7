"""``ensml data archive``: one file per init time, each the forecast's own data; bad options."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import xarray as xr

from ensml.cli.main import main


def test_archive_writes_one_file_per_init(tiny_data, tmp_path: Path) -> None:
    out = tmp_path / "archive"
    args = [
        "data",
        "archive",
        f"--forecast={tiny_data['forecast']}",
        f"--out_dir={out}",
        "--period=[2017-03-01, 2017-03-31]",
        "--name=fc_{init:%Y%m%d}.nc",
    ]
    assert main(args) == 0
    files = sorted(out.glob("*.nc"))
    whole = xr.open_dataset(tiny_data["forecast"]).sel(init_time=slice("2017-03-01", "2017-03-31"))
    assert [p.name for p in files] == [
        f"fc_{str(t)[:10].replace('-', '')}.nc" for t in whole.init_time.values
    ]
    one = xr.open_dataset(files[2])
    assert one.sizes["init_time"] == 1 and one.attrs["Conventions"] == "CF-1.8"
    np.testing.assert_array_equal(one["z"].values, whole["z"].isel(init_time=[2]).values)
    assert [p.name for p in out.glob(".*")] == [".ensml"]  # the ledger; no temporary left
    assert list((out / ".ensml" / "staging").iterdir()) == []


def test_archive_bad_options(tiny_data, tmp_path: Path, capsys) -> None:
    base = ["data", "archive", f"--forecast={tiny_data['forecast']}"]
    afile = tmp_path / "afile"
    afile.write_text("x")
    cases = {
        "is a file, not a folder": [f"--out_dir={afile}"],
        "gives 'fc_2017.nc' to init times": [
            f"--out_dir={tmp_path / 'a'}",
            "--name=fc_{init:%Y}.nc",
        ],
        "holds no init dates": [f"--out_dir={tmp_path / 'b'}", "--period=[2030-01-01, 2030-02-01]"],
    }
    for message, extra in cases.items():
        assert main([*base, *extra]) == 1
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and message in err[0], err
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists() and afile.read_text() == "x"


def test_archive_is_read_a_lead_at_a_time(tiny_data, tmp_path: Path) -> None:
    """Files opened one by one (a reader given, as ``evaluate`` gives one) are dask arrays of
    one init time at one lead: reading a lead reads no other lead of the files."""
    from ensml.data.frame import build_frame
    from ensml.data.layouts import ReaderOptions

    out = tmp_path / "archive"
    period = "--period=[2017-03-01, 2017-03-10]"
    assert main(["data", "archive", f"--forecast={tiny_data['forecast']}", f"--out_dir={out}", period]) == 0
    files = sorted(str(p) for p in out.glob("*.nc"))
    frame = build_frame(files, str(tiny_data["analysis"]), variables=["z"], reader=ReaderOptions())
    z = frame.forecast["z"]
    n_leads = z.sizes["lead_time"]
    assert n_leads > 1 and z.chunks[z.dims.index("lead_time")] == (1,) * n_leads
    assert z.chunks[z.dims.index("init_time")] == (1,) * len(files)
    lead = frame.leads[-1]
    at = frame.at(lead).forecast["z"]
    whole = xr.open_dataset(tiny_data["forecast"])["z"].sel(init_time=frame.inits, lead_time=lead)
    np.testing.assert_array_equal(at.values, whole.transpose(*at.dims).values)
