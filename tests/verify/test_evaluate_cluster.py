"""``evaluate --cluster`` and ``report --cluster`` give the tables of the single-process run.

The reference is the same command in one process (``cluster: none``): the per-init parts of
each block of init times, joined on the client, must make the same rows to the last bit
(``scores.csv``, ``decomposition.csv``, ``spread.csv`` byte for byte, ``scores.nc``
identical), whatever the block size; the report's page and tables likewise. Bad cluster
settings end in one line with nothing written (the sandbox of ``tests/cli/test_cli_table.py``).
"""

from __future__ import annotations

import filecmp
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import xarray as xr

from ensml.cli.main import main
from ensml.verify.distributed import init_blocks
from tests.cli.bad_rows import inputs, run_row  # noqa: F401 - a fixture
from tests.verify.reference_inputs import make_inputs

EVAL = "evaluate --forecast {fc} --analysis {an} --out_dir out"
REPORT = "report --forecast {fc} --analysis {an} --out_dir out"
#: What the tables are compared on: every file ``evaluate`` writes (the figures are not compared).
TABLES = ("scores.csv", "scores.md", "decomposition.csv", "decomposition.md")


def test_blocks_cover_the_inits_in_order() -> None:
    inits = np.arange(10)
    blocks = init_blocks(inits, 4)
    assert [b.tolist() for b in blocks] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert [b.tolist() for b in init_blocks(inits, 20)] == [inits.tolist()]


