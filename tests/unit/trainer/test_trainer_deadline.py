"""The save-on-notice decision (rljob_trainer.deadline): pure functions, no process group."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime

import pytest
from rljob_contract.request import CheckpointRequest, format_request, parse_request
from rljob_trainer.deadline import (
    Decision,
    Phase,
    Situation,
    decide,
    describe,
    notice_budget,
    notice_deadline,
    rest_of_step,
)
from rljob_trainer.faults import (
    ENV_TEST_KILL_BEFORE_MANIFEST,
    ENV_TEST_SLOW_ROLLOUT_FROM_STEP,
    ENV_TEST_SLOW_ROLLOUT_TOKEN,
    ENV_TEST_SLOW_STOP_SAVE,
    NO_FAULTS,
    Faults,
)

# Step 12 finished, step 13's rollout under way, the newest checkpoint is of step 10; 20 s left.
ROLLOUT = Situation(
    now=100.0,
    deadline=120.0,
    phase=Phase.ROLLOUT,
    step_rest=5.0,
    save_seconds=2.0,
    last_finished=12,
    newest_saved=10,
)
BOUNDARY = replace(ROLLOUT, phase=Phase.BOUNDARY, step_rest=None)


@pytest.mark.parametrize(
    ("situation", "expected"),
    [
        # The rest of the step and a save fit: finish the step, save it at its end.
        (ROLLOUT, Decision.GO_ON),
        (replace(ROLLOUT, step_rest=18.0), Decision.GO_ON),  # exactly fits
        # They do not: save step 12 now.
        (replace(ROLLOUT, step_rest=18.5), Decision.SAVE),
        (replace(ROLLOUT, save_seconds=16.0), Decision.SAVE),
        # Either not measured yet: rewind (costs at most the part of the step done so far).
        (replace(ROLLOUT, step_rest=None), Decision.SAVE),
        (replace(ROLLOUT, save_seconds=None), Decision.SAVE),
        # Step 12 is the newest checkpoint already (a notice right after a save): exit at once.
        (replace(ROLLOUT, step_rest=60.0, newest_saved=12), Decision.SKIP),
        (replace(ROLLOUT, step_rest=None, last_finished=0, newest_saved=0), Decision.SKIP),
        # Not even a save of step 12 fits.
        (replace(ROLLOUT, save_seconds=25.0), Decision.NO_TIME),
        (replace(ROLLOUT, now=119.0, step_rest=0.5), Decision.NO_TIME),
        # An unmeasured save is tried.
        (replace(ROLLOUT, now=119.0, save_seconds=None), Decision.SAVE),
        # No grace period known: the step finishes, as without a deadline.
        (replace(ROLLOUT, deadline=None, step_rest=None, save_seconds=None), Decision.GO_ON),
        # At a boundary the step just ended: save it, unless the save cannot fit.
        (BOUNDARY, Decision.SAVE),
        (replace(BOUNDARY, save_seconds=None), Decision.SAVE),
        (replace(BOUNDARY, save_seconds=25.0), Decision.NO_TIME),
        (replace(BOUNDARY, deadline=None, save_seconds=25.0), Decision.SAVE),
        (replace(BOUNDARY, newest_saved=12), Decision.SKIP),
    ],
)
def test_decide(situation: Situation, expected: Decision) -> None:
    assert decide(situation) is expected


def test_decisions_are_ordered_so_that_the_most_urgent_rank_wins() -> None:
    assert Decision.GO_ON < Decision.SAVE < Decision.SKIP < Decision.NO_TIME
    assert max(Decision.GO_ON, Decision.SAVE) is Decision.SAVE


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        # 2 of 8 tokens took 4 s: 6 more at 2 s, then a 1 s update.
        ((4.0, 2, 8, 3.0, 1.0), 13.0),
        # This step is slower than the mean: its own pace counts.
        ((10.0, 1, 3, 3.0, 1.0), 21.0),
        # Before the first token: the measured rollout, less what already passed.
        ((0.5, 0, 8, 3.0, 1.0), 3.5),
        ((5.0, 0, 8, 3.0, 1.0), 1.0),
        # Nothing measured yet in this attempt.
        ((4.0, 2, 8, 3.0, None), None),
        ((0.0, 0, 8, None, 1.0), None),
    ],
)
def test_rest_of_step(args: tuple, expected: float | None) -> None:
    assert rest_of_step(*args) == expected


@pytest.mark.parametrize(
    ("grace", "env", "expected"),
    [
        (None, {}, None),
        (300.0, {}, 270.0),  # a tenth kept for leaving
        (15.0, {}, 13.5),
        (5.0, {}, 4.0),  # at least a second
        (300.0, {"TORCH_ELASTIC_SHUTDOWN_TIMEOUT": "290"}, 261.0),  # torchrun kills first
        (300.0, {"TORCH_ELASTIC_SHUTDOWN_TIMEOUT": "soon"}, 270.0),
        (0.5, {}, 0.0),
    ],
)
def test_notice_budget(grace: float | None, env: dict[str, str], expected: float | None) -> None:
    assert notice_budget(grace, env) == expected


@pytest.mark.parametrize(
    ("budget", "node_ends_at", "node_told_at", "expected"),
    [
        (270.0, None, None, 1270.0),  # the grace period only
        (None, None, None, None),
        # The node goes 30 s after the notice: sooner, less a tenth for leaving.
        (270.0, 1030.0, None, 1027.0),
        (None, 1030.0, 1000.0, 1027.0),
        (270.0, 1005.0, None, 1004.0),  # at least a second for leaving
        (13.5, 1030.0, None, 1013.5),  # the grace period is sooner still
        (270.0, 990.0, None, 989.0),  # read late: the node's time passed before the notice
        # A warning at 1000, then a request again at 1200: the node goes 20 s later. A tenth
        # of those 20 s is kept for leaving, not a tenth of the 220 s since the warning.
        (None, 1220.0, 1200.0, 1218.0),
    ],
)
def test_notice_deadline(
    budget: float | None,
    node_ends_at: float | None,
    node_told_at: float | None,
    expected: float | None,
) -> None:
    assert notice_deadline(1000.0, budget, node_ends_at, node_told_at) == expected


@pytest.mark.parametrize(
    ("value", "requested_at", "deadline"),
    [
        ("2026-12-02T21:00:00Z", "2026-12-02T21:00:00Z", None),
        (
            "2026-12-02T21:00:00Z deadline=2026-12-02T21:02:00Z",
            "2026-12-02T21:00:00Z",
            "2026-12-02T21:02:00Z",
        ),
        # A part that does not parse is left out: the request stands.
        ("2026-12-02T21:00:00Z deadline=soon", "2026-12-02T21:00:00Z", None),
        ("now", None, None),
    ],
)
def test_checkpoint_request_value(
    value: str, requested_at: str | None, deadline: str | None
) -> None:
    def parsed(text: str | None) -> datetime | None:
        return datetime.fromisoformat(text.replace("Z", "+00:00")) if text else None

    request = parse_request(value)
    assert request == CheckpointRequest(parsed(requested_at), parsed(deadline))
    if request.requested_at is not None:
        assert format_request(request.requested_at, request.deadline) == value.replace(
            " deadline=soon", ""
        )


@pytest.mark.parametrize(
    ("decision", "step", "saved", "message"),
    [
        (Decision.SAVE, 12, 12, "saved at step 12 in 3.2 s"),
        (Decision.SKIP, 12, 12, "skipped: step 12 already saved"),
        (Decision.SKIP, 0, 0, "skipped: no step finished yet"),
        (Decision.NO_TIME, 12, 10, "no time: last save is step 10"),
    ],
)
def test_describe(decision: Decision, step: int, saved: int, message: str) -> None:
    assert describe(decision, step, saved, 3.21) == message


def test_faults_are_read_once_and_default_to_none() -> None:
    assert Faults.from_env({}) == NO_FAULTS
    faults = Faults.from_env(
        {
            ENV_TEST_KILL_BEFORE_MANIFEST: "6",
            ENV_TEST_SLOW_STOP_SAVE: "40",
            ENV_TEST_SLOW_ROLLOUT_TOKEN: "0.5",
            ENV_TEST_SLOW_ROLLOUT_FROM_STEP: "4",
        }
    )
    assert faults == Faults(
        kill_before_manifest=6,
        slow_stop_save=40.0,
        slow_rollout_token=0.5,
        slow_rollout_from_step=4,
    )
