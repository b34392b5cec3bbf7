"""The out_dir check of the data generators (``ensml data synth``, ``ensml data physics``)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from ensml.data.outputs.folder import OutputFolder
from ensml.data.outputs.ledger import Ledger
from ensml.data.outputs.names import STATE_DIR
from ensml.errors import EnsmlError


def check_generated(
    out_dir: str | os.PathLike[str], command: str, names: Sequence[str], overwrite: bool
) -> None:
    """Check ``out_dir`` for a generator's outputs ``names``; nothing is written.

    :meth:`OutputFolder.check` refuses a file, the root or current folder, a read-only place,
    a non-empty folder ensml does not own (whatever it holds) and a user's file of an output's
    name. Without ``overwrite``, a folder holding an earlier run's outputs of ``command`` is
    refused too: the folder holds one dataset, so this run would replace it.
    """
    real = OutputFolder.check(out_dir, command, names=names)
    ledger = Ledger.load(real / STATE_DIR)  # read again: check returns only the folder
    earlier = [
        name
        for name, entry in sorted(ledger.entries.items())
        if entry.command == command and entry.kind != "parent" and os.path.lexists(Path(real) / name)
    ]
    if earlier and not overwrite:
        raise EnsmlError(
            f"{command}: out_dir {out_dir} already holds {', '.join(earlier)} of an earlier {command}; "
            "pass overwrite=True to replace them"
        )
