"""Run ``python -m ensml.cli.main`` in a subprocess of its own session, so a test can kill all of it.

Lightning's ``ddp``-style launchers re-execute the command for the other ranks as children of
rank 0's session; killing the process group ends every rank.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def cli_env() -> dict[str, str]:
    """The environment of a test subprocess: one thread, loopback gloo, the repo importable, and
    Python's fault handler on (a crash, or the SIGABRT of :func:`finish` on a hang, prints where
    every thread was)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": "lo", "PYTHONWARNINGS": "ignore"}
    env["PYTHONFAULTHANDLER"] = "1"
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")])
    return env


def start_cli(args: list[str], cwd: Path) -> subprocess.Popen:
    """Start ``ensml ARGS`` in ``cwd`` in a new session; stdout and stderr merged into one pipe."""
    cmd = [sys.executable, "-m", "ensml.cli.main", *args]
    pipe = {"stdout": subprocess.PIPE, "stderr": subprocess.STDOUT, "text": True}
    return subprocess.Popen(cmd, cwd=cwd, env=cli_env(), start_new_session=True, **pipe)


def kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL ``proc`` and every process of its session (e.g. the other ranks)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def finish(proc: subprocess.Popen, what: str, timeout: float = 150) -> subprocess.CompletedProcess:
    """Wait for ``proc``; on timeout kill its whole group and fail the test with its output, which
    then ends with where each of the process's threads was (SIGABRT first: the fault handler of
    :func:`cli_env` prints them)."""
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        try:
            os.kill(proc.pid, signal.SIGABRT)
            out, _ = proc.communicate(timeout=10)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            kill_group(proc)
            out, _ = proc.communicate()
        stacks = [line for line in out.splitlines() if not line.startswith("Extension modules:")]
        pytest.fail(f"{what} did not finish in {timeout} s:\n" + "\n".join(stacks)[-6000:])
    finally:
        kill_group(proc)  # make sure no rank is left behind
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, "")


def run_cli(args: list[str], cwd: Path, timeout: float = 150) -> subprocess.CompletedProcess:
    """Run ``ensml ARGS`` in ``cwd`` to the end (at most ``timeout`` seconds)."""
    return finish(start_cli(args, cwd), f"ensml {args[0]}", timeout)
