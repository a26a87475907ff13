"""OpenRLHF's checkpoints (`openrlhf-deepspeed`), as a run of PPO leaves them: the actor's and
the critic's `global_stepN` folders side by side under --ckpt.path, DeepSpeed's `latest` in
each naming the newest, whole or not. Trees laid out from OpenRLHF 0.11.2's and DeepSpeed
0.19.6's save code (tests/unit/operator/ckpt_trees.py: OpenRLHF does not import here)."""

from __future__ import annotations

from pathlib import Path

import pytest
from ckpt_trees import build_openrlhf, remove
from rljob_operator.checkpoints import Status, find_latest

LAYOUT = "openrlhf-deepspeed"


def ppo_run(root: Path, steps: tuple[int, ...] = (4, 8)) -> tuple[Path, Path]:
    actor, critic = root / "_actor", root / "_critic"
    for step in steps:
        build_openrlhf(actor, step)
        build_openrlhf(critic, step)
    return actor, critic


@pytest.mark.parametrize(
    ("tear", "why"),
    [
        ("actor_cut_after_latest", "no metric.json: OpenRLHF writes it last"),
        ("critic_cut_short", "_critic/global_step8: no metric.json"),
        ("critic_never_saved", "_critic/global_step8 is missing"),
        ("critic_rank_missing", "_critic/global_step8: the optimizer shard of rank 0 is missing"),
    ],
)
def test_a_save_cut_short_in_either_role_falls_back_to_the_step_before(tmp_path, tear, why):
    """DeepSpeed's `latest` names global_step8 in both roles; the save did not end in one."""
    actor, critic = ppo_run(tmp_path)
    if tear == "actor_cut_after_latest":
        remove(actor / "global_step8" / "metric.json")
    elif tear == "critic_cut_short":
        remove(critic / "global_step8" / "metric.json")
    elif tear == "critic_never_saved":
        remove(critic / "global_step8")
    else:
        remove(critic / "global_step8" / "bf16_zero_pp_rank_0_mp_rank_00_optim_states.pt")

    latest = find_latest(actor, LAYOUT)

    assert (latest.step, latest.path) == (4, str(actor / "global_step4"))
    ((rejected),) = latest.rejected
    assert (rejected.step, rejected.verdict.status) == (8, Status.INCOMPLETE)
    assert why in rejected.verdict.reason
    assert (actor / "latest").read_text() == "global_step8"  # OpenRLHF's own pointer: torn


def test_a_run_without_critic_and_the_best_metric_folders_are_judged_by_the_actor_alone(tmp_path):
    """GRPO has no critic; `best_global_stepN` (OpenRLHF's best-metric saves) is not a step."""
    actor = tmp_path / "_actor"
    for step in (4, 8):
        build_openrlhf(actor, step)
    build_openrlhf(actor, 12)
    (actor / "global_step12").rename(actor / "best_global_step12")

    latest = find_latest(actor, LAYOUT, "deep")

    assert (latest.step, latest.rejected) == (8, ())
    assert "the critic's" not in latest.chosen.verdict.reason
