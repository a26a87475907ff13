"""A held rank's wait for its next run, what a run may change, and a process's place in a warm
gang: plain functions, no process group."""

from __future__ import annotations

from pathlib import Path

import pytest
import rljob_contract as contract
from rljob_contract.in_place import RunWord, format_word
from rljob_trainer import warm
from rljob_trainer.config import load_config
from rljob_trainer.place import GangError, Place, place_from_env


class Clock:
    """A clock that moves only when the wait sleeps, and a run file that changes at set times."""

    def __init__(self, run_file: Path, words: dict[float, RunWord]) -> None:
        self.now = 0.0
        self.run_file = run_file
        self.words = sorted(words.items())

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds
        while self.words and self.words[0][0] <= self.now:
            self.run_file.write_text(format_word(self.words.pop(0)[1]))


def wait(tmp_path: Path, words: dict[float, RunWord], told_at: float | None = None):
    run_file = tmp_path / "run"
    run_file.write_text("")
    clock = Clock(run_file, words)
    result = warm.wait_for_run(
        run_file, ended=3, word_wait=10, run_wait=45,
        told_to_go=lambda: told_at is not None and clock.now >= told_at,
        clock=clock, sleep=clock.sleep,
    )  # fmt: skip
    return result, clock.now


RUN_4 = RunWord(4, args=(), env={contract.ENV_RESUME_STEP: "12"})


def test_a_run_of_a_newer_attempt_is_taken(tmp_path: Path) -> None:
    word, at = wait(tmp_path, {2.0: RUN_4})
    assert word == RUN_4
    assert at == pytest.approx(2.0, abs=0.3)  # the next poll


def test_no_word_within_the_wait_ends_the_hold(tmp_path: Path) -> None:
    word, at = wait(tmp_path, {})
    assert word is None
    assert at == pytest.approx(10.0, abs=0.3)


def test_a_run_of_the_ended_attempt_or_older_is_not_taken(tmp_path: Path) -> None:
    word, _ = wait(tmp_path, {1.0: RunWord(3, args=()), 2.0: RunWord(2, args=())})
    assert word is None


def test_a_stop_word_keeps_the_rank_waiting_for_its_run(tmp_path: Path) -> None:
    """Named at 8 s, the run comes at 40 s: past the first wait, within the run's."""
    word, at = wait(tmp_path, {8.0: RunWord(4), 40.0: RUN_4})
    assert word == RUN_4
    assert at == pytest.approx(40.0, abs=0.3)


def test_a_named_attempt_whose_run_never_comes_ends_the_hold(tmp_path: Path) -> None:
    word, at = wait(tmp_path, {8.0: RunWord(4)})
    assert word is None
    assert at == pytest.approx(8.0 + 45.0, abs=0.3)


def test_the_pod_told_to_go_ends_the_hold(tmp_path: Path) -> None:
    word, at = wait(tmp_path, {8.0: RunWord(4), 40.0: RUN_4}, told_at=20.0)
    assert word is None
    assert at == pytest.approx(20.0, abs=0.3)


def test_newer_attempt_named(tmp_path: Path) -> None:
    run_file = tmp_path / "run"
    assert warm.newer_attempt_named(run_file, 3) is None  # not projected yet
    run_file.write_text("not a word")
    assert warm.newer_attempt_named(run_file, 3) is None
    run_file.write_text(format_word(RunWord(3)))
    assert warm.newer_attempt_named(run_file, 3) is None
    run_file.write_text(format_word(RunWord(4)))
    assert warm.newer_attempt_named(run_file, 3) == 4
    assert warm.newer_attempt_named(None, 3) is None
    assert warm.newer_attempt_named(run_file, None) is None


def test_take_env_sets_unsets_and_names_the_attempt() -> None:
    env = {"KEEP": "1", "DROP": "x", contract.ENV_ATTEMPT: "3"}
    warm.take_env(RunWord(4, args=(), env={"DROP": None, "NEW": "y"}), env)
    assert env == {"KEEP": "1", "NEW": "y", contract.ENV_ATTEMPT: "4"}


def test_a_run_may_change_where_it_resumes_from_and_nothing_else() -> None:
    held = load_config(overrides=["runner.checkpoint_dir=/ckpt"], env={})
    resumed = load_config(
        overrides=["runner.checkpoint_dir=/ckpt", "runner.resume_dir=/ckpt/global_step_4"],
        env={contract.ENV_RESUME_DIR: "/ckpt/global_step_4"},
    )
    assert warm.changed_keys(held, resumed) == []
    other = load_config(
        overrides=["runner.checkpoint_dir=/ckpt", "algorithm.lr=0.5", "runner.save_interval=7"],
        env={},
    )
    assert warm.changed_keys(held, other) == ["algorithm.lr", "runner.save_interval"]


def test_run_wait_follows_the_grace_period() -> None:
    assert warm.run_wait_seconds(20) == 35
    assert warm.run_wait_seconds(None) == warm.DEFAULT_GRACE_SECONDS + 15


GANG = {
    contract.ENV_WARM_RESTART: "true",
    contract.ENV_GANG_ADDR: "job-0.job",
    contract.ENV_GANG_PORT: "29500",
    contract.ENV_NODE_RANK: "1",
    contract.ENV_NNODES: "2",
}


def test_place_in_a_warm_gang() -> None:
    assert place_from_env({}) is None
    assert place_from_env({**GANG, contract.ENV_WARM_RESTART: "false"}) is None
    place = place_from_env({**GANG, "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "4"})
    assert place == Place("job-0.job", 29500, node_rank=1, nnodes=2, local_rank=1, local_world=4)
    assert (place.rank, place.world_size) == (5, 8)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({contract.ENV_GANG_PORT: ""}, "needs RLJOB_GANG_PORT"),
        ({contract.ENV_NNODES: "two"}, "must be numbers"),
        ({contract.ENV_NODE_RANK: "2"}, "is no place in a gang"),
        ({"LOCAL_RANK": "1"}, "is no place in a gang"),
    ],
)
def test_a_gang_without_its_variables_is_refused(change: dict[str, str], message: str) -> None:
    with pytest.raises(GangError, match=message):
        place_from_env({**GANG, **change})
