"""The partial collective (eager-SGD / WAGMA): which contributions reach which round."""

from __future__ import annotations

import pytest

from ensml.models.spatial.testing import run_distributed
from ensml.train.decentralised import butterfly_groups
from tests.train import partial_checks as checks

pytestmark = [pytest.mark.distributed, pytest.mark.timeout(120)]


def test_quorum_of_all_is_an_allreduce():
    a, b = run_distributed(checks.synchronous, 2, timeout=60)
    assert a == b
    assert [x[0] for x in a] == [[10.0 * 2 * r + 1] * 3 for r in range(3)]
    assert all(x[1:] == (2, 0, True) for x in a)


def test_solo_round_starts_without_the_straggler_and_takes_its_work_next_round():
    fast, slow = run_distributed(checks.solo_with_straggler, 2, timeout=60)
    assert slow["late"] is True
    assert fast["r0"][:3] == slow["r0"][:3] == ([1.0, 0.0, 0.0], 1, 0)
    assert (fast["r0"][3], slow["r0"][3]) == (True, False)
    # Round 1: rank 0's fresh work and rank 1's stale round-0 work.
    assert fast["r1"][:3] == slow["r1"][:3] == ([0.0, 2.0, 4.0], 1, 1)


def test_majority_of_four_starts_with_two():
    results = run_distributed(checks.majority_of_four, 4, timeout=60)
    assert all(r[:3] == ([3.0, 0.0, 0.0], 2, 0) for r in results)  # ranks 0 and 1: 1 + 2
    assert [r[3] for r in results] == [True, True, False, False]


def test_latest_slot_sends_the_late_members_model_as_stale():
    a, b = run_distributed(checks.latest_model, 2, timeout=60)
    assert a[:3] == b[:3] == ([6.0, 6.0], 1, 1)  # rank 0's new model [5, 5] + rank 1's [1, 1]


def test_butterfly_groups_rotate_over_the_rank_digits():
    assert butterfly_groups(4, 2) == [[[0, 1], [2, 3]], [[0, 2], [1, 3]]]
    assert butterfly_groups(8, 2)[2] == [[0, 4], [1, 5], [2, 6], [3, 7]]
    assert butterfly_groups(4, 4) == [[[0, 1, 2, 3]]]
    assert butterfly_groups(9, 3)[1] == [[0, 3, 6], [1, 4, 7], [2, 5, 8]]
    assert butterfly_groups(2, 1) == [[[0], [1]]]
