"""Exactly once: reruns skip what is current, redo what changed, clean up, and never share a folder."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pandas as pd
import pytest

from ensml.cli.main import main
from ensml.errors import EnsmlError
from ensml.postprocess import Products, postprocess
from ensml.postprocess.manifest import MANIFEST, output_lock


@pytest.fixture
def inputs(archive_dir: Path, tmp_path: Path) -> Path:
    """Four archive files in a folder of the test's own (so they can be changed)."""
    folder = tmp_path / "in"
    folder.mkdir()
    for p in sorted(archive_dir.glob("*.nc"))[:4]:
        shutil.copy2(p, folder / p.name)
    return folder


@pytest.fixture
def run(checkpoints, tiny_data, inputs: Path, tmp_path: Path):
    def go(**kw) -> dict[str, int]:
        kw.setdefault("checkpoints", [str(checkpoints["mixed48"])])
        return postprocess(forecasts=str(inputs / "*.nc"), analysis=str(tiny_data["analysis"]),
                           out_dir=str(tmp_path / "out"), cluster="none", **kw)  # fmt: skip

    return go


def test_rerun_skips_current_outputs_and_redoes_what_changed(
    run, inputs: Path, tmp_path: Path, checkpoints
) -> None:
    out = tmp_path / "out"
    assert run() == {"done": 4, "up_to_date": 0, "failed": 0}
    assert run() == {"done": 0, "up_to_date": 4, "failed": 0}
    first, second, third, _ = sorted(inputs.glob("*.nc"))
    os.utime(first, ns=(first.stat().st_atime_ns, first.stat().st_mtime_ns + 10**9))  # input changed
    (out / second.name).unlink()  # output missing
    with open(out / third.name, "r+b") as f:  # output cut short
        f.truncate(1000)
    assert run() == {"done": 3, "up_to_date": 1, "failed": 0}
    moved = tmp_path / "moved.ckpt"  # the same checkpoint elsewhere: outputs depend on content only
    shutil.copy2(checkpoints["mixed48"], moved)
    assert run(checkpoints=[str(moved)]) == {"done": 0, "up_to_date": 4, "failed": 0}
    assert run(products=Products(quantiles=[0.5])) == {"done": 4, "up_to_date": 0, "failed": 0}
    assert run(products=Products(quantiles=[0.5]), force=True)["done"] == 4
    other = [str(checkpoints["noanalysis48"])]
    assert run(checkpoints=other, products=Products(quantiles=[0.5]))["done"] == 4
    records = pd.read_json(out / MANIFEST, lines=True)
    assert len(records) == 4 and set(records["status"]) == {"done"}  # compacted: one line per input
    assert {"input_size", "input_mtime_ns", "checkpoints", "options", "output_sha256"} <= set(records.columns)


def test_verify_catches_an_output_changed_in_place(run, inputs: Path, tmp_path: Path) -> None:
    run()
    target = tmp_path / "out" / sorted(inputs.glob("*.nc"))[1].name
    stat = target.stat()
    data = bytearray(target.read_bytes())
    data[-100] ^= 0xFF  # same size, same mtime, different bytes
    target.write_bytes(bytes(data))
    os.utime(target, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert run()["up_to_date"] == 4  # size and mtime cannot see it
    assert run(verify=True) == {"done": 1, "up_to_date": 3, "failed": 0}


def test_interrupted_writes_and_a_cut_manifest_line_are_cleaned_up(run, inputs: Path, tmp_path: Path) -> None:
    run()
    out = tmp_path / "out"
    debris = [out / ".forecast_2017110200.nc.0123456789ab.tmp", out / "sub" / ".x.nc.abcdef012345.tmp"]
    debris[1].parent.mkdir()
    for p in debris:
        p.write_bytes(b"half a file")
    (out / ".products.zarr.aaaaaaaaaaaa.tmp").mkdir()
    (out / ".keep-me").write_text("not ours")
    with open(out / MANIFEST, "a") as f:
        f.write('{"key": "cut sh')  # a kill in the middle of a record
    assert run() == {"done": 0, "up_to_date": 4, "failed": 0}
    assert not any(p.exists() for p in debris) and not (out / ".products.zarr.aaaaaaaaaaaa.tmp").exists()
    assert (out / ".keep-me").exists()
    (out / sorted(inputs.glob("*.nc"))[0].name).unlink()
    with open(out / MANIFEST, "a") as f:
        f.write('{"key": "cut again')
    assert run()["done"] == 1  # appended after the cut line, on a line of its own
    assert pd.read_json(out / MANIFEST, lines=True).shape[0] == 4


def test_a_second_run_on_the_same_folder_is_refused(
    checkpoints, tiny_data, inputs: Path, tmp_path, capsys
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    with output_lock(out):
        args = ["postprocess", f"--checkpoints=[{checkpoints['mixed48']}]", f"--forecasts={inputs}/*.nc",
                f"--analysis={tiny_data['analysis']}", f"--out_dir={out}", "--cluster=none"]  # fmt: skip
        assert main(args) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "being written by another ensml postprocess (pid" in err[0]
    assert sorted(p.name for p in out.iterdir()) == [".postprocess.lock"]
    with output_lock(out):  # released by the first holder: can be taken again
        pass
    with output_lock(out), pytest.raises(EnsmlError, match="another ensml postprocess"), output_lock(out):
        pass
