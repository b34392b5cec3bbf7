"""PBS (Debian bookworm packages no PBS server): the job script against PBS Pro's ``select``
syntax, and runs against fake ``qsub``/``qstat``/``qdel`` that print what PBS Pro prints.
Also the batch clients' output parsers and the submission-error path of dask-jobqueue itself."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from ensml.cli.main import main
from ensml.cluster.batch import JobState, parse_qstat, parse_squeue, pbs_resources, supervised_job_cls
from ensml.cluster.connection import job_script
from ensml.cluster.options import JobQueue
from ensml.cluster.spec import ClusterSpec
from ensml.errors import EnsmlError
from tests.postprocess.conftest import pp_args

pytestmark = pytest.mark.timeout(120)

# PBS Pro: one "-l select=" with chunks "[N:]resource=value[:resource=value…]" joined by "+".
SELECT = re.compile(r"#PBS -l select=\d+(:[A-Za-z_]\w*=[^:\s+,]+)+")


def _script(**jobqueue) -> list[str]:
    return job_script(
        ClusterSpec(kind="pbs", jobqueue=JobQueue(cores=16, memory="64GB", **jobqueue))
    ).splitlines()


@pytest.mark.parametrize(
    ("extra", "select", "other"),
    [
        ([], "select=1:ncpus=16:mem=64GB", []),
        (["-l select=1:ngpus=1"], "select=1:ncpus=16:mem=64GB:ngpus=1", []),
        (["-l ngpus=2"], "select=1:ncpus=16:mem=64GB:ngpus=2", []),
        (
            ["-lselect=ngpus=1:ncpus=16,place=excl", "-j oe"],
            "select=1:ncpus=16:mem=64GB:ngpus=1",
            ["#PBS -l place=excl", "#PBS -j oe"],
        ),
    ],
)
def test_one_select_line(extra: list[str], select: str, other: list[str]) -> None:
    lines = _script(job_extra_directives=extra)
    selects = [line for line in lines if "select=" in line]
    assert selects == [f"#PBS -l {select}"] and SELECT.fullmatch(selects[0])
    assert all(line in lines for line in other)
    assert not [line for line in lines if re.match(r"#PBS -l (ncpus|mem|ngpus)=", line)]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["-l select=2:ncpus=16"], "a job runs one node's workers (select=1)"),
        (["-l select=1:ngpus=1+1:ncpus=4"], "one select chunk per job"),
        (["-l select=1:ncpus=8"], "asks for ncpus=8, jobqueue.cores for 16: set jobqueue.cores instead"),
        (["-l select=1:ngpus"], "'ngpus' is not resource=value"),
    ],
)
def test_select_directives_that_cannot_be_merged(extra: list[str], message: str) -> None:
    with pytest.raises(EnsmlError, match=re.escape(message)):
        pbs_resources(16, "64GB", extra)


def test_parsers_of_squeue_and_qstat() -> None:
    assert parse_squeue("12 PENDING Resources\n13 RUNNING None\n14 PENDING (QOSMaxJobsPerUserLimit)\n") == {
        "12": JobState("12", "PENDING", "Resources"),
        "13": JobState("13", "RUNNING"),
        "14": JobState("14", "PENDING", "(QOSMaxJobsPerUserLimit)"),
    }
    text = QSTAT_QUEUED + "\nJob Id: 4243.pbs-server\n    job_state = R\n    Job_Name = ensml-x\n"
    assert parse_qstat(text) == {
        "4242": JobState("4242", "Q", "Not Running: Insufficient amount of resource: ncpus (R: 4 A: 2 T: 2)"),
        "4243": JobState("4243", "R"),
    }


# -- fake PBS clients --------------------------------------------------------------------------------
# qstat wraps long values at a fixed width, the rest on a line that starts with a tab.
QSTAT_QUEUED = """Job Id: 4242.pbs-server
    Job_Name = ensml-abcd1234
    job_state = Q
    queue = workq
    comment = Not Running: Insufficient amount of resource: ncpus (R: 4 A: 2{space}
\tT: 2)
    Resource_List.select = 1:ncpus=4:mem=1GB""".format(space=" ")

FAKES = {
    "qsub": """if [ -n "$FAKE_QSUB_ERROR" ]; then echo "$FAKE_QSUB_ERROR" >&2; exit 1; fi
echo Q > "$FAKE_PBS/state"; echo 4242.pbs-server""",
    "qstat": f"""if [ "$(cat "$FAKE_PBS/state" 2>/dev/null)" = Q ]; then cat <<'EOT'
{QSTAT_QUEUED}
EOT
else echo "qstat: 4242.pbs-server Job has finished, use -x or -H to obtain historical job information" >&2
exit 35; fi""",
    "qdel": """echo "$@" >> "$FAKE_PBS/qdel.log"; echo F > "$FAKE_PBS/state\"""",
    "qselect": """if [ "$(cat "$FAKE_PBS/state" 2>/dev/null)" = Q ]; then echo 4242.pbs-server; fi""",
}