@pytest.fixture(scope="module")
def sources(tiny_data: dict, tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """Every input ``evaluate`` scores: predictions, members in two files, spread predictions,
    the oracle, and an analysis that does not observe a box of z (NaN: left out of every score)."""
    root = tmp_path_factory.mktemp("cluster-inputs")
    paths = make_inputs(tiny_data, root)
    with xr.open_dataset(tiny_data["analysis"]) as an:
        an = an.load()
    an["z"][:, :, 2:5, 3:9] = np.nan
    an.to_netcdf(root / "analysis.nc")
    args = ["--forecast", str(tiny_data["forecast"]), "--analysis", str(root / "analysis.nc")]
    for name in ("predictions", "members", "spread_predictions", "oracle"):
        args += [f"--{name}", str(paths[name])]
    return args


@pytest.mark.slow
@pytest.mark.distributed
@pytest.mark.timeout(600)
def test_evaluate_on_a_local_cluster_writes_the_tables_of_one_process(sources, tmp_path) -> None:
    assert main(["evaluate", *sources, "--out_dir", str(tmp_path / "one")]) == 0
    # blocks of 7 init times, the last one shorter; the leads interleave on two workers
    cluster = ["--cluster", "local", "--workers", "2", "--init_block", "7"]
    assert main(["evaluate", *sources, "--out_dir", str(tmp_path / "two"), *cluster]) == 0
    for name in (*TABLES, "spread.csv", "spread.md"):
        assert filecmp.cmp(tmp_path / "one" / name, tmp_path / "two" / name, shallow=False), name
    with xr.open_dataset(tmp_path / "one" / "scores.nc") as one:
        with xr.open_dataset(tmp_path / "two" / "scores.nc") as two:
            # every value, coordinate and attribute but the time of writing
            one.attrs.pop("history"), two.attrs.pop("history")
            xr.testing.assert_identical(one.load(), two.load())
            assert "n_observed_z" in one  # the box of NaN was left out alike


def _open_under(folder: Path) -> list[str]:
    """The files under ``folder`` this process holds open (its file descriptors)."""
    fds = Path("/proc/self/fd")
    targets = (os.path.realpath(fd) for fd in fds.iterdir()) if fds.is_dir() else ()
    return [t for t in targets if t.startswith(str(folder.resolve()))]


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc to list open files")
def test_a_block_closes_the_files_it_read(tiny_data, tmp_path) -> None:
    """A worker's memory must not grow with the files it has read (netCDF keeps a chunk cache per
    variable of every open file): after a block, at most one file of the archive stays open, and
    the next block reopens what it reads and scores it as before."""
    from ensml.data.archive import archive
    from ensml.verify.distributed import FrameSource, forget_frames, score_block
    from ensml.verify.options import Selection, Sources

    files = archive(
        str(tiny_data["forecast"]), str(tmp_path / "archive"), period=("2017-11-01", "2017-11-30")
    )
    source = FrameSource.of([str(f) for f in files], str(tiny_data["analysis"]), Sources(), Selection())
    try:
        frame = source.open().frame
        lead, inits = frame.leads[0], frame.inits[:4]
        first, _ = score_block(source, lead, inits, False, False)
        assert len(_open_under(tmp_path / "archive")) <= 1
        again, _ = score_block(source, lead, inits, False, False)
        for var, parts in first.items():
            for name, crps in parts.crps.items():
                xr.testing.assert_identical(crps, again[var].crps[name])
    finally:
        forget_frames()


@pytest.mark.slow
@pytest.mark.distributed
@pytest.mark.timeout(300)
def test_a_worker_reads_its_block_itself(tiny_data, tmp_path) -> None:
    """The cluster runs one task per block: the block's reads are not sent back to the cluster as
    tasks of their own (on other threads, they met netCDF files that xarray's file cache had
    closed: ``NetCDF: HDF error`` at 60 inits of 361 x 720)."""
    from distributed import Client, LocalCluster, get_task_stream

    with LocalCluster(n_workers=1, threads_per_worker=2, dashboard_address=":0") as cluster:
        with Client(cluster) as client, get_task_stream(client) as stream:
            args = ["--forecast", str(tiny_data["forecast"]), "--analysis", str(tiny_data["analysis"])]
            run = ["--scheduler_address", cluster.scheduler_address, "--init_block", "5"]
            assert main(["evaluate", *args, "--out_dir", str(tmp_path / "out"), *run]) == 0
    names = {str(task["key"]).split("-")[0] for task in stream.data}
    assert names == {"score_block"}, names


@pytest.mark.slow
@pytest.mark.distributed
@pytest.mark.timeout(600)
def test_report_on_a_local_cluster_writes_the_page_of_one_process(tiny_data, tmp_path) -> None:
    def report(out: Path, *extra: str) -> None:
        args = ["report", "--forecast", str(tiny_data["forecast"]), "--analysis", str(tiny_data["analysis"])]
        args += ["--oracle", str(tiny_data["oracle"]), "--variables", "z", "--leads", "[24h, 48h]"]
        assert main([*args, "--out_dir", str(out), *extra]) == 0

    report(tmp_path / "one")
    report(tmp_path / "two", "--cluster", "local", "--workers", "2", "--init_block", "5")  # 122 inits: 24 + 2
    figures = sorted(p.relative_to(tmp_path / "one").as_posix() for p in (tmp_path / "one").glob("figures/*"))
    assert {"figures/rank_histograms.png", "figures/reliability.png", "figures/spread_skill.png"} <= {
        *figures
    }
    for name in (
        "report.md",
        *(f"tables/{t}" for t in TABLES),
        *figures,
    ):  # the figures drawn from the same numbers
        assert filecmp.cmp(tmp_path / "one" / name, tmp_path / "two" / name, shallow=False), name


@pytest.mark.slow
@pytest.mark.distributed
@pytest.mark.timeout(300)
def test_ctrl_c_stops_evaluate_on_a_cluster_with_nothing_written(tiny_data, tmp_path) -> None:
    out = tmp_path / "out"
    args = [sys.executable, "-m", "ensml.cli.main", "evaluate", "--forecast", str(tiny_data["forecast"])]
    args += ["--analysis", str(tiny_data["analysis"]), "--out_dir", str(out), "--variables", "[z, t]"]
    args += ["--cluster", "local", "--workers", "2", "--init_block", "1"]
    proc = subprocess.Popen(args, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    end = time.monotonic() + 200
    seen = ""
    while time.monotonic() < end and "blocks" not in seen:  # a block scored: the run is under way
        seen += proc.stderr.readline()
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "Traceback" not in err
    last = err.strip().splitlines()[-1]
    assert last.startswith("ensml: interrupted (Ctrl-C) after ") and "blocks; nothing written" in last, last
    assert not out.exists() or not [p for p in out.rglob("*") if p.is_file()]


#: One row: a name, the arguments, the exit status and words the one line must contain.
ROWS = [
    ("evaluate: workers zero", EVAL + " --cluster local --workers 0", 1, ("--workers",)),
    ("evaluate: workers without a cluster", EVAL + " --workers 2", 1, ("workers 2 is for a cluster",)),
    ("evaluate: init_block zero", EVAL + " --cluster local --init_block 0", 1, ("--init_block",)),
    ("evaluate: cluster unknown", EVAL + " --cluster bogus", 1, ("--cluster", "'bogus'")),
    (
        "evaluate: scheduler file missing",
        EVAL + " --scheduler_file {dir}/no-scheduler.json",
        1,
        ("scheduler_file", "no-scheduler.json", "does not exist"),
    ),
    (
        "evaluate: two schedulers",
        EVAL + " --scheduler_file {dir}/readme.txt --scheduler_address tcp://127.0.0.1:1",
        1,
        ("not both",),
    ),
    (
        "evaluate: more local workers than cores",
        EVAL + " --cluster local --workers 100000",
        1,
        ("evaluate: --workers 100000", "more than this machine can run"),
    ),
    (
        "evaluate: cluster with multivariate",
        EVAL + " --cluster local --multivariate true",
        1,
        ("multivariate", "cluster: none"),
    ),
    (
        "evaluate: cluster with thresholds",
        EVAL + ' --cluster local --thresholds={{"z":[50000]}}',
        1,
        ("thresholds", "cluster: none"),
    ),
    (
        "evaluate: cluster with observations",
        "evaluate --forecast {fc} --observations {dir}/readme.txt --out_dir out --cluster local",
        1,
        ("station observations", "cluster: none"),
    ),
    (
        "evaluate: jobqueue cores below processes",
        EVAL + " --cluster slurm --jobqueue.cores 1 --jobqueue.processes 2",
        1,
        ("cores (1) must be at least processes (2)",),
    ),
    ("report: workers without a cluster", REPORT + " --workers 2", 1, ("workers 2 is for a cluster",)),
    ("report: init_block zero", REPORT + " --cluster local --init_block 0", 1, ("--init_block",)),
    (
        "report: scheduler file missing",
        REPORT + " --scheduler_file {dir}/no-scheduler.json",
        1,
        ("no-scheduler.json", "does not exist"),
    ),
    (
        "report: cluster at stations",
        "report --forecast {fc} --observations {dir}/readme.txt --out_dir out --cluster local",
        1,
        ("report: cluster scores gridded forecasts", "cluster: none"),
    ),
]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("row", ROWS, ids=[row[0] for row in ROWS])
def test_bad_cluster_option_is_one_line_and_harmless(
    row,
    inputs,  # noqa: F811 - the fixture imported above
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture,
) -> None:
    run_row(row, inputs, tmp_path, monkeypatch, capsys)


@pytest.mark.slow
@pytest.mark.distributed
@pytest.mark.timeout(120)
def test_a_scheduler_that_cannot_be_reached_is_one_line_and_harmless(
    inputs,  # noqa: F811 - the fixture imported above
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture,
) -> None:
    """Nothing listens on port 1: the connection fails after its timeout, nothing is written."""
    row = (
        "evaluate: scheduler unreachable",
        EVAL + " --variables z --scheduler_address tcp://127.0.0.1:1",
        1,
        ("evaluate: cannot reach the cluster at tcp://127.0.0.1:1", "nothing was done"),
    )
    run_row(row, inputs, tmp_path, monkeypatch, capsys)


@pytest.mark.skipif(shutil.which("sbatch") is not None, reason="sbatch is on PATH here: the row would submit")
def test_slurm_without_sbatch_is_one_line(
    inputs,  # noqa: F811 - the fixture imported above
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture,
) -> None:
    row = ("evaluate: no sbatch", EVAL + " --cluster slurm", 1, ("sbatch, which is not on PATH",))
    run_row(row, inputs, tmp_path, monkeypatch, capsys)


def test_an_analysis_with_many_times_to_a_chunk_gets_a_note(tmp_path: Path) -> None:
    """Each block decompresses its analysis chunks whole: many times to a chunk are said once."""
    from ensml.data.open import open_analysis
    from ensml.verify.on_cluster import analysis_chunks_note

    times = np.arange("2021-01-01", "2021-01-13", dtype="datetime64[D]").astype("datetime64[ns]")
    dims = ("time", "level", "latitude", "longitude")
    values = np.random.default_rng(0).normal(size=(12, 1, 3, 4)).astype("f4")
    ds = xr.Dataset(
        {"z": (dims, values), "t": (dims, values + 250)},
        coords={"time": times, "level": [500], "latitude": [10.0, 0.0, -10.0], "longitude": np.arange(4.0)},
    )
    for name, per_chunk in (("one.nc", 1), ("many.nc", 12)):
        chunks = (per_chunk, 1, 3, 4)
        ds.to_netcdf(tmp_path / name, encoding={v: {"zlib": True, "chunksizes": chunks} for v in ("z", "t")})
    assert (
        analysis_chunks_note(open_analysis(tmp_path / "one.nc", ["z", "t"]), ["z", "t"], 4, "evaluate")
        is None
    )
    line = analysis_chunks_note(open_analysis(tmp_path / "many.nc", ["z", "t"]), ["z", "t"], 4, "evaluate")
    assert line == (
        "evaluate: the analysis stores z 12 times to a chunk, and every block of 4 init times decompresses "
        "such chunks whole; stored one time to a chunk it reads faster on a cluster"
    )
