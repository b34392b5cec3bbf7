"""A full disk, a quota, a read-only mount, a size limit: one line naming the final path, nothing left."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import numpy as np
import pytest
import xarray as xr

from ensml.data.outputs import OutputFolder
from ensml.errors import EnsmlError
from tests.data.outputs_sandbox import make_sandbox, run_python, skip_unless_mounts, snapshot

pytestmark = pytest.mark.timeout(180)

# Written before the disk fills up, and read back after: the previous outputs.
PREVIOUS = """
from pathlib import Path
import numpy as np, xarray as xr
from ensml.data.outputs import OutputFolder
from ensml.errors import EnsmlError

def big(n_bytes):
    return xr.Dataset({"z": ("x", np.random.default_rng(0).random(n_bytes // 8))})

def previous(out):
    with OutputFolder.open(out, "evaluate") as folder:
        folder.write_bytes("big.bin", b"previous")
        folder.write_text("config.yaml", "model: previous\\n")
        folder.write_netcdf(big(800), "scores.nc")

def attempt(out, writes):
    try:
        with OutputFolder.open(out, "evaluate") as folder:
            for write in writes:
                try:
                    write(folder)
                    print("written?!")
                except EnsmlError as exc:
                    print(exc)
    except EnsmlError as exc:
        print(exc)

WRITES = [
    lambda f: f.write_bytes("big.bin", b"x" * (4 << 20)),
    lambda f: f.write_netcdf(big(4 << 20), "scores.nc", encoding={"z": {"zlib": False}}),
    lambda f: f.write_zarr(big(4 << 20), "store.zarr", encoding={"z": {"chunksizes": (1 << 19,)}}),
]
"""


def after_failure(out: Path, before: dict[str, str], messages: list[str], reason: str) -> None:
    """One line per write naming the final path; previous outputs whole; no temporary left."""
    assert messages == [
        f"evaluate: cannot write {out}/big.bin: {reason}",
        f"evaluate: cannot write {out}/scores.nc: {reason}",
        f"evaluate: cannot write {out}/store.zarr: {reason}",
    ]
    assert snapshot(out, skip=(out / ".ensml",)) == before
    assert not (out / "store.zarr").exists()
    assert [p.name for p in (out / ".ensml" / "staging").rglob("*")] == []  # runs over: staging empty
    assert not [p for p in out.rglob("*") if p.is_file() and p.stat().st_size == 0 and p.name != "lock"]


@pytest.mark.slow
def test_file_size_limit(tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = run_python(
        PREVIOUS
        + f"""
import resource, signal
previous({str(out)!r})
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # so that write() returns EFBIG
resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, 1 << 20))
attempt({str(out)!r}, WRITES)
"""
    )
    assert result.returncode == 0, result.stderr
    before = None
    with OutputFolder.open(out, "evaluate") as folder:
        assert folder.final("big.bin").read_bytes() == b"previous"
        before = snapshot(out, skip=(out / ".ensml",))
        xr.open_dataset(folder.final("scores.nc")).load()  # whole
    after_failure(out, before, result.stdout.splitlines(), "file too large")


@pytest.mark.slow
def test_a_full_disk(tmp_path: Path) -> None:
    skip_unless_mounts()
    disk = tmp_path / "disk"
    disk.mkdir()
    result = run_python(
        PREVIOUS
        + f"""
import json, os, subprocess, sys
from tests.data.outputs_sandbox import fill_disk, make_sandbox, snapshot
disk = Path({str(disk)!r})
if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(disk)]).returncode:
    sys.exit(77)
