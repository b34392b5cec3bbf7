"""On a dask cluster: local workers, batch job scripts, paths, the dashboard port, options, and runs
killed with SIGKILL or stopped with Ctrl-C mid-way."""

from __future__ import annotations

import os
import shutil
import signal
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import psutil
import pytest
import xarray as xr

from ensml.cli.main import main
from ensml.cluster.connection import job_script
from ensml.cluster.options import JobQueue
from ensml.cluster.spec import ClusterSpec
from ensml.postprocess.manifest import MANIFEST
from tests.cluster.runs import archive_year, finish, last_line, start, wait_for_records, wait_session_gone
from tests.postprocess.conftest import pp_args

pytestmark = [pytest.mark.distributed, pytest.mark.timeout(300, func_only=True)]  # fixtures fit models first


@pytest.fixture(scope="module")
def year_archive(tiny_data, tmp_path_factory) -> Path:
    return archive_year(tiny_data, tmp_path_factory)


@pytest.fixture(scope="module")
def ckpt(fitted: Path) -> Path:
    """The mixed 48 h smoke checkpoint (``checkpoints["mixed48"]`` without fitting the other five)."""
    return fitted / "runs/smoke/checkpoints/best.ckpt"


@pytest.fixture(scope="module")
def reference(ckpt, year_archive: Path, tiny_data, tmp_path_factory) -> Path:
    """The products of an uninterrupted run, in this process."""
    out = tmp_path_factory.mktemp("reference")
    assert main(pp_args([ckpt], year_archive / "*.nc", out, analysis=tiny_data["analysis"])) == 0
    return out


def test_local_cluster_loads_the_model_once_per_worker(ckpt, archive_dir, tiny_data, tmp_path) -> None:
    args = pp_args([ckpt], archive_dir / "*.nc", tmp_path, analysis=tiny_data["analysis"])
    assert main([*args, "--cluster=local", "--workers=2", "--threads_per_worker=1"]) == 0
    records = pd.read_json(tmp_path / MANIFEST, lines=True)
    assert len(records) == len(list(archive_dir.glob("*.nc"))) and (records["status"] == "done").all()
    assert records["worker"].nunique() == 2 and not records["worker"].str.endswith(f":{os.getpid()}").any()
    assert (records["worker_loads"] == 1).all()  # each worker built the networks once, for all its files
    assert (records["torch_threads"] == 1).all()
    assert main([*args, "--cluster=local", "--workers=1", "--threads_per_worker=2", "--force=true"]) == 0
    assert (pd.read_json(tmp_path / MANIFEST, lines=True)["torch_threads"] == 2).all()


def test_joins_a_running_cluster_by_address_and_by_scheduler_file(ckpt, archive_dir, tiny_data, tmp_path):
    from distributed import LocalCluster

    sched_file = tmp_path / "scheduler.json"
    with LocalCluster(
        n_workers=1,
        threads_per_worker=1,
        processes=True,
        dashboard_address=None,
        scheduler_kwargs={"scheduler_file": str(sched_file)},
    ) as cluster:
        args = pp_args([ckpt], archive_dir / "*.nc", tmp_path / "a", analysis=tiny_data["analysis"])
        assert main([*args, "--cluster=local", f"--scheduler_address={cluster.scheduler_address}"]) == 0
        args = pp_args([ckpt], archive_dir / "*.nc", tmp_path / "b", analysis=tiny_data["analysis"])
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
        queue="compute",
        account="ens42",
        cores=16,
        memory="64GB",
        processes=4,
        jobs=3,
        walltime="02:30:00",
        job_extra_directives=extra,
        job_script_prologue=["module load cuda"],
    )
    spec = ClusterSpec(kind=kind, jobqueue=jq)
    assert spec.torch_threads == 4
    script = job_script(spec)
    lines = script.splitlines()
    if kind == "slurm":
        for expected in (
            "#SBATCH -p compute",
            "#SBATCH -A ens42",
            "#SBATCH --cpus-per-task=16",
            "#SBATCH -t 02:30:00",
            "#SBATCH --gres=gpu:1",
        ):
            assert expected in lines, expected
        assert any(line.startswith("#SBATCH --mem=") for line in lines)
    else:  # one select line: PBS Pro refuses ngpus beside it (tests/cluster/test_pbs.py)
        for expected in (
            "#PBS -q compute",
            "#PBS -A ens42",
            "#PBS -l select=1:ncpus=16:mem=64GB:ngpus=1",
            "#PBS -l walltime=02:30:00",
        ):
            assert expected in lines, expected
    assert "module load cuda" in lines
    # the workers get ensml's quiet event-loop settings through dask's environment variables
    assert "export DASK_DISTRIBUTED__ADMIN__TICK__INTERVAL=1s" in lines
    assert "export DASK_DISTRIBUTED__WORKER__PROFILE__ENABLED=False" in lines
    worker = next(line for line in lines if "distributed.cli.dask_worker" in line)
    # 4 workers per job, one unit at a time each (one dask thread); torch gets 16/4 threads
    assert "--nworkers 4" in worker and "--nthreads 1" in worker and sys.executable in worker


