"""``ensml fit ... --sbatch SCRIPT``: check the fit, submit it as a SLURM job, see it start.

The batch script (``configs/slurm_fit.sh``, edited for the cluster) runs ``srun ensml fit "$@"``;
this submits it with the fit's own options as its arguments, after parsing them here (a bad
option or config ends here in one line, not after the queue wait), and watches the job until
SLURM starts it, so that a job that can never start does not wait unseen:

- sbatch refuses the script: ``fit: sbatch refused the job script …: <sbatch's words>``;
- the job is still pending after ``--sbatch_pending_timeout`` (default 10 min): it is cancelled,
  with squeue's reason: ``fit: SLURM job 12 PENDING (PartitionConfig) did not start within …``;
- it starts: one line names the job, its node and its output file, and ``ensml`` exits 0 (the
  training runs in the job; its own lines are in that file);
- Ctrl-C or SIGTERM while it waits: the job is cancelled (nothing was trained).

While it waits, a line every 30 s says why (squeue's reason).
"""

from __future__ import annotations

import logging
import shutil
import signal
import subprocess
import time
from pathlib import Path

from ensml.cluster.batch import SLURM
from ensml.cluster.spec import duration_s
from ensml.data.datamodule import EnsembleDataModule
from ensml.errors import EnsmlError, Interrupted, interrupted_line
from ensml.progress import EVERY_S, note, seconds
from ensml.train.lightning_cli import VERBS, EnsmlCLI, quiet_lightning
from ensml.train.tasks import EnsembleTask

COMMAND = "fit"
#: The options of the submission (not passed on to the job's ``ensml fit``).
OPTIONS = {"--sbatch": None, "--sbatch_pending_timeout": "10m"}
#: States in which the job has started (or already ended).
STARTED = ("RUNNING", "COMPLETING", "COMPLETED", "SUSPENDED")


#: What ``ensml fit --help`` adds after Lightning's options.
HELP = """
submit as a SLURM job (ensml fit OPTIONS --sbatch SCRIPT):
  --sbatch SCRIPT       Parse the fit's options here, submit them with sbatch as
                        the arguments of SCRIPT (configs/slurm_fit.sh, edited for
                        the cluster: it runs srun ensml fit "$@") and wait until
                        SLURM starts the job; a refused script, or a job that
                        does not start in time, ends in one line and leaves no
                        job. (type: str | null, default: null)
  --sbatch_pending_timeout SBATCH_PENDING_TIMEOUT
                        How long the job may wait in the queue before it is
                        cancelled: seconds, or e.g. 90s, 10m, 2h. (type: str,
                        default: 10m)
"""


def take_options(args: list[str]) -> tuple[dict[str, str | None], list[str]]:
    """``(submission options, the rest)`` of ``args`` (``--name value`` or ``--name=value``)."""
    options: dict[str, str | None] = dict(OPTIONS)
    rest: list[str] = []
    i = 0
    while i < len(args):
        name, eq, value = args[i].partition("=")
        if name in OPTIONS:
            if not eq:
                if i + 1 >= len(args):
                    raise EnsmlError(f"{COMMAND}: option {name} needs a value")
                value, i = args[i + 1], i + 1
            options[name] = value
        else:
            rest.append(args[i])
        i += 1
    return options, rest


def job_field(job: str, name: str) -> str:
    """One field of ``scontrol show job`` (e.g. ``StdOut``, ``NodeList``); "" if not known."""
    done = subprocess.run(["scontrol", "show", "job", "-o", job], capture_output=True, text=True, timeout=60)
    for word in done.stdout.split():
        key, _, value = word.partition("=")
        if key == name:
            return value
    return ""


class ParseOnly(EnsmlCLI):
    """EnsmlCLI that parses and checks the options (and a ``--ckpt_path`` file), builds nothing."""

    def instantiate_classes(self) -> None:
        pass

    def after_instantiate_classes(self) -> None:
        pass

    def _run_subcommand(self, subcommand: str) -> None:
        pass


