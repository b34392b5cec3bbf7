"""Imported at start-up by the processes of ``tests/cli/test_signals_every_verb.py`` (this folder
is put first on their ``PYTHONPATH``): the run pauses at a known point of its work, writes
``ready`` and waits there for the test's signal.

``ENSML_TEST_PAUSE``: ``advance`` pauses after the first unit of work a verb counts (a file,
a field, a unit, a batch, a model; what it completed is then in place), ``savefig`` just before
the first figure is drawn (``report``, while matplotlib draws).
"""

import os
import time
from pathlib import Path

WHERE = os.environ.get("ENSML_TEST_PAUSE")


def _pause() -> None:
    """Write ``ready`` and wait for ``go``, which the test writes after its signal: a verb that
    stops at its next safe point (postprocess) or counts its work in another thread then goes
    on to that point; the others stop inside the wait."""
    ready = Path("ready")
    if ready.exists():
        return
    ready.write_text(f"{WHERE}\n")
    deadline = time.monotonic() + 120
    while not Path("go").exists():
        if time.monotonic() > deadline:
            raise SystemExit("signal_hook: no signal within 120 s")
        time.sleep(0.05)


if WHERE == "advance":
    from ensml.progress import Progress

    _advance = Progress.advance

    def advance(self, *args, **kwargs):
        _advance(self, *args, **kwargs)
        _pause()

    Progress.advance = advance
elif WHERE == "savefig":
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    _savefig = Figure.savefig

    def savefig(self, *args, **kwargs):
        _pause()
        return _savefig(self, *args, **kwargs)

    Figure.savefig = savefig
