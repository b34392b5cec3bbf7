"""Seeds: the one range every verb's seed option takes, and its check.

A seed reaches numpy (``np.random.seed``, the legacy generator Lightning's ``seed_everything``
seeds), torch and the files' attributes (``synth_seed``). numpy's legacy generator takes
0 … 2**32 - 1, so every seed option does: ``--seed``, ``--data.seed``, ``--synth.seed``,
``--physics.seed`` are typed :data:`Seed` (jsonargparse refuses a value out of range where the
option is parsed: ``option --seed: 18446744073709551616 is out of range (must be >= 0 and <=
4294967295)``), Lightning's ``--seed_everything`` is translated to the same words
(:mod:`ensml.cli.fit`), and a library function called from Python checks with
:func:`check_seed`.
"""

from __future__ import annotations

import operator

from jsonargparse.typing import restricted_number_type

from ensml.errors import EnsmlError

#: The seeds ensml takes, inclusive: numpy's legacy generator's.
SEED_RANGE = (0, 2**32 - 1)

#: A seed option's type: an ``int`` in :data:`SEED_RANGE`, checked where the option is parsed.
Seed = restricted_number_type("Seed", int, [(">=", SEED_RANGE[0]), ("<=", SEED_RANGE[1])])


def out_of_range(option: str, value: object) -> str:
    """The one message for a seed out of :data:`SEED_RANGE`, in the words of the option parser's."""
    low, high = SEED_RANGE
    return f"{option}: {value} is out of range (must be >= {low} and <= {high})"


def check_seed(value: int, option: str) -> int:
    """``value`` as a plain ``int``, or :class:`EnsmlError` (:func:`out_of_range`) naming ``option``."""
    try:
        seed = operator.index(value)  # an int or numpy integer, not a bool's or a float's value
    except TypeError:
        seed = None
    if seed is None or isinstance(value, bool) or not SEED_RANGE[0] <= seed <= SEED_RANGE[1]:
        raise EnsmlError(out_of_range(option, value))
    return int(seed)


__all__ = ["SEED_RANGE", "Seed", "check_seed", "out_of_range"]