def check_fit_args(args: list[str]) -> None:
    """Parse ``ensml fit ARGS`` as the job will (options, config files, a checkpoint), running nothing."""
    quiet_lightning()
    logging.getLogger("lightning.fabric.utilities.seed").setLevel(logging.WARNING)  # the job seeds
    ParseOnly(
        EnsembleTask,
        EnsembleDataModule,
        subclass_mode_model=True,
        seed_everything_default=0,
        parser_kwargs={"exit_on_error": False, **{verb: {"exit_on_error": False} for verb in VERBS}},
        args=["fit", *args],
    )


def submit_fit(args: list[str]) -> str:
    """Check ``ensml fit ARGS``, submit it with ``--sbatch SCRIPT`` and wait until it starts.

    Returns the line that says which job started where.
    """
    options, fit_args = take_options(args)
    script = Path(str(options["--sbatch"]))
    timeout = duration_s(str(options["--sbatch_pending_timeout"]), f"{COMMAND}: --sbatch_pending_timeout")
    if not script.is_file():
        raise EnsmlError(f"{COMMAND}: --sbatch {script}: no such batch script (e.g. configs/slurm_fit.sh)")
    if shutil.which("sbatch") is None:
        raise EnsmlError(
            f"{COMMAND}: --sbatch submits with sbatch, which is not on PATH here: run on a SLURM login node"
        )
    check_fit_args(fit_args)
    done = subprocess.run(
        ["sbatch", "--parsable", str(script), *fit_args], capture_output=True, text=True, timeout=120
    )
    if done.returncode != 0:
        said = " ".join(
            (done.stderr.strip() or done.stdout.strip() or f"exit status {done.returncode}").split()
        )
        raise EnsmlError(f"{COMMAND}: sbatch refused the job script {script}: {said}")
    job = done.stdout.strip().split(";")[0]
    try:  # Ctrl-C (KeyboardInterrupt) or SIGTERM (ensml's Interrupted) while the job waits
        state = _wait_start(job, timeout)
    except (Interrupted, KeyboardInterrupt) as exc:
        _cancel(job)
        signum = exc.signum if isinstance(exc, Interrupted) else signal.SIGINT
        raise Interrupted(
            interrupted_line(
                signum, f" while SLURM job {job} waited to start; cancelled it, nothing was trained"
            ),
            signum,
        ) from None
    out = job_field(job, "StdOut") or "(see scontrol show job)"
    where = job_field(job, "NodeList") or "?"
    return f"{COMMAND}: SLURM job {job} {state} on {where}; its output: {out}"


def _wait_start(job: str, timeout: float) -> str:
    start = last = time.monotonic()
    state = reason = ""
    while True:
        seen = SLURM.states([job])[job]  # "unknown" while squeue cannot be asked: ask again
        state, reason = seen.state, seen.reason
        if state in STARTED:
            return state
        if state not in SLURM.waiting | SLURM.running | {"unknown"}:  # ended (or gone) unseen running
            ended = job_field(job, "JobState") or "ended"
            if ended in STARTED:
                return ended
            why = job_field(job, "Reason")
            why = f" ({why})" if why not in ("", "None") else ""
            raise EnsmlError(f"{COMMAND}: SLURM job {job} {ended}{why} before it started")
        now = time.monotonic()
        if now - start > timeout:
            _cancel(job)
            why = f" ({reason})" if reason else ""
            raise EnsmlError(
                f"{COMMAND}: SLURM job {job} {state}{why} did not start within {seconds(timeout)} "
                "(--sbatch_pending_timeout; reason from squeue); cancelled; nothing was trained"
            )
        if now - last >= EVERY_S:
            note(
                f"{COMMAND}: waiting for SLURM job {job} to start ({state}{': ' + reason if reason else ''})"
            )
            last = now
        time.sleep(1.0)


def _cancel(job: str) -> None:
    SLURM.cancel([job])
