"""Writers that are not the run: worker processes (reserve, stage, record) and libraries (adopt)."""

from __future__ import annotations

import pickle
import signal
from pathlib import Path

import numpy as np
import pytest
import xarray as xr

from ensml.data.outputs import (
    OutputFolder,
    Staging,
    append_netcdf_init,
    create_zarr_store,
    write_zarr_region,
)
from ensml.errors import EnsmlError
from tests.data.outputs_sandbox import run_python

pytestmark = pytest.mark.timeout(180)


def worker(staging: Staging, code: str) -> None:
    """Run ``code`` in another process with ``staging`` (sent pickled, as dask sends it)."""
    result = run_python(
        f"""
        import pickle
        staging = pickle.loads({pickle.dumps(staging)!r})
        {code}
        """
    )
    assert result.returncode == 0, result.stderr


@pytest.mark.slow
def test_reserve_write_in_another_process_record(tmp_path: Path) -> None:
    out = tmp_path / "out"
    with OutputFolder.open(out, "postprocess") as folder:
        paths = folder.reserve(["2020/a.nc", "b.nc"])
        assert paths == [out / "2020" / "a.nc", out / "b.nc"] and (out / "2020").is_dir()
        assert {k: e.state for k, e in folder.ledger.entries.items()} == {
            "2020": "done",
            "2020/a.nc": "reserved",
            "b.nc": "reserved",
        }
        worker(
            folder.staging(["2020/a.nc", "b.nc"]),
            "for n in ('2020/a.nc', 'b.nc'): staging.write_bytes(n, n.encode())",
        )
        assert [p.read_bytes() for p in paths] == [b"2020/a.nc", b"b.nc"]
        assert [p.name for p in folder.run_dir.iterdir()] == ["lock"]  # the worker's temporaries went
        folder.record(["2020/a.nc", "b.nc"])
        entry = folder.ledger.entries["b.nc"]
        assert (entry.state, entry.size, entry.mtime_ns) == ("done", 4, paths[1].stat().st_mtime_ns)
        with pytest.raises(EnsmlError) as info:
            folder.record(["c.nc"])
        assert str(info.value) == (
            f"postprocess: out_dir {out}: c.nc was not reserved by this run; "
            "reserve names before writing them"
        )


