"""A real single-node SLURM for the session (see :mod:`tests.cluster.slurm`), and the data to post-process.

Skipped with the reason where SLURM cannot run (not root, not installed); ``.ci/run`` sets
``ENSML_REQUIRE_SLURM=1`` once it has installed SLURM, and then a SLURM that does not start is a
failure.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cluster import slurm as slurm_daemons
from tests.cluster.runs import archive_year
from tests.postprocess.conftest import archive_dir  # noqa: F401 - the test period, a file per init


@pytest.fixture(scope="session")
def slurm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[slurm_daemons.Slurm]:
    """munged, slurmctld and slurmd of this host, idle; ``SLURM_CONF`` points the clients at it."""
    required = bool(os.environ.get("ENSML_REQUIRE_SLURM"))
    reason = slurm_daemons.missing_reason()
    if reason:
        if required:
            pytest.fail(f"ENSML_REQUIRE_SLURM is set but {reason}")
        pytest.skip(f"no SLURM here: {reason}")
    try:
        running = slurm_daemons.start(tmp_path_factory.mktemp("slurm"))
    except (slurm_daemons.SlurmUnavailable, OSError) as exc:
        if required:
            pytest.fail(f"ENSML_REQUIRE_SLURM is set but SLURM did not start: {exc}")
        pytest.skip(f"SLURM did not start here: {exc}")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SLURM_CONF", str(running.conf))
        try:
            yield running
        finally:
            running.stop()


@pytest.fixture(scope="session")
def year_archive(tiny_data, tmp_path_factory) -> Path:
    return archive_year(tiny_data, tmp_path_factory)