def test_dry_run_prints_the_plan_and_the_job_script(ckpt, archive_dir, tiny_data, tmp_path, capsys) -> None:
    args = pp_args([ckpt], archive_dir / "*.nc", tmp_path / "out", analysis=tiny_data["analysis"])
    assert main([*args, "--cluster=slurm", "--jobqueue.queue=short", "--dry_run=true"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    n = len(list(archive_dir.glob("*.nc")))
    assert f"{n} units from {n} files, {n} to do, 0 up to date" in out and "#SBATCH -p short" in out
    assert not (tmp_path / "out").exists()


# -- killed runs ---------------------------------------------------------------------------------
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


def test_client_killed_then_rerun(ckpt, year_archive, tiny_data, reference, tmp_path) -> None:
    out = tmp_path / "out"
    args = pp_args([ckpt], year_archive / "*.nc", out, analysis=tiny_data["analysis"])
    args = [*args, "--cluster=local", "--workers=2"]
    proc = start(args, tmp_path)
    wait_for_records(out / MANIFEST, 5, proc)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    wait_session_gone(proc.pid)
    done = len(list(out.glob("*.nc")))
    assert 5 <= done < len(list(year_archive.glob("*.nc")))  # killed half-way
    rerun = start(args, tmp_path)
    _, stderr = rerun.communicate(timeout=300)
    assert rerun.returncode == 0, stderr
    _assert_exactly_once(out, year_archive, reference)


def test_worker_killed_mid_run(ckpt, year_archive, tiny_data, reference, tmp_path) -> None:
    out = tmp_path / "out"
    args = pp_args([ckpt], year_archive / "*.nc", out, analysis=tiny_data["analysis"])
    proc = start([*args, "--cluster=local", "--workers=2"], tmp_path)
    wait_for_records(out / MANIFEST, 5, proc)
    workers = [c for c in psutil.Process(proc.pid).children() if "spawn_main" in " ".join(c.cmdline())]
    assert len(workers) == 2
    workers[0].send_signal(signal.SIGKILL)
    _, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 0, stderr  # distributed reran the lost unit on a live worker
    _assert_exactly_once(out, year_archive, reference)


def test_two_runs_at_once_on_one_folder(ckpt, year_archive, tiny_data, reference, tmp_path) -> None:
    out = tmp_path / "out"
    args = pp_args([ckpt], year_archive / "*.nc", out, analysis=tiny_data["analysis"])
    procs = [start(args, tmp_path) for _ in range(2)]
    results = [p.communicate(timeout=300) for p in procs]
    codes = sorted(p.returncode for p in procs)
    assert codes == [0, 1], results
    refused = next(err for p, (_, err) in zip(procs, results) if p.returncode == 1)
    in_use = f"ensml: postprocess: out_dir {out} is in use by ensml postprocess"
    assert refused.strip().splitlines()[-1].startswith(in_use)
    _assert_exactly_once(out, year_archive, reference)


@pytest.mark.parametrize("cluster", ["none", "local"])
def test_ctrl_c_stops_the_run_in_one_line(cluster, ckpt, year_archive, tiny_data, tmp_path) -> None:
    out = tmp_path / "out"
    args = pp_args([ckpt], year_archive / "*.nc", out, analysis=tiny_data["analysis"])
    proc = start([*args, f"--cluster={cluster}", "--workers=2"], tmp_path)
    wait_for_records(out / MANIFEST, 3, proc)
    os.killpg(proc.pid, signal.SIGINT)  # as a terminal's Ctrl-C: the whole process group, workers too
    code, stdout, stderr = finish(proc)
    assert code == 130, stderr
    line = last_line(stdout, stderr)
    assert line.startswith("ensml: interrupted (Ctrl-C) after ") and line.endswith(
        " of 122 units; run the same command again to finish"
    ), line
    wait_session_gone(proc.pid)
    # A worker that finished its unit after the Ctrl-C left its output in the run's staging
    # folder, which went with the run: every output in place has its record.
    records = pd.read_json(out / MANIFEST, lines=True)
    assert (records["status"] == "done").all() and len(records) == len(list(out.glob("*.nc")))
    assert not [p for p in out.rglob("*") if p.name.endswith(".tmp")]
    staging = out / ".ensml" / "staging"
    assert not staging.exists() or not any(staging.iterdir())


def test_paths_sent_to_workers_are_absolute(ckpt, archive_dir, tiny_data, tmp_path, monkeypatch) -> None:
    """Workers of a joined cluster run in another folder than the command: no relative path for them."""
    from distributed import LocalCluster

    work = tmp_path / "work"
    (work / "models").mkdir(parents=True)
    shutil.copy2(ckpt, work / "models/best.ckpt")
    sched_file = tmp_path / "scheduler.json"
    with LocalCluster(
        n_workers=1,
        threads_per_worker=1,
        processes=True,
        dashboard_address=":0",
        scheduler_kwargs={"scheduler_file": str(sched_file)},
    ):
        monkeypatch.chdir(work)  # the workers stay where they started
        args = pp_args(
            [Path("models/best.ckpt")], archive_dir / "*.nc", Path("out"), analysis=tiny_data["analysis"]
        )
        assert main([*args, "--cluster=local", f"--scheduler_file={sched_file}"]) == 0
    records = pd.read_json(work / "out" / MANIFEST, lines=True)
    assert (records["status"] == "done").all() and not records["worker"].str.endswith(f":{os.getpid()}").any()


def test_for_workers_makes_every_input_path_absolute(ckpt, tiny_data, monkeypatch, tmp_path) -> None:
    from ensml.postprocess.execute import for_workers
    from ensml.postprocess.models import ModelSet
    from ensml.postprocess.options import Products
    from ensml.postprocess.worker import Job, Unit

    monkeypatch.chdir(ckpt.parent)
    models = ModelSet.from_paths([ckpt.name])
    job = Job(models, Products(), (), ("analysis.nc",), "netcdf", "cpu", {}, "")
    job, units = for_workers(job, [Unit("k", "in/a.nc", "a.nc")])
    here = ckpt.parent
    assert job.models.checkpoints[0].path == str(here / ckpt.name)
    assert job.analysis == (str(here / "analysis.nc"),) and job.models.identity == models.identity
    # the output is a name in the output folder, written through the unit's (absolute) staging
    assert units == [Unit("k", str(here / "in/a.nc"), "a.nc")]


def test_a_busy_dashboard_port_prints_no_warning(capfd) -> None:
    """No cluster or scheduler ensml makes binds 8787 (a second user's run would print a warning)."""
    import socket
    import warnings

    from distributed.diagnostics.plugin import WorkerPlugin

    from ensml.cluster.connection import Connection, jobqueue_cluster

    class Nothing(WorkerPlugin):
        name = "nothing"

    with socket.socket() as busy, warnings.catch_warnings():
        warnings.simplefilter("error")  # distributed's "Port 8787 is already in use" is a UserWarning
        busy.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            busy.bind(("", 8787))
            busy.listen()
        except OSError:
            pass  # busy already
        with Connection(ClusterSpec(kind="local", workers=1), Nothing()) as conn:
            assert conn.client.submit(sum, [1, 2]).result() == 3
        jobqueue_cluster(ClusterSpec(kind="slurm", jobqueue=JobQueue(cores=1, memory="1GB"))).close()
    assert "8787" not in capfd.readouterr().err


@pytest.mark.parametrize(
    ("jobqueue", "message"),
    [
        (
            {"pending_timeout": "soon"},
            "jobqueue.pending_timeout: 'soon' is not a duration (seconds, or e.g. 90s",
        ),
        ({"no_worker_timeout": 0}, "jobqueue.no_worker_timeout must be a positive duration, got 0"),
        ({"memory": "lots"}, "jobqueue.memory: 'lots' is not an amount of memory (e.g. 16GB)"),
        ({"walltime": "2 hours"}, "jobqueue.walltime: '2 hours' is not a duration such as 01:30:00"),
        ({"jobs": 0}, "jobqueue.jobs must be at least 1, got 0"),
        ({"job_extra_directives": ["-l select=2:ngpus=1"]}, "a job runs one node's workers (select=1)"),
    ],
)
def test_bad_jobqueue_options(jobqueue: dict, message: str) -> None:
    from ensml.errors import EnsmlError

    kind = "pbs" if "job_extra_directives" in jobqueue else "slurm"
    with pytest.raises(EnsmlError) as err:
        ClusterSpec(kind=kind, jobqueue=JobQueue(**jobqueue)).check(submit=False)
    assert message in str(err.value)


def test_durations_in_seconds_or_words() -> None:
    spec = ClusterSpec(kind="slurm", jobqueue=JobQueue(pending_timeout="10m", no_worker_timeout=90))
    assert (spec.pending_timeout_s, spec.no_worker_timeout_s) == (600.0, 90.0)


def test_no_sbatch_is_one_line_before_anything_is_written(
    ckpt, archive_dir, tiny_data, tmp_path, monkeypatch, capsys
) -> None:
    monkeypatch.setenv("PATH", str(Path(sys.executable).parent))  # python, but no batch clients
    out = tmp_path / "out"
    args = pp_args([ckpt], archive_dir / "*.nc", out, analysis=tiny_data["analysis"])
    assert main([*args, "--cluster=slurm", "--jobqueue.cores=1"]) == 1
    assert capsys.readouterr().err.strip() == (
        "ensml: cluster: slurm submits jobs with sbatch, which is not on PATH here: run on a SLURM login "
        "node, or use cluster: local"
    )
    assert not out.exists()