@pytest.fixture
def fake_pbs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, body in FAKES.items():
        (bin_dir / name).write_text(f"#!/bin/sh\n{body}\n")
        (bin_dir / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{__import__('os').environ['PATH']}")
    monkeypatch.setenv("FAKE_PBS", str(tmp_path))
    return tmp_path


def _pbs_args(fitted: Path, archive_dir: Path, tiny_data: dict, out: Path, *extra: str) -> list[str]:
    ckpt = fitted / "runs/smoke/checkpoints/best.ckpt"
    job = ["--cluster=pbs", "--jobqueue.cores=4", "--jobqueue.processes=1", "--jobqueue.memory=1GB"]
    return pp_args([ckpt], archive_dir / "*.nc", out, *job, *extra, analysis=tiny_data["analysis"])


@pytest.mark.slow
def test_a_queued_pbs_job_is_cancelled_with_qstat_comment(
    fake_pbs: Path, fitted, archive_dir, tiny_data, tmp_path, capsys
) -> None:
    args = _pbs_args(fitted, archive_dir, tiny_data, tmp_path / "out", "--jobqueue.pending_timeout=2")
    assert main(args) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == (
        "ensml: PBS job 4242 Q (Not Running: Insufficient amount of resource: ncpus (R: 4 A: 2 T: 2)) "
        "did not start within 2 s (jobqueue.pending_timeout; reason from qstat); cancelled; no unit was done"
    )
    assert all(line.startswith("postprocess: ") for line in err[:-1]), err
    assert (fake_pbs / "qdel.log").read_text().split() == ["4242"]


def test_a_rejected_pbs_job_is_qsubs_message(
    fake_pbs, fitted, archive_dir, tiny_data, tmp_path, capsys, monkeypatch
):
    monkeypatch.setenv("FAKE_QSUB_ERROR", "qsub: Unknown resource Resource_List.ngpus")
    args = _pbs_args(
        fitted, archive_dir, tiny_data, tmp_path / "out", "--jobqueue.job_extra_directives=[-l ngpus=1]"
    )
    assert main(args) == 1
    err = capsys.readouterr().err.strip()
    assert err == "ensml: qsub refused the job script: qsub: Unknown resource Resource_List.ngpus", err
    assert not (fake_pbs / "qdel.log").exists()  # nothing was submitted


def test_dask_jobqueue_still_fails_a_submission_the_way_we_read_it(fake_pbs, monkeypatch) -> None:
    """dask-jobqueue's submission error (its private ``Job._call`` message) as seen by our job class."""
    from ensml.cluster.interrupt import import_jobqueue

    dask_jobqueue = import_jobqueue()  # without its process-wide SIGINT handler

    monkeypatch.setenv("FAKE_QSUB_ERROR", "qsub: Bad UID for job execution")
    with dask_jobqueue.PBSCluster(
        cores=1,
        memory="1GB",
        job_cls=supervised_job_cls(dask_jobqueue.pbs.PBSJob),
        scheduler_options={"dashboard_address": ":0"},
    ) as cluster:
        cluster.scale(jobs=1)
        end = time.monotonic() + 30
        while not any(getattr(j, "submit_error", None) for j in cluster.workers.values()):
            assert time.monotonic() < end, "no submission error seen"
            time.sleep(0.05)
        (job,) = cluster.workers.values()
        assert job.submit_error == "qsub: Bad UID for job execution" and job.job_id is None


@pytest.mark.parametrize("kind", ["slurm", "pbs"])
def test_job_logs_go_to_the_out_dir_and_rendering_creates_no_folder(kind: str, tmp_path: Path) -> None:
    logs = tmp_path / "out" / ".ensml" / "logs"
    lines = job_script(ClusterSpec(kind=kind, log_dir=str(logs))).splitlines()
    if kind == "slurm":
        assert f"#SBATCH -o {logs}/" in "\n".join(lines) and f"#SBATCH -e {logs}/" in "\n".join(lines)
    else:
        assert f"#PBS -o {logs}/" in lines and f"#PBS -e {logs}/" in lines
    assert not (tmp_path / "out").exists()  # dask-jobqueue made it to render the script: removed
    mine = tmp_path / "mine"
    lines = job_script(ClusterSpec(kind=kind, log_dir=str(logs), jobqueue=JobQueue(log_directory=str(mine))))
    assert str(mine) in lines and str(logs) not in lines
