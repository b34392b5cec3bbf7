"""A real single-node SLURM for tests: Debian's ``slurm-wlm`` 22.05 and ``munge``, run as root.

Everything lives in one folder: a munge key and socket, ``slurm.conf`` naming this host with
its CPUs and memory, the state, spool, pid and log files. The daemons run in the foreground as
children of the test process (``-D``/``-F``), so stopping them needs no service manager, and
free ports keep them apart from any other SLURM on the machine. Clients (``sbatch``,
``squeue``, ``scancel``, and dask-jobqueue's calls of them) find this SLURM through the
``SLURM_CONF`` variable of :meth:`Slurm.env`.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

DAEMONS = ("munged", "mungekey", "slurmctld", "slurmd", "sbatch", "squeue", "sinfo", "scancel")


class SlurmUnavailable(RuntimeError):
    """SLURM cannot run here (the reason says why)."""


def missing_reason() -> str | None:
    """Why SLURM cannot be started here, or None when it can be tried."""
    if os.geteuid() != 0:
        return "the SLURM daemons need root (this user is not)"
    absent = [d for d in DAEMONS if shutil.which(d, path=os.environ.get("PATH", "") + ":/usr/sbin") is None]
    if absent:
        return f"{', '.join(absent)} not installed (apt-get install -y slurm-wlm munge)"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def _real_memory_mb() -> int:
    """What slurmd would report (``slurmd -C``), less a margin so the node never drains for it."""
    out = subprocess.run(["slurmd", "-C"], capture_output=True, text=True, check=True).stdout
    mb = int(next(w for w in out.split() if w.startswith("RealMemory=")).split("=")[1])
    return max(1024, mb - 512)


@dataclass
class Slurm:
    """A running single-node SLURM (start with :func:`start`, stop with :meth:`stop`)."""

    root: Path
    node: str
    cpus: int
    procs: list[subprocess.Popen] = field(default_factory=list)

    @property
    def conf(self) -> Path:
        return self.root / "slurm.conf"

    def env(self) -> dict[str, str]:
        """This process's environment with SLURM's clients pointed at this SLURM."""
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def run(self, *cmd: str) -> str:
        """A client command's stdout (raises on a non-zero exit)."""
        done = subprocess.run(cmd, capture_output=True, text=True, env=self.env(), timeout=30)
        if done.returncode:
            raise RuntimeError(f"{' '.join(cmd)}: {done.stderr.strip() or done.stdout.strip()}")
        return done.stdout

    def jobs(self) -> list[str]:
        """``"<id> <state>"`` of every job not yet finished."""
        return self.run("squeue", "-h", "-o", "%i %T").split("\n")[:-1]

    def node_state(self) -> str:
        return self.run("sinfo", "-h", "-n", self.node, "-o", "%T").strip()

    def log(self, name: str = "slurmctld") -> str:
        path = self.root / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def stop(self) -> None:
        """Cancel every job, then stop the daemons (slurmd first)."""
        if self.procs:
            subprocess.run(["scancel", "--full", "-u", "root"], env=self.env(), capture_output=True)
        for proc in reversed(self.procs):
            proc.terminate()
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.procs.clear()


def _config(root: Path, node: str, cpus: int, memory_mb: int) -> str:
    return "\n".join(
        [
            "ClusterName=ensmltest",
            f"SlurmctldHost={node}",
            "SlurmUser=root",
            "SlurmdUser=root",
            "AuthType=auth/munge",
            "CredType=cred/munge",
            f"AuthInfo=socket={root}/munge.socket",
            f"SlurmctldPort={_free_port()}",
            f"SlurmdPort={_free_port()}",
            f"StateSaveLocation={root}/state",
            f"SlurmdSpoolDir={root}/spool",
            f"SlurmctldPidFile={root}/slurmctld.pid",
            f"SlurmdPidFile={root}/slurmd.pid",
            f"SlurmctldLogFile={root}/slurmctld.log",
            f"SlurmdLogFile={root}/slurmd.log",
            # No cgroups in a container: track processes by parent pid, bind nothing.
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none",
            "MpiDefault=none",
            "SwitchType=switch/none",
            # One job per CPU, so two 1-CPU jobs run side by side.
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_CPU",
            "SchedulerType=sched/backfill",
            "ReturnToService=2",
            "SlurmctldTimeout=30",
            "SlurmdTimeout=30",
            "InactiveLimit=0",
            "KillWait=2",
            "MinJobAge=300",
            "MessageTimeout=10",
            f"NodeName={node} CPUs={cpus} RealMemory={memory_mb} State=UNKNOWN",
            f"PartitionName=debug Nodes={node} Default=YES MaxTime=INFINITE State=UP",
            "",
        ]
    )


def start(root: Path, timeout: float = 60.0) -> Slurm:
    """Start munged, slurmctld and slurmd under ``root``; return once the node is idle.

    Raises
    ------
    SlurmUnavailable
        When a daemon exits or the node is not idle within ``timeout`` seconds (the logs' tails
        are in the message).
    """
    node = socket.gethostname().split(".")[0]
    cpus = os.cpu_count() or 1
    for sub in ("state", "spool"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    root.chmod(0o700)  # munged refuses a socket folder others may write to
    key = root / "munge.key"
    subprocess.run(["mungekey", "--create", f"--keyfile={key}", "--force"], check=True, capture_output=True)
    key.chmod(0o600)
    (root / "slurm.conf").write_text(_config(root, node, cpus, _real_memory_mb()))
    slurm = Slurm(root, node, cpus)
    log = open(root / "daemons.out", "ab")
    commands = [
        [
            "munged",
            "-F",
            "--force",
            f"--key-file={key}",
            f"--socket={root}/munge.socket",
            f"--pid-file={root}/munged.pid",
            f"--log-file={root}/munged.log",
            f"--seed-file={root}/munged.seed",
        ],
        ["slurmctld", "-D", "-c", "-i", "-f", str(slurm.conf)],
        ["slurmd", "-D", "-f", str(slurm.conf), "-N", node],
    ]
    try:
        for cmd in commands:
            slurm.procs.append(subprocess.Popen(cmd, stdout=log, stderr=log, env=slurm.env(), cwd=root))
            time.sleep(0.5 if cmd[0] == "munged" else 0)
        _wait_idle(slurm, timeout)
    except BaseException:
        slurm.stop()
        raise
    finally:
        log.close()
    return slurm


def _wait_idle(slurm: Slurm, timeout: float) -> None:
    end = time.monotonic() + timeout
    state = ""
    while time.monotonic() < end:
        dead = [p.args[0] for p in slurm.procs if p.poll() is not None]
        if dead:
            raise SlurmUnavailable(f"{', '.join(dead)} exited: {_tail(slurm)}")
        try:
            state = slurm.node_state()
        except RuntimeError as exc:
            state = str(exc)
        if state == "idle":
            return
        time.sleep(0.5)
    raise SlurmUnavailable(
        f"node {slurm.node} not idle after {timeout:.0f} s (sinfo: {state}): {_tail(slurm)}"
    )


def _tail(slurm: Slurm, lines: int = 5) -> str:
    text = "\n".join(slurm.log(name) for name in ("munged", "slurmctld", "slurmd"))
    text += (slurm.root / "daemons.out").read_text(errors="replace")
    return " | ".join(text.strip().splitlines()[-lines:])
