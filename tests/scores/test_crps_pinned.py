"""The CRPS kernels' output pinned bit for bit (before refactoring ``_kernels._crps_block``).

Every path of :func:`ensml.scores._kernels.crps_2d` (members in registers 9..16 by tiles, 9..128
whole columns, groups of 8/16 and a network, the scalar path), both layouts, float32/float64,
standard/fair, CRPS/twCRPS, NaN members and observations, and a ragged last block. Update the
digest only with a change that is meant to change the scores (and say so in its commit).
"""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from ensml.scores.crps import crps_ensemble_array
from ensml.scores.twcrps import twcrps_ensemble_array

_MEMBERS = (1, 2, 5, 8, 9, 12, 16, 17, 20, 33, 50, 64, 100, 128, 129, 150, 200)


def _digest() -> str:
    h = hashlib.sha256()
    rng = np.random.default_rng(20261125)
    for m in _MEMBERS:
        for dtype in (np.float32, np.float64):
            n = 1237  # not a multiple of a block, a tile or a vector
            fc = (rng.standard_normal((m, n)) * 3 + rng.integers(-2, 3, size=(m, n))).astype(dtype)
            obs = rng.standard_normal(n).astype(dtype)
            fc[rng.random((m, n)) < 0.002] = np.nan
            obs[rng.random(n) < 0.002] = np.nan
            for layout, f, axis in (("rows", fc, 0), ("members-last", np.ascontiguousarray(fc.T), -1)):
                for fair in (False, True) if m > 1 else (False,):
                    outs = [crps_ensemble_array(f, obs, axis=axis, fair=fair)]
                    outs.append(twcrps_ensemble_array(f, obs, 0.5, axis=axis, tail="upper", fair=fair))
                    outs.append(twcrps_ensemble_array(f, obs, -0.3, axis=axis, tail="lower", fair=fair))
                    for k, a in enumerate(outs):
                        h.update(f"{m} {np.dtype(dtype).str} {layout} {fair} {k} {a.dtype.str}".encode())
                        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()


#: sha256 of :func:`_digest`'s scores
CRPS_SHA256 = "31e5aa044e5327612a1c98149de19eb219fdc9dc6005af2f6d37afecfdbbbcf8"


@pytest.mark.slow
def test_crps_kernels_are_pinned_bit_for_bit():
    assert _digest() == CRPS_SHA256
