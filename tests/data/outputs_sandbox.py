"""A user's files around (and inside) an output folder, and a way to prove they are untouched.

Shared by ``tests/data/test_outputs_*.py``. The sandbox holds what the old mechanisms harmed:
hidden ``.name.<hex>.tmp`` folders (swept by pattern), product-like names (``scores.csv``,
``benchmark.md``, ``cases/``), a sibling folder, and a symbolic link pointing outside.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def make_sandbox(folder: Path, outside: Path) -> Path:
    """Fill ``folder`` with a user's files; ``outside`` gets a file the link points to."""
    folder.mkdir(parents=True, exist_ok=True)
    outside.mkdir(parents=True, exist_ok=True)
    (outside / "precious.nc").write_bytes(b"outside data")
    (folder / ".scores.nc.0123456789ab.tmp").mkdir()
    (folder / ".scores.nc.0123456789ab.tmp" / "scores.nc").write_bytes(b"my own temporary")
    (folder / ".name.deadbeefcafe.tmp").write_bytes(b"hidden file")
    (folder / "scores.csv").write_text("lead,crps\n24,1.0\n")
    (folder / "benchmark.md").write_text("# my benchmark notes\n")
    (folder / "cases").mkdir()
    (folder / "cases" / "case_a.png").write_bytes(b"\x89PNG my figure")
    (folder / "sibling").mkdir()
    (folder / "sibling" / "data.txt").write_text("sibling data")
    os.symlink(outside, folder / "outside")
    return folder


def fill_disk(filler: Path) -> None:
    """Write ``filler`` until its file system has no byte left (a size-limited tmpfs in the tests)."""
    with open(filler, "wb", buffering=0) as f:
        try:
            while True:
                f.write(b"x" * 4096)
        except OSError:
            pass


def snapshot(*roots: Path, skip: tuple[Path, ...] = ()) -> dict[str, str]:
    """Every entry under ``roots`` (links not followed): sha256 of files, link targets, folders."""
    out: dict[str, str] = {}
    for root in roots:
        for dirpath, dirnames, filenames in os.walk(root):
            here = Path(dirpath)
            dirnames[:] = [d for d in dirnames if here / d not in skip]
            for name in dirnames + filenames:
                p = here / name
                if p in skip:
                    continue
                key = str(p)
                if p.is_symlink():
                    out[key] = "link:" + os.readlink(p)
                elif p.is_dir():
                    out[key] = "dir"
                else:
                    out[key] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def run_python(code: str, *, namespace: bool = False, timeout: float = 120) -> subprocess.CompletedProcess:
    """Run ``code`` in a new Python process with this worktree importable.

    ``namespace``: in a new mount namespace (``unshare -m``), so the code may mount tmpfs or
    read-only binds that vanish with it. Exit status 77 from the code means "cannot here".
    """
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    cmd = [sys.executable, "-c", textwrap.dedent(code)]
    if namespace:
        cmd = ["unshare", "-m", "--propagation", "private", *cmd]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)


def skip_unless_mounts() -> None:
    """Skip unless this process may make mounts in a private namespace (root, ``unshare``)."""
    if os.geteuid() != 0:
        pytest.skip("mounting tmpfs or a read-only bind needs root")
    probe = run_python(
        """
        import subprocess, sys, tempfile
        d = tempfile.mkdtemp()
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", d])
        sys.exit(0 if r.returncode == 0 else 77)
        """,
        namespace=True,
    )
    if probe.returncode != 0:
        pytest.skip(f"cannot mount in a private namespace here: {probe.stderr.strip()[:200]}")


# What a run on a small disk reports back (the tmpfs vanishes with its mount namespace).
_REPORT = """
import json, os, sys
from pathlib import Path
from ensml.cli.main import main
status = main({args!r})
files = {{str(p): p.stat().st_size for p in Path(".").rglob("*") if p.is_file() and not p.is_symlink()}}
print(json.dumps({{"status": status, "files": files}}))
"""


def run_cli_on_small_disk(
    disk: Path, args: list[str], size: str, before: str = "", timeout: float = 300
) -> tuple[int, list[str], dict[str, int]] | None:
    """Run ``ensml ARGS`` with its working folder on a tmpfs of ``size`` mounted at ``disk``.

    ``before`` is Python run first, in that folder (to prepare it, or to patch the moment the
    disk fills up). Returns the exit status, the lines of stderr and every file left on the disk
    (path relative to it: size in bytes); None where no tmpfs can be mounted here.
    """
    disk.mkdir(parents=True, exist_ok=True)
    code = f"""
import os, subprocess, sys
if subprocess.run(["mount", "-t", "tmpfs", "-o", "size={size}", "tmpfs", {str(disk)!r}]).returncode:
    sys.exit(77)
os.chdir({str(disk)!r})
{before}
""" + _REPORT.format(args=args)
    result = run_python(code, namespace=True, timeout=timeout)
    if result.returncode == 77:
        return None
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    return report["status"], result.stderr.strip().splitlines(), report["files"]