make_sandbox(disk / "home", disk / "elsewhere")
out = disk / "home" / "out"
previous(out)
before, user = snapshot(out), snapshot(disk, skip=(out,))
attempt(out, WRITES)
# then a disk without a byte left: where the issue found a 0-byte config.yaml
fill_disk(disk / "home" / "filler")
attempt(out, [lambda f: f.write_text("config.yaml", "model: new\\n")])
os.remove(disk / "home" / "filler")
empty = [str(p) for p in out.rglob("*") if p.is_file() and p.stat().st_size == 0 and p.name != "lock"]
after = [snapshot(out), snapshot(disk, skip=(out,)), (out / "config.yaml").read_text(), empty]
print(json.dumps([before, user, *after]))
""",
        namespace=True,
    )
    if result.returncode == 77:
        pytest.skip("cannot mount a size-limited tmpfs here")
    assert result.returncode == 0, result.stderr
    *messages, data = result.stdout.splitlines()
    before, user, after, user_after, config, empty = json.loads(data)
    out = f"{disk}/home/out"
    reason = "no space left on device"
    assert messages == [
        f"evaluate: cannot write {out}/big.bin: {reason}",
        f"evaluate: cannot write {out}/scores.nc: {reason}",
        f"evaluate: cannot write {out}/store.zarr: {reason}",
        f"evaluate: cannot write {out}/config.yaml: {reason}",
    ]
    ours = {k: v for k, v in after.items() if "/.ensml" not in k}
    assert ours == {k: v for k, v in before.items() if "/.ensml" not in k}
    assert user_after == user and config == "model: previous\n" and empty == []
    assert not [k for k in after if "/.ensml/staging/" in k]


@pytest.mark.slow
def test_a_file_system_that_turns_read_only(tmp_path: Path) -> None:
    skip_unless_mounts()
    out = tmp_path / "ro" / "out"
    make_sandbox(tmp_path / "ro", tmp_path / "elsewhere")
    result = run_python(
        f"""
        import subprocess, sys
        from ensml.data.outputs import OutputFolder
        from ensml.errors import EnsmlError
        d = {str(tmp_path / "ro")!r}
        with OutputFolder.open(d + "/out", "report") as folder:
            folder.write_text("report.md", "previous")
        with OutputFolder.open(d + "/out", "report") as folder:
            for args in (["--bind", d, d], ["-o", "remount,ro,bind", d]):
                if subprocess.run(["mount", *args]).returncode:
                    sys.exit(77)
            for name in ("report.md", "figures/a.png"):
                try:
                    folder.write_text(name, "new")
                except EnsmlError as exc:
                    print(exc)
        """,
        namespace=True,
    )
    if result.returncode == 77:
        pytest.skip("no read-only bind mount here")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        f"report: cannot write {out}/report.md: read-only file system",
        f"report: cannot write {out}/figures/a.png: read-only file system",
    ]
    assert (out / "report.md").read_text() == "previous" and not (out / "figures").exists()


@pytest.mark.parametrize(
    ("code", "reason"),
    [
        (errno.ENOSPC, "no space left on device"),
        (errno.EDQUOT, "disk quota exceeded"),
        (errno.EROFS, "read-only file system"),
        (errno.EFBIG, "file too large"),
        (errno.EACCES, "permission denied"),
        (errno.EPERM, "permission denied"),
        (errno.EIO, "input/output error"),
    ],
)
@pytest.mark.parametrize("whole", [False, True])
def test_every_os_error_is_one_line(tmp_path: Path, code: int, reason: str, whole: bool) -> None:
    with OutputFolder.open(tmp_path / "out", "evaluate") as folder:
        folder.write_text("sub/a.nc", "previous")
    before = snapshot(tmp_path, skip=(tmp_path / "out" / ".ensml",))
    with pytest.raises(EnsmlError) as info:
        with OutputFolder.open(tmp_path / "out", "evaluate", whole=whole) as folder:
            with folder.write("sub/a.nc") as tmp:
                tmp.write_text("half")
                raise OSError(code, os.strerror(code), str(tmp))  # the temporary's name...
    assert str(info.value) == f"evaluate: cannot write {tmp_path}/out/sub/a.nc: {reason}"  # ...is not shown
    assert snapshot(tmp_path, skip=(tmp_path / "out" / ".ensml",)) == before
    assert list((tmp_path / "out" / ".ensml" / "staging").iterdir()) == []


def test_an_interrupted_netcdf_write(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ds = xr.Dataset({"z": ("x", np.arange(4.0))})
    with OutputFolder.open(tmp_path / "out", "evaluate") as folder:
        folder.write_netcdf(ds, "scores.nc")
    home = make_sandbox(tmp_path / "home", tmp_path / "elsewhere")
    before = snapshot(tmp_path, skip=(tmp_path / "out" / ".ensml",))

    def interrupted(self, target, **kwargs):
        Path(target).write_bytes(b"half a file")
        raise KeyboardInterrupt

    monkeypatch.setattr(xr.Dataset, "to_netcdf", interrupted)
    with OutputFolder.open(tmp_path / "out", "evaluate") as folder:
        with pytest.raises(KeyboardInterrupt):
            folder.write_netcdf(ds + 1, "scores.nc")
        assert [p.name for p in folder.run_dir.iterdir()] == ["lock"]
    assert snapshot(tmp_path, skip=(tmp_path / "out" / ".ensml",)) == before
    assert home.exists()


def test_a_bug_is_not_disguised(tmp_path: Path) -> None:
    with OutputFolder.open(tmp_path / "out", "evaluate") as folder:
        with pytest.raises(ZeroDivisionError):
            with folder.write("a.nc") as tmp:
                tmp.write_text("half")
                _ = 1 / 0
        with pytest.raises(EnsmlError, match=r"evaluate: nothing was written for .*/out/b\.nc"):
            with folder.write("b.nc"):
                pass
        assert [p.name for p in folder.run_dir.iterdir()] == ["lock"]
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [".ensml"]


@pytest.mark.slow
def test_a_library_saying_permission_denied_on_a_full_disk_is_told_the_cause(tmp_path: Path) -> None:
    # HDF5 reports a file it cannot create on a full disk as EACCES: the manifest of postprocess
    # recorded "permission denied" for units that failed for lack of space.
    skip_unless_mounts()
    disk = tmp_path / "disk"
    disk.mkdir()
    result = run_python(
        f"""
import subprocess, sys
from pathlib import Path
from ensml.data.outputs import OutputFolder
from ensml.errors import EnsmlError
from tests.data.outputs_sandbox import fill_disk
disk = Path({str(disk)!r})
if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(disk)]).returncode:
    sys.exit(77)
with OutputFolder.open(disk / "out", "postprocess") as folder:
    fill_disk(disk / "filler")
    for code in (13, 1):
        try:
            with folder.write("fc.nc"):
                raise OSError(code, "Permission denied")
        except EnsmlError as exc:
            print(exc)
""",
        namespace=True,
    )
    if result.returncode == 77:
        pytest.skip("cannot mount a size-limited tmpfs here")
    assert result.returncode == 0, result.stderr
    full = f"postprocess: cannot write {disk}/out/fc.nc: no space left on device"
    assert result.stdout.splitlines() == [full, full]
