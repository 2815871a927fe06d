"""Stage targets and the epoch bookkeeping of the gradual schedule."""

from __future__ import annotations

import pytest

from sparseprune.errors import UserError
from sparseprune.pruning.schedule import Schedule


def test_linear_and_cubic_targets() -> None:
    assert Schedule(target=0.6, stages=3, kind="linear").stage_targets == pytest.approx([0.2, 0.4, 0.6])
    cubic = Schedule(target=0.8, stages=2, kind="cubic").stage_targets
    assert cubic == pytest.approx([0.8 * (1 - 0.5**3), 0.8])


def test_explicit_list() -> None:
    schedule = Schedule(target=0.75, kind="list", targets=[0.5, 0.7, 0.75], dense_epochs=2, finetune_epochs=3)
    assert schedule.stage_targets == [0.5, 0.7, 0.75]
    assert schedule.total_epochs == 11
    assert [schedule.stage_starting_at(e) for e in range(11)] == [
        None,
        None,
        0,
        None,
        None,
        1,
        None,
        None,
        2,
        None,
        None,
    ]
    assert [e for e in range(11) if schedule.is_phase_end(e)] == [1, 4, 7, 10]


def test_dense_only_schedule() -> None:
    schedule = Schedule(stages=0, dense_epochs=3)
    assert schedule.stage_targets == [] and schedule.total_epochs == 3
    assert [schedule.is_phase_end(e) for e in range(3)] == [False, False, True]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"target": 1.0}, r"\[0, 1\)"),
        ({"kind": "exponential"}, "kind"),
        ({"stages": -1}, "stages"),
        ({"finetune_epochs": 0}, "finetune_epochs"),
        ({"kind": "list", "targets": []}, "non-empty"),
        ({"kind": "list", "targets": [0.5, 0.4], "target": 0.4}, "must not decrease"),
        ({"kind": "list", "targets": [0.5], "target": 0.75}, "must equal target"),
    ],
)
def test_bad_schedules(kwargs: dict, message: str) -> None:
    with pytest.raises(UserError, match=message):
        Schedule(**kwargs)
