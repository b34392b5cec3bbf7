"""The one output module: every file ensml writes goes through an :class:`OutputFolder`.

What it guarantees, for every command:

- **Checked before any side effect.** :meth:`OutputFolder.check` only reads the file system and
  refuses, in one line naming the command, the path and the reason, an out_dir that is empty
  text, a file, under a file, the root, the current folder or above it, not writable or on a
  read-only mount, or an existing non-empty folder without an ensml ledger, whatever it holds
  (``evaluate: out_dir runs holds 3 entries ensml did not write (e.g. checkpoints); name a new
  or empty folder``). The planned output names are checked too.
- **Only what the ledger records is ensml's.** ``<out_dir>/.ensml/ledger.json`` (see
  :mod:`.ledger`) lists every file and folder ensml wrote there, with the command, the run, a
  state (``reserved`` before a write, ``done`` after) and size and mtime. Anything else is the
  user's: never deleted, never replaced, and a planned name equal to it is refused before any
  work. A command replaces or deletes only its own entries, and only while unchanged since it
  wrote them (``… was changed after ensml wrote it; move it away``). Nothing is decided by
  name patterns.
- **One run at a time.** ``.ensml/lock`` is held with ``flock`` for the whole run; a second run
  stops at once, naming the holder (command, pid, host, start). The kernel drops the lock when
  a process dies, so there is no stale lock.
- **Temporaries only in staging.** Every temporary lives in
  ``<out_dir>/.ensml/staging/<run-id>/`` (the folder's own file system, so renames are
  atomic), never beside a user's file. A run removes only the staging folders named like a run
  id whose owner is dead (an ``flock`` mark); nothing outside ``.ensml/staging`` is ever swept.
- **Whole or nothing.** A write yields a temporary path; on success it is fsync'ed, renamed
  into place and recorded. On failure, ``KeyboardInterrupt`` included, the temporary goes
  and the target is as it was. ``whole=True`` folders (evaluate, report) stage everything and
  commit at the end in one short phase, so the folder holds one run's results; a journal lets
  the next run finish a commit that a SIGKILL cut.
- **One line for a full disk.** Every OSError while writing becomes an :class:`EnsmlError`
  naming the final path (``no space left on device``, ``disk quota exceeded``, ``read-only
  file system``, ``file too large``, ``permission denied``), with no partial or 0-byte file
  at that path.

Choices beyond the first sketch, and why:

- The ledger is a snapshot plus an append-only change log (``ledger.jsonl``): recording an
  output is one short append, so a run of 10,000 post-processed files costs 10,000 appends
  rather than 10,000 rewrites of a growing file. A run compacts it when it opens or closes the
  folder, if anything changed (so opening a folder on a full disk writes nothing), and when
  the log outgrows about twice the live entries, so it stays bounded in a long run.
- A commit logs its names as ``reserved`` before the first rename and ``done`` after the last
  (two ledger writes, not one): a kill in between leaves files the ledger knows, so the next
  run may replace them, where a single write afterwards would leave them looking like a
  user's files. Only the reservation is fsync'ed: a lost ``done`` leaves ``reserved``, which
  is as safe, and saves an fsync per output.
- Temporaries are flat files ``<random>.<name>`` in the run's staging folder, not a folder per
  write: on this machine's ext4 (mounted with ``discard``) every folder removed cost 3 ms.
- An earlier output of the command that the user changed is not deleted as stale: it is kept
  and dropped from the ledger (it is the user's now) and named in :attr:`OutputFolder.disowned`,
  because failing a finished evaluate over an old ``spread.md`` would waste the run.
- Ownership of a file is size + mtime (the SHA-256 of files below 4 MiB is recorded for
  audits, not compared: hashing a 100 GB store on every run costs more than the risk it covers).
- Names may not pass through symbolic links (not only links leading out): two names for one
  file would confuse the ledger, and ensml writes only real files.
- ``shared=True`` serves one file in a folder the user keeps other things in (``predict``'s
  output, possibly in the working folder): only the named outputs are checked.
- A worker's :class:`Staging` writes only the names the run reserved for it, so a mistake in
  post-processing's plan cannot reach a user's file even though workers hold no lock.
- Messages start with the command (``evaluate: out_dir …``); the CLI puts ``ensml:`` before them.

Typical use::

    OutputFolder.check(out_dir, "evaluate", names=["scores.csv"])   # before the work
    ...
    with OutputFolder.open(out_dir, "evaluate", whole=True) as folder:
        folder.write_text("scores.md", table)
        folder.write_netcdf(per_point, "scores.nc", history=command())
        with folder.write("cases") as tmp:       # a folder output
            write_cases(tmp, studies)

    with OutputFolder.open(out_dir, "postprocess") as folder:   # workers, other hosts too
        folder.reserve(names)                     # before any work is submitted
        for unit in units:
            client.submit(run_unit, unit, folder.staging([unit.name]))
        ...                                       # worker: with staging.write(name) as tmp: ...
        folder.record([unit.name])                # as each result arrives
"""

from __future__ import annotations

from ensml.data.outputs.check import check_out_dir
from ensml.data.outputs.errors import REASONS, write_error
from ensml.data.outputs.folder import OutputFolder
from ensml.data.outputs.ledger import Entry, Ledger
from ensml.data.outputs.names import STATE_DIR, distinct, format_name, normalise
from ensml.data.outputs.netcdf import (
    CONVENTIONS,
    DEFAULT_COMPRESSION,
    append_netcdf_init,
    create_zarr_store,
    global_attrs,
    netcdf_encoding,
    write_netcdf,
    write_zarr,
    write_zarr_region,
    zarr_encoding,
)
from ensml.data.outputs.staging import Staging

__all__ = [
    "CONVENTIONS",
    "DEFAULT_COMPRESSION",
    "REASONS",
    "STATE_DIR",
    "Entry",
    "Ledger",
    "OutputFolder",
    "Staging",
    "append_netcdf_init",
    "check_out_dir",
    "create_zarr_store",
    "distinct",
    "format_name",
    "global_attrs",
    "netcdf_encoding",
    "normalise",
    "write_error",
    "write_netcdf",
    "write_zarr",
    "write_zarr_region",
    "zarr_encoding",
]
