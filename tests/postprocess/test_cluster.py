"""On a dask cluster: local workers, batch job scripts, and runs killed with SIGKILL mid-way."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import psutil
import pytest
import xarray as xr

from ensml.cli.main import main
from ensml.postprocess.cluster import ClusterSpec, job_script
from ensml.postprocess.manifest import MANIFEST
from ensml.postprocess.options import JobQueue
from tests.postprocess.conftest import pp_args

pytestmark = pytest.mark.distributed


@pytest.fixture(scope="module")
def year_archive(tiny_data, tmp_path_factory) -> Path:
    """Every init of the tiny year (122 files): a run long enough to be killed half-way."""
    from ensml.data.archive import archive

    out = tmp_path_factory.mktemp("year")
    archive(str(tiny_data["forecast"]), str(out))
    return out


@pytest.fixture(scope="module")
def reference(checkpoints, year_archive: Path, tiny_data, tmp_path_factory) -> Path:
    """The products of an uninterrupted run, in this process."""
    out = tmp_path_factory.mktemp("reference")
    assert (
        main(pp_args([checkpoints["mixed48"]], year_archive / "*.nc", out, analysis=tiny_data["analysis"]))
        == 0
    )
    return out


def test_local_cluster_loads_the_model_once_per_worker(checkpoints, archive_dir, tiny_data, tmp_path) -> None:
    args = pp_args([checkpoints["mixed48"]], archive_dir / "*.nc", tmp_path, analysis=tiny_data["analysis"])
    assert main([*args, "--cluster=local", "--workers=2", "--threads_per_worker=1"]) == 0
    records = pd.read_json(tmp_path / MANIFEST, lines=True)
    assert len(records) == len(list(archive_dir.glob("*.nc"))) and (records["status"] == "done").all()
    assert records["worker"].nunique() == 2 and not records["worker"].str.endswith(f":{os.getpid()}").any()
    assert (records["worker_loads"] == 1).all()  # each worker built the networks once, for all its files
    assert (records["torch_threads"] == 1).all()
    assert main([*args, "--cluster=local", "--workers=1", "--threads_per_worker=2", "--force=true"]) == 0
    assert (pd.read_json(tmp_path / MANIFEST, lines=True)["torch_threads"] == 2).all()


def test_joins_a_running_cluster_by_address_and_by_scheduler_file(
    checkpoints, archive_dir, tiny_data, tmp_path
):
    from distributed import LocalCluster

    sched_file = tmp_path / "scheduler.json"
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None,
                      scheduler_kwargs={"scheduler_file": str(sched_file)}) as cluster:  # fmt: skip
        args = pp_args(
            [checkpoints["mixed48"]], archive_dir / "*.nc", tmp_path / "a", analysis=tiny_data["analysis"]
        )
        assert main([*args, "--cluster=local", f"--scheduler_address={cluster.scheduler_address}"]) == 0
        args = pp_args(
            [checkpoints["mixed48"]], archive_dir / "*.nc", tmp_path / "b", analysis=tiny_data["analysis"]
        )
        assert main([*args, "--cluster=local", f"--scheduler_file={sched_file}"]) == 0
        assert len(cluster.workers) == 1  # the running cluster's worker did the work and is still there
    for out in ("a", "b"):
        records = pd.read_json(tmp_path / out / MANIFEST, lines=True)
        assert (records["status"] == "done").all() and records["worker"].nunique() == 1
        assert not records["worker"].str.endswith(f":{os.getpid()}").any()


@pytest.mark.parametrize("kind", ["slurm", "pbs"])
def test_batch_job_script(kind: str) -> None:
    extra = ["--gres=gpu:1"] if kind == "slurm" else ["-l ngpus=1"]
    jq = JobQueue(
        queue="compute", account="ens42", cores=16, memory="64GB", processes=4, jobs=3, walltime="02:30:00",
        job_extra_directives=extra, job_script_prologue=["module load cuda"],
    )  # fmt: skip
    spec = ClusterSpec(kind=kind, jobqueue=jq)
    assert spec.torch_threads == 4
    script = job_script(spec)
    lines = script.splitlines()
    if kind == "slurm":
        for expected in ("#SBATCH -p compute", "#SBATCH -A ens42", "#SBATCH --cpus-per-task=16",
                         "#SBATCH -t 02:30:00", "#SBATCH --gres=gpu:1"):  # fmt: skip
            assert expected in lines, expected
        assert any(line.startswith("#SBATCH --mem=") for line in lines)
    else:
        for expected in ("#PBS -q compute", "#PBS -A ens42", "#PBS -l select=1:ncpus=16:mem=64GB",
                         "#PBS -l walltime=02:30:00", "#PBS -l ngpus=1"):  # fmt: skip
            assert expected in lines, expected
    assert "module load cuda" in lines
    # the workers get ensml's quiet event-loop settings through dask's environment variables
    assert "export DASK_DISTRIBUTED__ADMIN__TICK__INTERVAL=1s" in lines
    assert "export DASK_DISTRIBUTED__WORKER__PROFILE__ENABLED=False" in lines
    worker = next(line for line in lines if "distributed.cli.dask_worker" in line)
    # 4 workers per job, one unit at a time each (one dask thread); torch gets 16/4 threads
    assert "--nworkers 4" in worker and "--nthreads 1" in worker and sys.executable in worker


def test_dry_run_prints_the_plan_and_the_job_script(
    checkpoints, archive_dir, tiny_data, tmp_path, capsys
) -> None:
    args = pp_args(
        [checkpoints["mixed48"]], archive_dir / "*.nc", tmp_path / "out", analysis=tiny_data["analysis"]
    )
    assert main([*args, "--cluster=slurm", "--jobqueue.queue=short", "--dry_run=true"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    n = len(list(archive_dir.glob("*.nc")))
    assert f"{n} units from {n} files, {n} to do, 0 up to date" in out and "#SBATCH -p short" in out
    assert not (tmp_path / "out").exists()


# -- killed runs ---------------------------------------------------------------------------------
def _start(args: list[str], cwd: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "ensml.cli.main", *args], cwd=cwd, start_new_session=True,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def _wait_for_records(manifest: Path, n: int, proc: subprocess.Popen, timeout: float = 120.0) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if manifest.is_file() and len(manifest.read_text().splitlines()) >= n:
            return
        if proc.poll() is not None:
            pytest.fail(f"the run ended before it could be killed: {proc.communicate()}")
        time.sleep(0.02)
    pytest.fail("no progress to kill")


def _wait_session_gone(pgid: int, timeout: float = 60.0) -> None:
    """Workers orphaned by a killed client stop on their own (they watch their parent)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if not [p for p in psutil.process_iter(["pid"]) if _pgid(p.pid) == pgid]:
            return
        time.sleep(0.2)
    os.killpg(pgid, signal.SIGKILL)
    pytest.fail("workers outlived their killed client by a minute")


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except OSError:
        return None