def test_a_kill_after_a_workers_rename_leaves_a_file_the_ledger_knows(tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = run_python(
        f"""
        import os, signal
        from ensml.data.outputs import OutputFolder
        folder = OutputFolder.open({str(out)!r}, "postprocess")
        folder.reserve(["a.nc"])
        folder.staging(["a.nc"]).write_bytes("a.nc", b"written by a worker")
        os.kill(os.getpid(), signal.SIGKILL)  # before the client records it
        """
    )
    assert result.returncode == -signal.SIGKILL, result.stderr
    assert (out / "a.nc").read_bytes() == b"written by a worker"
    with pytest.raises(EnsmlError, match=r"a\.nc was written by ensml postprocess; name another folder"):
        OutputFolder.check(out, "evaluate", names=["a.nc"])
    with OutputFolder.open(out, "postprocess", names=["a.nc"]) as folder:
        assert folder.ledger.entries["a.nc"].state == "reserved"
        folder.write_bytes("a.nc", b"redone")
    assert (out / "a.nc").read_bytes() == b"redone"


def test_a_worker_of_a_run_that_is_over_is_refused(tmp_path: Path) -> None:
    with OutputFolder.open(tmp_path / "out", "postprocess") as folder:
        folder.reserve(["a.nc"])
        staging = folder.staging(["a.nc"])
    with pytest.raises(EnsmlError) as info:
        staging.write_bytes("a.nc", b"late")
    assert str(info.value) == (
        f"postprocess: cannot write {tmp_path}/out/a.nc: "
        f"run {staging.run_id} is over (its staging folder is gone)"
    )
    assert not (tmp_path / "out" / "a.nc").exists()
    with pytest.raises(EnsmlError, match=r"postprocess: output name '\.\./x' leaves out_dir"):
        staging.write_bytes("../x", b"escape")


def test_a_worker_writes_only_what_the_run_reserved_for_it(tmp_path: Path) -> None:
    out = tmp_path / "out"
    (out / "notes").mkdir(parents=True)
    with OutputFolder.open(out, "postprocess", shared=True) as folder:
        (out / "benchmark.md").write_text("the user's")
        folder.reserve(["a.nc"])
        folder.reserve(["store.zarr"], kind="dir")
        with pytest.raises(EnsmlError) as info:
            folder.staging(["a.nc", "benchmark.md"])
        assert str(info.value) == (
            f"postprocess: out_dir {out}: benchmark.md was not reserved by this run; "
            "reserve names before workers write them"
        )
        staging = folder.staging(["a.nc", "store.zarr"])
        for name in ("benchmark.md", "notes/x.nc"):
            with pytest.raises(EnsmlError) as info:
                staging.write_bytes(name, b"clobber")
            assert str(info.value) == (
                f"postprocess: cannot write {out}/{name}: the run did not reserve it for this worker"
            )
        staging.write_bytes("store.zarr/zarr.json", b"{}")  # inside a folder reserved for it
    assert (out / "benchmark.md").read_text() == "the user's" and list((out / "notes").iterdir()) == []


def test_adopt_what_a_library_wrote(tmp_path: Path) -> None:
    out = tmp_path / "runs" / "mixed"
    with OutputFolder.open(out, "fit") as folder:
        folder.reserve(["config.yaml", "hparams.yaml", "metrics.csv"])
        folder.reserve(["checkpoints"], kind="dir")
        # Lightning writes these itself, not through the folder
        (out / "config.yaml").write_text("model: x\n")
        (out / "metrics.csv").write_text("epoch\n0\n")
        (out / "checkpoints").mkdir()
        (out / "checkpoints" / "last.ckpt").write_bytes(b"weights")
        folder.adopt(["config.yaml", "hparams.yaml", "metrics.csv", "checkpoints"])
        entries = folder.ledger.entries
        assert sorted(entries) == ["checkpoints", "config.yaml", "metrics.csv"]  # hparams: never written
        assert entries["checkpoints"].kind == "dir" and entries["checkpoints"].files == 1
        assert all(e.state == "done" for e in entries.values())
        with pytest.raises(EnsmlError, match=r"metrics\.csv was not reserved by this run"):
            folder.adopt(["metrics.csv"])  # done: a change now is no longer ensml's to adopt
    # a resumed fit reserves them again (they are unchanged) and the library appends
    with OutputFolder.open(out, "fit") as folder:
        folder.reserve(["metrics.csv"])
        with open(out / "metrics.csv", "a") as f:
            f.write("1\n")
        folder.adopt(["metrics.csv"])
        assert folder.ledger.entries["metrics.csv"].size == len("epoch\n0\n1\n")


@pytest.mark.slow
def test_zarr_regions_written_by_workers(tmp_path: Path) -> None:
    out = tmp_path / "out"
    inits = np.array(["2020-01-01", "2020-01-02", "2020-01-03"], dtype="datetime64[ns]")
    leads = np.array([0, 24], dtype="timedelta64[h]").astype("timedelta64[ns]")

    def one(i: int) -> xr.Dataset:
        init = inits[i : i + 1]
        data = np.full((1, 2, 3), float(i), "f4")
        return xr.Dataset(
            {"t_mean": (("init_time", "lead_time", "x"), data)},
            coords={
                "init_time": init,
                "lead_time": leads,
                "x": [0.0, 1.0, 2.0],
                "valid_time": (("init_time", "lead_time"), init[:, None] + leads[None, :]),
            },
        )

    enc = {"t_mean": {"chunks": (1, 1, 3), "dtype": "float32"}}
    with OutputFolder.open(out, "postprocess") as folder:
        store_id = create_zarr_store(folder, "products.zarr", one(0), inits, enc, {"title": "t"}, "test")
        folder.reserve(["products.zarr"], kind="dir")  # workers fill it in place
        store = folder.final("products.zarr")
        for i in range(3):
            worker(
                folder.staging(["products.zarr"]),
                f"""
        import numpy as np, xarray as xr
        from ensml.data.outputs import write_zarr_region
        ds = xr.Dataset({{"t_mean": (("init_time", "lead_time", "x"), np.full((1, 2, 3), {i}.0, "f4"))}})
        write_zarr_region({str(store)!r}, ds, {i})
        """,
            )
        folder.record(["products.zarr"])
    back = xr.open_zarr(out / "products.zarr")
    assert back.attrs["ensml_store_id"] == store_id and back.attrs["Conventions"] == "CF-1.8"
    assert back["t_mean"].values[:, 0, 0].tolist() == [0.0, 1.0, 2.0]
    assert (back["valid_time"].values[:, 1] == inits + np.timedelta64(24, "h")).all()
    assert write_zarr_region  # the same function the workers ran


def test_a_netcdf_file_grown_init_by_init_under_staging(tmp_path: Path) -> None:
    inits = np.array(["2020-01-01T00", "2020-01-01T12"], dtype="datetime64[ns]")

    def one(i: int) -> xr.Dataset:
        init = inits[i : i + 1]
        return xr.Dataset(
            {"t_mean": (("init_time", "x"), np.full((1, 2), float(i), "f4"))},
            coords={
                "init_time": init,
                "x": [0.0, 1.0],
                "valid_time": (("init_time",), init + np.timedelta64(6, "h")),
            },
        )

    enc = {
        "init_time": {"units": "minutes since 1970-01-01 00:00:00", "dtype": "int64"},
        "valid_time": {"units": "minutes since 1970-01-01 00:00:00", "dtype": "int64"},
    }
    with OutputFolder.open(tmp_path / "out", "postprocess") as folder:
        folder.reserve(["a.nc"])
        staging = folder.staging(["a.nc"])
        with staging.write("a.nc") as tmp:
            for i in range(2):
                append_netcdf_init(tmp, one(i), i, {"title": "t"}, "test", enc)
            assert not (tmp_path / "out" / "a.nc").exists()
        folder.record(["a.nc"])
    back = xr.open_dataset(tmp_path / "out" / "a.nc")
    assert back["init_time"].values.tolist() == inits.tolist()
    assert back["valid_time"].values.tolist() == (inits + np.timedelta64(6, "h")).tolist()
    assert back["t_mean"].values.tolist() == [[0.0, 0.0], [1.0, 1.0]]
    assert back.attrs["title"] == "t" and "ensml" in back.attrs["history"]


@pytest.mark.slow
def test_a_held_output_is_in_place_only_once_the_run_places_it(tmp_path: Path) -> None:
    """Staging.hold + OutputFolder.place: a worker's output waits in the staging folder; one the
    run never places (it was stopped) goes with the run, and nothing is left beside the records."""
    out = tmp_path / "out"
    (tmp_path / "mine.nc").write_bytes(b"the user's")  # beside the folder: never touched
    with OutputFolder.open(out, "postprocess") as folder:
        folder.reserve(["2020/a.nc", "b.nc"])
        staging = folder.staging(["2020/a.nc", "b.nc"])
        worker(
            staging,
            "for n in ('2020/a.nc', 'b.nc'):\n"
            "            with staging.hold(n) as tmp:\n"
            "                tmp.write_bytes(n.encode())",
        )
        assert not (out / "b.nc").exists() and staging.ready("b.nc").read_bytes() == b"b.nc"
        folder.place(["b.nc"])
        assert (out / "b.nc").read_bytes() == b"b.nc" and not staging.ready("b.nc").exists()
        assert folder.ledger.entries["b.nc"].state == "done"
        with pytest.raises(EnsmlError) as info:
            folder.place(["b.nc"])  # recorded: no longer reserved
        assert "b.nc was not reserved by this run" in str(info.value)
    # 2020/a.nc was held but never placed: the run is over, its file went with the staging folder
    assert not (out / "2020" / "a.nc").exists()
    assert sorted(p.name for p in out.iterdir()) == [".ensml", "2020", "b.nc"]
    assert (tmp_path / "mine.nc").read_bytes() == b"the user's"
    with OutputFolder.open(out, "postprocess") as folder:
        folder.reserve(["c.nc"])
        with pytest.raises(EnsmlError) as info:
            folder.place(["c.nc"])  # reserved, but no worker held it
        assert str(info.value) == f"postprocess: out_dir {out}: c.nc was reserved but not written"
