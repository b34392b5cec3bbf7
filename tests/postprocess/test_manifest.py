"""Exactly once: reruns skip what is current, redo what changed, clean up, and never share a folder."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pandas as pd
import pytest

from ensml.cli.main import main
from ensml.data.outputs import OutputFolder
from ensml.errors import EnsmlError
from ensml.postprocess import Products, postprocess
from ensml.postprocess.manifest import MANIFEST


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
        return postprocess(
            forecasts=str(inputs / "*.nc"),
            analysis=str(tiny_data["analysis"]),
            out_dir=str(tmp_path / "out"),
            cluster="none",
            **kw,
        )

    return go


@pytest.mark.slow
def test_rerun_skips_current_outputs_and_redoes_what_changed(
    run, inputs: Path, tmp_path: Path, checkpoints
) -> None:
    out = tmp_path / "out"
    assert run() == {"done": 4, "up_to_date": 0, "failed": 0}
    assert run() == {"done": 0, "up_to_date": 4, "failed": 0}
    first, second, third, _ = sorted(inputs.glob("*.nc"))
    os.utime(first, ns=(first.stat().st_atime_ns, first.stat().st_mtime_ns + 10**9))  # input changed
    (out / second.name).unlink()  # output missing
    with open(out / third.name, "r+b") as f:  # output cut short by someone: the user's now
        f.truncate(1000)
    with pytest.raises(EnsmlError, match=rf"{third.name} was changed after ensml wrote it; move it away"):
        run()
    (out / third.name).unlink()
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


@pytest.mark.slow
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


def cut_record(out: Path, text: str) -> None:
    """Leave ``out`` as a run killed in the middle of a manifest record does: the manifest
    reserved in the folder's ledger (as every run does before appending), its last line cut."""
    with OutputFolder.open(out, "postprocess") as folder:
        folder.reserve([MANIFEST])
        with open(out / MANIFEST, "a") as f:
            f.write(text)


@pytest.mark.slow
def test_a_killed_runs_temporaries_go_and_the_users_hidden_files_stay(
    run, inputs: Path, tmp_path: Path
) -> None:
    run()
    out = tmp_path / "out"
    # What a killed run left: its staging folder (no live process marks it) ...
    dead = out / ".ensml" / "staging" / "20260101T000000Z-0123abcd"
    (dead / "w-1").mkdir(parents=True)
    (dead / "w-1" / "forecast_2017110200.nc").write_bytes(b"half a file")
    # ... and the user's own hidden files, named like the temporaries of old ensml versions.
    users = [out / ".forecast_2017110200.nc.0123456789ab.tmp", out / "sub" / ".x.nc.abcdef012345.tmp"]
    users[1].parent.mkdir()
    for p in users:
        p.write_bytes(b"the user's")
    (out / ".products.zarr.aaaaaaaaaaaa.tmp").mkdir()
    (out / ".keep-me").write_text("not ours")
    cut_record(out, '{"key": "cut sh')
    assert run() == {"done": 0, "up_to_date": 4, "failed": 0}
    assert not dead.exists()
    assert all(p.read_bytes() == b"the user's" for p in users)
    assert (out / ".products.zarr.aaaaaaaaaaaa.tmp").is_dir() and (out / ".keep-me").exists()
    (out / sorted(inputs.glob("*.nc"))[0].name).unlink()
    cut_record(out, '{"key": "cut again')
    assert run()["done"] == 1  # appended after the cut line, on a line of its own
    assert pd.read_json(out / MANIFEST, lines=True).shape[0] == 4


def test_a_second_run_on_the_same_folder_is_refused(
    checkpoints, tiny_data, inputs: Path, tmp_path, capsys
) -> None:
    out = tmp_path / "out"
    args = [
        "postprocess",
        f"--checkpoints=[{checkpoints['mixed48']}]",
        f"--forecasts={inputs}/*.nc",
        f"--analysis={tiny_data['analysis']}",
        f"--out_dir={out}",
        "--cluster=none",
    ]
    with OutputFolder.open(out, "postprocess"):
        assert main(args) == 1
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith(
            f"ensml: postprocess: out_dir {out} is in use by ensml postprocess (pid"
        )
        with pytest.raises(EnsmlError, match="is in use by ensml postprocess"):
            OutputFolder.open(out, "postprocess")
    assert sorted(p.name for p in out.iterdir()) == [".ensml"]
    with OutputFolder.open(out, "postprocess"):  # released by the first holder: can be taken again
        pass


@pytest.mark.slow
def test_a_full_disk_ends_in_status_2_with_the_done_units_recorded(
    fitted: Path, tiny_data, archive_dir: Path, tmp_path: Path
) -> None:
    from tests.data.outputs_sandbox import run_cli_on_small_disk, skip_unless_mounts
    from tests.postprocess.conftest import pp_args

    skip_unless_mounts()
    ckpt = fitted / "runs/smoke/checkpoints/best.ckpt"
    args = pp_args([ckpt], archive_dir / "*.nc", Path("pp"), analysis=tiny_data["analysis"])
    report = run_cli_on_small_disk(tmp_path / "disk", args, "600k")
    if report is None:
        pytest.skip("cannot mount a size-limited tmpfs here")
    status, err, files = report
    total = len(list(archive_dir.glob("*.nc")))
    assert status == 2 and not any("Traceback" in line for line in err), err[-5:]
    done = sorted(p for p in files if p.startswith("pp/") and p.endswith(".nc"))
    assert 0 < len(done) < total, files
    expected = (
        f"; {len(done)} of {total} units done and recorded; run the same command again for the other "
        f"{total - len(done)}"
    )
    assert err[-1].startswith("ensml: postprocess: cannot write") and err[-1].endswith(expected), err[-1]
    assert "no space left on device" in err[-1] and "permission denied" not in err[-1]