def _assert_exactly_once(out: Path, inputs: Path, reference: Path) -> None:
    names = sorted(p.name for p in inputs.glob("*.nc"))
    assert sorted(p.name for p in out.glob("*.nc")) == names
    assert not [p for p in out.rglob("*") if p.name.endswith(".tmp")]
    records = pd.read_json(out / MANIFEST, lines=True)
    assert len(records) == len(names) and (records["status"] == "done").all()
    for name in names[::10]:
        with xr.open_dataset(out / name) as got, xr.open_dataset(reference / name) as want:
            for var in ("z_mean", "t_std", "t", "z_quantile"):
                np.testing.assert_array_equal(got[var].values, want[var].values)


def test_client_killed_then_rerun(checkpoints, year_archive, tiny_data, reference, tmp_path) -> None:
    out = tmp_path / "out"
    args = pp_args([checkpoints["mixed48"]], year_archive / "*.nc", out, analysis=tiny_data["analysis"])
    args = [*args, "--cluster=local", "--workers=2"]
    proc = _start(args, tmp_path)
    _wait_for_records(out / MANIFEST, 5, proc)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    _wait_session_gone(proc.pid)
    done = len(list(out.glob("*.nc")))
    assert 5 <= done < len(list(year_archive.glob("*.nc")))  # killed half-way
    rerun = _start(args, tmp_path)
    _, stderr = rerun.communicate(timeout=300)
    assert rerun.returncode == 0, stderr
    _assert_exactly_once(out, year_archive, reference)


def test_worker_killed_mid_run(checkpoints, year_archive, tiny_data, reference, tmp_path) -> None:
    out = tmp_path / "out"
    args = pp_args([checkpoints["mixed48"]], year_archive / "*.nc", out, analysis=tiny_data["analysis"])
    proc = _start([*args, "--cluster=local", "--workers=2"], tmp_path)
    _wait_for_records(out / MANIFEST, 5, proc)
    workers = [c for c in psutil.Process(proc.pid).children() if "spawn_main" in " ".join(c.cmdline())]
    assert len(workers) == 2
    workers[0].send_signal(signal.SIGKILL)
    _, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 0, stderr  # distributed reran the lost unit on a live worker
    _assert_exactly_once(out, year_archive, reference)


def test_two_runs_at_once_on_one_folder(checkpoints, year_archive, tiny_data, reference, tmp_path) -> None:
    out = tmp_path / "out"
    args = pp_args([checkpoints["mixed48"]], year_archive / "*.nc", out, analysis=tiny_data["analysis"])
    procs = [_start(args, tmp_path) for _ in range(2)]
    results = [p.communicate(timeout=300) for p in procs]
    codes = sorted(p.returncode for p in procs)
    assert codes == [0, 1], results
    refused = next(err for p, (_, err) in zip(procs, results) if p.returncode == 1)
    assert (
        refused.strip().splitlines()[-1].startswith(f"ensml: output folder {out} is being written by another")
    )
    _assert_exactly_once(out, year_archive, reference)
